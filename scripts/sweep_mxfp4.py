"""Time MXFP4 kernel variants against the planner's choice and torch (bf16 on the dequantized weight) on the H200:
the measurements behind the MXFP4 rules in smgemm.plan. Variants as in scripts/sweep_configs.py, plus "split"
(even and odd k in two dots, nibbles not interleaved) and "swap" (the kernel computes (W @ A^T)^T). Weights rotate
through ~256 MB of copies, so that neither side runs from L2.

    PYTHONPATH=src python scripts/sweep_mxfp4.py --shapes 16x8192x8192 --variants "16x64x256 w4 s4 split swap sk"
    PYTHONPATH=src python scripts/sweep_mxfp4.py --both --shapes 4096x4096x4096 --variants "..."
"""

import argparse
import math

import torch
from sweep_configs import parse_variant

import smgemm
from smgemm._device import device_spec
from smgemm._gemm import gemm_mxfp4
from smgemm.bench import _rel_err, _table, _time_rotating, environment
from smgemm.plan import make_plan, mx_config


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", required=True, help="comma list of MxNxK")
    p.add_argument("--variants", required=True, help="semicolon list of variants")
    p.add_argument("--both", action="store_true", help="MXFP4 activations too")
    p.add_argument("--num-sms", type=int, default=None)
    args = p.parse_args()
    print(environment())
    spec = device_spec(torch.device("cuda"))
    rows, best = [], {}
    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        sets = []
        for _ in range(max(1, min(16, math.ceil(256e6 / (n * k * 2))))):
            w = smgemm.quantize_mxfp4(torch.randn(n, k, device="cuda"))
            x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
            xq = smgemm.quantize_mxfp4(x.float()) if args.both else x
            sets.append(((xq, w), ((xq.dequantize(torch.bfloat16) if args.both else x), w.dequantize().t())))
        ours, peer = [s for s, _ in sets], [q for _, q in sets]
        ref = torch.matmul(*peer[0])
        t_torch = _time_rotating(torch.matmul, peer)
        plan = make_plan(m, n, k, torch.bfloat16, spec, num_sms=args.num_sms, config=mx_config(m, n, k))
        c = plan.config
        planned = (f"{c.block_m}x{c.block_n}x{c.block_k} w{c.num_warps} s{c.num_stages}"
                   f"{' tma' if c.tma else ''}{' split' if c.mx_split else ''}{' swap' if c.mx_swap else ''}"
                   f"{' prefetch' if c.mx_prefetch else ''} {plan.schedule} (planner)")
        for name in [planned, *args.variants.split(";")]:
            row = {"shape": shape, "variant": name.strip()}
            try:
                if name is planned:
                    kw = {}
                else:
                    cfg, sched = parse_variant(name)
                    kw = {"config": cfg, "schedule": sched}
                fn = lambda a, w, kw=kw: gemm_mxfp4(a, w, num_sms=args.num_sms, **kw)
                err = _rel_err(fn(*ours[0]), ref)
                t = _time_rotating(fn, ours)
                row.update({"us": t * 1e3, "TFLOP/s": 2 * m * n * k / t / 1e9, "vs torch bf16": t_torch / t,
                            "err": f"{err:.1e}"})
            except Exception as e:  # a variant that does not compile or apply is a result too
                row.update({"us": 0.0, "TFLOP/s": 0.0, "vs torch bf16": 0.0,
                            "err": f"{type(e).__name__}: {str(e)[:60]}"})
            rows.append(row)
            print(row, flush=True)
            if row["TFLOP/s"] > best.get(shape, {"TFLOP/s": -1.0})["TFLOP/s"]:
                best[shape] = row
        del sets, ours, peer
    print(_table(rows))
    print("\nbest per shape:")
    print(_table(list(best.values())))


if __name__ == "__main__":
    main()
