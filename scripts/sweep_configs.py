"""Time chosen tile configurations against the planner's choice and torch on a few shapes (GPU): the measurements
behind the tile model in smgemm.plan. Each variant is "BMxBNxBK wW sS [tma|tmaload] [pers|sk|dp]" (BK in
elements; tma = TMA loads + TMA store + flattened loop; default schedule pers; MXFP4 GEMMs also take "split"
(nibbles not interleaved) and "swap" (W @ A^T), see scripts/sweep_mxfp4.py).

    PYTHONPATH=src python scripts/sweep_configs.py --shapes 128x8192x8192 \\
        --variants "128x128x64 w8 s4 sk;128x128x64 w8 s4 tma sk"
"""

import argparse

import torch
from triton.testing import do_bench

from smgemm._device import device_spec
from smgemm._gemm import gemm
from smgemm.bench import DTYPES, _table
from smgemm.plan import TileConfig, make_plan

SCHEDULES = {"pers": "persistent", "sk": "streamk", "dp": "data_parallel"}


def parse_variant(text: str) -> tuple[TileConfig, str]:
    words = text.split()
    bm, bn, bk = (int(v) for v in words[0].split("x"))
    opts = {w[0]: int(w[1:]) for w in words[1:] if w[0] in "ws" and w[1:].isdigit()}
    tma, store = "tma" in words or "tmaload" in words, "tma" in words
    schedule = next((SCHEDULES[w] for w in words if w in SCHEDULES), "persistent")
    cfg = TileConfig(bm, bn, bk, num_warps=opts.get("w", 4), num_stages=opts.get("s", 3), tma=tma, tma_store=store,
                     flatten=store, mx_split="split" in words, mx_swap="swap" in words,
                     mx_prefetch="prefetch" in words)
    return cfg, schedule


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--num-sms", type=int, default=None)
    p.add_argument("--shapes", required=True, help="comma list of MxNxK")
    p.add_argument("--variants", required=True, help="semicolon list of variants (see above)")
    args = p.parse_args()
    dtype = DTYPES[args.dtype]
    spec = device_spec(torch.device("cuda"))
    rows, best = [], {}
    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        a = torch.randn(m, k, device="cuda").to(dtype)
        b = torch.randn(n, k, device="cuda").to(dtype).t()
        ref = a.float() @ b.float()
        t_torch = do_bench(lambda a=a, b=b: torch.matmul(a, b), return_mode="median") if dtype != DTYPES["fp8"] else 0
        plan = make_plan(m, n, k, dtype, spec, num_sms=args.num_sms)
        c = plan.config
        planned = (f"{c.block_m}x{c.block_n}x{c.block_k} w{c.num_warps} s{c.num_stages}"
                   f"{' tma' if c.tma else ''} {plan.schedule} (planner)")
        for name in [planned, *args.variants.split(";")]:
            row = {"shape": shape, "variant": name.strip()}
            try:
                if name is planned:
                    fn = lambda a=a, b=b: gemm(a, b, num_sms=args.num_sms)
                else:
                    cfg, sched = parse_variant(name)
                    fn = lambda a=a, b=b, cfg=cfg, sched=sched: gemm(a, b, config=cfg, schedule=sched,
                                                                      num_sms=args.num_sms)
                err = ((fn().float() - ref).norm() / ref.norm()).item()
                t = do_bench(fn, warmup=10, rep=50, return_mode="median")
                row.update({"us": t * 1e3, "TFLOP/s": 2 * m * n * k / t / 1e9,
                            "vs torch": t_torch / t if t_torch else 0.0, "err": f"{err:.1e}"})
            except Exception as e:  # a variant that does not compile or apply is a result too
                row.update({"us": 0.0, "TFLOP/s": 0.0, "vs torch": 0.0, "err": f"{type(e).__name__}: {str(e)[:50]}"})
            rows.append(row)
            print(row, flush=True)
            if row["TFLOP/s"] > best.get(shape, {"TFLOP/s": -1.0})["TFLOP/s"]:
                best[shape] = row
    print(_table(rows))
    print("\nbest per shape:")
    print(_table(list(best.values())))


if __name__ == "__main__":
    main()
