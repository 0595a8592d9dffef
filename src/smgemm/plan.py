"""Turn a GEMM problem into a launch plan: schedule, tile configuration, grid and SM budget.

Plain Python, no GPU and no Triton: everything here is unit-tested on the CPU with made-up device specs.
`make_plan` is cached on its (hashable) arguments, so a repeated call with the same problem costs a dict lookup.

Tile selection (`choose_config`) is a small analytical model, not autotuning:

* candidates are a fixed list of (BLOCK_M, BLOCK_N) shapes; BLOCK_K gives 128-byte rows of A and B
  (twice that when M is small and the GEMM is bound by streaming B);
* a tile's efficiency is its arithmetic intensity BM*BN/(BM+BN) relative to the 128x256 tile (capped at 1): a
  tile re-reads A and B from L2/HBM once per (BM+BN) columns/rows and computes BM*BN outputs;
* with `budget` SMs the tiles run in `ceil(tiles / budget)` waves, each as long as one tile, so the modelled time
  is `waves * BM * BN / efficiency`; the cheapest candidate wins (ties go to the larger tile);
* the pipeline depth is the most stages of (BM + BN) * BK operand bytes that fit in shared memory, at most 4
  (3 for the largest tile, whose fp32 epilogue scratch also needs room).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from ._device import DeviceSpec

SCHEDULES = ("auto", "data_parallel", "persistent")

_ELEMENT_BYTES = {
    torch.float32: 4,
    torch.float16: 2,
    torch.bfloat16: 2,
    torch.float8_e4m3fn: 1,
}
INPUT_DTYPES = tuple(_ELEMENT_BYTES)
OUTPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# (BLOCK_M, BLOCK_N, num_warps), largest first.
_CANDIDATE_TILES = (
    (128, 256, 8),
    (128, 128, 8),
    (128, 64, 4),
    (64, 128, 4),
    (64, 64, 4),
    (32, 64, 4),
    (16, 64, 4),
    (16, 32, 4),
)
_REFERENCE_INTENSITY = 128 * 256 / (128 + 256)
_SMEM_RESERVE = 16 * 1024  # bytes kept free for the epilogue's layout conversions and barriers


@dataclass(frozen=True)
class TileConfig:
    """Triton meta-parameters of one kernel specialisation."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8  # tiles in an L2-friendly group along M (see kernels.common.tile_coords)
    num_warps: int = 4
    num_stages: int = 3

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "block_k"):
            value = getattr(self, name)
            if value < 16 or value & (value - 1):
                raise ValueError(f"TileConfig.{name} must be a power of two >= 16, got {value}")
        if self.group_m < 1 or self.num_warps < 1 or self.num_stages < 1:
            raise ValueError(f"TileConfig fields must be positive, got {self}")


@dataclass(frozen=True)
class Plan:
    """Everything a launch needs besides the tensors."""

    schedule: str  # the schedule that runs: "data_parallel" or "persistent"
    config: TileConfig
    num_tiles: int
    num_programs: int  # the launch grid; <= sm_budget unless schedule == "data_parallel" with no budget
    sm_budget: int  # SMs the GEMM may occupy
    k_iters: int  # BLOCK_K steps per tile
    even_k: bool  # K % BLOCK_K == 0: the K loop needs no mask
    input_precision: str  # tl.dot's input_precision; only fp32 operands read it ("ieee" unless TF32 is allowed)


def element_bytes(dtype: torch.dtype) -> int:
    return _ELEMENT_BYTES[dtype]


def min_block_k(dtype: torch.dtype) -> int:
    """The smallest K a tensor-core dot takes for `dtype` on Hopper (fp8: 32, else 16)."""
    return 32 if element_bytes(dtype) == 1 else 16


def _next_pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def choose_config(m: int, n: int, k: int, dtype: torch.dtype, spec: DeviceSpec, budget: int) -> TileConfig:
    """The tile configuration the model above predicts fastest for an (m, n, k) GEMM on `budget` SMs."""
    elem = element_bytes(dtype)
    block_k = 128 // elem * (2 if m <= 64 else 1)
    block_k = min(block_k, max(min_block_k(dtype), _next_pow2(k)))
    max_m, max_n = max(16, _next_pow2(m)), max(32, _next_pow2(n))
    best, best_cost = None, math.inf
    for bm, bn, warps in _CANDIDATE_TILES:
        if bm > max_m or bn > max_n:
            continue
        stage_bytes = (bm + bn) * block_k * elem
        stages = min(3 if bm * bn >= 128 * 256 else 4, (spec.smem_per_block - _SMEM_RESERVE) // stage_bytes)
        if stages < 2:
            continue
        tiles = math.ceil(m / bm) * math.ceil(n / bn)
        efficiency = min(1.0, bm * bn / (bm + bn) / _REFERENCE_INTENSITY)
        cost = math.ceil(tiles / budget) * bm * bn / efficiency
        if cost < best_cost:
            best, best_cost = TileConfig(bm, bn, block_k, num_warps=warps, num_stages=stages), cost
    assert best is not None, "the smallest candidate tile always fits"
    return best


def resolve_budget(num_sms: int | None, spec: DeviceSpec) -> int:
    """SMs a GEMM may occupy: all of the device's, or `num_sms` clamped to the device's count."""
    return spec.num_sms if num_sms is None else min(num_sms, spec.num_sms)


@functools.lru_cache(maxsize=4096)
def make_plan(
    m: int,
    n: int,
    k: int,
    dtype: torch.dtype,
    spec: DeviceSpec,
    *,
    schedule: str = "auto",
    num_sms: int | None = None,
    tf32: bool = False,
    config: TileConfig | None = None,
) -> Plan:
    """Plan an (m, n, k) GEMM with `dtype` operands on the device described by `spec`.

    `num_sms` is the caller's SM budget (None: the whole device); `config` overrides the tile model (tests and
    tuning use it). The returned plan's grid never exceeds the budget unless the caller asked for plain
    data-parallel tiles with no budget.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    budget = resolve_budget(num_sms, spec)
    cfg = config or choose_config(m, n, k, dtype, spec, budget)
    if cfg.block_k < min_block_k(dtype):
        raise ValueError(f"{dtype} needs block_k >= {min_block_k(dtype)}, got {cfg}")
    num_tiles = math.ceil(m / cfg.block_m) * math.ceil(n / cfg.block_n)
    if schedule == "auto":
        # Persistent: measured at least as fast as one program per tile for the 128x256 tiles that large
        # problems get (docs/performance.md), and it never occupies more SMs than the budget.
        schedule = "persistent"
    if schedule == "data_parallel" and num_sms is not None:
        schedule = "persistent"  # an explicit budget caps the grid on every path
    num_programs = num_tiles if schedule == "data_parallel" else min(budget, num_tiles)
    return Plan(
        schedule=schedule,
        config=cfg,
        num_tiles=num_tiles,
        num_programs=max(1, num_programs),
        sm_budget=budget,
        k_iters=math.ceil(k / cfg.block_k),
        even_k=k % cfg.block_k == 0,
        input_precision="ieee" if (dtype == torch.float32 and not tf32) else "tf32",
    )
