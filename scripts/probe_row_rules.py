"""Probe (not part of the library): the planner's stop-19 rules for 16 < M <= 64 against the plans they replaced.

The rules (smgemm.plan): K steps of 512-byte rows up to M = 32 (`_WIDE_K_MAX_M`, 16 before) and, up to M = 64,
tiles that cover every row of A (`_ONE_ROW_MAX_M`, none before). For each (dtype, shape, SM budget) this plans the
GEMM with the rules and without them (the constants set back), and times both plans and torch side by side on the
same rotated operands (`bench._time_rotating`); rows whose plans are equal are timed once.

    PYTHONPATH=src python scripts/probe_row_rules.py
"""

import torch
from sweep_configs import fixed_plan, patched

from smgemm import plan as P
from smgemm._device import device_spec
from smgemm._gemm import gemm
from smgemm.bench import DTYPES, _copies_for, _operands, _table, _time_rotating, _torch_mm, describe

CASES = (
    [("bf16", (m, n, k), b) for m in (24, 32, 48, 64) for n, k in ((4096, 4096), (14336, 4096), (8192, 8192))
     for b in (None, 32, 66)]
    + [("fp16", (m, n, k), None) for m in (32, 64) for n, k in ((4096, 4096), (8192, 8192))]
    + [("fp8", (m, n, k), b) for m in (32, 48, 64) for n, k in ((4096, 4096), (14336, 4096), (8192, 8192))
       for b in (None, 66)]
    + [("fp32", (32, 4096, 4096), None)]
)


def plans(m, n, k, dtype, spec, budget):
    new = P.make_plan(m, n, k, dtype, spec, num_sms=budget)
    with patched(P, _WIDE_K_MAX_M=16, _ONE_ROW_MAX_M=0):
        old = P.make_plan(m, n, k, dtype, spec, num_sms=budget)
    return old, new


def main() -> None:
    spec = device_spec(torch.device("cuda"))
    rows = []
    for name, (m, n, k), budget in CASES:
        dtype = DTYPES[name]
        old, new = plans(m, n, k, dtype, spec, budget)
        sets = _operands(m, n, k, dtype, _copies_for(m, n, k, dtype))
        times = {}
        for label, plan in (("old", old), ("new", new)):
            if label == "new" and plan == old:
                times["new"] = times["old"]
                continue
            with fixed_plan(plan):
                fn = lambda a, b, budget=budget: gemm(a, b, num_sms=budget)
                fn(*sets[0])  # compile outside the timing: a compile's pause lets the clocks drop
                torch.cuda.synchronize()
                times[label] = _time_rotating(fn, sets)
        a, b = sets[0]
        ref = a.float() @ b.float()
        with fixed_plan(new):
            err = ((gemm(a, b, num_sms=budget).float() - ref).norm() / ref.norm()).item()
        row = {"dtype": name, "M": m, "N": n, "K": k, "num_sms": budget or spec.num_sms,
               "old us": times["old"] * 1e3, "new us": times["new"] * 1e3,
               "new / old speed": times["old"] / times["new"],
               "old plan": describe(old), "new plan": describe(new) if new != old else "same",
               "new rel err": err}
        if budget is None:
            t_torch = _time_rotating(_torch_mm(dtype), sets)
            row["new vs torch"] = t_torch / times["new"]
        rows.append(row)
        del sets
    print(_table(rows))


if __name__ == "__main__":
    main()
