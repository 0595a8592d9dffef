"""Host time per call of small cached GEMMs, smgemm against torch in the same process (GPU), eager and in a
torch.compile'd function. The calls run in interleaved batches of 200 over 40 rounds, so that each ratio compares
batches run moments apart: a process's torch time varies by a third with the machine's state (12-19 us for
torch.matmul on the H200 host). Prints each call's median us and the median of the per-round ratios to torch. Run it
once per tree, alternating processes, to compare trees:

    PYTHONPATH=src python benchmarks/host_compare.py NAME
"""

import argparse
import statistics
import time

import torch

import smgemm


def per_call_us(fn, calls: int = 200) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def compare(label: str, pairs: dict, rounds: int) -> None:
    """Time `pairs` {name: (smgemm's call, torch's peer or None, grad mode)}: each call warmed up in its grad mode,
    then batches of `per_call_us` interleaved over `rounds`; prints each call's median us and the median of the
    per-round ratios to torch."""
    times = {name: ([], []) for name in pairs}
    for ours, theirs, grad in pairs.values():
        with torch.set_grad_enabled(grad):
            for f in (ours, theirs or ours):
                for _ in range(50):
                    f()
    for _ in range(rounds):
        for name, (ours, theirs, grad) in pairs.items():
            with torch.set_grad_enabled(grad):
                times[name][0].append(per_call_us(ours))
                if theirs is not None:
                    times[name][1].append(per_call_us(theirs))
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    for name, (ours, theirs) in times.items():
        line = f"{label} {name}: smgemm {statistics.median(ours):.2f} us"
        if theirs:
            ratio = statistics.median(p / q for p, q in zip(ours, theirs))
            line += f", torch {statistics.median(theirs):.2f} us, ratio {ratio:.3f}"
        print(line)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", help="a label for this tree's lines")
    p.add_argument("--rounds", type=int, default=40)
    args = p.parse_args()
    a = torch.randn(16, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    c = torch.randn(16, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.nn.Parameter(torch.randn(64, 64, device="cuda", dtype=torch.bfloat16))
    bias = torch.randn(64, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1, 64, device="cuda", dtype=torch.bfloat16)
    q = smgemm.nn.MXFP4Linear.from_linear(torch.nn.Linear(64, 64, device="cuda", dtype=torch.bfloat16))
    linear = torch.nn.functional.linear
    compiled = torch.compile(lambda x, y: smgemm.matmul(x, y), fullgraph=True)
    compiled_torch = torch.compile(lambda x, y: torch.matmul(x, y), fullgraph=True)
    # (smgemm's call, torch's peer or None, grad mode); the Parameter requires grad, so the no_grad pair is what
    # inference runs
    pairs = {"no_grad compiled matmul": (lambda: compiled(a, b), lambda: compiled_torch(a, b), False),
             "matmul": (lambda: smgemm.matmul(a, b), lambda: torch.matmul(a, b), True),
             "addmm": (lambda: smgemm.addmm(c, a, b), lambda: torch.addmm(c, a, b), True),
             "linear, recorded by autograd": (lambda: smgemm.linear(a, w, bias), lambda: linear(a, w, bias), True),
             "no_grad linear": (lambda: smgemm.linear(a, w.detach(), bias), lambda: linear(a, w.detach(), bias),
                                False),
             "no_grad MXFP4Linear, 1 row": (lambda: q(x), None, False)}
    compare(args.name, pairs, args.rounds)

if __name__ == "__main__":
    main()
