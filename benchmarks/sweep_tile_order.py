"""Which of two equally modelled 4-warp tiles the planner should try first (GPU): the planner as it is against the
planner with 128 x 64 and 64 x 128 the other way round in both its candidate orders (the first of a tie wins;
`plan._CANDIDATE_TILES` and `plan._TALL_FIRST`), on every problem of
the bench's llm, square, mid and streamk suites and random draws 0-7 whose pick the swap changes; each timed twice
a side, alternating, the faster kept, with torch's time (unbudgeted) for reference. The measurement behind the order.
With --square-stages N the other side is instead the planner with `plan._SQUARE_DEEP_STAGES` = N (4: no 5-stage
128 x 128 tiles), the measurement behind that rule; with --square-rules, the planner without the rules that extend
those tiles (5 stages beyond three waves, `plan._SQUARE_DEEP_MIN_FILL`; one-wave skinny products,
`plan._SKINNY_SQUARE_MIN_FILL`) and without their rate (`Rates.square_deep_factor`), the measurement behind those;
with --rates NAME=VALUE,..., the planner with those `smgemm.Rates` fields (a refit of the model); with --hopper-small,
the planner with its 4-warp tiles kept on the pointer path (`plan._HOPPER_SMALL_TILES` empty), the measurement behind
`plan.hopper_path`; with --hopper-tiles BMxBN,..., the planner with that rule over these tiles
(`plan._HOPPER_SMALL_TILES`), the measurement of extending it. --list prints the
problems whose pick changes and both picks, untimed, on any machine (no GPU: the interpreter's emulated H200).

    PYTHONPATH=src python benchmarks/sweep_tile_order.py --dtype bf16 --num-sms ,32,66
    PYTHONPATH=src python benchmarks/sweep_tile_order.py --dtype bf16 --seeds 2 --square-stages 4
    PYTHONPATH=src python benchmarks/sweep_tile_order.py --dtype bf16 --square-rules
    PYTHONPATH=src python benchmarks/sweep_tile_order.py --dtype bf16 --seeds 16 --num-sms ,66 --hopper-small
    PYTHONPATH=src python benchmarks/sweep_tile_order.py --dtype bf16 --seeds 18 --hopper-tiles 64x128,128x64,64x64
    PYTHONPATH=src python benchmarks/sweep_tile_order.py --dtype fp16 --seeds 12 --list \
        --rates unaligned_loads_per_iter=6100,inplace_run_speedup=1.695
"""

import argparse
import contextlib
import dataclasses
import math

import torch

import smgemm
import smgemm._gemm
import smgemm.plan as P
from smgemm._device import INTERPRETER_SPEC, device_spec
from smgemm._launch import operands_alignment
from smgemm.tools.bench import SUITES, _operands, _torch_mm, describe, random_shapes
from smgemm.tools.timing import copies_for, environment, rel_err, time_rotating


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="bf16", choices=P.DTYPES)
    p.add_argument("--num-sms", default="", help="comma list of SM budgets; empty: the whole device")
    p.add_argument("--seeds", type=int, default=8, help="random draws 0 .. seeds-1")
    p.add_argument("--square-stages", type=int, default=None,
                   help="the other side: plan._SQUARE_DEEP_STAGES set to this, not the tile order swapped")
    p.add_argument("--square-rules", action="store_true",
                   help="the other side: the planner without the rules that extend 5-stage 128 x 128 tiles")
    p.add_argument("--rates", default="", help="the other side: the planner with these Rates fields, NAME=VALUE,...")
    p.add_argument("--hopper-small", action="store_true",
                   help="the other side: the planner with its 4-warp tiles on the pointer path (plan.hopper_path)")
    p.add_argument("--hopper-tiles", default="",
                   help="the other side: plan._HOPPER_SMALL_TILES set to these tiles, BMxBN,... (plan.hopper_path)")
    p.add_argument("--list", action="store_true", help="only list the changed picks (no timing, no GPU needed)")
    args = p.parse_args()
    print(environment())
    gpu = torch.cuda.is_available()
    dtype = P.DTYPES[args.dtype]
    spec = device_spec(torch.device("cuda")) if gpu else INTERPRETER_SPEC
    ours = {"_CANDIDATE_TILES": P._CANDIDATE_TILES, "_TALL_FIRST": P._TALL_FIRST,
            "_SQUARE_DEEP_STAGES": P._SQUARE_DEEP_STAGES, "_SQUARE_DEEP_MIN_FILL": P._SQUARE_DEEP_MIN_FILL,
            "_SKINNY_SQUARE_MIN_FILL": P._SKINNY_SQUARE_MIN_FILL, "_HOPPER_SMALL_TILES": P._HOPPER_SMALL_TILES}
    other_rates = None  # the other side's model rates, where they differ
    if args.rates:
        fields = (field.split("=", 1) for field in args.rates.split(","))
        other, label = ours, "rates"
        other_rates = dataclasses.replace(spec.rates, **{name: float(value) for name, value in fields})
    elif args.hopper_small:
        other, label = {**ours, "_HOPPER_SMALL_TILES": ()}, "pointer"
    elif args.hopper_tiles:
        tiles = tuple(tuple(int(v) for v in tile.split("x")) for tile in args.hopper_tiles.split(","))
        other, label = {**ours, "_HOPPER_SMALL_TILES": tiles}, "tiles"
    elif args.square_rules:
        other = {**ours, "_SQUARE_DEEP_MIN_FILL": math.inf, "_SKINNY_SQUARE_MIN_FILL": math.inf}
        other_rates = dataclasses.replace(spec.rates, square_deep_factor=1.0)
        label = "without"
    elif args.square_stages is None:
        other = {**ours, "_CANDIDATE_TILES": P._TALL_FIRST, "_TALL_FIRST": P._CANDIDATE_TILES}
        label = "swapped"
    else:
        other = {**ours, "_SQUARE_DEEP_STAGES": args.square_stages}
        label = f"{args.square_stages} stages"
    orders = {"planner": ours, "other": other}
    rates = contextlib.ExitStack()

    def use(name):
        for attr, value in orders[name].items():
            setattr(P, attr, value)
        rates.close()
        if name == "other" and other_rates is not None:
            rates.enter_context(P.overrides(rates=other_rates))
        P.make_plan.cache_clear()
        P.hopper_path.cache_clear()  # reads _HOPPER_SMALL_TILES
        smgemm._gemm._SEEN_CALLS.clear()

    shapes = [(m, n, k, False) for name in ("llm", "square", "mid", "streamk") for m, n, k in SUITES[name]]
    for seed in range(args.seeds):
        shapes += random_shapes(seed)
    budgets = [int(b) if b else None for b in args.num_sms.split(",")]
    peer = _torch_mm(dtype)
    ratios = {}
    try:
        for budget in budgets:
            for m, n, k, odd in shapes:
                a, b = _operands(m, n, k, dtype, 1, odd, device="meta")[0]
                ops = operands_alignment(a, b)
                plans = {}
                for name in orders:
                    use(name)
                    plans[name] = describe(P.decide(m, n, k, dtype, spec, num_sms=budget, operands=ops))
                use("planner")
                if plans["planner"] == plans["other"]:
                    continue
                if args.list or not gpu:
                    print(f"{budget or 'all':>4} {m}x{n}x{k}{'u' if odd else ''}: {plans['planner']} -> "
                          f"{plans['other']}", flush=True)
                    continue
                sets = _operands(m, n, k, dtype, min(4, copies_for(m, n, k, dtype)), odd)
                a, b = sets[0]
                ref = a.float() @ b.float()
                f = lambda x, y: smgemm.matmul(x, y, num_sms=budget)  # noqa: B023
                us = {name: math.inf for name in orders}
                for name in (*orders, *orders):
                    use(name)
                    assert rel_err(f(a, b), ref) < 2e-2, (m, n, k, name)
                    us[name] = min(us[name], time_rotating(f, sets) * 1e3)
                ratio = us["other"] / us["planner"]
                ratios.setdefault(budget, []).append(ratio)
                try:
                    torch_us = f"{time_rotating(peer, sets) * 1e3:8.2f}"
                except RuntimeError:  # torch._scaled_mm takes no K or N that is not a multiple of 16
                    torch_us = "     n/a"
                print(f"{budget or 'all':>4} {m}x{n}x{k}{'u' if odd else ''}: planner {us['planner']:8.2f} us, {label} "
                      f"{us['other']:8.2f} ({ratio:.3f}), torch {torch_us}; {plans['planner']} -> {plans['other']}",
                      flush=True)
    finally:
        use("planner")
    for budget, r in ratios.items():
        mean = math.exp(sum(map(math.log, r)) / len(r))
        print(f"budget {budget or 'all'}: {len(r)} picks change; {label} / planner time: geometric mean {mean:.3f}, "
              f"{min(r):.3f}-{max(r):.3f}")


if __name__ == "__main__":
    main()
