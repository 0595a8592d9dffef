"""Two planners side by side (GPU): where they make different plans, time both plans on the same inputs.
`--before stop20` (the "before" planner; "now" is the planner as it is): before Stream-K over the last two waves
(`plan.streamk_split(..., waves=2)`) and the cost of drifting split iterations (`plan._SK_DRIFT`). `--before
decode-fixup`: "now" is an experiment of stop 21, a fixed fixup cost of 2 instead of `plan._SK_FIXUP_BASE` (4)
reference iterations for 16-row decode tiles (not adopted: 4 plans faster by 4-26%, 4 slower by 2-18%).

    PYTHONPATH=src python scripts/probe_sk_split.py --cases "bf16 3072x3072x8192 132,fp8 2560x2560x8192 66"
"""

import argparse
import contextlib

import torch
from sweep_configs import fixed_plan, patched

import smgemm.plan
from smgemm._device import device_spec, tf32_enabled
from smgemm._gemm import gemm
from smgemm.bench import _copies_for, _operands, _table, _time_rotating, describe, table_dtype
from smgemm.plan import make_plan


def planner_before_stop20():
    """Plans made inside are the planner's before stop 20: Stream-K over the partial wave only, split iterations
    costed as whole-tile ones (checked: the same plans on 1080 shapes, dtypes and budgets)."""
    return patched(smgemm.plan, _candidates=lambda schedules: [(s, 1) for s in schedules], _SK_DRIFT=1.0)


def decode_fixup_half():
    """Plans made inside charge 16-row (decode) Stream-K tiles a fixed fixup cost of 2, not _SK_FIXUP_BASE."""
    modelled = smgemm.plan.modelled_time

    def cheaper(cfg, m, n, k, dtype, budget, schedule, l2_bytes=50 * 2**20, sk_waves=1):
        time = modelled(cfg, m, n, k, dtype, budget, schedule, l2_bytes, sk_waves)
        if schedule == "streamk" and cfg.block_m <= 16:
            time -= smgemm.plan._SK_FIXUP_BASE - 2.0
        return time

    return patched(smgemm.plan, modelled_time=cheaper)


# --before NAME: (planner for the "before" column, planner for the "now" column)
BEFORE = {"stop20": (planner_before_stop20, contextlib.nullcontext),
          "decode-fixup": (contextlib.nullcontext, decode_fixup_half)}


def compare(name: str, dtype, shape: str, num_sms: int | None, spec, before: str) -> dict:
    m, n, k = (int(v) for v in shape.split("x"))
    tf32 = dtype == torch.float32 and tf32_enabled()
    planner_before, planner_now = BEFORE[before]
    with planner_before():
        old = make_plan(m, n, k, dtype, spec, num_sms=num_sms, tf32=tf32)
    with planner_now():
        new = make_plan(m, n, k, dtype, spec, num_sms=num_sms, tf32=tf32)
    row = {"dtype": name, "shape": shape, "num_sms": num_sms or spec.num_sms, "before": describe(old),
           "now": describe(new)}
    if old != new:
        sets = _operands(m, n, k, dtype, _copies_for(m, n, k, dtype))
        a, b = sets[0]
        ref = a.float() @ b.float()
        for label, plan in (("before", old), ("now", new)):
            with fixed_plan(plan):
                fn = lambda x, y: gemm(x, y, num_sms=num_sms)
                out = fn(a, b)
                torch.cuda.synchronize()
                row[f"{label} err"] = f"{((out.float() - ref).norm() / ref.norm()).item():.0e}"
                row[f"{label} us"] = _time_rotating(fn, sets) * 1e3
        row["now / before"] = row["before us"] / row["now us"]
    print(row, flush=True)
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", required=True, help='comma list of "dtype MxNxK num_sms"')
    p.add_argument("--before", default="stop20", choices=sorted(BEFORE), help="the pair of planners")
    args = p.parse_args()
    spec = device_spec(torch.device("cuda"))
    rows = []
    for case in args.cases.split(","):
        name, shape, sms = case.split()
        with table_dtype(name) as dtype:  # "tf32": fp32 with TF32 allowed while the case runs
            rows.append(compare(name, dtype, shape, None if int(sms) >= spec.num_sms else int(sms), spec, args.before))
    print(_table(rows))


if __name__ == "__main__":
    main()
