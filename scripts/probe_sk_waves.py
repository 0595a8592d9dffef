"""Where hybrid Stream-K loses time on a partial last wave (GPU probe; some variants give wrong results on purpose).

For each shape (more tiles than SMs, a partial last wave) and one tile configuration, times side by side:

* `full waves`: a GEMM with the same K and as many whole waves of tiles as the shape has (rows x cols a multiple
  of the SMs); its time scaled to the shape's tiles is what a split with no overhead at all would take (`ideal`);
* `persistent`, `data_parallel` and the planner's `streamk` split (whole waves data-parallel, the last wave's tiles
  split evenly over all programs);
* `streamk, no fixup`: a copy of the kernel whose finishers neither wait nor sum the lower partials (wrong on
  purpose, scripts/probe_fixup.py): what the fixup costs;
* `no fixup, no store`: neither the fixup nor the publishing of partials; `no sk loop`: the split tiles' K-loops
  run no iterations (partials of zeros, published and summed as usual); `whole tiles only`: the Stream-K kernel
  skips its split tiles (the whole-tile loop as compiled beside the Stream-K code); `fixup unroll 1`: the
  finisher loads one partial at a time (fewer registers);
* `two-tile`: Stream-K over the last full wave plus the partial one (each program then holds 1-2 tiles' worth of
  K-iterations, every split tile shared by 2-3 programs instead of ~6), and the same without fixup.

    PYTHONPATH=src python scripts/probe_sk_waves.py --shapes 3072x3072x8192 --tile "128x256x64 w8 s3 tma"
"""

import argparse

import torch
from probe_fixup import _CUTS, cut_kernel
from sweep_configs import parse_variant, patched

import smgemm.kernels.gemm as kgemm
import smgemm.plan
from smgemm._device import device_spec
from smgemm._gemm import gemm
from smgemm.bench import DTYPES, _copies_for, _operands, _table, _time_rotating, describe
from smgemm.plan import make_plan

_PUBLISH = "tl.store(ws_ptr + pid * tile_elems + offs_tile, acc,"
_UNROLL = "_FIXUP_UNROLL: tl.constexpr = tl.constexpr(2)"
_SK_RANGE = "seg_start - tile_start, seg_end - tile_start,"


def split_waves(waves: int):
    """Plans made inside split the last `waves` waves (plan.streamk_split): 1, the partial wave; 2, the last whole
    wave too."""
    return patched(smgemm.plan, _candidates=lambda schedules: [(s, waves if s == "streamk" else 1) for s in schedules])


def kernel(fn):
    """Launches inside run `fn` in place of gemm_kernel (a cut copy)."""
    return patched(kgemm, gemm_kernel=fn)


def measure(shape, dtype, cfg, spec, no_fixup, cut_kernels) -> dict:
    """One row of the table: every variant of the docstring on one shape (under split_waves(1))."""
    m, n, k = (int(v) for v in shape.split("x"))
    rows_m, cols = -(-m // cfg.block_m), -(-n // cfg.block_n)
    tiles = rows_m * cols
    # Whole waves of the same K-loop: rows_f x cols_f tiles, a multiple of the SMs, as many waves as are whole
    waves = tiles // spec.num_sms
    cols_f = max(d for d in range(1, cols + 1) if spec.num_sms % d == 0)
    rows_f = spec.num_sms // cols_f * waves
    row = {"shape": shape, "tiles": tiles, "waves": tiles / spec.num_sms}

    def timed(mm, nn, schedule, name):
        sets = _operands(mm, nn, k, dtype, _copies_for(mm, nn, k, dtype))
        a, b = sets[0]
        fn = lambda x, y: gemm(x, y, config=cfg, schedule=schedule)
        out = fn(a, b)
        torch.cuda.synchronize()
        ref = a.float() @ b.float()
        row[f"{name} err"] = f"{((out.float() - ref).norm() / ref.norm()).item():.0e}"
        return _time_rotating(fn, sets) * 1e3

    if dtype != DTYPES["fp8"]:
        row["torch us"] = _time_rotating(torch.matmul, _operands(m, n, k, dtype, _copies_for(m, n, k, dtype))) * 1e3
    if waves:
        t_full = timed(rows_f * cfg.block_m, cols_f * cfg.block_n, "persistent", "full")
        row["full waves us"] = t_full
        row["ideal us"] = t_full * tiles / (rows_f * cols_f)
    for schedule in ("persistent", "data_parallel", "streamk"):
        row[f"{schedule} us"] = timed(m, n, schedule, schedule)
    row["sk plan"] = describe(make_plan(m, n, k, dtype, spec, schedule="streamk", config=cfg))
    with kernel(no_fixup):
        row["streamk no fixup us"] = timed(m, n, "streamk", "nofix")
    for name, fn in cut_kernels.items():
        with kernel(fn):
            row[f"streamk {name} us"] = timed(m, n, "streamk", name)
    with split_waves(2):
        row["two-tile plan"] = describe(make_plan(m, n, k, dtype, spec, schedule="streamk", config=cfg))
        row["two-tile us"] = timed(m, n, "streamk", "two-tile")
        with kernel(no_fixup):
            row["two-tile no fixup us"] = timed(m, n, "streamk", "two-tile nofix")
    row["sk / dp"] = row["data_parallel us"] / row["streamk us"]
    row["best / dp"] = row["data_parallel us"] / min(row["streamk us"], row["two-tile us"], row["persistent us"])
    print(row, flush=True)
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--shapes", required=True)
    p.add_argument("--tile", default="128x256x64 w8 s3 tma", help="a scripts/sweep_configs.py variant, no schedule")
    p.add_argument("--cuts", action="store_true", help="also the kernel cuts beyond `no fixup`")
    args = p.parse_args()
    dtype = DTYPES[args.dtype]
    spec = device_spec(torch.device("cuda"))
    cfg, _ = parse_variant(args.tile)
    no_fixup = cut_kernel(_CUTS)
    cut_kernels = {  # more cuts of the Stream-K part: which of its pieces costs what
        # offs_tile never equals the launch's random 62-bit epoch, and the compiler cannot know it
        "no fixup, no store": cut_kernel({**_CUTS, _PUBLISH: _PUBLISH.replace("acc,", "acc, mask=offs_tile == epoch,")
                                          }),
        "no sk loop": cut_kernel({_SK_RANGE: "seg_start - tile_start, seg_start - tile_start,"}),
        # the whole-tile loop alone, in the kernel as compiled with its Stream-K part (255 registers, spills)
        "whole tiles only": cut_kernel({"while seg_end > start:": "while seg_end > start + (1 << 30):"}),
        "fixup unroll 1": cut_kernel({_UNROLL: _UNROLL.replace("(2)", "(1)")}),
    } if args.cuts else {}
    with split_waves(1):
        rows = [measure(shape, dtype, cfg, spec, no_fixup, cut_kernels) for shape in args.shapes.split(",")]
    keys = ("shape", "tiles", "waves", "torch us", "ideal us", "persistent us", "data_parallel us", "streamk us",
            "streamk no fixup us", "streamk no fixup, no store us", "streamk no sk loop us",
            "streamk whole tiles only us", "streamk fixup unroll 1 us", "two-tile us",
            "two-tile no fixup us", "sk / dp", "best / dp")
    print(_table([{key: r[key] for key in keys if key in r} for r in rows]))
    print(_table([{key: v for key, v in r.items() if key == "shape" or "err" in key or "plan" in key} for r in rows]))


if __name__ == "__main__":
    main()
