"""Calibrate the Stream-K model in smgemm.plan: persistent vs Stream-K, predicted and measured (GPU).

    PYTHONPATH=src python benchmarks/sweep_streamk.py [--dtype bf16] [--num-sms 132,66] [--fixup-n 64,128]

For every shape and budget it times (CUDA-graph replays: kernel time, no host overhead) the plans `make_plan`
makes for schedule="persistent" and "streamk", prints the modelled ratio (streamk / persistent, before the
auto margin) next to the measured one, and what "auto" picks. Auto is right when it picks Stream-K exactly where
the measured ratio is below 1. `--fixup-n` also times Stream-K with other fixup chunk widths.
"""

import argparse
import math

import torch

import smgemm._gemm as _gemm
import smgemm._launch as _launch
from smgemm._device import device_spec
from smgemm.plan import DTYPES, make_plan, modelled_time
from smgemm.tools.timing import graph_us, progress, table

SHAPES = [(m, n, k) for m, n in ((128, 1024), (256, 2048), (512, 4096), (1024, 1024), (1024, 3072), (2048, 2560),
                                 (3072, 3072), (4096, 4352), (6144, 4352), (16, 8192), (64, 4096))
          for k in (1024, 4096, 16384)]


def _modelled(plan, m, n, k, dtype) -> float:
    l2_bytes = device_spec(torch.device("cuda")).l2_bytes
    return modelled_time(plan.config, m, n, k, dtype, plan.sm_budget, plan.schedule, l2_bytes, plan.sk_waves)


def _with_fixup_n(fixup_n):
    """Patch the kernel meta-parameter FIXUP_N (None: the library's choice, `_launch.fixup_columns`)."""
    original = _launch.__dict__.setdefault("_original_fixup_columns", _launch.fixup_columns)
    _launch.fixup_columns = original if fixup_n is None else lambda cfg: min(fixup_n, cfg.block_n)
    _gemm._SEEN_CALLS.clear()  # remembered calls keep the meta-parameters they were launched with


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--num-sms", default="132,66")
    p.add_argument("--fixup-n", default="", help="extra FIXUP_N values to time Stream-K with")
    args = p.parse_args()
    dtype = DTYPES[args.dtype]
    spec = device_spec(torch.device("cuda"))
    extra = [int(x) for x in args.fixup_n.split(",") if x]
    rows = []
    for m, n, k in progress(SHAPES, "shapes"):
        a = torch.randn(m, k, device="cuda").to(dtype)
        b = torch.randn(n, k, device="cuda").to(dtype).t()
        for budget in (int(x) for x in args.num_sms.split(",")):
            plans = {s: make_plan(m, n, k, dtype, spec, schedule=s, num_sms=budget) for s in ("persistent", "streamk")}
            if plans["streamk"].schedule != "streamk":
                continue
            us = {}
            for s in plans:
                _with_fixup_n(None)
                us[s] = graph_us(lambda s=s, a=a, b=b, n=budget: _gemm.gemm(a, b, schedule=s, num_sms=n))
            auto = make_plan(m, n, k, dtype, spec, num_sms=budget).schedule
            best = min(us, key=us.__getitem__)
            sk = plans["streamk"]
            row = {
                "shape": f"{m}x{n}x{k}", "num_sms": budget,
                "persistent": f"{plans['persistent'].config.block_m}x{plans['persistent'].config.block_n}",
                "streamk": f"{sk.config.block_m}x{sk.config.block_n} sk{sk.sk_tiles} P{sk.num_programs}",
                "model sk/pers": _modelled(sk, m, n, k, dtype) / _modelled(plans["persistent"], m, n, k, dtype),
                "measured sk/pers": us["streamk"] / us["persistent"],
                "pers us": us["persistent"], "sk us": us["streamk"],
            }
            for fixup_n in extra:
                _with_fixup_n(fixup_n)
                row[f"sk us N{fixup_n}"] = graph_us(lambda a=a, b=b, n=budget: _gemm.gemm(a, b, schedule="streamk",
                                                                                           num_sms=n))
            _with_fixup_n(None)
            row.update({"auto": auto, "best": best, "auto loss": us[auto] / us[best] - 1})
            rows.append(row)
    print(table(rows))
    losses = [r["auto loss"] for r in rows]
    print(f"auto picks the faster schedule in {sum(r['auto'] == r['best'] for r in rows)}/{len(rows)} cases; "
          f"worst loss {max(losses, default=0):.1%}, geomean loss "
          f"{math.exp(sum(math.log1p(x) for x in losses) / max(1, len(losses))) - 1:.2%}")


if __name__ == "__main__":
    main()
