"""`python -m smgemm tune`: time candidate tile configurations on the device and keep the winners in a tuning file
(read back by `smgemm.use_tuning`)."""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, replace

import torch

from .._device import DeviceSpec, device_spec
from .._gemm import gemm
from ..plan import (
    _CANDIDATE_TILES,
    _SMEM_RESERVE,
    DTYPES,
    TileConfig,
    _next_pow2,
    element_bytes,
    make_plan,
    min_block_k,
    resolve_budget,
    streamk_split,
    whole_store_fits,
)
from ..tuning import _DTYPE_NAMES, save
from .bench import describe
from .timing import choices_list, copies_for, positive_int, progress, shape_list, time_rotating


def candidates(
    m: int, n: int, k: int, dtype: torch.dtype, spec: DeviceSpec, budget: int
) -> list[tuple[TileConfig, str]]:
    """Every (config, schedule) the search times: each candidate tile no larger than the problem needs, BLOCK_K
    of 128 or 256 bytes, 2-4 stages that fit in shared memory, the Hopper path on and off for tiles of 128 x 128
    and more, persistent and (where the shape splits) Stream-K."""
    elem = element_bytes(dtype)
    max_m, max_n = max(16, _next_pow2(m)), max(32, _next_pow2(n))
    found = []
    for bm, bn, warps in _CANDIDATE_TILES:
        if bm > max_m or bn > max_n:
            continue
        for block_k in sorted({max(min_block_k(dtype), 128 // elem), max(min_block_k(dtype), 256 // elem)}):
            stage_bytes = (bm + bn) * block_k * elem
            for stages in (2, 3, 4):
                if stages * stage_bytes > spec.smem_per_block - _SMEM_RESERVE:  # the planner's rule
                    continue
                for hopper in (False, True) if bm * bn >= 128 * 128 else (False,):
                    cfg = TileConfig(bm, bn, block_k, num_warps=warps, num_stages=stages, tma=hopper,
                                     tma_store=hopper, flatten=hopper)
                    if whole_store_fits(cfg, elem, spec):  # as the planner stores
                        cfg = replace(cfg, whole_store=True)
                    found.append((cfg, "persistent"))
                    tiles = math.ceil(m / bm) * math.ceil(n / bn)
                    if streamk_split(tiles, math.ceil(k / block_k), budget) is not None:
                        found.append((cfg, "streamk"))
    return found


Timer = Callable[[Callable[[torch.Tensor, torch.Tensor], object], list], float]


def _short(cfg: TileConfig, schedule: str) -> str:
    hopper = " tma" if cfg.tma else ""
    return f"{schedule} {cfg.block_m}x{cfg.block_n}x{cfg.block_k} w{cfg.num_warps} s{cfg.num_stages}{hopper}"


def _gpu_ms(fn: Callable[[torch.Tensor, torch.Tensor], object], sets: list) -> float:
    """The benchmark's own timing (`timing.time_rotating`): back-to-back calls rotating through operand sets that
    together defeat L2, so that a tuned configuration wins by the measure `python -m smgemm bench` reports."""
    fn(*sets[0])  # compiles, outside the timed span
    torch.cuda.synchronize()
    return time_rotating(fn, sets)


def _cpu_ms(fn: Callable[[torch.Tensor, torch.Tensor], object], sets: list) -> float:
    """The interpreter has no meaningful timing; one run's wall time keeps the search runnable on a CPU."""
    start = time.perf_counter()
    fn(*sets[0])
    return (time.perf_counter() - start) * 1e3


def tune(
    shapes: Iterable[tuple[int, int, int]],
    dtype: torch.dtype = torch.bfloat16,
    *,
    num_sms: int | None = None,
    device: str | torch.device = "cuda",
    timer: Timer | None = None,
    log: Callable[[str], None] | None = print,
    show: int = 0,
) -> list[dict]:
    """Time every candidate of each (M, N, K) on `device` with `num_sms`; returns one entry per shape (the fastest
    configuration that ran and matched the first candidate's result), ready for `save`.

    B is a transposed [N, K] weight, as in nn.Linear; operands are fresh random data, on the GPU several copies
    (about 256 MB) that the timer rotates through, as the benchmark does. `timer(fn, sets)` returns milliseconds
    per call of `fn(a, b)`. With `show` > 0 the log also lists that many of the fastest candidates of each shape.
    """
    device = torch.device(device)
    spec = device_spec(device)
    budget = resolve_budget(num_sms, spec)
    timer = timer or (_gpu_ms if device.type == "cuda" else _cpu_ms)
    entries = []
    for m, n, k in shapes:
        copies = copies_for(m, n, k, dtype) if device.type == "cuda" else 1
        sets = [(torch.randn(m, k, device=device).to(dtype), torch.randn(n, k, device=device).to(dtype).t())
                for _ in range(copies)]
        a, b = sets[0]
        ref = (a.double() @ b.double()).float()
        tolerance = 0.05 if dtype == torch.float8_e4m3fn else 0.01
        planned = make_plan(m, n, k, dtype, spec, num_sms=num_sms)
        searched = candidates(m, n, k, dtype, spec, budget)
        if (planned.config, planned.schedule) not in searched:  # the file then never holds a slower pick
            searched.append((planned.config, planned.schedule))
        timed = []
        for cfg, schedule in progress(searched, f"{m}x{n}x{k} candidates"):
            def run(a, b, cfg=cfg, schedule=schedule):
                return gemm(a, b, config=cfg, schedule=schedule, num_sms=num_sms)

            try:
                err = ((run(a, b).float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
                if not err <= tolerance:  # also catches NaN
                    raise RuntimeError(f"relative error {err:.2e}")
                ms = timer(run, sets)
            except Exception as e:  # a configuration that does not compile or fit is skipped, and said so
                if log:
                    log(f"  {m}x{n}x{k} {_short(cfg, schedule)}: skipped ({type(e).__name__}: {str(e)[:80]})")
                continue
            timed.append((ms, cfg, schedule))
        if not timed:
            raise RuntimeError(f"no candidate configuration ran for {m}x{n}x{k} {dtype}")
        timed.sort(key=lambda t: t[0])
        ms, cfg, schedule = timed[0]
        if log:  # the planner's pick is among the timed candidates: its time, not a second run of it
            planner = [f"{t_ms * 1e3:.1f} us" for t_ms, t_cfg, t_schedule in timed
                       if (t_cfg, t_schedule) == (planned.config, planned.schedule)]
            log(f"{m}x{n}x{k} {_DTYPE_NAMES[dtype]} on {budget} SMs: {_short(cfg, schedule)} ({ms * 1e3:.1f} us); "
                f"the planner's {describe(planned)}: {(planner or ['skipped'])[0]}")
            for t_ms, t_cfg, t_schedule in timed[1:show]:
                log(f"    {t_ms * 1e3:8.1f} us  {_short(t_cfg, t_schedule)}")
        entries.append({"device": spec.name, "m": m, "n": n, "k": k, "dtype": _DTYPE_NAMES[dtype],
                        "num_sms": budget, "schedule": schedule, "config": asdict(cfg), "us": ms * 1e3})
    return entries


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shapes", required=True, type=shape_list,
                   help="comma list of MxNxK, e.g. 4096x14336x4096,16x4096x4096")
    p.add_argument("--dtype", default=["bf16"], type=choices_list(DTYPES), help="comma list of " + ",".join(DTYPES))
    p.add_argument("--num-sms", type=positive_int, default=None, help="SM budget (default: the whole device)")
    p.add_argument("--show", type=int, default=0, help="also print this many of the fastest candidates per shape")
    p.add_argument("--out", required=True, help="JSON file to write (entries already in it are kept)")


def run(args: argparse.Namespace) -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        print("No CUDA GPU: timing through the Triton interpreter is meaningless; the file is written for testing.")
    entries = [e for name in args.dtype
               for e in tune(args.shapes, DTYPES[name], num_sms=args.num_sms, device=device, show=args.show)]
    try:
        with open(args.out, encoding="utf-8") as f:
            old = json.load(f).get("entries", [])
    except FileNotFoundError:
        old = []
    keys = {(e["device"], e["m"], e["n"], e["k"], e["dtype"], e["num_sms"]) for e in entries}
    kept = [e for e in old if (e["device"], e["m"], e["n"], e["k"], e["dtype"], e["num_sms"]) not in keys]
    save(kept + entries, args.out)
    print(f"wrote {len(kept + entries)} entries to {args.out}")
    return 0
