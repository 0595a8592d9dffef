"""The planner against the planner before stop 20 (GPU): where Stream-K over the last two waves
(`plan.streamk_split(..., waves=2)`) or the cost of drifting split iterations (`plan._SK_DRIFT`) changed a plan,
time the plan it replaced and the new one, side by side.

    PYTHONPATH=src python scripts/probe_sk_split.py --cases "bf16 3072x3072x8192 132,fp8 2560x2560x8192 66"
"""

import argparse

import torch
from sweep_configs import fixed_plan, patched

import smgemm.plan
from smgemm._device import device_spec
from smgemm._gemm import gemm
from smgemm.bench import DTYPES, _copies_for, _operands, _table, _time_rotating, describe
from smgemm.plan import make_plan


def planner_before_stop20():
    """Plans made inside are the planner's before stop 20: Stream-K over the partial wave only, split iterations
    costed as whole-tile ones (checked: the same plans on 1080 shapes, dtypes and budgets)."""
    return patched(smgemm.plan, _candidates=lambda schedules: [(s, 1) for s in schedules], _SK_DRIFT=1.0)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", required=True, help='comma list of "dtype MxNxK num_sms"')
    args = p.parse_args()
    spec = device_spec(torch.device("cuda"))
    rows = []
    for case in args.cases.split(","):
        name, shape, sms = case.split()
        dtype, num_sms = DTYPES[name], None if int(sms) >= spec.num_sms else int(sms)
        m, n, k = (int(v) for v in shape.split("x"))
        with planner_before_stop20():
            old = make_plan(m, n, k, dtype, spec, num_sms=num_sms)
        new = make_plan(m, n, k, dtype, spec, num_sms=num_sms)
        row = {"dtype": name, "shape": shape, "num_sms": sms, "before": describe(old), "now": describe(new)}
        if old != new:
            sets = _operands(m, n, k, dtype, _copies_for(m, n, k, dtype))
            a, b = sets[0]
            ref = a.float() @ b.float()
            for label, plan in (("before", old), ("now", new)):
                with fixed_plan(plan):
                    fn = lambda x, y, s=num_sms: gemm(x, y, num_sms=s)
                    out = fn(a, b)
                    torch.cuda.synchronize()
                    row[f"{label} err"] = f"{((out.float() - ref).norm() / ref.norm()).item():.0e}"
                    row[f"{label} us"] = _time_rotating(fn, sets) * 1e3
            row["now / before"] = row["before us"] / row["now us"]
        print(row, flush=True)
        rows.append(row)
    print(_table(rows))


if __name__ == "__main__":
    main()
