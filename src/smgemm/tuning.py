"""Explicit tuning: time candidate tile configurations on the device and keep the winners in a JSON file.

The default path never tunes: the planner's analytical model (plan.py) picks every configuration. Tuning is for
users who know their shapes and want the measured best:

    python -m smgemm tune --shapes 4096x14336x4096,16x4096x4096 --num-sms 66 --out tuned.json   # on the GPU
    smgemm.use_tuning("tuned.json")     # later, in the serving process

After `use_tuning`, a GEMM whose problem is in the file (device name, M, N, K, dtype, SM budget), called with
schedule "auto" and no explicit `config`, runs the stored configuration and schedule; every other GEMM is planned
as before. The table is process-wide and read-only once loaded; `use_tuning(None)` turns it off.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict

import torch

from ._device import DeviceSpec, device_spec
from .plan import (
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
)

FORMAT_VERSION = 1
_DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}

Key = tuple[str, int, int, int, str, int]  # device name, M, N, K, dtype name, SM budget


class _Active:
    table: dict[Key, tuple[TileConfig, str]] | None = None
    version: int = 0  # bumped by use_tuning: smgemm._gemm forgets the plans it derived from an older table


_ACTIVE = _Active()


def _key(spec: DeviceSpec, m: int, n: int, k: int, dtype: torch.dtype, budget: int) -> Key:
    return spec.name, m, n, k, _DTYPE_NAMES[dtype], budget


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
    """The benchmark's own timing (`bench._time_rotating`): back-to-back calls rotating through operand sets that
    together defeat L2, so that a tuned configuration wins by the measure `python -m smgemm bench` reports."""
    from .bench import _time_rotating

    fn(*sets[0])  # compiles, outside the timed span
    torch.cuda.synchronize()
    return _time_rotating(fn, sets)


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
    from ._gemm import gemm
    from .bench import _copies_for, describe

    device = torch.device(device)
    spec = device_spec(device)
    budget = resolve_budget(num_sms, spec)
    timer = timer or (_gpu_ms if device.type == "cuda" else _cpu_ms)
    entries = []
    for m, n, k in shapes:
        copies = _copies_for(m, n, k, dtype) if device.type == "cuda" else 1
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
        for cfg, schedule in searched:
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


def save(entries: list[dict], path: str) -> None:
    """Write tuning entries (from `tune`, possibly several runs' concatenated) as a JSON file."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"format": FORMAT_VERSION, "entries": entries}, f, indent=1)


_ENTRY_INTS = ("m", "n", "k", "num_sms")
_CONFIG_INTS = ("block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages")
_CONFIG_BOOLS = ("tma", "tma_store", "flatten")
_TUNED_SCHEDULES = ("persistent", "streamk", "data_parallel")
_MAX_SMEM = 232448  # the most shared memory one program may use on any sm_90 device (H100, H200)


def _int(value: object, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return value


def _entry(e: object) -> tuple[Key, tuple[TileConfig, str]]:
    """One entry of a tuning file, checked field by field: the lookup key and what runs."""
    if not isinstance(e, dict):
        raise ValueError(f"an entry must be an object, got {type(e).__name__}")
    missing = [f for f in ("device", "dtype", "schedule", "config", *_ENTRY_INTS) if f not in e]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    if not isinstance(e["device"], str):
        raise ValueError(f"device must be a string, got {e['device']!r}")
    m, n, k, budget = (_int(e[f], f, 0 if f != "num_sms" else 1) for f in _ENTRY_INTS)
    if e["dtype"] not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {e['dtype']!r}")
    if e["schedule"] not in _TUNED_SCHEDULES:
        raise ValueError(f"schedule must be one of {list(_TUNED_SCHEDULES)}, got {e['schedule']!r}")
    cfg = e["config"]
    if not isinstance(cfg, dict):
        raise ValueError(f"config must be an object, got {cfg!r}")
    unknown = sorted(set(cfg) - set(_CONFIG_INTS) - set(_CONFIG_BOOLS) - {"mx_split", "mx_swap", "mx_prefetch"})
    if unknown:
        raise ValueError(f"config has unknown fields {unknown}")
    for f in _CONFIG_INTS:
        if f in cfg:
            _int(cfg[f], f"config.{f}", 1)
    for f in (*_CONFIG_BOOLS, "mx_split", "mx_swap", "mx_prefetch"):
        if f in cfg and not isinstance(cfg[f], bool):
            raise ValueError(f"config.{f} must be true or false, got {cfg[f]!r}")
    if any(cfg.get(f) for f in ("mx_split", "mx_swap", "mx_prefetch")):
        raise ValueError("config.mx_* apply to MXFP4 GEMMs, which tuning files do not cover")
    config = TileConfig(**cfg)  # block sizes: powers of two >= 16
    warps = config.num_warps
    if warps & (warps - 1) or warps > 16:
        raise ValueError(f"config.num_warps must be 1, 2, 4, 8 or 16, got {warps}")
    dtype = DTYPES[e["dtype"]]
    if config.block_k < min_block_k(dtype):
        raise ValueError(f"{e['dtype']} needs config.block_k >= {min_block_k(dtype)}, got {config.block_k}")
    smem = (config.block_m + config.block_n) * config.block_k * element_bytes(dtype) * config.num_stages
    if smem > _MAX_SMEM:
        raise ValueError(f"config needs {smem} bytes of shared memory for its stages; a program has at most "
                         f"{_MAX_SMEM}")
    return (e["device"], m, n, k, e["dtype"], budget), (config, e["schedule"])


def load(path: str) -> dict[Key, tuple[TileConfig, str]]:
    """Read a tuning file into a lookup table, checking all of it: anything malformed (JSON, fields, types,
    configurations the kernel cannot run) raises ValueError naming the file and the entry."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION:
        raise ValueError(f"{path}: not an smgemm tuning file of format {FORMAT_VERSION}")
    entries = data.get("entries")
    if not isinstance(entries, list):
        raise ValueError(f"{path}: 'entries' must be a list, got {type(entries).__name__}")
    table = {}
    for i, e in enumerate(entries):
        try:
            key, value = _entry(e)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{path}: entry {i} is malformed: {err}") from None
        table[key] = value
    return table


def use_tuning(path: str | None) -> None:
    """Make GEMMs whose problems are in the tuning file at `path` use its configurations (None: stop)."""
    _ACTIVE.table = None if path is None else load(path)
    _ACTIVE.version += 1


def tuning_version() -> int:
    """Changes whenever `use_tuning` is called."""
    return _ACTIVE.version


def lookup(spec: DeviceSpec, m: int, n: int, k: int, dtype: torch.dtype, budget: int) -> tuple[TileConfig, str] | None:
    """The tuned (config, schedule) of this problem, or None (no table loaded, or the problem is not in it)."""
    table = _ACTIVE.table
    if not table or dtype not in _DTYPE_NAMES:
        return None
    return table.get(_key(spec, m, n, k, dtype, budget))


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m smgemm tune", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", required=True, help="comma list of MxNxK")
    p.add_argument("--dtype", default="bf16", help=",".join(DTYPES))
    p.add_argument("--num-sms", type=int, default=None, help="SM budget (default: the whole device)")
    p.add_argument("--show", type=int, default=0, help="also print this many of the fastest candidates per shape")
    p.add_argument("--out", required=True, help="JSON file to write (entries already in it are kept)")
    args = p.parse_args(argv)
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        print("No CUDA GPU: timing through the Triton interpreter is meaningless; the file is written for testing.")
    entries = tune(shapes, DTYPES[args.dtype], num_sms=args.num_sms, device=device, show=args.show)
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
