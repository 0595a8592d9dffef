"""Where the time of a both-operands MXFP4 GEMM on the two-pass path goes (GPU): the whole `smgemm.linear` call,
the expansion launch alone, the dense GEMM alone on already expanded operands, a `fill_` of the same output bytes
(the device's write floor for the expansion), and torch.matmul in bf16 on the dequantized operands.

    PYTHONPATH=src python scripts/probe_twopass_floor.py --shapes 4096x4096x4096,4096x14336x4096
"""

import argparse
import math

import torch

import smgemm
from smgemm._gemm import expand_mxfp4_pair
from smgemm.bench import _table, _time_rotating, environment


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="4096x4096x4096,4096x14336x4096")
    args = p.parse_args()
    print(environment())
    rows = []
    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        copies = max(2, min(8, math.ceil(256e6 / ((m + n) * k * 2))))
        mx, dense, outs = [], [], []
        for _ in range(copies):
            xq = smgemm.quantize_mxfp4(torch.randn(m, k, device="cuda"))
            w = smgemm.quantize_mxfp4(torch.randn(n, k, device="cuda"))
            mx.append((xq, w))
            dense.append((xq.dequantize(torch.bfloat16), w.dequantize(torch.bfloat16).t()))
            outs.append((torch.empty(m, k, dtype=torch.bfloat16, device="cuda"),
                         torch.empty(n, k, dtype=torch.bfloat16, device="cuda")))
        ea, ew = expand_mxfp4_pair(*mx[0], torch.bfloat16)
        exact = torch.equal(ea, dense[0][0]) and torch.equal(ew, dense[0][1].t())
        smgemm.linear(*mx[0])
        smgemm.matmul(*dense[0])
        torch.cuda.synchronize()
        t = {
            "linear": _time_rotating(lambda a, b: smgemm.linear(a, b), mx),
            "expand pair": _time_rotating(lambda a, b: expand_mxfp4_pair(a, b, torch.bfloat16), mx),
            "fill_ same bytes": _time_rotating(lambda a, b: (a.fill_(1.0), b.fill_(1.0)), outs),
            "dense GEMM": _time_rotating(smgemm.matmul, dense),
            "torch": _time_rotating(torch.matmul, dense),
        }
        row = {"shape": shape, **{f"{key} us": v * 1e3 for key, v in t.items()},
               "write GB/s (expand)": (m + n) * k * 2 / t["expand pair"] / 1e6,
               "write GB/s (fill_)": (m + n) * k * 2 / t["fill_ same bytes"] / 1e6,
               "vs torch": t["torch"] / t["linear"],
               "at the fill floor": t["torch"] / (t["linear"] - t["expand pair"] + t["fill_ same bytes"]),
               "exact": exact}
        rows.append(row)
        print(row, flush=True)
    print(_table(rows))


if __name__ == "__main__":
    main()
