"""Time the two-pass MXFP4 GEMM (expansion, then the dense GEMM) on the GPU with the expansion as it is and as it
was before stop 16 (a persistent grid of 128 x 512 blocks, one launch per operand), side by side with torch.matmul
in bf16 on the dequantized operands.

    PYTHONPATH=src python scripts/sweep_twopass.py
"""

import math
from unittest import mock

import torch

import smgemm
import smgemm._gemm as g
from smgemm.bench import _table, _time_rotating, environment

SHAPES = [(4096, 4096, 4096), (4096, 14336, 4096), (8192, 8192, 8192)]


def _old_pair(a, w, dtype, num_sms=None, **blocks):
    old = {**g._EXPAND, **blocks}
    return g.expand_mxfp4(a, dtype, num_sms, **old), g.expand_mxfp4(w, dtype, num_sms, **old)


def main():
    print(environment())
    rows = []
    for both in (True, False):
        for m, n, k in SHAPES:
            sets = []
            for _ in range(max(2, min(8, math.ceil(256e6 / (n * k * 2))))):
                w = smgemm.quantize_mxfp4(torch.randn(n, k, device="cuda"))
                x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
                xq = smgemm.quantize_mxfp4(x.float()) if both else x
                sets.append(((xq, w), ((xq.dequantize(torch.bfloat16) if both else x), w.dequantize().t())))
            ours = [s for s, _ in sets]
            row = {"shape": f"{m}x{n}x{k}", "operands": "both" if both else "weight"}
            ref = torch.matmul(*sets[0][1]).double()
            err = ((smgemm.linear(*ours[0]).double() - ref).norm() / ref.norm()).item()  # compiles, then times
            t_new, t_old = [], []
            for _ in range(2):  # interleaved, so that clock drift does not favour one side
                t_new.append(_time_rotating(lambda a, b: smgemm.linear(a, b), ours))
                with mock.patch.object(g, "expand_mxfp4_pair", _old_pair), \
                        mock.patch.object(g, "_EXPAND_CHIP", dict(g._EXPAND)):
                    smgemm.linear(*ours[0])
                    torch.cuda.synchronize()
                    t_old.append(_time_rotating(lambda a, b: smgemm.linear(a, b), ours))
            t_new, t_old = min(t_new), min(t_old)
            t_torch = _time_rotating(torch.matmul, [p for _, p in sets])
            row.update({"now us": t_new * 1e3, "before us": t_old * 1e3, "torch us": t_torch * 1e3,
                        "now vs torch": t_torch / t_new, "before vs torch": t_torch / t_old, "rel err": err})
            rows.append(row)
            print(row, flush=True)
    print(_table(rows))


if __name__ == "__main__":
    main()
