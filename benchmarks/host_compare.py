"""Host time per call of small cached GEMMs, smgemm against torch in the same process (GPU): run it once per tree
to compare, alternating processes, since a process's torch time varies with the machine's state (13-20 us for
torch.matmul on the H200 host). Each figure is the median of five timings of 1000 calls.

    PYTHONPATH=src python benchmarks/host_compare.py NAME
"""

import argparse
import statistics

import torch

import smgemm
from smgemm.tools.timing import host_us_per_call as per_call


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", help="a label for this tree's line")
    name = p.parse_args().name
    a = torch.randn(16, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    w = torch.nn.Parameter(torch.randn(64, 64, device="cuda", dtype=torch.bfloat16))
    bias = torch.randn(64, device="cuda", dtype=torch.bfloat16)
    c = torch.randn(16, 64, device="cuda", dtype=torch.bfloat16)
    mx = smgemm.quantize_mxfp4(torch.randn(64, 64, device="cuda"))
    q = smgemm.nn.MXFP4Linear.from_linear(torch.nn.Linear(64, 64, device="cuda", dtype=torch.bfloat16))

    def no_grad(f):  # the Parameters require grad: inference calls run under no_grad (or inference_mode)
        def call():
            with torch.no_grad():
                return f()
        return call

    calls = {"smgemm.matmul": lambda: smgemm.matmul(a, b), "torch.matmul": lambda: torch.matmul(a, b),
             "smgemm.linear bias": lambda: smgemm.linear(a, w, bias),
             "F.linear bias": lambda: torch.nn.functional.linear(a, w, bias),
             "smgemm.addmm": lambda: smgemm.addmm(c, a, b), "torch.addmm": lambda: torch.addmm(c, a, b),
             "smgemm.linear mxfp4": lambda: smgemm.linear(a, mx),
             "no_grad smgemm.linear bias": no_grad(lambda: smgemm.linear(a, w, bias)),
             "no_grad F.linear bias": no_grad(lambda: torch.nn.functional.linear(a, w, bias)),
             "no_grad MXFP4Linear": no_grad(lambda: q(a))}
    times = {k: [] for k in calls}
    for _ in range(5):
        for k, f in calls.items():
            times[k].append(per_call(f, 1000))
    print(name, " ".join(f"{k}={statistics.median(v):.2f}" for k, v in times.items()))


if __name__ == "__main__":
    main()
