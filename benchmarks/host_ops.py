"""Host time of the calls that go through the dispatcher (torch.compile's graphs, torch modes), what wraps the kernel
alone: smgemm's `gemm` is replaced by a stub that returns a preallocated output, so this runs on the CPU (no
interpreter) as on a GPU, and the peer is the same call of torch's (`aten.mm`, which computes its 16 x 64 x 64 product
on the CPU: ~0.5 us of its time). Rows: the differentiable op `torch.ops.smgemm.gemm` and its twin without autograd,
`gemm_nograd`, called directly, then torch.compile'd functions of one product (what a compiled graph's call costs, with
Dynamo's guards) without and with an input that requires grad (forward only), and of a chain of eight products (the
guards are checked once a call of the graph: the chain's cost over the single product's is that of seven more
products in a graph). With --eager, eager linear calls
instead (recorded by autograd, and under no_grad), every launch stubbed after a first real call that remembers
their signature (on the CPU that call runs in the Triton interpreter): the eager path's layers alone, against
F.linear (which on the CPU computes its fp16 product slowly: there compare smgemm's column between trees). Batches
of 200 calls interleaved over the rounds, medians and the median per-round ratio, as `host_compare.py`:

    PYTHONPATH=src python benchmarks/host_ops.py NAME [--eager]
"""

import argparse
import functools
import itertools
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: the --eager rows' first calls

from host_compare import compare

import smgemm
from smgemm import _gemm, _launch, _library


def eager_pairs() -> dict:
    """(smgemm's call, torch's peer, grad mode) of the --eager rows, their signatures remembered, launches stubbed."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(16, 64, dtype=torch.float16, device=device)
    w = torch.nn.Parameter(torch.randn(64, 64, dtype=torch.float16, device=device))
    bias = torch.randn(64, dtype=torch.float16, device=device)
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            smgemm.linear(x, w, bias)
    _gemm.launch = lambda *args, **kwargs: None
    _launch.Repeat.__call__ = lambda *args, **kwargs: True
    linear = torch.nn.functional.linear
    return {"eager linear, recorded by autograd": (lambda: smgemm.linear(x, w, bias), lambda: linear(x, w, bias), True),
            "eager linear, no_grad": (lambda: smgemm.linear(x, w, bias), lambda: linear(x, w, bias), False)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", help="a label for this tree's lines")
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--eager", action="store_true", help="eager linear calls, launches stubbed (see above)")
    args = p.parse_args()
    a, b = torch.randn(16, 64), torch.randn(64, 64)
    outs = itertools.cycle([torch.empty(16, 64), torch.empty(16, 64)])  # a product's output is never its input
    a_grad = a.clone().requires_grad_()
    _library.gemm = lambda *args, **kwargs: next(outs)  # the stub: every layer above the kernel's entry point runs
    gemm = torch.ops.smgemm.gemm.default
    args_of = (None, 1.0, 1.0, None, None, None, "auto", None)
    nograd = getattr(torch.ops.smgemm, "gemm_nograd", None)
    compiled = torch.compile(lambda x, y: smgemm.matmul(x, y), fullgraph=True)
    compiled_torch = torch.compile(lambda x, y: torch.mm(x, y), fullgraph=True)
    chain = torch.compile(lambda x, y: functools.reduce(lambda p, _: smgemm.matmul(p, y), range(8), x), fullgraph=True)
    chain_torch = torch.compile(lambda x, y: functools.reduce(lambda p, _: torch.mm(p, y), range(8), x),
                                fullgraph=True)
    mm = torch.ops.aten.mm.default
    # (smgemm's call, torch's peer, grad mode)
    pairs = {"op smgemm::gemm, no_grad": (lambda: gemm(a, b, *args_of), lambda: mm(a, b), False),
             "compiled matmul, no_grad": (lambda: compiled(a, b), lambda: compiled_torch(a, b), False),
             "compiled matmul, input requires grad": (lambda: compiled(a_grad, b), lambda: compiled_torch(a_grad, b),
                                                      True),
             "compiled chain of 8 matmuls, no_grad": (lambda: chain(a, b), lambda: chain_torch(a, b), False)}
    if nograd is not None:
        pairs["op smgemm::gemm_nograd, no_grad"] = (lambda: nograd.default(a, b, *args_of), lambda: mm(a, b), False)
    if args.eager:
        pairs = eager_pairs()
    compare(args.name, pairs, args.rounds)

if __name__ == "__main__":
    main()
