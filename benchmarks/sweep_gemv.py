"""How fast the overlap benchmark's bandwidth-bound GEMV (`smgemm.tools.overlap.kv_scores`) runs on a slice of the GPU,
per kernel configuration (GPU): the GEMV that overlaps best is the one that reaches device-memory bandwidth on
the fewest SMs.

    PYTHONPATH=src python benchmarks/sweep_gemv.py
"""

import argparse

import torch

import smgemm
from smgemm.tools.overlap import kv_scores
from smgemm.tools.timing import event_ms, table

CONFIGS = [(8, 1024, 4, 8), (16, 1024, 4, 8), (8, 512, 6, 4), (4, 1024, 6, 4), (16, 512, 4, 4), (32, 256, 4, 4),
           (8, 2048, 3, 8)]


def main():
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    x = torch.randn(6 * 10**9 // (2 * 8192), 8192, device="cuda").to(torch.bfloat16)
    q = torch.randn(8192, device="cuda")
    out = torch.empty(x.shape[0], device="cuda")
    ref = (x[:256].float() * q).sum(dim=1)
    parts = {sms: smgemm.SMPartition.split(132 - sms)[1] for sms in (28, 52, 84)}
    rows = []
    for cfg in CONFIGS:
        kw = dict(zip(("block_r", "block_c", "stages", "warps"), cfg))
        row = {"block_r,block_c,stages,warps": str(cfg)}
        try:
            kv_scores(x, q, out, **kw)
            assert torch.allclose(out[:256], ref, rtol=1e-3, atol=1e-2)
            row["full chip TB/s"] = x.numel() * 2 / event_ms(lambda kw=kw: kv_scores(x, q, out, **kw), 5) / 1e9
            for part in parts.values():
                with part:
                    ms = event_ms(lambda kw=kw: kv_scores(x, q, out, **kw), 5)
                torch.cuda.synchronize()
                row[f"{part.num_sms} SMs TB/s"] = x.numel() * 2 / ms / 1e9
        except Exception as e:  # a configuration that does not compile is a result too
            row["error"] = f"{type(e).__name__}: {str(e)[:60]}"
        rows.append(row)
        print(row, flush=True)
    ok = [r for r in rows if "error" not in r]
    print(table(ok))
    key = f"{parts[52].num_sms} SMs TB/s"
    best = max(ok, key=lambda r: r[key])["block_r,block_c,stages,warps"]
    print("best at", key, ":", best.strip("()").replace(" ", ""))


if __name__ == "__main__":
    main()
