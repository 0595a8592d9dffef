"""Time GEMMs whose operand rows are not 16-byte aligned (odd dims, views into wider buffers: no TMA, no vectorized
loads) read in place against staged into aligned copies first, next to the planner's pick, the same GEMM on aligned
operands of the next aligned K, the staging copy alone, and torch, on the GPU.

    PYTHONPATH=src python benchmarks/sweep_unaligned.py --shapes 4095x4097x4099,16x4096x4097 --num-sms 0,32

`slowdown` (in place / aligned) is what `Rates.unaligned_slowdown` models for tiles the planner may not change;
`copy us` (A and B in one launch) against the staged bytes gives `Rates.stage_fixed` and the copy rates of
`plan.copy_time`. `--inplace` adds each of `plan.INPLACE_CONFIGS` reading both operands in place, measured and as
`plan.inplace_time` models it (`Rates.unaligned_loads_per_iter`, `inplace_run_speedup` for K-runs of 4 bytes or
more, `launch_floor`; one iteration ~0.85 us):

    PYTHONPATH=src python benchmarks/sweep_unaligned.py --inplace --shapes 1668x361x203,881x224x2498,149x79x433
"""

import argparse
import contextlib

import torch

import smgemm
from smgemm._device import device_spec
from smgemm._launch import operands_alignment, stage
from smgemm.plan import INPLACE_CONFIGS, decide, inplace_time, modelled_time
from smgemm.tools.bench import _operands
from smgemm.tools.timing import copies_for, environment, shape_list, table, time_rotating

_US_PER_ITER = 0.85  # the reference iteration on the H200 (smgemm.Rates)
_SHAPES = ("4095x4097x4099,2047x8191x4097,8192x1025x4097,1023x1025x1027,511x14335x4097,128x4097x4097,"
           "64x14337x4097,16x4096x4097,16x14337x4097,255x255x257,3001x4999x3003")


def _matmul(num_sms):
    return lambda a, b: smgemm.matmul(a, b, num_sms=num_sms)


def _copies(programs):
    return lambda a, b: stage([a, b], programs)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", type=shape_list, default=shape_list(_SHAPES), help="comma list of MxNxK")
    p.add_argument("--num-sms", default="0", help="comma list of SM budgets (0: the whole device)")
    p.add_argument("--dtype", default="bf16", choices=sorted(smgemm.plan.DTYPES))
    p.add_argument("--inplace", action="store_true",
                   help="also each of plan.INPLACE_CONFIGS reading in place: measured and modelled us")
    args = p.parse_args()
    dtype = smgemm.plan.DTYPES[args.dtype]
    spec = device_spec(torch.device("cuda"))
    print(environment())
    rows = []
    for m, n, k in args.shapes:
        copies = copies_for(m, n, k, dtype)
        sets = _operands(m, n, k, dtype, copies, unaligned=True)
        k_al = -(-k // 16) * 16
        aligned = _operands(m, n, k_al, dtype, copies)
        ref = torch.matmul(*sets[0]).float()
        for budget in (int(v) for v in args.num_sms.split(",")):
            num_sms = budget or None
            t_torch = time_rotating(torch.matmul, sets) if num_sms is None else float("nan")
            times = {}
            run = _matmul(num_sms)
            for name, stage_it in (("in place", False), ("staged", True), ("auto", None)):
                with smgemm.overrides(stage=stage_it) if stage_it is not None else contextlib.nullcontext():
                    err = (run(*sets[0]).float() - ref).abs().max().item() / ref.abs().max().item()
                    times[name] = time_rotating(run, sets)
            t_aligned = time_rotating(run, aligned)
            programs = spec.num_sms if num_sms is None else num_sms
            t_copy = time_rotating(_copies(programs), sets)
            a, b = sets[0]
            plan = decide(m, n, k, dtype, spec, num_sms=num_sms, operands=operands_alignment(a, b))
            model = modelled_time(plan.config, m, n, k, dtype, plan.sm_budget, plan.schedule, spec.l2_bytes,
                                  plan.sk_waves, spec.rates)
            if args.inplace:
                runs = tuple(run * a.element_size() >= 4 for _, _, run in operands_alignment(a, b))
                for cfg in INPLACE_CONFIGS:
                    with smgemm.overrides(config=cfg, stage=False, schedule="persistent"):
                        tile = f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k}"
                        times[tile] = time_rotating(run, sets)
                        modelled = inplace_time(cfg, m, n, k, dtype, programs, spec, (True, True), runs=runs)
                        times[tile + " model"] = modelled * _US_PER_ITER * 1e-3
            rows.append({
                **{f"{name} us": t * 1e3 for name, t in times.items() if name not in ("in place", "staged", "auto")},
                "M": m, "N": n, "K": k, "sms": programs,
                "in place us": times["in place"] * 1e3, "staged us": times["staged"] * 1e3,
                "auto us": times["auto"] * 1e3, "aligned us": t_aligned * 1e3, "copy us": t_copy * 1e3,
                "torch us": t_torch * 1e3, "slowdown": times["in place"] / t_aligned,
                "copy GB/s": 2 * (a.numel() + b.numel()) * a.element_size() / t_copy / 1e6,
                "auto/torch": t_torch / times["auto"], "stages": plan.stage_a or plan.stage_b,
                "model iters": model, "rel err": err,
            })
            print(rows[-1], flush=True)
        del sets, aligned
    print(table(rows))


if __name__ == "__main__":
    main()
