"""Host time of the calls that go through the dispatcher (torch.compile's graphs, torch modes), what wraps the kernel
alone: smgemm's `gemm` is replaced by a stub that returns a preallocated output, so this runs on the CPU (no
interpreter) as on a GPU, and the peer is the same call of torch's (`aten.mm`, which computes its 16 x 64 x 64 product
on the CPU: ~0.5 us of its time). Rows: the differentiable op `torch.ops.smgemm.gemm` and its twin without autograd,
`gemm_nograd`, called directly, then torch.compile'd functions of one product (what a compiled graph's call costs, with
Dynamo's guards) without and with an input that requires grad (forward only). Batches of 200 calls interleaved over
the rounds, medians and the median per-round ratio, as `host_compare.py`:

    PYTHONPATH=src python benchmarks/host_ops.py NAME
"""

import argparse
import statistics

import torch
from host_compare import per_call_us

import smgemm
from smgemm import _library


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", help="a label for this tree's lines")
    p.add_argument("--rounds", type=int, default=40)
    args = p.parse_args()
    a, b, out = torch.randn(16, 64), torch.randn(64, 64), torch.empty(16, 64)
    a_grad = a.clone().requires_grad_()
    _library.gemm = lambda *args, **kwargs: out  # the stub: every layer above the kernel's entry point runs
    gemm = torch.ops.smgemm.gemm.default
    args_of = (None, 1.0, 1.0, None, None, None, "auto", None)
    nograd = getattr(torch.ops.smgemm, "gemm_nograd", None)
    compiled = torch.compile(lambda x, y: smgemm.matmul(x, y), fullgraph=True)
    compiled_torch = torch.compile(lambda x, y: torch.mm(x, y), fullgraph=True)
    mm = torch.ops.aten.mm.default
    # (smgemm's call, torch's peer, grad mode)
    pairs = {"op smgemm::gemm, no_grad": (lambda: gemm(a, b, *args_of), lambda: mm(a, b), False),
             "compiled matmul, no_grad": (lambda: compiled(a, b), lambda: compiled_torch(a, b), False),
             "compiled matmul, input requires grad": (lambda: compiled(a_grad, b), lambda: compiled_torch(a_grad, b),
                                                      True)}
    if nograd is not None:
        pairs["op smgemm::gemm_nograd, no_grad"] = (lambda: nograd.default(a, b, *args_of), lambda: mm(a, b), False)
    times = {name: ([], []) for name in pairs}
    for ours, theirs, grad in pairs.values():
        with torch.set_grad_enabled(grad):
            for f in (ours, theirs):
                for _ in range(50):
                    f()
    for _ in range(args.rounds):
        for name, (ours, theirs, grad) in pairs.items():
            with torch.set_grad_enabled(grad):
                times[name][0].append(per_call_us(ours))
                times[name][1].append(per_call_us(theirs))
    for name, (ours, theirs) in times.items():
        ratio = statistics.median(p / q for p, q in zip(ours, theirs))
        print(f"{args.name} {name}: smgemm {statistics.median(ours):.2f} us, torch {statistics.median(theirs):.2f} us, "
              f"ratio {ratio:.3f}")


if __name__ == "__main__":
    main()
