"""Tuning files: configurations measured by `python -m smgemm tune` (smgemm.tools.tune), looked up by the planner.

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

import torch

from ._device import DeviceSpec
from .plan import DTYPES, TileConfig, element_bytes, min_block_k

FORMAT_VERSION = 1
_DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}

Key = tuple[str, int, int, int, str, int]  # device name, M, N, K, dtype name, SM budget


class _Active:
    table: dict[Key, tuple[TileConfig, str]] | None = None
    version: int = 0  # bumped by use_tuning: smgemm._gemm forgets the plans it derived from an older table


_ACTIVE = _Active()


def _key(spec: DeviceSpec, m: int, n: int, k: int, dtype: torch.dtype, budget: int) -> Key:
    return spec.name, m, n, k, _DTYPE_NAMES[dtype], budget


def save(entries: list[dict], path: str) -> None:
    """Write tuning entries (from `tune`, possibly several runs' concatenated) as a JSON file."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"format": FORMAT_VERSION, "entries": entries}, f, indent=1)


_ENTRY_INTS = ("m", "n", "k", "num_sms")
_CONFIG_INTS = ("block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages")
_CONFIG_BOOLS = ("tma", "tma_store", "whole_store", "flatten")
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
    unknown = sorted(set(cfg) - set(_CONFIG_INTS) - set(_CONFIG_BOOLS) - {"mx_swap", "mx_prefetch"})
    if unknown:
        raise ValueError(f"config has unknown fields {unknown}")
    for f in _CONFIG_INTS:
        if f in cfg:
            _int(cfg[f], f"config.{f}", 1)
    for f in (*_CONFIG_BOOLS, "mx_swap", "mx_prefetch"):
        if f in cfg and not isinstance(cfg[f], bool):
            raise ValueError(f"config.{f} must be true or false, got {cfg[f]!r}")
    if any(cfg.get(f) for f in ("mx_swap", "mx_prefetch")):
        raise ValueError("config.mx_* apply to MXFP4 GEMMs, which tuning files do not cover")
    config = TileConfig(**cfg)  # block sizes: powers of two >= 16
    warps = config.num_warps
    if warps & (warps - 1) or warps > 16:
        raise ValueError(f"config.num_warps must be 1, 2, 4, 8 or 16, got {warps}")
    dtype = DTYPES[e["dtype"]]
    if config.block_k < min_block_k(dtype):
        raise ValueError(f"{e['dtype']} needs config.block_k >= {min_block_k(dtype)}, got {config.block_k}")
    smem = (config.block_m + config.block_n) * config.block_k * element_bytes(dtype) * config.num_stages
    if config.whole_store:
        smem += config.block_m * config.block_n * 2  # the whole output tile's staging buffer
    if smem > _MAX_SMEM:
        raise ValueError(f"config needs {smem} bytes of shared memory for its stages and store; a program has at most "
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
