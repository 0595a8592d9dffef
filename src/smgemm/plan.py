"""Turn a GEMM problem into a launch plan: schedule, tile configuration, grid and SM budget.

Plain Python, no GPU and no Triton: everything here is unit-tested on the CPU with made-up device specs.
`make_plan` is cached on its (hashable) arguments, so a repeated call with the same problem costs a dict lookup.

Tile and schedule selection (`choose_config`, `modelled_time`) is a small analytical model, not autotuning:

* candidates are a fixed list of (BLOCK_M, BLOCK_N) shapes; BLOCK_K gives 128-byte rows of A and B
  (twice that when M <= 64 and the GEMM is bound by streaming B, four times when M <= 32; 64-byte rows where the
  longer steps would pad a K of at most 160 by more than a tenth, `_SHORT_STEP_BYTES`); up to M = 64 the tile
  covers all of M's rows, so that B is streamed once (`choose_config`'s `one_row`); skinny GEMMs (64 < M <= 128)
  follow measured rules instead of the efficiency model (`_SKINNY_MAX_M`);
* a tile's efficiency is its arithmetic intensity BM*BN/(BM+BN) relative to the 128x256 tile (capped at 1): a
  tile re-reads A and B from L2/HBM once per (BM+BN) columns/rows and computes BM*BN outputs; with every SM of
  the budget busy, one K-iteration of a tile costs BM*BN/efficiency, relative to the 128x256 tile's (the unit of
  time below): the programs share the L2 bandwidth. With fewer programs than SMs each gets a larger share, down
  to what one SM loads by itself (~68 GB/s, `_iteration`), so a partial wave or a half-empty grid of small tiles
  is not charged as if the chip were full;
* persistent / data-parallel: with `budget` SMs the tiles run in `ceil(tiles / budget)` waves of k_iters
  iterations each, and no faster than streaming A, B and D through device memory once (`Rates.hbm_bytes_per_iter`),
  nor, for 16-row decode tiles, than the busiest program can load its operand bytes at such a tile's rate
  (`Rates.sm_bytes_per_iter`, ~30 GB/s per SM; this is what makes Stream-K's even split win on decode shapes,
  except over one wave of 16 x 64 tiles that fills most of the device, `_DECODE_FILL`);
* Stream-K (`streamk_split`): whole waves stay data-parallel; the K-iterations of the `tiles % budget` tiles of
  the last, partial wave are split evenly over all programs, so that wave costs `ceil(rem * k_iters / P)`
  iterations instead of k_iters. The fixup adds `Rates.sk_fixup_base` plus, per program sharing a split tile,
  `Rates.sk_fixup_per_sharer` scaled by the partial tile's size (publishing / reading it through the workspace and
  waiting for it; fitted on the H200, docs/performance.md). The model also weighs splitting the last whole wave
  with the partial one (`waves=2`): each program then holds 1-2 tiles' worth of iterations and a split tile
  has ~2 sharers instead of k_iters / share + 1, but more iterations are split, and on the Hopper path a split
  iteration whose range drifts across tiles costs `Rates.sk_drift` whole-tile ones. Splits thinner than
  `_SK_MIN_ITERS` iterations per program are not considered: they stay data-parallel (persistent). With fewer
  tiles than SMs the grid is a multiple of the tiles where that keeps >= 90% of the budget (`_aligned_programs`):
  every program then holds one near-equal part of one tile's K-loop, in step with the same part of the other
  tiles. Otherwise split tiles advance through K out of step, so an operand panel that several of them share is
  fetched from device memory once per tile unless that operand's split region fits in L2. `auto` takes Stream-K
  only when it is predicted `1 - Rates.sk_margin` faster (the model's accuracy: within a few percent either way is a
  tie, and the persistent loop has no fixup risk);
* the cheapest (tile, schedule) wins (ties go to the larger tile); the pipeline depth is the most stages of
  (BM + BN) * BK operand bytes that fit in shared memory, at most `_stage_cap` (4; 3 for the largest tile, whose
  epilogue scratch also needs room, but 4 for long batched products; 5 for 128 x 128 tiles over long K loops of few
  waves, persistent ones then charged `Rates.square_deep_factor` of the model's time), except 64 x 128 pointer
  tiles on aligned few-tile Stream-K grids: 6 (`_deep_streamk`, measured);
* tiles of 128 x 128 and more take the Hopper path (`TileConfig.tma`, `tma_store`, `flatten`), smaller ones
  the pointer path (measured, see _HOPPER_PATH_MIN_TILE); there a 128 x 128 tile is nearer the 128 x 256 tile's
  rate than its intensity says (`Rates.hopper_efficiency_exponent`), and so is one wave of 64 x 128 pointer tiles
  over a long K loop (`Rates.one_wave_64_factor`, `_one_wave_64`). Where TMA reads their operands, persistent
  4-warp 64 x 128, 128 x 64 and 64 x 64 tiles run the Hopper path too, and Stream-K ones whose last row tile M
  leaves partial, decided after the staging (`decide`, `hopper_path`: measured, not modelled);
* one measured exception to the model: on the whole device, 16-bit K loops of at most 128 over one or two waves of
  128 x 128 tiles (M and N above 128) run one 4-warp pointer program per tile, two an SM (`_OVERLAP_MAX_K`): the
  model has no term for the result's store, which such short tiles are mostly made of.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from ._device import H200_RATES, DeviceSpec, Rates

SCHEDULES = ("auto", "data_parallel", "persistent", "streamk")

_ELEMENT_BYTES = {
    torch.float32: 4,
    torch.float16: 2,
    torch.bfloat16: 2,
    torch.float8_e4m3fn: 1,
}
INPUT_DTYPES = tuple(_ELEMENT_BYTES)
# The short names the CLIs and tuning files use.
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp8": torch.float8_e4m3fn}
OUTPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# (BLOCK_M, BLOCK_N, num_warps), largest first.
_CANDIDATE_TILES = (
    (128, 256, 8),
    # Batched products only, with 4 stages. On the H200 (python -m smgemm bench --batched, both sides in one 64-SM green
    # context) 32 x 2048 x 128 x 2048 ran 0.96 -> 1.17x of torch.bmm and 8 x 4096 x 128 x 4096 0.78 -> 0.96x against 128
    # x 128 x 128 tiles. After 128 x 256 they win only where the model counts fewer tile rounds, i.e. where N leaves
    # half a 256-wide tile: 64 x 256 x 1408 x 4096 ran 0.90 -> 0.98x on 32 SMs and 0.93 -> 1.02x on 64, 64 x 512 x 1408
    # x 2048 0.92 -> 1.00x and 0.94 -> 1.03x, 8 x 2048 x 1408 x 1408 0.85 -> 0.90x and 0.87 -> 0.93x, each against
    # torch.bmm in the same green context (the 4 stages of _BATCHED_DEEP_MIN_K included; the batched table of
    # docs/performance.md). On the whole chip they are candidates for 16-bit products without a C matrix and with N >
    # 128, persistent: where they make fewer rounds (benchmarks/sweep_configs.py, "256x128x64 w8 s4 tma" against the
    # planner's 128 x 256 tiles, two runs of one day) 64 x 1024 x 1408 x 8192 ran 2440 -> 2230 us, 32 x 1024 x 1408 x
    # 4096 525 -> 498, 64 x 512 x 1408 x 4096 530 -> 511, 64 x 512 x 1408 x 2048 273 -> 264, 16 x 2048 x 1408 x 1408 193
    # -> 187, 64 x 2048 x 1408 x 1408 756 -> 733, 32 x 2048 x 1408 x 512 169 -> 164, 64 x 512 x 1408 x 512 88.6 -> 86.2;
    # in as many rounds they were slower (8 x 2048 x 1408 x 1408 105 against 100 us, 64 x 256 x 1408 x 4096 285 against
    # 275), as with a C matrix (64 x 1024 x 1408 x 1408: 454 against 451) and over Stream-K grids (9-23% slower). They
    # were 1-6% slower than 128 x 128 x 128 tiles on N <= 128, and 6-10% slower than 128 x 256 ones on single products
    # (4096^3, 8192^3).
    (256, 128, 8),
    (128, 128, 8),
    # 64 x 128 before 128 x 64: where the model rates them the same (the first wins a tie), 64 x 128 ran faster on
    # each of the 80 bf16 problems whose pick it changed (the whole device and 32 and 66 SMs; the llm, square, mid and
    # streamk suites and random draws 0-7): 0.73-0.99x the time, geometric means 0.89-0.93x; and on each of the 17 fp8
    # ones up to M = 128 (256-deep K steps; the whole device and 66 SMs, draws 0-2): 0.55-0.96x
    # (benchmarks/sweep_tile_order.py --dtype bf16 --num-sms ,32,66; --dtype fp8 --num-sms ,66 --seeds 3).
    # `_TALL_FIRST` orders the others.
    (64, 128, 4),
    (128, 64, 4),
    (64, 64, 4),
    (32, 64, 4),
    (16, 64, 4),
    (16, 32, 4),
)
# 128 x 64 before 64 x 128 for the fused MXFP4 kernel (`make_mx_plan`: the tiles it was measured with), and for fp32
# without TF32 (FMA instructions, `_FMA_MAX_TILE`) and fp8 above M = 128 (128-deep K steps), where 64 x 128 ran level
# or slower: fp32 0.98-1.05x the time on the first 34 of the 44 problems
# whose pick the order changes (the whole device and 66 SMs, draws 0-5), fp8 1.02-1.11x on 11 of 13, 0.97 and 0.99x
# on the other two (benchmarks/sweep_tile_order.py --dtype fp32 --num-sms ,66 --seeds 6; --dtype fp8 as above).
_TALL_FIRST = tuple({(64, 128, 4): (128, 64, 4), (128, 64, 4): (64, 128, 4)}.get(t, t) for t in _CANDIDATE_TILES)
_REFERENCE_INTENSITY = 128 * 256 / (128 + 256)
_SMEM_RESERVE = 16 * 1024  # bytes kept free for the epilogue's layout conversions and barriers
_SK_MIN_ITERS = 2  # fewest K-iterations per Stream-K program; thinner splits run data-parallel
_STREAMING_MAX_M = 64  # up to here B is streamed: longer K steps (block_k)
_WIDE_K_MAX_M = 32  # up to here K steps of 512-byte rows (see choose_config)
# Where 16-bit 16 x 64 decode tiles (B streamed) fill at least this fraction of the whole device in one wave, the
# 16-row tiles run one tile a program, never Stream-K: those programs already stream B at the rate the device gives
# such reads, so an even split adds only its fixup. The model predicts the split faster (~30 GB/s an SM); on the H200
# (bf16, CUDA-graph replays, `benchmarks/sweep_configs.py --graph --variants "auto;16x64x256 w4 s4 pers"` at 276fab9,
# one call, us) one tile a program ran 80 tiles (N = 5120, K = 4096) in 14.5-14.9 against 16.1-16.3 split, 96 (N =
# 6144) 16.4-16.6 against 17.8-18.5 at M = 1, 8, 16 and 28.8 against 30.8-31.2 at K = 8192, 112 (N = 7168, K = 8192)
# 32.2-32.7 against 34.7-35.3; with 64 tiles (N = 4096, K = 14336: 0.48 of a wave) the split stays faster, 33.0-34.0
# against 36.1-37.6, and so with 160 (1.2 waves; N = 10240, K = 8192), 46.1-47.4 against 55.5-56.7.
_DECODE_FILL = 0.6
_ONE_ROW_MAX_M = _STREAMING_MAX_M  # up to here one row of tiles covers M (see choose_config)
# Tiles at least this large take the Hopper path (TMA loads and store, flattened loop): on the H200 it lifted
# 8192^3 from 651 to 766 TFLOP/s with 128 x 256 tiles; with 16- and 64-row tiles its kernels were no faster
# (benchmarks/sweep_hopper.py). Measured, not modelled. The model's persistent 4-warp 64 x 128, 128 x 64 and 64 x 64
# tiles (and some Stream-K ones) take it after the staging where TMA reads their operands (`_HOPPER_SMALL_TILES`).
_HOPPER_PATH_MIN_TILE = 128 * 128
# Skinny GEMMs (64 < M <= 128, one or two rows of tiles): 64 x 128 / 128 x 64 pointer tiles with 256-byte K steps
# and Stream-K ran 0.77-0.89x of cuBLAS where 128 x 128 tiles (TMA or not) ran 0.63-0.82x and Stream-K over
# 128 x 256 tiles 0.48-0.63x (benchmarks/sweep_configs.py on 128 x {4096..10240} x {4096, 8192}, docs/performance.md).
# There 128 x 128 tiles are candidates only in the one-wave case of `_SKINNY_SQUARE_MIN_FILL`, smaller tiles take
# 256-byte K steps, and 128 x 256 tiles (still the best when N gives (nearly) a full wave of them: 0.96-0.98x at
# N = 28672, 57344) run persistent, and only then.
_SKINNY_MAX_M = 128
# Above M = 64 (where no tile covers every row of A) 16-bit tiles have at least 64 rows, where N takes a 64-wide tile:
# a 32-row tile moves half again the operand bytes per multiply-add, and a program alone on its SM streams them at
# ~25 GB/s, below the model's per-SM rate. On the H200 (benchmarks/sweep_configs.py, bf16, the planner's picks with
# and without the rule in one run) 10 of 13 few-tile problems whose pick changed ran faster: 96 x 2048 x 4096 20.2 ->
# 12.0 us, 881 x 224 x 2498 24.3 -> 19.2, 600 x 300 x 4096 15.3 -> 12.8, 339 x 518 x 4634 27.7 -> 23.6, 75 x 1503 x
# 3773 26.4 -> 24.1, 1000 x 200 x 3000 21.9 -> 20.0, 356 x 98 x 1781 13.4 -> 12.8, 388 x 137 x 1084 10.9 -> 10.3,
# 500 x 500 x 2048 9.66 -> 9.07, 415 x 76 x 770 9.83 -> 9.79; 100 x 1000 x 1000 ran 12.5 -> 12.6, 370 x 113 x 767
# 9.98 -> 10.3 and 72 x 264 x 5820 15.7 -> 17.0.
# Stream-K plans on the whole device still take 32-row tiles: each program streams only a short part of one tile's K
# loop, and the thinner tile doubles the tiles to split (not under an SM budget, where this was not measured). The
# planner at 6ffba22 against the 64-row plans it made before, forced, in one run (benchmarks/sweep_configs.py, bf16):
# 72 x 90 x 2718 15.0 -> 11.6 us, 72 x 264 x 5820 13.5 -> 12.0, 356 x 98 x 1781 12.6 -> 10.7, 153 x 177 x 2961 15.9
# -> 11.5, 75 x 1503 x 3773 24.7 -> 24.7.
_MIN_ROWS_ABOVE_STREAMING = 64
# Few-tile Stream-K over a grid aligned to the tiles: each program streams one contiguous part of one tile's K-loop
# with nothing else to overlap, and 64 x 128 pointer tiles with 128-byte K steps ran faster with 6 pipeline stages
# than with 4: bf16 0-14% on 11 of 12 shapes and budgets (1% slower on the 12th), fp8 2-22% on 5 of 6 (2% slower
# on the 6th), and as fast as 128 x 64 tiles or faster. The model charges their iterations `Rates.deep_factor`:
# with it, it picks the faster of 64 x 128 and 128 x 128 in all 12 bf16 cases, and in the fp8 ones 14-35% faster
# plans or the same. (Applied to split grids that are not aligned, it would pick
# 64 x 128 at bf16 384x1024x16384 and 640x640x16384, where it measured 15-19% slower: the model under-rates what
# drifting ranges cost small tiles.)
_DEEP_STAGES = 6  # their iterations cost `Rates.deep_factor` of a 4-stage pipeline's
# fp32 without TF32 runs on FMA instructions (Triton's `tl.dot(..., input_precision="ieee")`), not tensor cores. On
# the H200 (benchmarks/sweep_configs.py --dtype fp32) the tensor-core plans' 128 x 256 TMA tiles ran at 0.5
# TFLOP/s (4096^3; torch 50), 128 x 128 x 32 pointer tiles with 8 warps at 22 (0.44x of torch, the best of nine
# tilings at 4096^3 and 128 x 14336 x 4096), 64 x 64 at 11: tiles are capped at 128 x 128, through pointers.
_FMA_MAX_TILE = 128 * 128
# Persistent 16-bit 4-warp tiles (128 x 64, 64 x 128, 64 x 64) take K steps of at least this many bytes at every M,
# as the skinny and streaming rules already give them below M = 128: 1024^3 ran 9.7 -> 8.7 us (-10%) and 9.9 -> 9.0
# in two runs on the H200 (docs/performance.md). Stream-K keeps 128-byte steps, which its deeper few-tile
# pipeline (_deep_streamk) was measured with.
_LONG_STEP_BYTES = 256
# ... unless they pad K by more than this factor over the shorter steps (K = 160: 256 against 192), which costs more
# than the longer steps gain: on the H200 (benchmarks/sweep_configs.py, bf16, the planner with and without the rule in
# one run) the 10 problems of K 136-437 whose pick changed all ran faster, 1024 x 1024 x 160 7.8 -> 4.8 us (torch 4.1),
# 567 x 1113 x 143 11.0 -> 6.3, 943 x 463 x 437 10.0 -> 9.2 (docs/performance.md).
_LONG_STEP_PADDING = 1.1
# The same weighing the other way at short K: 16-bit tiles take 64-byte K steps where 128-byte ones pad K by more
# than _LONG_STEP_PADDING (K = 72: 128 against 96; K = 136: 192 against 160). On the H200 (benchmarks/sweep_configs.py,
# bf16, forced variants in one run at c70076f) 128 x 64 tiles ran 640 x 1600 x 72 5.36 -> 4.48 us, 1024 x 1024 x 72
# 5.34 -> 4.48, 1024 x 1024 x 136 5.86 -> 5.04, 8370 x 110 x 136 6.70 -> 5.95; 128 x 256 TMA tiles 2048 x 2048 x 80
# 9.00 -> 8.57 and 4096 x 4096 x 96 18.1 -> 18.4 (where the result's bytes set the time); at 878f390 1024 x 1024 x 160
# 4.90 -> 3.95 and 567 x 1113 x 143 10.1 -> 6.40. Measured up to K = 160 (five steps against three), and taken there
# only: above it the shorter steps would double a longer loop (K = 257: nine steps against five).
_SHORT_STEP_BYTES = 64
_SHORT_STEP_MAX_K = 160
# Short K loops over one or two waves of 128 x 128 tiles, on the whole device: one program per tile of 4 warps, through
# pointers, two resident on each SM, so that one program's loads overlap another's result stores, and no program
# builds TMA descriptors for a loop of a few steps. On the H200 (benchmarks/sweep_configs.py, bf16, the planner with the
# rule at 7ddb104 against 878f390's in one run) 2048 x 2048 x 80 ran 8.53 -> 6.35 us, 1822 x 2056 x 92 12.8 -> 8.62,
# 2048 x 2048 x 128 8.84 -> 6.40, 1500 x 1500 x 72 8.77 -> 7.86, 1408 x 1536 x 96 7.34 -> 4.42. Over more waves the
# persistent 128 x 256 TMA tiles stay faster: 1940 x 3928 x 120 (496 tiles) 13.6 against 17.4, 4096 x 4096 x 96
# 18.3 against 19.0, 8192 x 8192 x 128 50.1 against 69.8, batched 32 x 2048 x 2048 x 128 94.5 against 157.
_OVERLAP_MAX_K = 128
# One wave of persistent 64 x 64 tiles above M = 64 (each program one tile's K loop, on the whole device) takes
# 128-byte K steps, not the 256-byte ones of the rule above or of the skinny rule: on the H200
# (benchmarks/sweep_configs.py, bf16, "64x64x64 w4 s4 pers" against the planner's 64 x 64 x 128 in one run)
# 100 x 1000 x 1000 ran 8.82 -> 8.38 us, 881 x 224 x 2498 19.3 -> 18.1, 362 x 496 x 1740 14.2 -> 12.9,
# 388 x 137 x 1084 9.60 -> 9.00, 415 x 76 x 770 10.4 -> 9.28, 76 x 191 x 615 10.1 -> 9.24, 370 x 113 x 767
# 10.1 -> 9.28, 75 x 843 x 375 9.41 -> 8.61, and 512 x 512 x 512 4.10 -> 3.96, 128 x 128 x 128 3.19 -> 2.88 in an
# earlier run. Only where the 256-byte steps leave a masked last step: with K a multiple of them they ran faster
# (96 x 1024 x 1024 5.32 against 6.45 us, 512 x 1024 x 1024 6.26 against 7.39, 4096 x 128 x 1024 6.91 against 7.91;
# 512 x 512 x 512 4.06 either way). Measured up to K = 2498; longer loops keep the longer steps (the skinny rule was
# measured at 128 x 4096 x 4096, one wave of 64 x 64 tiles).
_ONE_WAVE_STEP_BYTES = 128
_ONE_WAVE_MAX_K = 2560
# Batched products on 128 x 128 Hopper-path tiles take the same 256-byte K steps (3 stages fit): on the H200
# (benchmarks/sweep_configs.py, batched shapes) 32 x 2048 x 128 x 2048 ran 83.6 -> 80.7 us and 8 x 4096 x 128 x 4096
# 79.9 -> 76.7 (0.96 -> 0.99x and 0.94 -> 0.98x of torch.bmm), MoE-like 64 x 256 x {1408, 4096} x {4096, 1408} within
# 1.5% either way. Single products were 1-5% slower with them (1024 x 6144 x 4096, 526 x 8991 x 1181), so they keep
# 128-byte steps.
# Products that add a C matrix keep 128-byte steps with 4 stages: the C tile's layout conversion takes the shared
# memory of the third 256-byte stage, so Triton builds those with 2. On the H200 (benchmarks/sweep_configs.py,
# batched shapes with a C matrix, "128x128x128 w8 s3 tma;128x128x64 w8 s4 tma") 8 x 200 x 1024 x 4096 ran 53.9 ->
# 35.4 us, 8 x 4096 x 128 x 4096 120 -> 83.6 and 32 x 2048 x 128 x 2048 122 -> 91.0 (0.55 -> 0.83x, 0.69 -> 0.98x and
# 0.77 -> 1.03x of torch.baddbmm; docs/performance.md).

# Batched 16-bit products of 128 x 256 tiles with K of at least this (and no C matrix, whose layout conversion takes
# the shared memory) take 4 stages, their output tile then leaving in two halves (`whole_store_fits`): on the H200
# (benchmarks/sweep_configs.py, "128x256x64 w8 s3 tma whole;128x256x64 w8 s4 tma", one run) 64 x 256 x 1408 x 4096
# ran 284 -> 274 us, 64 x 256 x 4096 x 1408 296 -> 273, 64 x 256 x 4096 x 512 136 -> 123, 16 x 1024 x 1024 x 256
# 26.8 -> 25.5 and x 1024 56.0 -> 54.2, 8 x 2048 x 2048 x 512 63.4 -> 61.0; on 64 SMs 40.8 -> 41.5 at K = 256 and
# 1.5-4.5% faster from K = 512. At K = 128 (two steps) the whole store pays more: 32 x 2048 x 2048 x 128 94.9 us
# with 3 stages, 104 with 4. Single products ran level (1024 x 4096 x 4096 48.3 / 48.4 us, 8192^3 1.53 / 1.54 ms).
_BATCHED_DEEP_MIN_K = 256
# 16-bit 128 x 128 Hopper-path tiles on the whole device, without a C matrix, with K loops of at least
# _SQUARE_DEEP_MIN_STEPS steps take 5 stages (4 elsewhere), as
# cuBLAS runs such problems with 5-6 (nvjet_sm90_tst_128x128_64x6 at 512 x 4096 x 4096). On the H200 (bf16, the
# planner with 4, 5 and 6 stages on 128 x 128 tiles, each timed twice a side in one run, on every suite and random
# problem of draws 0-1 whose plan changes; benchmarks/sweep_tile_order.py --square-stages 4 times the planner
# against 4 stages the same way) 512 x 4096 x 4096 ran 30.2 -> 28.5 us, 256 x 8192 x 8192 59.4 -> 54.8,
# 512 x 4096 x 14336 88.1 -> 84.8, 1024 x 6144 x 4096 77.4 -> 73.8, 512 x 10240 x 8192 136 -> 132, 1024 x 1024 x 16384
# 58.4 -> 57.1, random draws 207 x 5427 x 11551 and 135 x 7031 x 4421 1.0-1.5% faster, 12917 x 66 x 4936 and
# 3498 x 228 x 12095 level; 3463 x 584 x 6203 and 950 x 2107 x 6940 (staged operands, Stream-K) 2.2% and 3.8% slower.
# Shorter loops ran 0.5-4% slower with 5 stages, and 6 stages were no faster than 5 (0.91-1.11x of 4).
# Over more than _SQUARE_DEEP_MAX_WAVES waves, loops of exactly 64 steps (K = 4096 in 16 bits) whose last wave is at
# least _SQUARE_DEEP_MIN_FILL full take 5 stages too: on the H200 (benchmarks/sweep_configs.py, "128x128x64 w8 s5 tma
# whole;128x128x64 w8 s4 tma whole", one run) 5 stages beat 4 on all 9 problems of 3.4-13.6 waves (3-8%; 512 x 28672 x
# 4096 178 -> 166 us, 1024 x 14336 x 4096 170 -> 161), and with the rule and the model's rate for such tiles
# (`Rates.square_deep_factor`) 1024 x 10240 x 4096 ran 124.8 -> 118.7 us (the planner with and without both, each
# timed three times a side in one run, a one-off script; `benchmarks/sweep_tile_order.py --seeds 8 --square-rules`
# times the suites' and random draws' part the same way: at f9941b6 512 x 28672 x 4096 184.0 -> 166.1 us). Longer
# loops over more waves were level or slower with the 5-stage tiles the factor would pick (1024 x 14336 x 8192 1.026x
# the time, 512 x 28672 x 8192 1.008x, copied operands of random draws 1.01-1.14x), so they keep 4.
# Stream-K plans that split every tile (no data-parallel wave before the split ones) over more than
# _SQUARE_SK_DEEP_MAX_ROWS rows of tiles keep 4 stages. On the H200 (benchmarks/sweep_configs.py, "128x128x64 w8 s5 tma
# whole sk;128x128x64 w8 s4 tma whole sk", twice in one run, on every problem of the suites, random draws 0-7 and a
# Llama-like grid whose plan is such), with 4 stages 950 x 2107 x 6940 ran 102 -> 95.8 us, 3463 x 584 x 6203 101 ->
# 98.2, 1570 x 577 x 14363 115 -> 112, 2164 x 322 x 12512 57.5 -> 56.2, 1024 x 1024 x 16384 59.7 -> 58.7 (67.0 -> 58.1
# in another run), and six more 0.2-1.9% faster or level; with two rows of tiles, where each panel of B feeds two tiles,
# 5 stages stay faster: 256 x 10240 x 8192 82.0 against 89.0, 256 x 4096 x 14336 53.0 against 58.0, 256 x 10240 x 4096
# 48.2 against 51.1, 256 x 4096 x 8192 36.8 against 39.8, 207 x 5427 x 11551 166 against 167.
_SQUARE_SK_DEEP_MAX_ROWS = 2
_SQUARE_DEEP_STAGES = 5
_SQUARE_DEEP_MIN_STEPS = 64
_SQUARE_DEEP_MAX_WAVES = 3
_SQUARE_DEEP_MIN_FILL = 0.95
# Skinny products (`_SKINNY_MAX_M`) take 5-stage 128 x 128 tiles, persistent, where they make one wave of at least
# this fraction of the whole device: they stream the weight faster than Stream-K over 64-row pointer tiles. On the
# H200 (the planner with and without the rule, one run as above) 128 x 10240 x {4096, 8192, 14336, 28672} ran 34.4 ->
# 32.3, 58.4 -> 54.8, 93.0 -> 89.6 and 179 -> 171 us (80 tiles), 128 x 14336 x {4096, 8192, 14336, 28672} 38.9 ->
# 38.1, 70.6 -> 66.2, 133 -> 110 and 263 -> 209 us (112 tiles): 0.76-0.90x of torch -> 0.83-0.96x. With 64 tiles or
# fewer they ran 1.26-2.04x slower than the pointer tiles (128 x 8192 x 8192 51.0 against 39.0 us,
# benchmarks/sweep_configs.py), and Stream-K over them was slower than persistent. At M = 96, a quarter of each tile's
# rows empty, they lost (96 x 14336 x 4096 38.8 -> 41.5 us, 96 x 10240 x 8192 58.6 -> 59.8, 96 x 10240 x 4096 34.2 ->
# 33.8), so the rule starts above _SKINNY_SQUARE_MIN_M rows.
_SKINNY_SQUARE_MIN_FILL = 0.6
_SKINNY_SQUARE_MIN_M = 96
# One wave of persistent 64 x 128 pointer tiles with 256-byte K steps, above the skinny rows (M > 128), 1- or 2-byte
# operands, without a C matrix: where those tiles fill at least _ONE_WAVE_64_MIN_FILL of the budget's wave, N is a
# multiple of their width and the K loop is long and a whole number of steps, the model charges them
# `Rates.one_wave_64_factor` of its time (fp8 takes the 256-byte steps, 256 elements, only here). It rates their
# iterations at 0.97 of the reference tile's (operand traffic at half its intensity) and picked Stream-K over 128 x 128
# tiles from K = 6144 on; on the H200 each such program ran a 128-deep step in 0.57 of a reference iteration. The
# planner's Stream-K plan against "64x128x128 w4 s4 pers" (benchmarks/sweep_configs.py, bf16, one run at d14d8f5), in us
# (torch): 256 x 4096 x 8192 37.1 -> 30.8 (29.8), 192 x 4096 x 8192 50.6 -> 30.3 (37.6), 448 x 2304 x 8192 46.7 -> 29.9
# (39.9), 1024 x 1024 x 8192 36.4 -> 28.6 (28.4), 768 x 1408 x 8192 37.0 -> 28.8 (30.8), and at K = 14336 0.67-0.95x the
# time (256 x 4096 x 14336 53.2 -> 50.6, 448 x 2304 x 14336 72.8 -> 49.1): 20 problems of 96-132 tiles, 0.60-0.95x the
# time; TMA loads on the same tiles were 2-27% slower than pointers; at lower fills 320 x 2048 x 8192 (80 tiles) ran
# 39.4 -> 27.6, 256 x 2816 x 8192 (88) 31.3 -> 28.6. The planner with the rule against itself without it (a one-off
# script, one run): K = 6144 0.76-0.79x the time (256 x 4096 x 6144 31.4 -> 24.8), K = 12288-16384 0.89-0.97x (768 x
# 1408 x 16384 59.6 -> 54.7), tall products 0.79x and 0.91x (2048 x 512 x 8192 36.8 -> 29.0, 4096 x 256 x 14336 58.0 ->
# 52.5), fp16 0.65-0.94x. Longer loops keep Stream-K (256 x 4096 x 24576 86.3 against 87.1, 1024 x 1024 x 32768 104
# against 112); and where N leaves a partial tile and K a partial step (random draws), the 64 x 128 tiles lost to
# Stream-K's better spread: 496 x 1479 x 12632 61.4 -> 103, 3351 x 206 x 6440 43.0 -> 58.8, 1570 x 577 x 14363 109 ->
# 118. Under SM budgets (the same script, bf16) 100 SMs: 320 x 2048 x 8192 36.0 -> 28.0, 256 x 2816 x 14336 58.7 ->
# 46.3, 192 x 4096 x 14336 68.3 -> 48.9; 66 SMs: 256 x 2048 x 8192 34.6 -> 27.2, 512 x 1024 x 8192 32.7 -> 26.1, 320 x
# 1536 x 14336 57.8 -> 44.3; 32 SMs: 256 x 1024 x 16384 54.3 -> 47.8. fp8 on 256-byte steps against the planner's
# 128-element ones (whole chip): 256 x 4096 x 8192 23.9 -> 17.7, 1024 x 1024 x 14336 33.1 -> 26.2, 4096 x 256 x 14336
# 36.3 -> 29.2, 768 x 1408 x 16384 37.2 -> 29.6, 256 x 3840 x 12288 33.2 -> 24.7, 448 x 2304 x 8192 22.1 -> 16.8
# (benchmarks/sweep_configs.py --dtype fp8, "64x128x256 w4 s4 pers"; 128-element steps on the same tiles 22.0).
_ONE_WAVE_64_MIN_FILL = 0.6
_ONE_WAVE_64_MIN_K = 6144
_ONE_WAVE_64_MAX_K = 16384
# The last row (column) of tiles may start a tile before the edge instead of past the previous tile's end
# (`kernels.gemm._origin`, where `_launch.edge_tiles_clamped` allows it), so that its loads lie inside the operand. On
# the H200 an edge tile whose rows are mostly past M slowed persistent 128 x 128 plans, the tiles that share its B
# panel drifting apart from it: bf16 8192 x 8192 x K = 8192 took 89.5 / 75.4 / 69.0 us at M = 160 / 192 / 200 and
# 51.9 / 52.5 / 52.4 with the edge tiles clamped (54.9 at M = 256), 300 x 14336 x 4096 99.1 -> 72.1. Timed both ways
# in one run (a one-off script patching `_launch.edge_tiles_clamped`, docs/performance.md "Edge tiles"), over random
# draws 2-3 and mid sizes: with K >= 512 and tiles of at most 128 x 128, bf16 0.58-1.02x the time (geometric mean
# 0.90, 20 problems), fp16 0.64-1.02x (0.91), fp8 0.72-1.02x (0.97, 25); 128 x 256 tiles 0.95-1.02x, so they keep
# their tiles in place; and short K loops, whose time is the stores that clamped tiles repeat on the shared rows,
# 0.97-1.12x (225 x 8214 x 115 7.9 -> 8.7 us, 1151 x 1339 x 68 5.6 -> 6.2). fp32 was not measured.
_CLAMP_MIN_K = 512
_CLAMP_MAX_TILE = 128 * 128
_CLAMP_ELEMENT_BYTES = (1, 2)


@dataclass(frozen=True)
class TileConfig:
    """Triton meta-parameters of one kernel specialisation."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8  # tiles in an L2-friendly group along M (see kernels.common.tile_coords)
    num_warps: int = 4
    num_stages: int = 3
    # The Hopper path (sm_90+; each part falls back to pointers where a tensor breaks TMA's rules):
    tma: bool = False  # read dense operands through device-built tensor descriptors (TMA)
    tma_store: bool = False  # store D through a tensor descriptor (in two column halves unless whole_store)
    whole_store: bool = False  # with tma_store: a 2-byte output tile in one store (a staging buffer of the tile, no
    # wait between halves); 4-byte outputs and tiles that add a 2-byte C matrix (a bias is fine) are stored in
    # halves, and tiles that add a 4-byte C matrix in column quarters
    flatten: bool = False  # fuse the tile loop with the K loop: the next tile's loads overlap this tile's epilogue
    # MXFP4 GEMMs only (kernels.common.k_loop_mx):
    mx_swap: bool = False  # compute (W @ A^T)^T: the weight tile is the dot's left operand (measured faster)
    mx_prefetch: bool = False  # expand the next K step's weight tile while this step's dot runs

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "block_k"):
            value = getattr(self, name)
            # 8 rows: swapped MXFP4 tiles only, where they are the dot's narrow side (`mx_swap`)
            least = 8 if name == "block_m" and self.mx_swap else 16
            if value < least or value & (value - 1):
                raise ValueError(f"TileConfig.{name} must be a power of two >= {least}, got {value}")
        if self.group_m < 1 or self.num_warps < 1 or self.num_stages < 1:
            raise ValueError(f"TileConfig fields must be positive, got {self}")


_OVERLAP_TILE = TileConfig(128, 128, 32, num_warps=4, num_stages=3)  # see _OVERLAP_MAX_K


@dataclass(frozen=True)
class Plan:
    """Everything a launch needs besides the tensors."""

    schedule: str  # the schedule that runs: "data_parallel", "persistent" or "streamk"
    config: TileConfig
    num_tiles: int
    num_programs: int  # the launch grid; <= sm_budget unless schedule == "data_parallel" with no budget
    sm_budget: int  # SMs the GEMM may occupy
    k_iters: int  # BLOCK_K steps per tile
    even_k: bool  # K % BLOCK_K == 0: the K loop needs no mask
    input_precision: str  # tl.dot's input_precision; only fp32 operands read it ("ieee" unless TF32 is allowed)
    dp_tiles: int  # tiles computed whole by the tile loop; the K-iterations of the rest are split (Stream-K)
    # Copy A / B into a buffer with aligned rows before the GEMM (`stage_pays`): their rows are not aligned as the
    # tile reads them fastest
    stage_a: bool = False
    stage_b: bool = False

    @property
    def sk_tiles(self) -> int:
        return self.num_tiles - self.dp_tiles

    @property
    def sk_waves(self) -> int:
        """`streamk_split`'s `waves`: 2 when the last whole wave is split with the partial one (more split tiles
        than programs), else 1."""
        return 2 if self.sk_tiles > self.num_programs else 1

    @property
    def workspace_numel(self) -> int:
        """fp32 elements of Stream-K scratch: a partial tile per program, then an int64 flag per program."""
        if not self.sk_tiles:
            return 0
        return self.num_programs * self.config.block_m * self.config.block_n + 2 * self.num_programs


def element_bytes(dtype: torch.dtype) -> int:
    return _ELEMENT_BYTES[dtype]


def min_block_k(dtype: torch.dtype) -> int:
    """The smallest K a tensor-core dot takes for `dtype` on Hopper (fp8: 32, else 16)."""
    return 32 if element_bytes(dtype) == 1 else 16


def _padded_k(k: int, block_k: int) -> int:
    """K rounded up to whole steps of `block_k`: what a tile's K loop computes."""
    return math.ceil(k / block_k) * block_k


def _next_pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def streamk_split(num_tiles: int, k_iters: int, budget: int, waves: int = 1,
                  rates: Rates = H200_RATES) -> tuple[int, int] | None:
    """(dp_tiles, num_programs) of the hybrid Stream-K schedule, or None when nothing would be split.

    Whole waves stay data-parallel; the K-iterations of the last, partial wave (waves=1), or of the last whole
    wave and the partial one (waves=2, where there is a whole wave), are split evenly over the programs. With
    fewer tiles than SMs, the grid shrinks so that every program gets >= _SK_MIN_ITERS iterations.
    """
    full_waves, rem = divmod(num_tiles, budget)
    if rem == 0 or (waves == 2 and (full_waves == 0 or k_iters < _SK_MIN_ITERS)):
        return None  # every wave is full: nothing to balance (or no whole wave to add, or tiles too short to split)
    if waves == 2:
        return (full_waves - 1) * budget, budget
    sk_iters = rem * k_iters
    programs = budget if full_waves else min(budget, sk_iters // _SK_MIN_ITERS)
    if not full_waves:
        programs = _aligned_programs(num_tiles, k_iters, budget, rates) or programs
    if programs <= rem or sk_iters < programs * _SK_MIN_ITERS:
        return None  # a split this thin (or none at all) only adds fixup work
    return full_waves * budget, programs


def _aligned_programs(num_tiles: int, k_iters: int, budget: int, rates: Rates) -> int | None:
    """A Stream-K grid of `num_tiles * s` programs, s >= 2, that fills >= `rates.sk_align_fill` of the budget; None if
    there is none. Each program then takes one of s near-equal parts of one tile's K-loop (the kernel splits so
    whenever the grid is a multiple of the split tiles), and the programs holding the same part of different tiles
    walk the same K range at the same time, so the operand panels those tiles share are read from device memory
    once, while they sit in L2 (on the H200, 11-20% faster than an even split over all 132 SMs whose ranges drift
    across tiles, docs/performance.md)."""
    for s in range(budget // num_tiles, 1, -1):
        if num_tiles * s < rates.sk_align_fill * budget:
            return None
        if k_iters // s >= _SK_MIN_ITERS:
            return num_tiles * s
    return None


def _iteration(cfg: TileConfig, elem: int, active: int, budget: int, rates: Rates = H200_RATES) -> float:
    """Time of one K-iteration of one program, in reference iterations, while `active` programs of a `budget` run.

    The tile's multiply-adds at the reference tile's rate, unless its operand traffic is slower: the L2 -> SM
    bandwidth that the active programs share (at the full budget a tile of lower intensity moves more bytes per
    multiply-add, `efficiency`; fewer programs each get a larger share), or, when few share it, what one SM loads by
    itself (`Rates.sm_own_bytes_per_iter`).
    """
    base = cfg.block_m * cfg.block_n / (128 * 256) * cfg.block_k * elem / 128
    efficiency = min(1.0, cfg.block_m * cfg.block_n / (cfg.block_m + cfg.block_n) / _REFERENCE_INTENSITY)
    if cfg.tma:
        efficiency **= rates.hopper_efficiency_exponent
    own = (cfg.block_m + cfg.block_n) * cfg.block_k * elem / rates.sm_own_bytes_per_iter
    return max(base, base * active / budget / efficiency, own)


def modelled_time(
    cfg: TileConfig, m: int, n: int, k: int, dtype: torch.dtype, budget: int, schedule: str, l2_bytes: int = 50 * 2**20,
    sk_waves: int = 1, rates: Rates = H200_RATES, batch: int = 1,
) -> float:
    """Critical-path time of `schedule` with tile `cfg`, in iterations of the reference tile (inf: not applicable),
    for `batch` products of this shape scheduled together.

    See the module docstring: a K-iteration costs `_iteration` (its multiply-adds, or its operand traffic when
    that is slower); no schedule beats streaming its device-memory bytes; a Stream-K fixup costs `rates.sk_fixup_base`
    plus `rates.sk_fixup_per_sharer` (scaled by the partial tile's size) per program sharing a split tile.
    """
    elem = element_bytes(dtype)
    rows, cols = math.ceil(m / cfg.block_m), math.ceil(n / cfg.block_n)
    tiles = rows * cols * batch
    k_iters = math.ceil(k / cfg.block_k)
    hbm_bytes = ((m * k + k * n) * elem + m * n * 2) * batch  # operands once (grouped tile order), a 16-bit result
    # One program's operand bytes per K-iteration, in reference iterations of its SM's load rate: decode tiles
    # (16 rows) stream B at ~30 GB/s per SM, slower than `_iteration`'s rates.
    sm_load = (cfg.block_m + cfg.block_n) * cfg.block_k * elem / rates.sm_bytes_per_iter if cfg.block_m <= 16 else 0.0
    if schedule != "streamk":
        full_waves, rem = divmod(tiles, budget)
        longest = full_waves * k_iters * _iteration(cfg, elem, budget, budget, rates)
        if rem:  # the last, partial wave's programs share the L2 bandwidth with fewer others
            longest += k_iters * _iteration(cfg, elem, rem, budget, rates)
        waves = math.ceil(tiles / budget)
        return max(longest, waves * k_iters * sm_load, hbm_bytes / rates.hbm_bytes_per_iter)
    split = streamk_split(tiles, k_iters, budget, sk_waves, rates)
    if split is None:
        return math.inf
    dp_tiles, programs = split
    per_program = (tiles - dp_tiles) * k_iters / programs  # ceil() of it: the longest range, aligned or not
    fixup = _sk_fixup(cfg, k_iters, per_program, rates)
    # Split tiles advance through K out of step (unless the grid is aligned to them, `_aligned_programs`), so a
    # panel of A or B shared by several of them is fetched once per tile unless that operand's split region stays
    # in L2 (the split tiles are the last ones, GROUP_M rows deep).
    drift = 1.0
    if programs % (tiles - dp_tiles):
        drift = rates.sk_drift if cfg.tma else 1.0
        sk_rows = min(rows, 8, tiles - dp_tiles)
        sk_cols = min(cols, math.ceil((tiles - dp_tiles) / sk_rows))
        b_region, a_region = sk_cols * cfg.block_n * k * elem, sk_rows * cfg.block_m * k * elem
        hbm_bytes += (sk_rows - 1) * b_region * (b_region > l2_bytes)
        hbm_bytes += (sk_cols - 1) * a_region * (a_region > l2_bytes)
    iters = dp_tiles // programs * k_iters + math.ceil(per_program)
    longest = (dp_tiles // programs * k_iters * _iteration(cfg, elem, budget, budget, rates)
               + math.ceil(per_program) * _iteration(cfg, elem, programs, budget, rates) * drift)
    return max(longest, iters * sm_load, hbm_bytes / rates.hbm_bytes_per_iter) + fixup


def _sk_fixup(cfg: TileConfig, k_iters: int, per_program: float, rates: Rates, base: float | None = None) -> float:
    """A Stream-K plan's fixup, in reference iterations: `base` (`rates.sk_fixup_base` unless given) plus
    `rates.sk_fixup_per_sharer` (scaled by the partial tile's size) per program sharing a split tile of `k_iters`
    iterations, each program taking `per_program` of them."""
    sharers = k_iters / per_program + 1  # programs a split tile spans, on average
    base = rates.sk_fixup_base if base is None else base
    return base + sharers * rates.sk_fixup_per_sharer * cfg.block_m * cfg.block_n / (128 * 256)


def _cost(cfg: TileConfig, m: int, n: int, k: int, dtype: torch.dtype, budget: int, schedule: str, spec: DeviceSpec,
          sk_waves: int = 1, batch: int = 1) -> float:
    """modelled_time on `spec`, Stream-K's divided by `Rates.sk_margin`: it must win clearly to be chosen."""
    time = modelled_time(cfg, m, n, k, dtype, budget, schedule, spec.l2_bytes, sk_waves, spec.rates, batch)
    return time / (spec.rates.sk_margin if schedule == "streamk" else 1.0)


def _candidates(schedules: tuple[str, ...]) -> list[tuple[str, int]]:
    """(schedule, sk_waves) pairs the model compares: Stream-K over the partial wave, or the last two waves."""
    return [(s, waves) for s in schedules for waves in ((1, 2) if s == "streamk" else (1,))]


def _deep_streamk(cfg: TileConfig, m: int, n: int, k: int, elem: int, budget: int, rates: Rates,
                  batch: int = 1) -> bool:
    """Whether a Stream-K plan with `cfg` takes the deeper pipeline (_DEEP_STAGES): a 16-bit or fp8 64 x 128
    pointer-path tile with 128-byte K steps, every tile split over a grid aligned to the tiles (each program one
    part of one tile's K-loop, `_aligned_programs`)."""
    if elem > 2 or cfg.tma or (cfg.block_m, cfg.block_n) != (64, 128) or cfg.block_k * elem != 128:
        return False
    tiles, programs = _every_tile_split(cfg, m, n, k, budget, 1, rates, batch)
    return programs > 0 and programs % tiles == 0


def _every_tile_split(cfg: TileConfig, m: int, n: int, k: int, budget: int, waves: int, rates: Rates,
                      batch: int) -> tuple[int, int]:
    """(tiles, programs) of a Stream-K plan with `cfg` that splits every tile's K loop (no data-parallel tiles before
    them); programs 0 where the plan is not such."""
    tiles = math.ceil(m / cfg.block_m) * math.ceil(n / cfg.block_n) * batch
    split = streamk_split(tiles, math.ceil(k / cfg.block_k), budget, waves, rates)
    return tiles, split[1] if split is not None and split[0] == 0 else 0


def _stage_cap(bm: int, bn: int, block_k: int, m: int, n: int, k: int, elem: int, batch: int, budget: int,
               spec: DeviceSpec, fma: bool, c_matrix: bool) -> int:
    """The most pipeline stages a (bm, bn, block_k) tile takes (shared memory may allow fewer): 3 for 128 x 256 tiles
    (4 for long batched products without C, `_BATCHED_DEEP_MIN_K`), 5 for 128 x 128 tiles over long K loops of few
    waves, or of 64 steps over nearly full waves, on the whole device (`_SQUARE_DEEP_STAGES`), 4 for the others."""
    dense16 = elem == 2 and not fma and not c_matrix
    if bm * bn >= 128 * 256 and bn > bm:
        return 4 if dense16 and batch > 1 and k >= _BATCHED_DEEP_MIN_K else 3
    steps, tiles = math.ceil(k / block_k), math.ceil(m / bm) * math.ceil(n / bn) * batch
    waves = tiles / budget
    if (bm, bn) == (128, 128) and dense16 and budget >= spec.num_sms and steps >= _SQUARE_DEEP_MIN_STEPS and (
            waves <= _SQUARE_DEEP_MAX_WAVES
            or (steps <= _SQUARE_DEEP_MIN_STEPS and waves / math.ceil(waves) >= _SQUARE_DEEP_MIN_FILL)):
        return _SQUARE_DEEP_STAGES
    return 4


def _skinny_square(m: int, n: int, batch: int, budget: int, stages: int) -> bool:
    """Whether a skinny product (`_SKINNY_MAX_M`) may take 128 x 128 tiles of `stages` stages: above
    `_SKINNY_SQUARE_MIN_M` rows, where they got 5 stages (`_stage_cap`) and make one wave that fills at least
    `_SKINNY_SQUARE_MIN_FILL` of the budget."""
    tiles = math.ceil(m / 128) * math.ceil(n / 128)
    return batch == 1 and m > _SKINNY_SQUARE_MIN_M and stages == _SQUARE_DEEP_STAGES \
        and _SKINNY_SQUARE_MIN_FILL * budget <= tiles <= budget


def _one_wave_64(cfg: TileConfig, m: int, n: int, k: int, elem: int, batch: int, budget: int, dense: bool,
                 c_matrix: bool) -> bool:
    """Whether persistent tile `cfg` is a 64 x 128 pointer tile of 1- or 2-byte elements with 256-byte K steps that
    makes one wave of at least `_ONE_WAVE_64_MIN_FILL` of the budget over a K loop of whole steps from
    `_ONE_WAVE_64_MIN_K` to `_ONE_WAVE_64_MAX_K`, with N a multiple of its width, above the skinny rows, for a single
    product without a C matrix (`Rates.one_wave_64_factor`)."""
    if (cfg.block_m, cfg.block_n) != (64, 128) or cfg.tma or elem not in (1, 2) \
            or cfg.block_k * elem != _LONG_STEP_BYTES or batch != 1 or c_matrix or not dense or m <= _SKINNY_MAX_M \
            or not _ONE_WAVE_64_MIN_K <= k <= _ONE_WAVE_64_MAX_K or k % cfg.block_k or n % cfg.block_n:
        return False
    tiles = math.ceil(m / cfg.block_m) * math.ceil(n / cfg.block_n)
    return _ONE_WAVE_64_MIN_FILL * budget <= tiles <= budget


def choose_config(
    m: int,
    n: int,
    k: int,
    dtype: torch.dtype,
    spec: DeviceSpec,
    budget: int,
    schedules: tuple[str, ...] = ("persistent",),
    one_row: bool = True,
    fma: bool = False,
    batch: int = 1,
    wide_rows: bool = True,
    dense: bool = True,
    c_matrix: bool = False,
) -> tuple[TileConfig, str, int]:
    """The tile configuration, schedule (one of `schedules`) and Stream-K split (`streamk_split`'s `waves`) the
    model above predicts fastest on `budget` SMs.

    Up to _ONE_ROW_MAX_M rows (B streamed) the tile covers every row of A (`one_row`), where such a tile fits:
    thinner tiles would stream B once per row of tiles. On the H200, M = 48 and 64 x 4096 x 4096 ran 20.7 us on
    the 32 x 64 tiles the model preferred and 14.3 on 64 x 64 ones.

    `fma`: fp32 operands multiplied in full precision (no TF32), which Triton computes with FMA instructions, not
    tensor cores: tiles of at most 128 x 128, through pointers (`_FMA_MAX_TILE`).

    `wide_rows`: above M = 64, 16-bit tiles of fewer than 64 rows are candidates only where no tile of 64 rows or
    more fits in shared memory (`_MIN_ROWS_ABOVE_STREAMING`).

    `dense`: False for the fused kernel of an MXFP4 GEMM, which keeps the tiles it was measured with: no short K steps
    (`_SHORT_STEP_BYTES`), and no 32-row Stream-K tiles above M = 64.

    `c_matrix`: the call adds a C matrix (not a bias row), whose epilogue takes shared memory (`_LONG_STEP_BYTES`)."""
    elem = element_bytes(dtype)
    skinny = _STREAMING_MAX_M < m <= _SKINNY_MAX_M
    max_m, max_n = max(16, _next_pow2(m)), max(32, _next_pow2(n))
    one_row = one_row and m <= _ONE_ROW_MAX_M
    best, best_cost = None, math.inf
    tall_first = fma or (elem == 1 and m > _SKINNY_MAX_M) or not dense
    whole_chip = budget >= spec.num_sms
    # one wave of 16 x 64 decode tiles that fills most of the device: its 16-row tiles are not split (_DECODE_FILL)
    decode_wave = dense and elem == 2 and not fma and batch == 1 and whole_chip \
        and _DECODE_FILL * budget <= math.ceil(m / 16) * math.ceil(n / 64) <= budget
    for bm, bn, warps in _TALL_FIRST if tall_first else _CANDIDATE_TILES:
        if bm > max_m or bn > max_n or (one_row and bm < max_m) or (fma and bm * bn > _FMA_MAX_TILE):
            continue
        thin = wide_rows and m > _STREAMING_MAX_M and bm < _MIN_ROWS_ABOVE_STREAMING and max_n >= 64 and elem == 2 \
            and not fma  # only dense Stream-K plans take these tiles (see _MIN_ROWS_ABOVE_STREAMING)
        if (bm, bn) == (256, 128) and (batch == 1 or fma or (whole_chip and (elem != 2 or c_matrix or n <= 128))):
            continue  # 256 x 128: see _CANDIDATE_TILES
        largest = bm * bn >= 128 * 256
        if skinny and largest and math.ceil(m / bm) * math.ceil(n / bn) < 0.8 * budget:
            continue  # skinny: 128 x 256 tiles only where they (nearly) fill a wave
        # 512-byte K steps up to M = 32 (16-row tiles had them before): 32-row tiles with 256-byte steps streamed B
        # at ~39 GB/s per SM; with 512-byte ones bf16 / fp16 ran 1.05-1.44x faster at M = 24 and 32 on 32-132 SMs,
        # fp8 1.02-1.08x (the H200, benchmarks/sweep_configs.py)
        block_k = 128 // elem * (4 if m <= _WIDE_K_MAX_M else 2 if m <= _STREAMING_MAX_M
                                 or (skinny and bm * bn < 128 * 128) else 1)
        if fma and bm * bn >= 64 * 64:
            block_k = 32  # 128-byte rows on FMA: 128 x 128 x 16 ran 11% slower
        if batch > 1 and bm * bn == 128 * 128 and not fma and not c_matrix:
            block_k = _LONG_STEP_BYTES // elem  # batched 128 x 128 tiles: see _LONG_STEP_BYTES
        block_k = min(block_k, max(min_block_k(dtype), _next_pow2(k)))
        if dense and elem == 2 and not fma and block_k * elem == 2 * _SHORT_STEP_BYTES and k <= _SHORT_STEP_MAX_K \
                and _padded_k(k, block_k) > _LONG_STEP_PADDING * _padded_k(k, _SHORT_STEP_BYTES // elem):
            block_k = _SHORT_STEP_BYTES // elem  # see _SHORT_STEP_BYTES
        stage_bytes = (bm + bn) * block_k * elem
        fit = (spec.smem_per_block - _SMEM_RESERVE) // stage_bytes
        stages = min(_stage_cap(bm, bn, block_k, m, n, k, elem, batch, budget, spec, fma, c_matrix), fit)
        if stages < 2 or (skinny and bm * bn == 128 * 128 and not fma and not _skinny_square(m, n, batch, budget,
                                                                                           stages)):
            continue
        hopper = bm * bn >= _HOPPER_PATH_MIN_TILE and not fma
        # persistent 5-stage 128 x 128 tiles run nearer the 128 x 256 tile's rate than the model's 4-stage ones
        square5 = stages == _SQUARE_DEEP_STAGES and bm == bn == 128
        square_deep = spec.rates.square_deep_factor if square5 else 1.0
        cfg = TileConfig(bm, bn, block_k, num_warps=warps, num_stages=stages, tma=hopper, tma_store=hopper,
                         flatten=hopper)
        # fp8 takes 256-byte K steps on persistent 4-warp tiles only in one wave of 64 x 128 tiles (_one_wave_64)
        long_steps = elem == 2 or (elem == 1 and _one_wave_64(
            dataclasses.replace(cfg, block_k=_LONG_STEP_BYTES // elem), m, n, k, elem, batch, budget, dense, c_matrix))
        for schedule, waves in _candidates(schedules):
            if ((bm, bn) == (256, 128) and whole_chip and schedule == "streamk") or \
                    (decode_wave and bm <= 16 and schedule == "streamk") or \
                    (skinny and (largest or (bm * bn == 128 * 128 and not fma)) and schedule == "streamk") or \
                    (thin and (not dense or schedule != "streamk" or bm < 32 or budget < spec.num_sms)):
                continue
            chosen, factor = cfg, 1.0
            one_wave = math.ceil(m / bm) * math.ceil(n / bn) <= budget >= spec.num_sms  # see _ONE_WAVE_STEP_BYTES
            if schedule != "streamk" and (bm, bn) == (64, 64) and dense and elem == 2 and not fma and batch == 1 \
                    and m > _STREAMING_MAX_M and k <= _ONE_WAVE_MAX_K and k * elem % _LONG_STEP_BYTES and one_wave:
                chosen = dataclasses.replace(cfg, block_k=min(block_k, _ONE_WAVE_STEP_BYTES // elem))
            elif schedule != "streamk" and warps == 4 and long_steps and block_k * elem < _LONG_STEP_BYTES <= k * elem \
                    and fit * block_k * elem >= stages * _LONG_STEP_BYTES \
                    and _padded_k(k, _LONG_STEP_BYTES // elem) <= _LONG_STEP_PADDING * _padded_k(k, block_k):
                chosen = dataclasses.replace(cfg, block_k=_LONG_STEP_BYTES // elem)
            deep = fit >= _DEEP_STAGES and _deep_streamk(cfg, m, n, k, elem, budget, spec.rates, batch)
            if schedule == "streamk" and deep:
                chosen, factor = dataclasses.replace(cfg, num_stages=_DEEP_STAGES), spec.rates.deep_factor
            elif schedule == "streamk" and square5 and math.ceil(m / bm) > _SQUARE_SK_DEEP_MAX_ROWS \
                    and _every_tile_split(cfg, m, n, k, budget, waves, spec.rates, batch)[1]:
                chosen = dataclasses.replace(cfg, num_stages=4)  # see _SQUARE_SK_DEEP_MAX_ROWS
            if schedule != "streamk":
                factor *= square_deep
                if _one_wave_64(chosen, m, n, k, elem, batch, budget, dense, c_matrix):
                    factor *= spec.rates.one_wave_64_factor
            cost = _cost(chosen, m, n, k, dtype, budget, schedule, spec, waves, batch) * factor
            if cost < best_cost:
                best, best_cost = (chosen, schedule, waves), cost
    if best is None and wide_rows and m > _STREAMING_MAX_M:  # no 64-row tile fits (a small shared memory)
        return choose_config(m, n, k, dtype, spec, budget, schedules, one_row, fma, batch, wide_rows=False,
                             dense=dense, c_matrix=c_matrix)
    if best is None and one_row:  # no tile of max_m rows fits (e.g. N < 64 for M = 17..32): any rows
        return choose_config(m, n, k, dtype, spec, budget, schedules, one_row=False, fma=fma, batch=batch,
                             dense=dense, c_matrix=c_matrix)
    if best is None and schedules != ("persistent",):  # no tile gives Stream-K anything to split
        return choose_config(m, n, k, dtype, spec, budget, fma=fma, batch=batch, dense=dense, c_matrix=c_matrix)
    assert best is not None, "the smallest candidate tile always fits"
    cfg, schedule, waves = best
    if whole_store_fits(cfg, elem, spec):
        cfg = dataclasses.replace(cfg, whole_store=True)
    return cfg, schedule, waves


def clamps_edge_tiles(cfg: TileConfig, m: int, n: int, k: int, elem: int) -> tuple[bool, bool]:
    """Whether tile `cfg` ends its last row (column) of tiles at the edge of M (N) for speed (`_CLAMP_MIN_K`): where
    M (N) leaves a partial tile past a whole one, for 1- and 2-byte operands (`elem`), tiles of at most
    `_CLAMP_MAX_TILE` elements and K loops of at least `_CLAMP_MIN_K`."""
    if elem not in _CLAMP_ELEMENT_BYTES or k < _CLAMP_MIN_K or cfg.block_m * cfg.block_n > _CLAMP_MAX_TILE:
        return False, False
    return m > cfg.block_m and m % cfg.block_m != 0, n > cfg.block_n and n % cfg.block_n != 0


def host_descriptors_pay(plan: Plan, batched: bool) -> bool:
    """Whether the TMA operands of `plan` are read through tensor descriptors built on the host, kernel parameters
    (`_launch.reads_host_descriptors`), rather than ones each program builds in global memory as it starts. On the
    H200 (bf16, each kind forced in one run: docs/performance.md, "Tensor descriptors built on the host") a program's
    own descriptors cost it ~1.5 us before its first load: host-built ones ran one-wave and Stream-K plans 0.88-0.98x
    the time (2048 x 2048 x 512 13.1 -> 11.5 us, 512 x 4096 x 4096 28.4 -> 26.7, 768 x 6144 x 4096 65.5 -> 64.2),
    persistent 128 x 256 tiles over several waves 0.99x, batched ones 0.97-0.98x, persistent 128 x 128 tiles over up
    to three waves or short K loops 0.95-0.99x (1024 x 6144 x 4096 72.7 -> 71.0 us, 1536 x 4096 x 4096 73.1 -> 71.2,
    1159 x 7289 x 249 26.9 -> 25.5). Persistent 128 x 128 tiles over more than three waves of K loops of at least 64
    steps ran level or slower with them (1024 x 14336 x 4096 and 512 x 28672 x 4096 level, 10799 x 1029 x 6437 355 ->
    372 us), so those keep their own."""
    cfg = plan.config
    long_run = plan.sk_tiles == 0 and plan.dp_tiles > 3 * plan.num_programs and plan.k_iters >= 64
    return batched or not (long_run and cfg.block_m == 128 and cfg.block_n == 128)


def whole_store_fits(cfg: TileConfig, elem: int, spec: DeviceSpec) -> bool:
    """Whether tile `cfg` (TMA-stored, operands of at most 2 bytes, `elem`) has the shared memory to stage a whole
    2-byte output tile for one TMA store beside its pipeline's stages (`TileConfig.whole_store`). Two half stores
    share one staging buffer, so Triton waits for the first to leave it before writing the second; one store does
    not wait. On the H200 (benchmarks/sweep_configs.py, "whole" against halves in the same run) 128 x 256 x 64 tiles
    ran batched 32 x 2048 x 2048 x 128 in 94.4 against 104 us, 8192^3 1570 against 1580, and 128 x 128 x 128 tiles
    101 against 120 and 1690 against 1820; small-K and MoE-like shapes stayed within 1%."""
    if not cfg.tma_store or elem > 2:
        return False
    stages = cfg.num_stages * (cfg.block_m + cfg.block_n) * cfg.block_k * elem
    return stages + cfg.block_m * cfg.block_n * 2 <= spec.smem_per_block - _SMEM_RESERVE


def mx_config(m: int, n: int, k: int, layout: str = "ocp") -> TileConfig | None:
    """The tile configuration of an MXFP4 GEMM (an [N, K] MXFP4 weight in byte `layout`; bf16, fp16 or MXFP4
    activations), or None for the dense model's choice. Measured rules, not modelled (benchmarks/sweep_mxfp4.py on
    the H200, docs/performance.md):

    * a "hopper" weight and M <= 128: 64 weight rows, 4 warps, computed as (W @ A^T)^T (`mx_swap`): the expanded
      weight is the wgmma's register operand, each thread expanding the bytes its fragments need (no trip through
      shared memory). 512-element K steps for M <= 16 (make_mx_plan shortens them to 256 with 4 stages where
      Stream-K splits, with two programs per SM), 256 above. Graph-replayed against the "ocp" weight's plans in
      the same run (`python -m smgemm bench --dtype '' --mxfp4`, docs/performance.md): M = 1 1.14-1.43x of bf16 ->
      1.23-1.43x, M = 16 1.21-1.36x -> 1.23-1.51x, M = 32 0.97-1.06x -> 1.18-1.40x, M = 64 0.77-0.85x -> 0.89-1.20x.
      At M = 128 these 128 x 64 x 256 tiles, split by Stream-K, ran 1.2-1.3x faster than the dense model's tiles
      (128 x {1024, 4096, 14336, 28672} x {4096, 8192, 14336}: 23.9 -> 19.7, 28.9 -> 23.9, 67.7 -> 53.8, 62.7 ->
      48.9, 213 -> 162 us; still 0.45-0.77x of bf16);
    * M <= 16: 16 x 64 tiles with 512-element K steps (256 bytes of each packed weight row per step): the weight's
      expansion, not its bytes, bounds decode, and longer steps give each program more independent work;
    * 16 < M <= 32: 32 x 64 tiles with 256-element K steps, 4 warps and 4 stages (mma.sync, as at decode), which
      Stream-K splits: 1.23-1.29x faster than the 64-row tiles below at M = 17-32 (0.92-1.06x of bf16 against
      0.73-0.84x); 32 x 128 tiles with 8 warps were 3-7% faster at N >= 8192 and 8% slower at 4096;
    * 32 < M <= 64: 64 x 64 tiles with 256-element K steps and 4 warps, computed as (W @ A^T)^T (`mx_swap`: the
      expanded weight tile is the wgmma's register operand, no trip through shared memory), which Stream-K splits:
      0.75-0.80x of bf16 at M = 64, where 64 x 128 tiles unswapped gave 0.68-0.75x in the same run and
      the dense model's tiles 0.52-0.78x; 64-row tiles as two or four mma.sync dots on one expanded weight
      tile were 1-19% slower, 32-row tiles (two per weight tile, each expanding it) 22-44% slower;
    * M >= 256 and N >= 128: 256 x 128 tiles (128 weight rows: half the expansion per multiply-add of 128 x 256),
      computed as (W @ A^T)^T (`mx_swap`; the wgmma is then m64n256k16), with the next K step's weight tile expanded
      while this step's dot runs (`mx_prefetch`), A read through pointers: 0.63-0.68x of bf16 cuBLAS, where
      128 x 256 tiles gave 0.46-0.49x (0.39-0.41x with MXFP4 activations too, against 0.32-0.36x).
    """
    words = layout != "ocp"  # "hopper" or "kwords": the same words, the same tiles
    if words and m <= 16:
        return TileConfig(16, 64, min(512, max(128, _next_pow2(k))), num_warps=4, num_stages=3, mx_swap=True)
    if words and m <= 128:
        return TileConfig(max(32, _next_pow2(m)), 64, min(256, max(128, _next_pow2(k))), num_warps=4, num_stages=3,
                          mx_swap=True)
    if m <= 16:
        return TileConfig(16, 64, min(512, max(32, _next_pow2(k))), num_warps=4, num_stages=4)
    if m <= 32:
        return TileConfig(32, 64, min(256, max(32, _next_pow2(k))), num_warps=4, num_stages=4)
    if m <= 64:
        return TileConfig(64, 64, min(256, max(32, _next_pow2(k))), num_warps=4, num_stages=3, mx_swap=True)
    if m >= 256 and n >= 128:
        return TileConfig(256, 128, min(64, max(32, _next_pow2(k))), num_warps=8, num_stages=4, mx_swap=True,
                          mx_prefetch=True)
    return None


# From this M on (and this N too when the activations are MXFP4) an MXFP4 GEMM expands its MXFP4 operands to bf16 in a
# pass of their own and runs the dense Hopper path (`mx_expands`). Measured on the H200 (docs/performance.md):
# two passes against the fused kernel, weight-only, 4096 x 4096 weight: M = 256 43 vs 44 us, 512 46 vs 59, 2048 104
# vs 146; 14336 x 4096 weight: M = 256 112 vs 74, 1024 225 vs 260. Both operands MXFP4: 4096^3 211 vs 462 us.
_MX_EXPAND_MIN = 512


def mx_expands(m: int, n: int, k: int, a_mx: bool) -> bool:
    """Whether an MXFP4 GEMM runs in two passes: expand the MXFP4 operands to bf16 (fp16) copies, then the dense GEMM.

    On Hopper the fused kernel expands every weight tile once per row of output tiles, in the same warps that issue
    the MMAs: 0.35-0.6x of bf16 from M = 512 on. Expanding the weight once moves ~2.5 bytes per weight element (at
    ~3 TB/s), a cost that shrinks as 1 / M against the dense GEMM's time. The fused kernel keeps the shapes where
    bytes matter (decode, small M), where the copy would cost more than it saves.
    """
    return m >= _MX_EXPAND_MIN and (not a_mx or n >= _MX_EXPAND_MIN)


_MX_DECODE_SHORT_K = 4096  # decode K loops up to here run data-parallel over 16 x 32 tiles (make_mx_plan)


# From this many weight elements on (N * K: the 70B projections, lm_head), a "hopper" weight at M <= 16 runs
# 16 x 128 x 128 tiles split by Stream-K, two programs per SM: on the H200 (benchmarks/sweep_mxfp4.py --layout hopper,
# against the 16 x 64 plans in the same run) 1 x 8192 x 28672 65.3 -> 59.9 us, 1 x 28672 x 8192 69.6 -> 65.6,
# 16 x 28672 x 8192 64.4 -> 57.7; at 14336 x 4096 and 4096 x 4096 it was 2-13% slower, at 4096 x 14336 0-7% faster.
# At 16 < M <= 32, 32 x 128 x 256 tiles against the 32 x 64 x 256 plan: 32 x 28672 x 8192 72.0 -> 70.7 us, 32 x 8192 x
# 28672 73.8 -> 71.1, 32 x 128256 x 4096 157 -> 143, and 23.8 -> 25.2 at 32 x 14336 x 4096; at M = 64, 64 x 128 x 128
# tiles were 9-13% slower than the 64 x 64 plan.
_MX_WIDE_DECODE_MIN = 2**27

# Up to this M, a "hopper" weight with bf16 activations on the whole device runs swapped tiles of 8 activation rows
# (make_mx_plan): the dot [64, K] @ [K, 8] runs on mma.sync, which takes the expanded words as they are loaded
# (`kernels.common.word_order`; the activation tile is put in their order), with none of the wgmma's per-instruction
# fences and descriptors: 354 instructions per thread per 256-element K step against 482 for the 16-row wgmma tile
# (benchmarks/compile_report.py --tile 8,64,256 --warps 4 --stages 4 --b-mx --mx-swap --mx-layout hopper --sass).
# On the H200 (benchmarks/sweep_mxfp4.py --layout hopper, against the 16-row plans in the same run) 1 x 14336 x 4096
# ran 21.5 -> 19.0 us, 1 x 1024 x 4096 7.0 -> 6.6, 1 x 6144 x 4096 15.7 -> 14.5, 8 x 128256 x 4096 120 -> 114,
# 8 x 4096 x 4096 10.5 -> 10.8. Split by Stream-K they expand exactly (`kernels.common.k_loop`), and then also beat
# the 16 x 128 x 128 tiles of the widest weights: 1 x 8192 x 28672 59.4 -> 57.2 us (smgemm.linear timed by
# tools.timing.time_rotating, both trees in one run); under a 64-SM budget (1 x 14336 x 4096: 43.8 against 49.2) the
# 16-row tiles stay.
_MX_WORDS_MAX_M = 8
# Split 8-row plans of at least this many K steps a tile run four programs per SM instead of two: the aligned grid then
# gives each tile four parts instead of two. On the H200 (the planner's rows for the Llama-3 8B and 70B projections
# and lm_heads at M = 1, 4, 8, planned for the device's SMs and for twice them as by
# benchmarks/sweep_configs.plan_for_programs_per_sm, `smgemm.linear` timed by tools.timing.time_rotating, both in one
# run at commit 3cd974d) 1 x 8192 x 28672 ran 57.1 -> 54.4 us, 4 and 8 x 8192 x 28672 58.8 / 58.7 -> 55.1; with shorter
# loops four per SM was level or slower: 1 x 4096 x 14336 (56 steps) 19.2 -> 20.0, 1 x 4096 x 4096 10.3 -> 10.6,
# 1 x 8192 x 8192 21.1 -> 21.5 (4 and 8 x 8192 x 8192 1.5% faster). Data-parallel plans (one tile per program) are
# unchanged.
_MX_WORDS_LONG_K_STEPS = 64

# 8 < M <= 16 with a "kwords" weight and bf16 activations on the whole device, at least this share of the SMs in
# 64-row tiles (make_mx_plan): 16 x 64 x 512 tiles computed unswapped, one program per tile. Their dot [16, K] @ [K,
# 64] runs on mma.sync with the weight as its right operand, whose fragments are the expanded words in K order, so the
# activation tile is used as loaded (the swapped wgmma tiles put it in the fragments' order first). On the H200
# (benchmarks/sweep_mxfp4.py --graph --layout kwords, the trees of 0923d81 and of this rule in one run, planner rows
# in us): 16 x 14336 x 4096 28.3 -> 19.9, 9 x 14336 x 4096 28.6 -> 19.7, 16 x 6144 x 4096 13.6 -> 12.8, 16 x 128256 x
# 4096 135 -> 125, 16 x 28672 x 8192 64.4 -> 64.4; in a second run timed the same way the "hopper" plans took
# 0.96-1.10x the new "kwords" time, and the 8B-shaped 4-layer model (tools.model) decoded batch 16 at 1.24x -> 1.34x
# of bf16 torch (docs/performance.md). With fewer tiles the split plans stay (16 x 4096 x 4096: this tile 12.7 us
# data-parallel against 10.5 planned); 32-row tiles of the same kind at M = 32 were no faster than the planner's (28.3
# against 28.7 us at 32 x 14336 x 4096, 95.6 against 89.0 at 32 x 28672 x 8192).
_MX_KWORDS_ROWS_FILL = 0.7

# M = 1 with bf16 activations, a "hopper" weight of at least this many rows (a multiple of 64) and K a multiple of
# 512, on the whole of a Hopper device where Triton 3.6's Gluon runs: `kernels.mx_ring`, the weight's bytes through a
# ring of TMA copies (a step's copies issued two steps ahead, no barrier between them and their use). On the H200,
# CUDA-graph replays against the 8-row plans in one call (benchmarks/sweep_mx_ring.py; docs/performance.md, "The ring
# kernel"): 1 x 4096 x 4096 8.64 -> 8.46 us, 1 x 14336 x 4096 17.40 -> 16.28, 1 x 4096 x 14336 17.71 -> 16.70,
# 1 x 6144 x 4096 11.90 -> 10.59, 1 x 8192 x 8192 20.98 -> 19.50, 1 x 28672 x 8192 51.14 -> 47.97, 1 x 8192 x 28672
# 50.66 -> 46.85, 1 x 128256 x 4096 91.81 -> 91.14, 1 x 128256 x 8192 173.8 -> 163.7; the 8B-shaped model's batch-1
# decode 0.734-0.737 -> 0.713-0.714 ms. 1 x 1024 x 4096 ran 5.4 -> 5.8 us as a probe (left out), M = 4 and 8 3-5%
# slower.
_MX_RING_MIN_N = 4096
# A tile's K split: none where the tiles alone cover the SMs, else the most of four and two parts that leaves each
# at least this many 512-element steps (the best of the probe's splits, benchmarks/probes/mx_decode_tma.py on branch
# mx-tma: 4096 x 4096 two parts of 4 steps, 7.9 us against 8.4 in four; 4096 x 14336 four of 7, 16.3 against 17.2
# in two; 8192 x 28672 four of 14; 14336 x 4096 none, 15.1 against 16.5 in two).
_MX_RING_MIN_STEPS = 4


def mx_ring_split(m: int, n: int, k: int, spec: DeviceSpec, num_sms: int | None, layout: str,
                  a_dtype: torch.dtype, c_matrix: bool) -> int:
    """The K parts of each 64-row tile where `kernels.mx_ring` runs this MXFP4 product (x [m, k] @ w.T, w [n, k] in
    `layout`), 0 where it does not (`_MX_RING_MIN_N`; an `overrides` block with ring=False, a config or a schedule):
    the caller adds that Triton runs its Gluon."""
    if _OVERRIDES.ring is False or _OVERRIDES.config is not None or _OVERRIDES.schedule is not None:
        return 0
    if not (m == 1 and a_dtype == torch.bfloat16 and layout == "hopper" and not c_matrix and n % 64 == 0
            and n >= _MX_RING_MIN_N and k % 512 == 0 and k > 0 and spec.capability == (9, 0)
            and not spec.interpreted and (num_sms is None or num_sms >= spec.num_sms)):
        return 0
    if n // 64 >= spec.num_sms:
        return 1
    return next((parts for parts in (4, 2) if k // 512 // parts >= _MX_RING_MIN_STEPS), 1)

# 64 < M <= 128 with a "hopper" weight on the whole device (make_mx_plan): mx_config's 128 x 64 x 256 tiles (one
# program per SM) against 64 x 64 x 256 ones two programs per SM, which expand each weight tile twice but hide the
# expansion behind the other program's, split by Stream-K in the same run (benchmarks/sweep_mxfp4.py --layout hopper
# --programs-per-sm 2 on the H200): 128 x 14336 x 4096 53.8 -> 48.6 us, 128 x 4096 x 14336 48.7 -> 44.7,
# 128 x 4096 x 4096 23.7 -> 18.2, 96 x 4096 x 14336 48.5 -> 44.7. From _MX_WIDE_DECODE_MIN weight elements on,
# 128 x 128 x 128 tiles with 8 warps, one program per SM: 128 x 28672 x 8192 162 -> 144 us (163 with the 64-row
# tiles; two programs per SM of 8 warps: 164).


def make_mx_plan(
    m: int,
    n: int,
    k: int,
    dtype: torch.dtype,
    spec: DeviceSpec,
    *,
    schedule: str = "auto",
    num_sms: int | None = None,
    config: TileConfig | None = None,
    layout: str = "ocp",
    a_mx: bool = False,
) -> Plan:
    """`make_plan` for an MXFP4 GEMM (`dtype`: the dtype its dot runs in; `layout`: the weight's byte layout; `a_mx`:
    the activations are MXFP4 too): the
    tile of `mx_config` unless `config` is given (a "hopper" weight is read in whole 128-element groups: K steps of
    at least 128), and these measured rules for `auto`:

    * 16 < M <= 64 (128 for a "hopper" weight): Stream-K over mx_config's tiles (the configurations were measured
      split);
      a "hopper" weight's split plans on the whole device run two programs per SM;
    * decode (M <= 16) with no SM budget and at least one 16 x 64 tile per SM: data-parallel, one program per tile. The
      decode tile's shared memory lets two programs share an SM, so up to 2 x SMs tiles run at once with no Stream-K
      fixup: 14336 x 4096 and 28672 x 4096 ran 17-22% faster than the Stream-K plan. With fewer 16 x 64 tiles than SMs
      but a short K loop (K <= _MX_DECODE_SHORT_K) and 16 x 32 tiles for >= 90% of the SMs, data-parallel over those
      narrower tiles: 16 x 4096 x 4096 13.1 -> 11.4 us, 16 x 6144 x 4096 17.1 -> 15.8; with longer K loops (5120 and up)
      Stream-K's split stays faster. Otherwise Stream-K splits the tiles; with a budget below the device's SMs the grid
      stays within it, as for every GEMM.
    * M <= _MX_WORDS_MAX_M with a "hopper" weight and bf16 activations on the whole device: 8 x 64 x 256 tiles with
      4 stages (the note at _MX_WORDS_MAX_M), scheduled as the decode tiles above; split, they run four programs
      per SM where a tile's K loop has at least _MX_WORDS_LONG_K_STEPS steps (two otherwise, as below).
    * 8 < M <= 16 with a "kwords" weight and bf16 activations on the whole device, with 64-row tiles for at least
      _MX_KWORDS_ROWS_FILL of the SMs: mx_config's tile computed unswapped (mma.sync, the activations as loaded),
      one program per tile.
    * 8 < M <= 32 with a "hopper" weight of at least _MX_WIDE_DECODE_MIN elements on the whole device: tiles of 128
      weight rows (16 x 128 x 128 with 4 stages, 32 x 128 x 256 with 3 above M = 16), split by Stream-K (two programs
      per SM, as below).
    * 64 < M <= 128 with a "hopper" weight on the whole device: 64 x 64 x 256 tiles two programs per SM, or 128 x 128 x
      128 tiles of 8 warps one per SM from _MX_WIDE_DECODE_MIN weight elements on, split by Stream-K (the note above).
    """
    whole = whole_device(num_sms, spec)
    word_layout = layout != "ocp"  # "hopper" or "kwords": the same words, read by the same tiles
    forced = config is not None
    if config is None:
        config = mx_config(m, n, k, layout)
        words = schedule == "auto" and whole and word_layout and m <= _MX_WORDS_MAX_M and \
            dtype == torch.bfloat16 and not a_mx
        if words:
            config = dataclasses.replace(config, block_m=8, block_k=min(config.block_k, 256), num_stages=4)
        elif schedule == "auto" and whole and layout == "kwords" and m <= 16 and dtype == torch.bfloat16 and \
                not a_mx and math.ceil(n / config.block_n) >= _MX_KWORDS_ROWS_FILL * spec.num_sms:
            config, schedule = dataclasses.replace(config, mx_swap=False), "data_parallel"  # _MX_KWORDS_ROWS_FILL
        decode = schedule == "auto" and whole and config is not None and m <= 16
        if schedule == "auto" and whole and word_layout and m <= 32 and not words and \
                n * k >= _MX_WIDE_DECODE_MIN:
            config = dataclasses.replace(config, block_n=128, block_k=128 if m <= 16 else 256,
                                         num_stages=4 if m <= 16 else 3)
            schedule = "streamk"
        elif decode and math.ceil(n / config.block_n) >= spec.num_sms:
            schedule = "data_parallel"  # one program per tile, like a data-parallel launch
        elif decode and not word_layout and k <= _MX_DECODE_SHORT_K and \
                math.ceil(n / 32) >= spec.rates.sk_align_fill * spec.num_sms:
            config = dataclasses.replace(config, block_n=32)
            schedule = "data_parallel"
        elif schedule == "auto" and whole and word_layout and 64 < m <= 128:
            # the note above make_mx_plan: 64-row tiles two programs per SM, or 128 x 128 x 128 for the widest weights
            if n * k >= _MX_WIDE_DECODE_MIN:
                config = dataclasses.replace(config, block_n=128, block_k=128, num_warps=8)
            else:
                config = dataclasses.replace(config, block_m=64)
            schedule = "streamk"
        elif schedule == "auto" and 16 < m <= (128 if word_layout else 64):
            schedule = "streamk"  # as measured with mx_config's tiles (persistent where nothing splits)
        if word_layout and schedule != "data_parallel" and m <= 16:
            config = dataclasses.replace(config, block_k=min(config.block_k, 256), num_stages=4)
    if word_layout and (m <= 64 or (config is not None and config.block_m <= 64)) and \
            schedule != "data_parallel" and whole:
        # Two programs per SM: a split decode GEMM hides its expansion's latency behind the other program's (on the
        # H200 1 x 4096 x 14336 26.2 -> 22.6 us, 64 x 14336 x 4096 36.2 -> 30.2; three per SM were slower), four for
        # the 8-row tiles' long K loops (_MX_WORDS_LONG_K_STEPS). Stream-K waits only on lower programs, which
        # started first, so the schedule needs no co-residency.
        long_words = config is not None and config.block_m == 8 and \
            math.ceil(k / config.block_k) >= _MX_WORDS_LONG_K_STEPS
        spec, num_sms = dataclasses.replace(spec, num_sms=(4 if long_words else 2) * spec.num_sms), None
    plan = make_plan(m, n, k, dtype, spec, schedule=schedule, num_sms=num_sms, config=config, dense=False)
    readable = hopper_steps(plan.config) if word_layout else plan.config
    readable = dataclasses.replace(readable, whole_store=False)  # whole-tile stores are measured on dense tiles only
    if not forced and readable.block_k < 64:
        # Triton 3.6 fails to compile some 32-deep tiles that expand an MXFP4 weight (128 x 256 of 8 warps, 128 x 128
        # and 64 x 128 of 4 with dense activations; 256 x 128 swapped with MXFP4 activations:
        # benchmarks/compile_report.py's compile_variant), as the planner picks them for K <= 32: 64-deep steps
        # instead, the K tail masked
        readable = dataclasses.replace(readable, block_k=64)
    if readable != plan.config:
        plan = make_plan(m, n, k, dtype, spec, schedule=plan.schedule, num_sms=num_sms, config=readable)
    return plan


def hopper_steps(cfg: TileConfig) -> TileConfig:
    """`cfg` made to read a "hopper" MXFP4 weight, which comes in whole 128-element groups: K steps of at least 128
    (a widened step with at most 3 stages), and, where the weight is the dot's right operand (not `mx_swap`), at
    most 16 weight rows a warp: Triton 3.6 fails to compile 64 x 128 tiles of 4 warps and 128 x 256 of 8 that read
    such a weight (benchmarks/compile_plans.py), while 128 x 128 of 8 warps and 128 x 64 of 4 compile."""
    if cfg.block_k < 128:
        cfg = dataclasses.replace(cfg, block_k=128, num_stages=min(cfg.num_stages, 3))
    if not cfg.mx_swap and cfg.block_n > 16 * cfg.num_warps:
        cfg = dataclasses.replace(cfg, block_n=16 * cfg.num_warps)
    return cfg


# Pointer tiles read an operand where it lies, without a staging copy, when its K-runs (the K-contiguous rows of A,
# columns of B) start at multiples of _POINTER_RUN_BYTES bytes, or of _SHORT_RUN_BYTES in plans whose programs run at
# most _SHORT_RUN_MAX_STEPS K steps; the kernel then loads that many bytes at a time (`_launch.vector_elements`, the
# kernel's A_VEC / B_VEC). On the H200 (bf16, benchmarks/sweep_configs.py, one run each):
# * forced tiles read in place ("nostage") against the planner's staging, commit 5055ce2: 8-byte runs 72 x 264 x 5820
#   17.0 -> 13.6 us (torch 12.9), 543 x 81 x 15500 33.0 -> 24.8; 4-byte runs lost (415 x 76 x 770: staged 10.2 us, in
#   place 11.4-13.4; 881 x 224 x 2498: 18.9 against 23.0); TMA plans keep the copy (2048 x 2048 x 2044: staged 41.8
#   us, pointer tiles in place 54.1 at best);
# * planner rows of the random suite's problems with 8- and 16-byte runs, reading every such operand in place against
#   the tree before the hints (docs/performance.md, "Any shape"): 10 of 15 ran faster (884 x 105 x 11400 38.6 ->
#   23.1 us, 269 x 1090 x 604 10.9 -> 8.04), 2 level, and 3 slower: 640 x 1595 x 72, whose tile changed, and the two
#   with 8-byte runs and 14 K steps a program (362 x 496 x 1740 14.6 -> 17.2, 608 x 239 x 1724 13.8 -> 17.6): a
#   program that streams many steps alone on its SM issues twice the loads, while short loops are bound by the
#   loads' latency.
# Longer loops read 8-byte runs in place only where the copy is modelled to cost at least _SHORT_RUN_COPY_SHARE of
# the GEMM (`decide`): of the rows above with longer loops, those at a modelled share of 0.85-0.86 (the two above)
# ran slower in place, those at 1.05-1.06 faster (543 x 81 x 15500 33.3 -> 28.5, 171 x 1636 x 7580 47.0 -> 40.2);
# 662 x 254 x 8868, at 0.73, ran 32.9 -> 31.7 and stays copied.
_POINTER_RUN_BYTES = 16
_SHORT_RUN_BYTES = 8
_SHORT_RUN_MAX_STEPS = 10
_SHORT_RUN_COPY_SHARE = 0.9


def reads_at_full_speed(cfg: TileConfig, dtype: torch.dtype, rows: int, runs: int, steps: int) -> bool:
    """Whether tile `cfg` reads an operand at full speed where it lies: `rows`, the elements to which its rows (or
    columns, column-major) start aligned (`_launch.row_alignment`), `runs`, those of its K-runs as the kernel's
    pointer loads use them (`_launch.vector_elements`), `steps`, the K steps a program of the plan runs. TMA needs
    16-byte rows; pointer loads 16-element rows (Triton's own specialisation of the stride) or long enough K-runs
    (the note above)."""
    elem = element_bytes(dtype)
    if cfg.tma:
        return rows * elem >= 16
    return rows >= 16 or runs * elem >= _POINTER_RUN_BYTES or (
        runs * elem >= _SHORT_RUN_BYTES and steps <= _SHORT_RUN_MAX_STEPS)


def steps_per_program(plan: Plan) -> int:
    """The K steps the busiest program of `plan` runs: its tiles' K loops, spread evenly over the grid."""
    return math.ceil(plan.num_tiles * plan.k_iters / plan.num_programs)


# Tiles that read operands with unaligned rows in place (1- and 2-byte elements): 32 deep, so that a thread's
# element loads of a K step stay few enough for its registers (a 128 x 64 x 128 tile spills: 2,300 instructions a
# step against 200), from decode-like to wide. Their stages pay where K-runs of 4 bytes or more come in asynchronous
# copies (single elements are not pipelined): on the H200 (bf16, `benchmarks/sweep_configs.py`, forced tiles read in
# place, one run, us; 4-byte runs unless said) 2 -> 4 stages took 662 x 254 x 8868 (8-byte runs, 32 x 64) 196 -> 76,
# 117 x 4060 x 5322 (64 x 64) 131 -> 53.9, 8425 x 104 x 1842 (64 x 128) 55.7 -> 26.9, and 2 -> 3 stages took the
# planner's in-place plans 0.72-1.02x the time (127 x 1681 x 474 9.73 -> 7.04, 69 x 6653 x 270 10.5 -> 8.14,
# 231 x 7955 x 140 8.16 -> 7.10, 415 x 76 x 770 7.15 -> 6.22, 273 x 64 x 2526 10.1 -> 8.57; 225 x 8214 x 115 8.44 ->
# 8.61); odd rows, one element a load, ran alike at 2-4 stages. Past 4 stages 64 x 128 and 128 x 64 tiles slowed
# (8425 x 104 x 1842 at 6: 43.9, 45.5), as 128 x 128 did past 3 (1054 x 1677 x 78: 5.96 at 3, 6.73 at 4); 32 x 64
# and 64 x 64 gained 4-28% more at 6 on K of 1842-8868 (on short K, 6 is untimed and 4 ran 0-3% behind 3).
INPLACE_CONFIGS = (
    TileConfig(32, 64, 32, num_warps=4, num_stages=4),
    TileConfig(64, 64, 32, num_warps=4, num_stages=4),
    TileConfig(64, 128, 32, num_warps=8, num_stages=4),
    TileConfig(128, 64, 32, num_warps=8, num_stages=4),
    TileConfig(128, 128, 32, num_warps=8, num_stages=3),
)


# In-place Stream-K plans (`decide`) run at most this many K steps a program: on the H200 (benchmarks/sweep_configs.py,
# bf16, the planner with and without them in one run) 2-9 steps ran 1.1-1.7x faster than the copy and the GEMM
# (415 x 76 x 770 10.2 -> 7.31 us, 149 x 79 x 433 10.2 -> 6.14, 96 x 1249 x 486 10.5 -> 7.46, 93 x 341 x 1815
# 12.7 -> 10.2; 601 x 144 x 518 8.20 -> 8.21, 123 x 89 x 4533 12.0 -> 12.5), 11-13 steps mostly slower (153 x 177 x
# 2961 11.0 -> 14.0, 90 x 228 x 4455 14.3 -> 16.4, 356 x 98 x 1781 10.6 -> 11.6; 106 x 423 x 1893 14.1 -> 13.1):
# their element loads take longer than `Rates.unaligned_loads_per_iter` models.
_INPLACE_SK_MAX_STEPS = 9

# Where every operand read in place comes in K-runs of 4 bytes or more (asynchronous copies, which its stages keep in
# flight), a Stream-K grid of 128 x 64 x 32 tiles (8 warps, 4 stages) takes any number of K steps a program: on the
# H200 (bf16, `benchmarks/sweep_configs.py`, each forced in place over the whole device, one run, us) it ran 0.55-0.81x
# the planner's copy-and-GEMM or persistent in-place plan on long K (81 x 3163 x 14926 129 -> 78.5, 80 x 1982 x 14978
# 96.8 -> 52.7, 117 x 4060 x 5322 53.7 -> 39.8, 126 x 1204 x 4674 26.6 -> 19.0, 662 x 254 x 8868 32.5 -> 24.9,
# 107 x 5413 x 5550 79.7 -> 53.8, 3074 x 69 x 4786 44.7 -> 31.9, 90 x 10228 x 1076 38.9 -> 24.3, 81 x 14844 x 13476
# 321 -> 272, 221 x 2076 x 12260 82.6 -> 68.6; 8425 x 104 x 1842 26.6 -> 27.2). It was the fastest 32-deep tile on
# 9 of those 12; the others took 1.12x its time (64 x 64 at 6 stages; 0.91-1.27x), 1.14x (64 x 128), 1.30x (128 x 128
# at 3 stages) and 1.70x or more (32 x 64 at 6 stages, 64 x 64 at 8), geometric means. `inplace_time` models it
# 1.25-1.7x slower than it ran, so the planner takes it where it is clearly faster.
INPLACE_RUNS_SK_CONFIG = INPLACE_CONFIGS[3]


def inplace_time(cfg: TileConfig, m: int, n: int, k: int, dtype: torch.dtype, budget: int, spec: DeviceSpec,
                 unaligned: tuple[bool, bool], batch: int = 1, schedule: str = "persistent",
                 runs: tuple[bool, bool] = (False, False)) -> float:
    """Modelled time of a plan with tile `cfg` and `schedule` ("persistent" or "streamk") that reads the `unaligned`
    operands (A, B) in place: its aligned time, or the time its busiest program takes to load their elements
    (`Rates.unaligned_loads_per_iter`; with Stream-K, plus the fixup), whichever is longer; inf where Stream-K
    has nothing to split, or where its programs would run more than `_INPLACE_SK_MAX_STEPS` K steps (unless `cfg`
    is `INPLACE_RUNS_SK_CONFIG` and every unaligned operand comes in runs). `runs`: which of them come in K-runs of 4
    bytes or more, which the tile's pipeline loads `Rates.inplace_run_speedup` times faster; a persistent program
    then also pays `Rates.inplace_run_fixed`. The launch's floor (`Rates.launch_floor`) is the caller's to apply."""
    rates = spec.rates
    tiles = math.ceil(m / cfg.block_m) * math.ceil(n / cfg.block_n) * batch
    k_iters = math.ceil(k / cfg.block_k)
    speedup = [rates.inplace_run_speedup if run else 1.0 for run in runs]
    per_step = (cfg.block_m * unaligned[0] / speedup[0] + cfg.block_n * unaligned[1] / speedup[1]) * cfg.block_k
    if schedule == "streamk":
        split = streamk_split(tiles, k_iters, budget, 1, rates)
        if split is None:
            return math.inf
        dp_tiles, programs = split
        per_program = (tiles - dp_tiles) * k_iters / programs
        steps = dp_tiles // programs * k_iters + math.ceil(per_program)
        if steps > _INPLACE_SK_MAX_STEPS and not (cfg == INPLACE_RUNS_SK_CONFIG and all(
                run or not slow for run, slow in zip(runs, unaligned))):
            return math.inf
        rates = dataclasses.replace(rates, sk_fixup_base=rates.inplace_sk_fixup_base,
                                    sk_fixup_per_sharer=rates.inplace_sk_fixup_per_sharer)
        loads = steps * per_step / rates.unaligned_loads_per_iter + _sk_fixup(cfg, k_iters, per_program, rates)
    else:
        loads = math.ceil(tiles / budget) * k_iters * per_step / rates.unaligned_loads_per_iter + \
            rates.inplace_run_fixed * any(run and slow for run, slow in zip(runs, unaligned))
    return max(modelled_time(cfg, m, n, k, dtype, budget, schedule, spec.l2_bytes, 1, rates, batch), loads)


def copy_time(plan: Plan, dtype: torch.dtype, spec: DeviceSpec, elements: int) -> float:
    """Modelled time of copying `elements` elements of the operands `plan` stages into aligned buffers (one launch
    for both): `Rates.stage_fixed` plus the bytes read and written at what the budget's SMs copy."""
    rates = spec.rates
    rate = rates.stage_bytes_per_iter if plan.sm_budget >= spec.num_sms else min(
        rates.stage_bytes_per_iter, plan.sm_budget * rates.stage_sm_bytes_per_iter)
    return rates.stage_fixed + 2 * elements * element_bytes(dtype) / rate


def stage_pays(plan: Plan, m: int, n: int, k: int, dtype: torch.dtype, spec: DeviceSpec, elements: int,
               batch: int = 1) -> bool:
    """Whether copying `elements` elements whose rows are not aligned as the plan's tile reads them fastest
    (`reads_at_full_speed`) into aligned buffers before the GEMM is predicted faster than the same tile reading them
    where they lie, which then runs `Rates.unaligned_slowdown` times its modelled time
    (`Rates.unaligned_decode_slowdown` with 16-row decode tiles). For a tile that `decide` may not change."""
    time = modelled_time(plan.config, m, n, k, dtype, plan.sm_budget, plan.schedule, spec.l2_bytes, plan.sk_waves,
                         spec.rates, batch)
    slowdown = spec.rates.unaligned_decode_slowdown if plan.config.block_m <= 16 else spec.rates.unaligned_slowdown
    return copy_time(plan, dtype, spec, elements) < time * (slowdown - 1)


def resolve_budget(num_sms: int | None, spec: DeviceSpec) -> int:
    """SMs a GEMM may occupy: all of the device's, or `num_sms` clamped to the device's count."""
    return spec.num_sms if num_sms is None else min(num_sms, spec.num_sms)


def whole_device(num_sms: int | None, spec: DeviceSpec) -> bool:
    """Whether a budget leaves the GEMM the whole device (None, or at least its SM count): then, and only then, a
    launch may have more programs than SMs (one per tile; they still run on the device's SMs only). A smaller
    budget caps the grid, so the GEMM occupies at most that many SMs."""
    return num_sms is None or num_sms >= spec.num_sms


def _overlaps_stores(m: int, n: int, k: int, dtype: torch.dtype, spec: DeviceSpec, num_sms: int | None,
                     batch: int) -> bool:
    """Whether a GEMM runs `_OVERLAP_TILE` data-parallel: 16-bit operands, K of at most _OVERLAP_MAX_K, one or two
    waves of its tiles, the whole device, and M and N above the skinny range (the rule was measured on M and N of
    1024 and more: a 128 x 128 tile over a few rows or columns would mostly compute padding)."""
    if element_bytes(dtype) != 2 or k > _OVERLAP_MAX_K or not whole_device(num_sms, spec) \
            or min(m, n) <= _SKINNY_MAX_M:
        return False
    return spec.num_sms <= math.ceil(m / 128) * math.ceil(n / 128) * batch <= 2 * spec.num_sms


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
    batch: int = 1,
    dense: bool = True,
    c_matrix: bool = False,
) -> Plan:
    """Plan an (m, n, k) GEMM with `dtype` operands on the device described by `spec` (`batch` of them in one
    launch: their tiles share the schedule; `c_matrix`: it adds a C matrix, not a bias row).

    `num_sms` is the caller's SM budget (None, or the device's SM count or more: the whole device); `config`
    overrides the tile model (tests and tuning use it). The returned plan's grid never exceeds a budget below the
    device's SMs; on the whole device a data-parallel plan has one program per tile. `dense`: False for the fused
    kernel of an MXFP4 GEMM (`make_mx_plan`), which keeps the tiles it was measured with (no `_OVERLAP_TILE`;
    `choose_config`'s `dense`).
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    budget = resolve_budget(num_sms, spec)
    wanted = {"auto": ("persistent", "streamk"), "streamk": ("streamk",)}.get(schedule, ("persistent",))
    if config is None and schedule == "auto" and dense and _overlaps_stores(m, n, k, dtype, spec, num_sms, batch):
        config, schedule, wanted = _OVERLAP_TILE, "data_parallel", ("persistent",)
    if config is None:
        cfg, chosen, sk_waves = choose_config(m, n, k, dtype, spec, budget, wanted,
                                              fma=dtype == torch.float32 and not tf32, batch=batch, dense=dense,
                                              c_matrix=c_matrix)
    else:
        cfg = config
        chosen, sk_waves = min(_candidates(wanted),
                               key=lambda c: _cost(cfg, m, n, k, dtype, budget, c[0], spec, c[1], batch))
    if cfg.block_k < min_block_k(dtype):
        raise ValueError(f"{dtype} needs block_k >= {min_block_k(dtype)}, got {cfg}")
    num_tiles = math.ceil(m / cfg.block_m) * math.ceil(n / cfg.block_n) * batch
    k_iters = math.ceil(k / cfg.block_k)
    split = streamk_split(num_tiles, k_iters, budget, sk_waves, spec.rates) if chosen == "streamk" else None
    if split is not None:
        schedule, (dp_tiles, num_programs) = "streamk", split
    elif schedule == "data_parallel" and whole_device(num_sms, spec):
        dp_tiles = num_programs = num_tiles  # one program per tile; a smaller budget caps the grid instead
    else:
        # Persistent also for "streamk" when nothing needs splitting (every wave full, or splits too thin).
        schedule, dp_tiles, num_programs = "persistent", num_tiles, min(budget, num_tiles)
    return Plan(
        schedule=schedule,
        config=cfg,
        num_tiles=num_tiles,
        num_programs=max(1, num_programs),
        sm_budget=budget,
        k_iters=k_iters,
        even_k=k % cfg.block_k == 0,
        input_precision="ieee" if (dtype == torch.float32 and not tf32) else "tf32",
        dp_tiles=dp_tiles,
    )


class _Overrides:
    """What `overrides` forces; process-wide, like `sm_budget` (see ops._Defaults). `version` changes with every
    block, so that remembered calls (smgemm._gemm) never outlive the setting they were planned under."""

    config: TileConfig | None = None
    schedule: str | None = None
    rates: Rates | None = None
    stage: bool | None = None
    host_descriptors: bool | None = None
    ring: bool | None = None
    version: int = 0


_OVERRIDES = _Overrides()


@contextlib.contextmanager
def overrides(*, config: TileConfig | None = None, schedule: str | None = None,
              rates: Rates | None = None, stage: bool | None = None,
              host_descriptors: bool | None = None, ring: bool | None = None) -> Iterator[None]:
    """Force the plans of the smgemm GEMMs called inside the block: a tile `config`, a `schedule`, the model's
    `rates` (the planner's measured constants, `smgemm.Rates`), or whether operands whose rows are not aligned as the
    tile reads them fastest are copied into aligned buffers first (`stage`; `plan.stage_pays` decides otherwise).
    `host_descriptors=False` has the kernel build the tensor descriptors through which it reads A and B on the
    device, as each program starts; True has it take them built on the host wherever it reads through TMA (where
    neither is given, `host_descriptors_pay` decides; `_launch.reads_host_descriptors`). `ring=False` keeps the `tl`
    kernels where `kernels.mx_ring` would run (`mx_ring_split`); a forced config or schedule does too.
    What is not given is planned as usual; tuning files are not consulted for a forced config or schedule. For
    tests, sweeps and users who measured better.

        with smgemm.plan.overrides(config=TileConfig(128, 128, 64, num_warps=8), schedule="streamk"):
            y = smgemm.matmul(a, b)

    The check of an impossible forced configuration (e.g. fp8 with block_k 16) happens at the call, as for any
    config. Blocks nest; leaving one restores the outer setting.
    """
    if schedule is not None and schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if config is not None and not isinstance(config, TileConfig):
        raise TypeError(f"config must be a TileConfig, got {type(config).__name__}")
    if rates is not None and not isinstance(rates, Rates):
        raise TypeError(f"rates must be a smgemm.Rates, got {type(rates).__name__}")
    if stage is not None and not isinstance(stage, bool):
        raise TypeError(f"stage must be a bool, got {type(stage).__name__}")
    if host_descriptors is not None and not isinstance(host_descriptors, bool):
        raise TypeError(f"host_descriptors must be a bool, got {type(host_descriptors).__name__}")
    if ring is not None and not isinstance(ring, bool):
        raise TypeError(f"ring must be a bool, got {type(ring).__name__}")
    saved = (_OVERRIDES.config, _OVERRIDES.schedule, _OVERRIDES.rates, _OVERRIDES.stage,
             _OVERRIDES.host_descriptors, _OVERRIDES.ring)
    _OVERRIDES.config = config if config is not None else saved[0]
    _OVERRIDES.schedule = schedule if schedule is not None else saved[1]
    _OVERRIDES.rates = rates if rates is not None else saved[2]
    _OVERRIDES.stage = stage if stage is not None else saved[3]
    _OVERRIDES.host_descriptors = host_descriptors if host_descriptors is not None else saved[4]
    _OVERRIDES.ring = ring if ring is not None else saved[5]
    _OVERRIDES.version += 1
    try:
        yield
    finally:
        (_OVERRIDES.config, _OVERRIDES.schedule, _OVERRIDES.rates, _OVERRIDES.stage,
         _OVERRIDES.host_descriptors, _OVERRIDES.ring) = saved
        _OVERRIDES.version += 1


def overrides_version() -> int:
    """Changes whenever an `overrides` block is entered or left."""
    return _OVERRIDES.version


def _eight_byte_runs(plan: Plan, m: int, n: int, k: int, dtype: torch.dtype, spec: DeviceSpec, operands,
                     tf32: bool, num_sms: int | None) -> Plan:
    """`plan` (a single product on the whole device, which reads every operand where it lies), or, where its pointer
    tile reads 8-byte K-runs of 16-bit elements (`reads_at_full_speed`: a short loop, or a copy that would cost about
    what the GEMM does), a Stream-K grid of `INPLACE_RUNS_SK_CONFIG` reading them in place where `inplace_time`
    models it faster than that tile, both read as runs. On the H200 (bf16, `benchmarks/sweep_configs.py --variants
    "auto;128x64x32 w8 s4 sk nostage;auto stage"`, one run at c105c60) this takes 7 of the 26 such problems of the
    random suite's draws 0-13, each faster than the pointer tile: 90 x 10228 x 1076 38.6 -> 24.3 us (torch 27.6),
    3184 x 266 x 6164 93.5 -> 66.0, 81 x 14844 x 13476 316.6 -> 270.8, 543 x 81 x 15500 28.0 -> 21.8, 2602 x 64 x
    988 13.7 -> 10.7, 4385 x 65 x 756 14.8 -> 13.3, 171 x 1636 x 7580 39.9 -> 38.5; of the 19 it leaves, the Stream-K
    tile ran slower on 16 (1.07-2.2x the time: short K loops, 1822 x 2056 x 92 8.7 -> 18.2) and faster on three by
    1-9% (2398 x 156 x 1148, 720 x 1030 x 764, 263 x 2830 x 3004 where copying first was faster still)."""
    eb = element_bytes(dtype)
    if plan.config.tma or eb != 2:
        return plan
    eight = tuple(rows * eb < 16 and _SHORT_RUN_BYTES <= runs * eb < _POINTER_RUN_BYTES for _, rows, runs in operands)
    if not any(eight) or not whole_device(num_sms, spec) or not _split_pays(plan, m, n, k, dtype, spec, eight):
        return plan
    return make_plan(m, n, k, dtype, spec, schedule="streamk", tf32=tf32, config=INPLACE_RUNS_SK_CONFIG)


@functools.lru_cache(maxsize=4096)
def _split_pays(plan: Plan, m: int, n: int, k: int, dtype: torch.dtype, spec: DeviceSpec,
                eight: tuple[bool, bool]) -> bool:
    """`_eight_byte_runs`' model comparison (cached: a call given its `out` plans again every time)."""
    runs = (True, True)
    schedule = "persistent" if plan.schedule == "data_parallel" else plan.schedule
    tile = inplace_time(plan.config, m, n, k, dtype, plan.sm_budget, spec, eight, 1, schedule, runs)
    split = inplace_time(INPLACE_RUNS_SK_CONFIG, m, n, k, dtype, plan.sm_budget, spec, eight, 1, "streamk", runs)
    return max(spec.rates.launch_floor, split) < max(spec.rates.launch_floor, tile)


# Persistent 16-bit 4-warp tiles of 64 x 128, 128 x 64 (and 64 x 64, below) with K steps of at least 128 bytes, as the
# model picks them above the streaming rows (M > _STREAMING_MAX_M) for a single product without a C matrix, run Triton's
# Hopper path (`hopper_path`) where TMA reads both operands (rows of 16 bytes, or staged for the pointer tile as they
# are): TMA loads, the tile loop flattened with the K loop (the next tile's first steps load during this tile's
# epilogue) and a whole TMA store where the output allows it. On the H200 (`benchmarks/sweep_tile_order.py
# --hopper-small --seeds 16 --num-sms ,66`, and `--dtype fp16 --seeds 8`: the planner against itself with those tiles
# kept on the pointer path, on every pick it changes in the suites and random draws, twice a side in one run;
# docs/performance.md, "4-warp tiles on the Hopper path") the plans this rule moves ran bf16 on the whole device
# 0.53-1.11x the time (geometric mean 0.81, 49 of 50 faster: 66 x 4917 x 152 9.30 -> 4.94 us, 1712 x 377 x 482 staged
# 14.4 -> 9.31, 1461 x 693 x 482 staged 16.5 -> 10.8, 128 x 6144 x 4096 19.9 -> 19.6), on 66 SMs 0.39-1.00x (0.79, 41
# problems: 75 x 3882 x 120 9.50 -> 4.45), fp16 on the whole device 0.63-0.99x (0.84, 25 problems). The one slower, 7818
# x 66 x 1040 13.0 -> 14.4 us, stores its 132-byte output rows through pointers. Left out, as measured in the same runs:
# M = 64 (64 x 28672 x 4096 1.01x the time in bf16, 1.07x in fp16), and operands that TMA cannot read (8-byte rows read
# in place), whose loads in a flattened loop ran 3-6x slower (263 x 2830 x 3004 39.9 -> 234 us). 4-warp steps of 64
# bytes were measured only on operands TMA cannot read (184 x 3705 x 132 4.82 -> 8.52 us; forced with
# `benchmarks/sweep_configs.py`, the planner's tile as "BMxBNxBK wW sS" against the same with "tma whole"), so those
# keep the pointer path, as does one wave of 64 x 128 tiles over long K loops (`_one_wave_64`: TMA loads measured
# slower).
#
# Stream-K plans of such tiles with 256-byte K steps take the Hopper path too where M > 64 does not fill its last row
# tile (`_hopper_streamk`): there the pointer path masks A's rows in every step and TMA fills them with zeros. The same
# A/B in bf16 (`--hopper-small --seeds 17 --num-sms ,66`, one run) timed every such plan of draws 0-16 faster: whole
# device 0.78-0.91x the time (67 x 2055 x 10441 78.0 -> 60.5 us, 120 x 2885 x 11785 104.2 -> 85.2, 105 x 4272 x 8273
# 98.9 -> 86.5; 5 problems), 66 SMs 0.80-0.94x (13 problems: 102 x 6581 x 3789 158.2 -> 126.8); fp16 on the whole
# device (`--dtype fp16 --seeds 18 --hopper-small`) 0.77-0.95x (5 problems). Where M fills its row tiles (the Llama rows
# of M = 64 and 128) the same move ran 0.98-1.05x the time, so those keep the pointer path.
#
# 64 x 64 tiles take the same rule (`benchmarks/sweep_tile_order.py --dtype bf16 --seeds 18 --num-sms ,66
# --hopper-tiles 64x128,128x64,64x64,32x64`: the rule over those tiles against the rule as it was, one run): persistent
# ones on the whole device 0.79-1.06x the time (geometric mean 0.94, 53 of 65 faster: 73 x 142 x 232 4.63 -> 3.80 us;
# the slowest 801 x 160 x 2336 9.18 -> 9.71), on 66 SMs 0.68-0.99x (0.82, 65 of 65: 97 x 103 x 2183 staged 15.0 ->
# 12.3), Stream-K ones 0.90-1.02x (0.97, 15 of 19 faster); fp16 persistent ones on the whole device 0.79-1.07x (0.95,
# 65 problems). 32 x 64 Stream-K tiles ran 0.98-1.22x (1.05, 19 problems), so they keep the pointer path.
_HOPPER_SMALL_TILES = ((64, 128), (128, 64), (64, 64))
_HOPPER_SMALL_MIN_STEP_BYTES = 128
_HOPPER_STREAMK_MIN_STEP_BYTES = 256


def _hopper_streamk(plan: Plan, m: int, elem: int) -> bool:
    """Whether Stream-K `plan` (a `_HOPPER_SMALL_TILES` tile) runs the Hopper path: the note above."""
    cfg = plan.config
    return plan.schedule == "streamk" and cfg.block_k * elem >= _HOPPER_STREAMK_MIN_STEP_BYTES and m % cfg.block_m != 0


@functools.lru_cache(maxsize=4096)
def hopper_path(plan: Plan, m: int, n: int, k: int, dtype: torch.dtype, spec: DeviceSpec, batch: int,
                c_matrix: bool, operands: tuple | None) -> Plan:
    """`plan`, or where its tile is one of `_HOPPER_SMALL_TILES` run persistent (or Stream-K: `_hopper_streamk`)
    and TMA reads both `operands` (the note there; None: aligned), the same plan on the Hopper path (`TileConfig.tma`,
    `tma_store`, `flatten`; `whole_store` where it fits). Cached: a call given its `out` plans again every time, and
    the two `dataclasses.replace` of a moved plan cost ~12 us."""
    cfg, elem = plan.config, element_bytes(dtype)
    if cfg.tma or (cfg.block_m, cfg.block_n) not in _HOPPER_SMALL_TILES or cfg.num_warps != 4 or elem != 2 \
            or (plan.schedule != "persistent" and not _hopper_streamk(plan, m, elem)) \
            or batch != 1 or c_matrix or m <= _STREAMING_MAX_M \
            or cfg.block_k * elem < _HOPPER_SMALL_MIN_STEP_BYTES \
            or _one_wave_64(cfg, m, n, k, elem, batch, plan.sm_budget, True, c_matrix):
        return plan
    if operands is not None and not all(staged or rows * elem >= 16 for staged, (_, rows, _) in
                                        zip((plan.stage_a, plan.stage_b), operands)):
        return plan
    cfg = dataclasses.replace(cfg, tma=True, tma_store=True, flatten=True)
    return dataclasses.replace(plan, config=dataclasses.replace(cfg, whole_store=whole_store_fits(cfg, elem, spec)))


def decide(
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
    mxfp4: bool = False,
    mx_layout: str = "ocp",
    mx_a: bool = False,
    tuned: tuple[TileConfig, str] | None = None,
    batch: int = 1,
    operands: tuple[tuple[int, int, int], tuple[int, int, int]] | None = None,
    c_matrix: bool = False,
) -> Plan:
    """The plan of a GEMM call: the one place that weighs, in order, an `overrides` block, the caller's `config`,
    a tuning file's entry (`tuned`, for schedule "auto" and no config), the MXFP4 rules (`mxfp4`: an MXFP4 weight
    in byte layout `mx_layout`, `dtype` the dot's dtype, `mx_a`: MXFP4 activations) and the model, and then, given
    the dense `operands` A and B as (elements, row and K-run alignment in elements: `_launch.operand_alignment`),
    whether to copy those the tile cannot read at full speed (`reads_at_full_speed`) into aligned buffers first
    (`stage_pays`). `c_matrix`: the call adds a C matrix, not a bias row (`choose_config`)."""
    if _OVERRIDES.rates is not None:
        spec = dataclasses.replace(spec, rates=_OVERRIDES.rates)
    config = _OVERRIDES.config or config
    schedule = _OVERRIDES.schedule or schedule
    if config is None and schedule == "auto" and tuned is not None:
        config, schedule = tuned
    if not mxfp4 and config is not None and config.block_m < 16:
        raise ValueError(f"config.block_m = {config.block_m} is for the swapped tiles of an MXFP4 weight; a dense "
                         f"GEMM takes block_m >= 16")
    if mxfp4:
        return make_mx_plan(m, n, k, dtype, spec, schedule=schedule, num_sms=num_sms, config=config,
                            layout=mx_layout, a_mx=mx_a)
    plan = _staged_plan(m, n, k, dtype, spec, schedule, num_sms, tf32, config, batch, operands, c_matrix)
    # the model's tile, its staging decided, may move onto the Hopper path
    return plan if config is not None else hopper_path(plan, m, n, k, dtype, spec, batch, c_matrix, operands)


def _staged_plan(m: int, n: int, k: int, dtype: torch.dtype, spec: DeviceSpec, schedule: str, num_sms: int | None,
                 tf32: bool, config: TileConfig | None, batch: int, operands, c_matrix: bool) -> Plan:
    """`decide`'s plan of a dense GEMM: the model's (or `config`), and which `operands` to copy first."""
    plan = make_plan(m, n, k, dtype, spec, schedule=schedule, num_sms=num_sms, tf32=tf32, config=config, batch=batch,
                     c_matrix=c_matrix)
    if operands is None:
        return plan
    steps = steps_per_program(plan)
    slow = [0 if reads_at_full_speed(plan.config, dtype, rows, runs, steps) else elements
            for elements, rows, runs in operands]
    if any(slow):
        stage = _OVERRIDES.stage
        # 8-byte K-runs that a pointer tile reads in a longer loop stay where they lie too if copying them would cost
        # about what the GEMM does (the note at _POINTER_RUN_BYTES)
        short = [elements if elements and not plan.config.tma and runs * element_bytes(dtype) >= _SHORT_RUN_BYTES
                 else 0 for elements, (_, _, runs) in zip(slow, operands)]
        gemm_time = modelled_time(plan.config, m, n, k, dtype, plan.sm_budget, plan.schedule, spec.l2_bytes,
                                  plan.sk_waves, spec.rates, batch)
        if stage is None and any(short) and \
                copy_time(plan, dtype, spec, sum(short)) >= _SHORT_RUN_COPY_SHARE * gemm_time:
            slow = [0 if kept else elements for elements, kept in zip(slow, short)]
    if not any(slow):  # every operand read where it lies by the plan's tile
        if schedule == "auto" and config is None and batch == 1:
            return _eight_byte_runs(plan, m, n, k, dtype, spec, operands, tf32, num_sms)
        return plan
    staged = dataclasses.replace(plan, stage_a=slow[0] > 0, stage_b=slow[1] > 0)
    if config is not None or element_bytes(dtype) > 2 or plan.config.block_m <= 16:
        # A forced tile, 4-byte elements (which Triton still loads asynchronously) or a decode tile: the tile stays,
        # and the copy is weighed against the plan's slowdown when read in place
        if stage is None:
            stage = stage_pays(plan, m, n, k, dtype, spec, sum(slow), batch)
        return staged if stage else plan
    # Otherwise reading in place takes the fastest of the 32-deep tiles (`INPLACE_CONFIGS`), persistent or, for a
    # single product on the whole device, Stream-K (`_INPLACE_SK_MAX_STEPS`, `Rates.inplace_sk_fixup_base`)
    unaligned = (slow[0] > 0, slow[1] > 0)
    runs = tuple(run * element_bytes(dtype) >= 4 for _, _, run in operands)
    budget = plan.sm_budget
    schedules = ("persistent", "streamk") if schedule == "auto" and batch == 1 and whole_device(num_sms, spec) \
        else ("persistent",)
    inplace, inplace_schedule, time = min(
        ((cfg, s, inplace_time(cfg, m, n, k, dtype, budget, spec, unaligned, batch, s, runs))
         for s in schedules for cfg in INPLACE_CONFIGS), key=lambda c: c[2])
    if stage is None:
        staged_time = copy_time(plan, dtype, spec, sum(slow)) + max(spec.rates.launch_floor, gemm_time)
        stage = staged_time < max(spec.rates.launch_floor, time)
    if stage:
        return staged
    return make_plan(m, n, k, dtype, spec, schedule=inplace_schedule if schedule == "auto" else schedule,
                     num_sms=num_sms, tf32=tf32, config=inplace, batch=batch)
