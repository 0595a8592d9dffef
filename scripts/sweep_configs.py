"""Time every candidate tile configuration on a few shapes (GPU); calibrates the tile model in smgemm.plan.

    PYTHONPATH=src python scripts/sweep_configs.py [--dtype bf16] [--num-sms 132]
"""

import argparse

import torch
from triton.testing import do_bench

from smgemm._device import device_spec
from smgemm._gemm import gemm
from smgemm.bench import DTYPES, _table
from smgemm.plan import _CANDIDATE_TILES, TileConfig, make_plan

SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (4096, 14336, 4096), (16, 4096, 4096), (128, 14336, 4096),
          (1024, 4096, 4096)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--num-sms", type=int, default=None)
    args = p.parse_args()
    dtype = DTYPES[args.dtype]
    spec = device_spec(torch.device("cuda"))
    elem = torch.empty((), dtype=dtype).element_size()
    rows = []
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda").to(dtype)
        b = torch.randn(n, k, device="cuda").to(dtype).t()
        chosen = make_plan(m, n, k, dtype, spec, num_sms=args.num_sms).config
        t_torch = do_bench(lambda a=a, b=b: torch.matmul(a, b), return_mode="median") if dtype != DTYPES["fp8"] else 0
        for bm, bn, warps in _CANDIDATE_TILES:
            for bk_mult in (1, 2):
                bk = 128 // elem * bk_mult
                for stages in (3, 4, 5):
                    if stages * (bm + bn) * bk * elem > spec.smem_per_block - 8192:
                        continue
                    cfg = TileConfig(bm, bn, bk, num_warps=warps, num_stages=stages)
                    for sched in ("data_parallel", "persistent"):
                        try:
                            def fn(a=a, b=b, cfg=cfg, sched=sched):
                                return gemm(a, b, config=cfg, schedule=sched, num_sms=args.num_sms)

                            ref = (a.float() @ b.float())
                            err = ((fn().float() - ref).norm() / ref.norm()).item()
                            t = do_bench(fn, warmup=10, rep=40, return_mode="median")
                        except Exception as e:
                            rows.append({"shape": f"{m}x{n}x{k}", "cfg": f"{bm}x{bn}x{bk} w{warps} s{stages}",
                                         "sched": sched, "TFLOP/s": 0.0, "vs torch": 0.0, "err": type(e).__name__,
                                         "chosen": ""})
                            continue
                        rows.append({"shape": f"{m}x{n}x{k}", "cfg": f"{bm}x{bn}x{bk} w{warps} s{stages}",
                                     "sched": sched, "TFLOP/s": 2 * m * n * k / t / 1e9,
                                     "vs torch": t_torch / t if t_torch else 0.0, "err": f"{err:.1e}",
                                     "chosen": "*" if cfg == chosen else ""})
    print(_table(rows))
    print("\nbest per shape:")
    best = {}
    for r in rows:
        if r["TFLOP/s"] > best.get(r["shape"], {"TFLOP/s": -1})["TFLOP/s"]:
            best[r["shape"]] = r
    print(_table(list(best.values())))


if __name__ == "__main__":
    main()
