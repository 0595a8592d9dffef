"""The planner is plain Python: tested here with made-up devices, no GPU and no kernel."""

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import smgemm
from smgemm._device import INTERPRETER_SPEC, DeviceSpec
from smgemm.plan import (
    _MX_KWORDS_ROWS_FILL,
    _MX_WORDS_LONG_K_STEPS,
    INPUT_DTYPES,
    SCHEDULES,
    TileConfig,
    _iteration,
    clamps_edge_tiles,
    element_bytes,
    make_mx_plan,
    make_plan,
    mx_config,
    mx_expands,
    mx_ring_split,
    streamk_split,
)

H200 = dataclasses.replace(INTERPRETER_SPEC, name="fake H200", interpreted=False)
SMALL_GPU = DeviceSpec(name="fake 20-SM GPU", num_sms=20, smem_per_block=101376, capability=(8, 6))
SMEM_64K = DeviceSpec(name="fake 64 KB GPU", num_sms=40, smem_per_block=65536, capability=(7, 5))

dims = st.integers(min_value=1, max_value=70_000)


@settings(max_examples=300, deadline=None)
@given(m=dims, n=dims, k=dims, dtype=st.sampled_from(INPUT_DTYPES), spec=st.sampled_from([H200, SMALL_GPU, SMEM_64K]),
       schedule=st.sampled_from(SCHEDULES), num_sms=st.none() | st.integers(1, 400))
def test_grid_respects_budget_and_config_fits(m, n, k, dtype, spec, schedule, num_sms):
    plan = make_plan(m, n, k, dtype, spec, schedule=schedule, num_sms=num_sms)
    cfg = plan.config
    budget = spec.num_sms if num_sms is None else min(num_sms, spec.num_sms)
    assert plan.sm_budget == budget
    assert plan.num_tiles == -(-m // cfg.block_m) * -(-n // cfg.block_n)
    whole = num_sms is None or num_sms >= spec.num_sms  # the whole device: no cap below its SMs
    if not whole or plan.schedule != "data_parallel":
        assert 1 <= plan.num_programs <= budget
    else:
        assert plan.num_programs == plan.num_tiles
    assert plan.schedule in ("data_parallel", "persistent", "streamk")
    if plan.schedule == "streamk":
        assert schedule in ("auto", "streamk")
        # whole waves stay data-parallel, but for at most one split with the partial wave; every split tile shared
        # (more programs than split tiles, or each program at least one tile's worth); >= 2 iterations a program
        assert plan.dp_tiles % plan.num_programs == 0
        assert 0 < plan.sk_tiles < 2 * plan.num_programs
        assert plan.sk_tiles < plan.num_programs or (plan.num_programs == budget and plan.k_iters >= 2)
        assert plan.sk_tiles * plan.k_iters >= 2 * plan.num_programs
        tile = cfg.block_m * cfg.block_n
        assert plan.workspace_numel == plan.num_programs * tile + 2 * plan.num_programs
    else:
        assert plan.dp_tiles == plan.num_tiles and plan.workspace_numel == 0
    assert cfg.num_stages * (cfg.block_m + cfg.block_n) * cfg.block_k * element_bytes(dtype) <= spec.smem_per_block
    assert plan.k_iters == -(-k // cfg.block_k)
    assert plan.even_k == (k % cfg.block_k == 0)


def test_explicit_budget_turns_data_parallel_persistent():
    plan = make_plan(8192, 8192, 8192, torch.bfloat16, H200, schedule="data_parallel", num_sms=66)
    assert plan.schedule == "persistent" and plan.num_programs == 66
    plan = make_plan(8192, 8192, 8192, torch.bfloat16, H200, schedule="data_parallel")
    assert plan.schedule == "data_parallel" and plan.num_programs == plan.num_tiles


def test_budget_larger_than_chip_is_clamped():
    plan = make_plan(8192, 8192, 8192, torch.bfloat16, SMALL_GPU, num_sms=1000)
    assert plan.sm_budget == 20 and plan.num_programs == 20


def test_plans_are_cached_and_keyed_on_the_device():
    p1 = make_plan(4096, 4096, 4096, torch.float16, H200, num_sms=32)
    assert make_plan(4096, 4096, 4096, torch.float16, H200, num_sms=32) is p1
    p2 = make_plan(4096, 4096, 4096, torch.float16, SMALL_GPU, num_sms=32)
    assert p2.sm_budget == 20 and p1.sm_budget == 32


def test_tile_model_prefers_big_tiles_for_big_problems_and_more_tiles_for_small_ones():
    big = make_plan(8192, 8192, 8192, torch.bfloat16, H200).config
    assert (big.block_m, big.block_n) == (128, 256)
    decode = make_plan(16, 4096, 4096, torch.bfloat16, H200).config
    assert decode.block_m == 16
    assert make_plan(16, 4096, 4096, torch.bfloat16, H200).num_tiles >= 64  # enough programs to stream B


@pytest.mark.parametrize("num_sms", [None, 66, 32])
def test_auto_picks_streamk_where_tile_quantization_wastes_the_chip(num_sms):
    # Few tiles and a long K loop: 8 tiles of 128 x 256 would leave most SMs idle; Stream-K splits their
    # K-iterations over every SM of the budget.
    plan = make_plan(512, 512, 32768, torch.bfloat16, H200, num_sms=num_sms)
    assert plan.schedule == "streamk" and plan.dp_tiles == 0
    budget = num_sms or 132
    # A grid aligned to the tiles (each program one equal part of one tile's K-loop) within 10% of the budget.
    assert 0.9 * budget <= plan.num_programs <= budget
    assert plan.num_programs % plan.num_tiles == 0


@pytest.mark.parametrize(("tiles", "k_iters", "budget", "programs"), [
    (16, 512, 132, 128),  # 8 parts of 64 iterations
    (64, 256, 132, 128),  # 2 parts
    (16, 512, 66, 64),
    (24, 256, 132, 120),  # 5 parts of 51 or 52 iterations (the kernel splits each tile so, docs/streamk.md)
    (16, 100, 132, 128),  # 8 parts of 12 or 13
    (10, 126, 100, 100),  # 10 parts of 12 or 13
    (40, 128, 132, 120),  # 3 parts of 42 or 43
    (28, 256, 132, 132),  # 4 parts use 112 < 0.9 * 132 SMs: even split over all
    (16, 17, 132, 128),  # 8 parts of 2 (one of 3)
    (16, 15, 132, 120),  # 8 parts would hold 1 iteration, 7 use 112 SMs: 240 iterations split evenly, 2 a program
    (3, 4, 132, 6),  # no aligned grid near 132; the even split shrinks to _SK_MIN_ITERS iterations a program
])
def test_streamk_grid_aligned_to_tiles(tiles, k_iters, budget, programs):
    assert streamk_split(tiles, k_iters, budget) == (0, programs)


@pytest.mark.parametrize(("shape", "num_sms", "dtype", "expected"), [
    # Every tile split over a grid aligned to the tiles: 64 x 128 pointer tiles with 6 stages (measured faster).
    ((512, 512, 32768), None, torch.bfloat16, ((64, 128, 64), 6, 128)),
    ((256, 1024, 16384), None, torch.float16, ((64, 128, 64), 6, 128)),
    ((256, 2048, 8192), None, torch.bfloat16, ((64, 128, 64), 6, 128)),
    # Where 128 x 128 tiles measured faster: fewer parts per tile, a budget, or 64 x 128 tiles not aligned (4 stages:
    # every tile is split, plan._SQUARE_DEEP_STAGES).
    ((512, 512, 32768), 66, torch.bfloat16, ((128, 128, 64), 4, 64)),
    ((1024, 1024, 32768), None, torch.bfloat16, ((128, 128, 64), 4, 128)),
    ((384, 1024, 16384), None, torch.bfloat16, ((128, 128, 64), 4, 120)),
    ((768, 768, 16384), None, torch.bfloat16, ((128, 128, 64), 4, 132)),
    # fp8: 128-byte K steps of 128 elements (measured 14-35% faster than the 4-stage plans).
    ((512, 512, 32768), None, torch.float8_e4m3fn, ((64, 128, 128), 6, 128)),
    ((1024, 1024, 32768), None, torch.float8_e4m3fn, ((128, 128, 128), 4, 128)),
    # Not measured for fp32 (32-element K steps): the 4-stage cap stands.
    ((512, 512, 32768), None, torch.float32, ((128, 128, 32), 4, 128)),
])
def test_few_tile_streamk_takes_a_deeper_pipeline_on_aligned_grids(shape, num_sms, dtype, expected):
    plan = make_plan(*shape, dtype, H200, num_sms=num_sms)
    cfg = plan.config
    assert plan.schedule == "streamk" and plan.dp_tiles == 0
    assert ((cfg.block_m, cfg.block_n, cfg.block_k), cfg.num_stages, plan.num_programs) == expected


@pytest.mark.parametrize("n", [10240, 28672])
def test_decode_shapes_balance_the_bytes_each_program_streams(n):
    # M = 16: every program streams a slice of B. With 16 x 64 tiles N / 64 tiles fill an uneven number of waves
    # (160, 448 tiles on 132 SMs), so the busiest persistent program streams up to twice its share; Stream-K gives
    # every program the same number of K-iterations. K steps are 512 bytes.
    plan = make_plan(16, n, 4096, torch.bfloat16, H200)
    assert (plan.schedule, plan.config.block_m, plan.config.block_k) == ("streamk", 16, 256)
    assert plan.num_programs == 132
    # One even wave of tiles has nothing to balance.
    assert make_plan(16, 8192, 8192, torch.bfloat16, H200).schedule == "persistent"


@pytest.mark.parametrize("m", [1, 8, 16])
def test_decode_tiles_that_fill_most_of_one_wave_run_one_tile_a_program(m, monkeypatch):
    """16-bit 16 x 64 decode tiles filling at least plan._DECODE_FILL of the whole device in one wave run one tile a
    program (on the H200 7-11% faster than the even Stream-K split the model alone predicts); with fewer tiles, more
    than a wave, under an SM budget and in fp8 the plan is the model's, as without the rule."""
    for n, k in ((5120, 4096), (6144, 4096), (6144, 8192), (7168, 8192), (6144, 14336)):
        for dtype in (torch.bfloat16, torch.float16):
            plan = make_plan(m, n, k, dtype, H200)
            cfg = plan.config
            assert (plan.schedule, cfg.block_m, cfg.block_n, plan.num_programs) == ("persistent", 16, 64, n // 64), \
                (m, n, k, dtype, plan)
    kept = [(n, k, torch.bfloat16, None) for n, k in ((4096, 14336), (10240, 8192), (14336, 4096))]  # 64, 160, 224
    kept += [(6144, 4096, torch.bfloat16, 128), (6144, 4096, torch.bfloat16, 100), (6144, 4096, torch.float8_e4m3fn,
                                                                                   None)]
    with_rule = [make_plan(m, n, k, dtype, H200, num_sms=num_sms) for n, k, dtype, num_sms in kept]
    assert [p.schedule for p in with_rule[:3]] == ["streamk"] * 3
    monkeypatch.setattr(smgemm.plan, "_DECODE_FILL", math.inf)
    make_plan.cache_clear()
    try:
        assert with_rule == [make_plan(m, n, k, dtype, H200, num_sms=num_sms) for n, k, dtype, num_sms in kept]
        assert make_plan(m, 6144, 4096, torch.bfloat16, H200).schedule == "streamk"  # the model alone
    finally:
        make_plan.cache_clear()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn])
@pytest.mark.parametrize("num_sms", [None, 32, 66])
def test_small_m_streams_b_once_with_long_k_steps(dtype, num_sms):
    # Up to M = 64 one row of tiles covers M, so B is streamed once (M = 48 / 64 x 4096 x 4096 picked 32 x 64 tiles
    # before, 1.4x slower); up to M = 32 the K steps are 512 bytes per row (1.05-1.44x faster than 256).
    elem = 2 if dtype == torch.bfloat16 else 1
    for m in (17, 24, 32, 40, 48, 64):
        for n, k in ((4096, 4096), (14336, 4096), (8192, 8192), (6144, 4096)):
            plan = make_plan(m, n, k, dtype, H200, num_sms=num_sms)
            assert plan.config.block_m == (32 if m <= 32 else 64), (m, n, k, plan)
            assert plan.config.block_k * elem == (512 if m <= 32 else 256), (m, n, k, plan)
    # Where no tile of those rows fits the problem (N < 64 at M = 17..32), any rows: a 16-row tile.
    assert make_plan(17, 1, 1, torch.float32, H200).config.block_m == 16


def test_skinny_gemms_use_pointer_tiles_with_long_k_steps():
    # 64 < M <= 128 (measured, plan._SKINNY_MAX_M): 256-byte K steps on tiles below 128 x 128; 128 x 256 tiles only
    # persistent and only where they (nearly) fill a wave; 128 x 128 tiles only with 5 stages, persistent, in one
    # wave of at least plan._SKINNY_SQUARE_MIN_FILL of the whole device.
    squares = 0
    for n, k in ((6144, 4096), (4096, 4096), (10240, 8192), (8192, 8192), (4096, 14336), (14336, 4096)):
        for num_sms in (None, 66):
            plan = make_plan(128, n, k, torch.bfloat16, H200, num_sms=num_sms)
            cfg = plan.config
            if cfg.block_m * cfg.block_n < 128 * 128:
                assert cfg.block_k == 128 and not cfg.tma, (n, k, num_sms, plan)
            elif cfg.block_m * cfg.block_n == 128 * 128:
                squares += 1
                assert (cfg.block_k, cfg.num_stages, plan.schedule, num_sms) == (64, 5, "persistent", None), plan
                assert 0.6 * H200.num_sms <= plan.num_tiles <= H200.num_sms, (n, k, plan)
            else:
                assert plan.schedule == "persistent" and plan.num_tiles >= 0.8 * plan.sm_budget
    assert squares == 2  # N = 10240 and 14336: 80 and 112 tiles
    # 64 tiles (N = 8192) fill less than 0.6 of the device: 64 x 128 pointer tiles, twice as many
    assert make_plan(128, 8192, 8192, torch.bfloat16, H200).config.block_m == 64
    wide = make_plan(128, 28672, 4096, torch.bfloat16, H200)  # 112 tiles of 128 x 256 on 132 SMs
    assert (wide.config.block_n, wide.schedule, wide.config.tma) == (256, "persistent", True)
    # Above the skinny range the efficiency model and the Hopper path from 128 x 128 tiles apply again.
    assert make_plan(1024, 6144, 4096, torch.bfloat16, H200).config.tma


def test_programs_share_l2_bandwidth_in_proportion_to_how_many_run():
    # With the whole budget busy a 128 x 64 tile (half the reference intensity) costs twice its multiply-adds; with
    # half the programs, its own SM's load rate (~68 GB/s) bounds it instead, between the two.
    cfg = TileConfig(128, 64, 128, num_warps=4, num_stages=4)
    full, half = _iteration(cfg, 2, 132, 132), _iteration(cfg, 2, 66, 132)
    multiply_adds = 128 * 64 / (128 * 256) * 128 * 2 / 128
    assert full == pytest.approx(2 * multiply_adds)
    assert multiply_adds < half < full
    # The reference tile is compute-bound however many programs run.
    ref = TileConfig(128, 256, 64, num_warps=8)
    assert _iteration(ref, 2, 132, 132) == _iteration(ref, 2, 10, 132) == 1.0


def test_a_half_empty_grid_of_small_tiles_can_beat_streamk():
    # Measured on the H200 (docs/performance.md): 96 tiles of 128 x 64 on 96 SMs ran 291 TFLOP/s where the
    # Stream-K plan over 132 SMs ran 248 (64 x 128 tiles, which win the model's tie, faster still), and 64 x 8192 x
    # 8192 ran faster on 128 persistent 64 x 64 tiles than split.
    plan = make_plan(128, 6144, 4096, torch.bfloat16, H200)
    assert (plan.schedule, plan.config.block_m, plan.config.block_n, plan.num_programs) == ("persistent", 64, 128, 96)
    plan = make_plan(64, 8192, 8192, torch.bfloat16, H200)
    assert (plan.schedule, plan.config.block_m, plan.config.block_n, plan.num_programs) == ("persistent", 64, 64, 128)
    # Few tiles and a long K loop still split (the 256 x 1024 x 16384 Stream-K row: 2.6x over data-parallel).
    assert make_plan(256, 1024, 16384, torch.bfloat16, H200).schedule == "streamk"


@pytest.mark.parametrize(("dtype", "tf32", "m", "n", "k", "tile"), [
    (torch.bfloat16, False, 1024, 1024, 1024, (64, 128)), (torch.bfloat16, False, 128, 8192, 8192, (64, 128)),
    (torch.float16, False, 1024, 1024, 1024, (64, 128)), (torch.float32, True, 128, 8192, 8192, (64, 128)),
    (torch.float8_e4m3fn, False, 128, 8192, 8192, (64, 128)), (torch.float8_e4m3fn, False, 2625, 353, 1856, (128, 64)),
    (torch.float32, False, 1024, 1024, 1024, (128, 64))])
def test_equal_4_warp_tiles_go_to_the_measured_faster(dtype, tf32, m, n, k, tile):
    """Where the model rates 128 x 64 and 64 x 128 the same, plans take the one measured faster there: 64 x 128 on
    tensor cores, except fp8 above M = 128; 128 x 64 for those and on FMA (fp32 without TF32) (plan._CANDIDATE_TILES,
    _TALL_FIRST; benchmarks/sweep_tile_order.py)."""
    plan = make_plan(m, n, k, dtype, H200, tf32=tf32)
    assert (plan.config.block_m, plan.config.block_n) == tile


def test_batched_tiles_with_a_c_matrix_keep_short_k_steps():
    """Batched 128 x 128 tiles take 256-byte K steps with 3 stages, but not when the call adds a C matrix, whose
    epilogue needs the third stage's shared memory: then 128-byte steps with 4 stages (plan._LONG_STEP_BYTES)."""
    for b, m, n, k in [(8, 200, 1024, 4096), (8, 4096, 128, 4096)]:
        plain = make_plan(m, n, k, torch.bfloat16, H200, batch=b)
        with_c = make_plan(m, n, k, torch.bfloat16, H200, batch=b, c_matrix=True)
        assert (plain.config.block_m, plain.config.block_n, plain.config.block_k) == (128, 128, 128)
        assert (with_c.config.block_m, with_c.config.block_n) == (128, 128)
        assert (with_c.config.block_k, with_c.config.num_stages) == (64, 4)
    # single products never took the long steps, with or without C
    for c_matrix in (False, True):
        cfg = make_plan(1024, 6144, 4096, torch.bfloat16, H200, c_matrix=c_matrix).config
        assert (cfg.block_m, cfg.block_n, cfg.block_k) == (128, 128, 64)


def test_the_planner_is_told_of_a_c_matrix(device, monkeypatch):
    """`gemm` plans with `c_matrix` where C has rows of its own (a matrix, batched or not), not for a bias row."""
    import smgemm._gemm as G

    seen = []
    monkeypatch.setattr(G, "decide", lambda *a, decide=G.decide, **kw: seen.append(kw["c_matrix"]) or decide(*a, **kw))
    f16 = torch.float16
    a, b = torch.randn(2, 8, 16, device=device).to(f16), torch.randn(2, 16, 8, device=device).to(f16)
    G._SEEN_CALLS.clear()
    smgemm.baddbmm(torch.randn(2, 8, 8, device=device).to(f16), a, b)
    smgemm.baddbmm(torch.randn(8, device=device).to(f16), a, b)
    smgemm.addmm(torch.randn(8, 8, device=device).to(f16), a[0], b[0])
    smgemm.addmm(torch.randn(8, device=device).to(f16), a[0], b[0])
    assert seen == [True, False, True, False]


def test_auto_keeps_full_waves_and_thin_splits_data_parallel():
    # 512 tiles on 128 SMs: four full waves, nothing to balance.
    assert make_plan(4096, 4096, 4096, torch.bfloat16, H200, num_sms=128).schedule == "persistent"
    # A ragged last wave of a short K loop: the fixup would cost more than the idle SMs.
    assert make_plan(1024, 1024, 256, torch.bfloat16, H200).schedule == "persistent"
    # An explicit request with nothing to split runs the persistent tile loop.
    plan = make_plan(4096, 4096, 4096, torch.bfloat16, H200, schedule="streamk", num_sms=128)
    assert plan.schedule == "persistent" and plan.sk_tiles == 0


def test_streamk_keeps_whole_waves_data_parallel():
    # 288 tiles on 66 SMs: 4 whole waves (264 tiles) run data-parallel, 24 tiles are split over the 66 programs.
    plan = make_plan(3072, 3072, 8192, torch.bfloat16, H200, schedule="streamk", num_sms=66)
    assert (plan.num_tiles, plan.dp_tiles, plan.sk_tiles, plan.num_programs) == (288, 264, 24, 66)


def test_streamk_split_over_the_last_two_waves():
    assert streamk_split(288, 128, 132, waves=2) == (132, 132)  # 156 tiles split, 1.2 tiles' worth a program
    assert streamk_split(200, 128, 132, waves=2) == (0, 132)  # one whole wave: every tile split
    assert streamk_split(100, 128, 132, waves=2) is None  # no whole wave to add
    assert streamk_split(264, 128, 132, waves=2) is None  # whole waves only
    assert streamk_split(288, 1, 132, waves=2) is None  # tiles of one K-iteration cannot be split
    plan = make_plan(3072, 3072, 8192, torch.bfloat16, H200)
    assert (plan.dp_tiles, plan.sk_tiles, plan.sk_waves) == (132, 156, 2)
    assert make_plan(2560, 2560, 8192, torch.bfloat16, H200).sk_waves == 1


@pytest.mark.parametrize(("shape", "num_sms", "dtype", "sk_tiles"), [
    # Measured on the H200 : many programs a split tile in the partial wave
    # (its finisher reads them all at one SM's rate) -> split the last two waves: 1.03-1.11x faster.
    ((3072, 3072, 8192), None, torch.bfloat16, 156),
    ((4096, 4352, 4096), None, torch.bfloat16, 148),
    ((4096, 4096, 4096), 100, torch.bfloat16, 112),
    ((3072, 3072, 8192), None, torch.float8_e4m3fn, 156),
    # ~3 programs a split tile: the last wave only (two waves measured 1-8% slower).
    ((2560, 2560, 8192), None, torch.bfloat16, 68),
    ((1024, 10240, 8192), None, torch.bfloat16, 56),
    ((1024, 8192, 8192), 100, torch.bfloat16, 56),
])
def test_streamk_waves_as_measured(shape, num_sms, dtype, sk_tiles):
    plan = make_plan(*shape, dtype, H200, num_sms=num_sms)
    assert (plan.schedule, plan.config.block_m, plan.config.block_n, plan.sk_tiles) == ("streamk", 128, 256, sk_tiles)


@pytest.mark.parametrize("shape", [(8192, 8192, 8192), (4096, 4096, 4096), (128, 14336, 4096), (16, 4096, 4096)])
def test_fp32_without_tf32_takes_fma_tiles(shape):
    # FMA, not tensor cores: at most 128 x 128 through pointers, 32-element K steps from 64 x 64 up (the H200: 22
    # TFLOP/s at 4096^3 where the tensor-core plan's 128 x 256 TMA tile ran 0.5).
    ieee = make_plan(*shape, torch.float32, H200)
    cfg = ieee.config
    assert ieee.input_precision == "ieee" and cfg.block_m * cfg.block_n <= 128 * 128 and not cfg.tma
    assert cfg.block_k == 32 or cfg.block_m * cfg.block_n < 64 * 64
    if shape[0] >= 128:
        assert (cfg.block_m, cfg.block_n, cfg.num_warps) == (128, 128, 8)
    tf32 = make_plan(*shape, torch.float32, H200, tf32=True)
    if shape[0] >= 4096:
        assert (tf32.config.block_m, tf32.config.block_n, tf32.config.tma) == (128, 256, True)


def test_tf32_and_fp8_precision_flags():
    assert make_plan(64, 64, 64, torch.float32, H200, tf32=True).input_precision == "tf32"
    assert make_plan(64, 64, 64, torch.float32, H200, tf32=False).input_precision == "ieee"


def test_bad_schedule_and_config():
    with pytest.raises(ValueError, match="schedule must be one of"):
        make_plan(64, 64, 64, torch.float16, H200, schedule="nope")
    with pytest.raises(ValueError, match="block_k must be a power of two"):
        TileConfig(64, 64, 48)
    with pytest.raises(ValueError, match="needs block_k >= 32"):
        make_plan(64, 64, 64, torch.float8_e4m3fn, H200, config=TileConfig(64, 64, 16))



def test_mxfp4_rules():
    decode = mx_config(16, 8192, 8192)
    assert (decode.block_m, decode.block_n, decode.block_k) == (16, 64, 512) and not decode.mx_swap
    assert mx_config(1, 64, 96).block_k == 128  # K steps no longer than K needs
    large = mx_config(4096, 4096, 4096)
    assert (large.block_m, large.block_n, large.mx_swap, large.mx_prefetch, large.tma) == (256, 128, True, True, False)
    small = mx_config(32, 8192, 8192)
    assert (small.block_m, small.block_n, small.block_k, small.num_warps, small.num_stages, small.mx_swap) == \
        (32, 64, 256, 4, 4, False)
    assert make_mx_plan(17, 4096, 4096, torch.bfloat16, H200).schedule == "streamk"
    mid = mx_config(64, 8192, 8192)
    assert (mid.block_m, mid.block_n, mid.block_k, mid.num_warps, mid.mx_swap) == (64, 64, 256, 4, True)
    assert make_mx_plan(64, 14336, 4096, torch.bfloat16, H200).schedule == "streamk"  # measured split
    assert mx_config(128, 8192, 8192) is None  # between the rules: the dense model
    assert mx_config(4096, 64, 4096) is None


def test_mxfp4_decode_runs_one_program_per_tile_when_tiles_fill_the_device():
    # At least one 16 x 64 tile per SM: data-parallel (two decode programs fit an SM, no fixup).
    plan = make_mx_plan(16, 14336, 4096, torch.bfloat16, H200)
    assert (plan.schedule, plan.num_programs, plan.num_tiles) == ("data_parallel", 224, 224)
    assert make_mx_plan(1, 28672, 4096, torch.bfloat16, H200).num_programs == 448
    # A budget of every SM (or more) is the whole device, as None: the same plan.
    for every in (132, 500):
        assert make_mx_plan(1, 28672, 4096, torch.bfloat16, H200, num_sms=every) == make_mx_plan(
            1, 28672, 4096, torch.bfloat16, H200)
    # Fewer 16 x 64 tiles than SMs: a short K loop runs data-parallel over 16 x 32 tiles when those fill >= 90%
    # of the SMs; a long one, or too few tiles even then, Stream-K splits.
    plan = make_mx_plan(16, 4096, 4096, torch.bfloat16, H200)
    assert (plan.schedule, plan.config.block_n, plan.num_programs) == ("data_parallel", 32, 128)
    assert make_mx_plan(1, 6144, 4096, torch.bfloat16, H200).num_programs == 192
    assert make_mx_plan(16, 4096, 14336, torch.bfloat16, H200).schedule == "streamk"
    assert make_mx_plan(16, 2048, 4096, torch.bfloat16, H200).schedule == "streamk"
    assert make_mx_plan(16, 4096, 4096, torch.bfloat16, H200, num_sms=131).schedule == "streamk"
    # A budget below the device's, an explicit schedule or config: the grid stays within the budget as always.
    assert make_mx_plan(16, 14336, 4096, torch.bfloat16, H200, num_sms=66).num_programs <= 66
    assert make_mx_plan(16, 14336, 4096, torch.bfloat16, H200, schedule="persistent").num_programs == 132
    cfg = mx_config(16, 14336, 4096)
    assert make_mx_plan(16, 14336, 4096, torch.bfloat16, H200, config=cfg).schedule != "data_parallel"
    # Large M keeps the measured 256 x 128 configuration.
    assert make_mx_plan(4096, 4096, 4096, torch.bfloat16, H200).config == mx_config(4096, 4096, 4096)


def test_hopper_decode_with_bf16_activations_runs_eight_row_tiles():
    """Up to M = 8 a "hopper" weight with bf16 activations on the whole device takes 8 x 64 swapped tiles (mma.sync on
    the expanded words as loaded: plan._MX_WORDS_MAX_M), scheduled as the decode tiles, the widest weights too; M = 9,
    a budget, fp16 or MXFP4 activations and the "ocp" layout keep 16-row tiles, M = 9 of the widest weights its
    16 x 128 ones. Only swapped tiles have 8 rows."""
    for m in (1, 5, 8):
        for n, k in ((14336, 4096), (4096, 14336), (128256, 4096), (28672, 8192), (8192, 28672), (1024, 128)):
            plan = make_mx_plan(m, n, k, torch.bfloat16, H200, layout="hopper")
            cfg = plan.config
            assert (cfg.block_m, cfg.block_n, cfg.block_k, cfg.mx_swap) == (8, 64, min(256, k), True), (m, n, k)
            per_sm = 4 if k // 256 >= _MX_WORDS_LONG_K_STEPS else 2
            assert plan.num_programs <= per_sm * H200.num_sms or plan.schedule == "data_parallel"
            assert make_mx_plan(m, n, k, torch.bfloat16, H200, layout="hopper", num_sms=66).config.block_m == 16
    assert make_mx_plan(9, 8192, 28672, torch.bfloat16, H200, layout="hopper").config.block_n == 128
    # Long K loops run four programs per SM (8192 / 64 tiles, four parts each); shorter ones two.
    long_k = make_mx_plan(1, 8192, 28672, torch.bfloat16, H200, layout="hopper")
    assert (long_k.schedule, long_k.num_programs) == ("streamk", 4 * 8192 // 64) and 4 * 8192 // 64 > 2 * H200.num_sms
    short_k = make_mx_plan(1, 4096, 14336, torch.bfloat16, H200, layout="hopper")
    assert short_k.schedule == "streamk" and short_k.num_programs <= 2 * H200.num_sms
    assert make_mx_plan(1, 14336, 4096, torch.bfloat16, H200, layout="hopper").schedule == "data_parallel"
    assert make_mx_plan(1, 4096, 14336, torch.bfloat16, H200, layout="hopper").schedule == "streamk"
    for plan in (make_mx_plan(9, 14336, 4096, torch.bfloat16, H200, layout="hopper"),
                 make_mx_plan(1, 14336, 4096, torch.float16, H200, layout="hopper"),
                 make_mx_plan(1, 14336, 4096, torch.bfloat16, H200, layout="hopper", a_mx=True),
                 make_mx_plan(1, 14336, 4096, torch.bfloat16, H200)):
        assert plan.config.block_m == 16
    with pytest.raises(ValueError, match="block_m must be a power of two >= 16"):
        TileConfig(8, 64, 256)
    assert TileConfig(8, 64, 256, mx_swap=True).block_m == 8


def _kwords_rows(m, n, dtype, a_mx, schedule, num_sms) -> bool:
    """Where the planner gives a "kwords" weight its own unswapped 16-row tiles (plan._MX_KWORDS_ROWS_FILL)."""
    return 8 < m <= 16 and dtype == torch.bfloat16 and not a_mx and schedule == "auto" and num_sms is None and \
        math.ceil(n / 64) >= _MX_KWORDS_ROWS_FILL * H200.num_sms


def test_kwords_weights_plan_as_hopper_ones():
    """A "kwords" weight is read in the same words as a "hopper" one: every rule but the unswapped 16-row tiles at
    8 < M <= 16 gives it the same plan."""
    for m in (1, 8, 9, 16, 32, 64, 100, 128, 300, 4096):
        for n, k in ((14336, 4096), (4096, 14336), (128256, 4096), (28672, 8192), (1024, 128)):
            for schedule, num_sms in (("auto", None), ("auto", 66), ("streamk", None), ("data_parallel", None)):
                for dtype, a_mx in ((torch.bfloat16, False), (torch.float16, False), (torch.bfloat16, True)):
                    args = (m, n, k, dtype, H200)
                    kw = dict(schedule=schedule, num_sms=num_sms, a_mx=a_mx)
                    kwords, hopper = make_mx_plan(*args, layout="kwords", **kw), make_mx_plan(*args, layout="hopper",
                                                                                                **kw)
                    if _kwords_rows(m, n, dtype, a_mx, schedule, num_sms):
                        assert kwords != hopper
                    else:
                        assert kwords == hopper
            assert mx_config(m, n, k, "kwords") == mx_config(m, n, k, "hopper")


def test_kwords_weight_at_m_9_to_16_runs_unswapped_16_row_tiles():
    """8 < M <= 16 with a "kwords" weight and bf16 activations on the whole device, with 64-row tiles for >= 70% of
    the SMs: 16 x 64 x 512 tiles unswapped (mma.sync, activations as loaded), one program per tile; fewer tiles, a
    budget, fp16 or MXFP4 activations, or M <= 8 / M > 16 keep the other rules."""
    for m in (9, 12, 16):
        for n, k in ((14336, 4096), (6144, 4096), (128256, 4096), (28672, 8192)):
            plan = make_mx_plan(m, n, k, torch.bfloat16, H200, layout="kwords")
            assert plan.schedule == "data_parallel" and plan.num_programs == math.ceil(n / 64)
            assert plan.config == TileConfig(16, 64, 512, num_warps=4, num_stages=3)
        assert make_mx_plan(m, 4096, 4096, torch.bfloat16, H200, layout="kwords").config.mx_swap  # 64 tiles
        for kw in (dict(num_sms=66), dict(a_mx=True), dict(schedule="streamk")):
            assert make_mx_plan(m, 14336, 4096, torch.bfloat16, H200, layout="kwords", **kw).config.mx_swap
        assert make_mx_plan(m, 14336, 4096, torch.float16, H200, layout="kwords").config.mx_swap
    for m in (8, 17):
        assert make_mx_plan(m, 14336, 4096, torch.bfloat16, H200, layout="kwords").config.mx_swap


@pytest.mark.parametrize("schedule,num_sms", [("auto", None), ("persistent", None), ("streamk", 100)])
def test_hopper_weight_plans_read_whole_groups_in_tiles_that_compile(schedule, num_sms):
    """A "hopper" MXFP4 weight is read in whole 128-element groups, so every fused plan takes K steps of 128 or
    more, and the dense model's 128 x 256 and 64 x 128 tiles (which do not compile reading it) become 128 x 128 and
    64 x 64 (plan.hopper_steps); tests/test_compiles.py compiles the tiles this leaves for sm_90."""
    for m in (1, 8, 9, 16, 17, 64, 65, 96, 128, 129, 200, 256, 384, 511):
        for n, k in ((1024, 4096), (4096, 4096), (14336, 4096), (4096, 14336), (128256, 4096), (130, 384)):
            if mx_expands(m, n, k, a_mx=False):
                continue
            cfg = make_mx_plan(m, n, k, torch.bfloat16, H200, layout="hopper", schedule=schedule,
                               num_sms=num_sms).config
            assert cfg.block_k % 128 == 0 and (cfg.block_n <= 16 * cfg.num_warps or cfg.mx_swap), (m, n, k, cfg)
    forced = TileConfig(128, 256, 64, num_warps=8, num_stages=4, tma=True, tma_store=True, flatten=True)
    cfg = make_mx_plan(128, 4096, 4096, torch.bfloat16, H200, layout="hopper", config=forced).config
    assert (cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_stages) == (128, 128, 128, 3)


def test_mxfp4_expands_operands_first_only_where_the_gemm_is_compute_bound():
    assert mx_expands(4096, 4096, 4096, a_mx=False) and mx_expands(8192, 8192, 8192, a_mx=True)
    assert mx_expands(512, 14336, 4096, a_mx=False)
    assert not mx_expands(16, 8192, 8192, a_mx=False) and not mx_expands(256, 14336, 4096, a_mx=False)
    # Expanding MXFP4 activations costs M x K: worth it only when N is large too.
    assert mx_expands(4096, 256, 4096, a_mx=False) and not mx_expands(4096, 256, 4096, a_mx=True)


def test_persistent_four_warp_tiles_take_long_k_steps():
    # 16-bit persistent 4-warp tiles: 128-element K steps at any M (1024^3: -10% on the H200); fp8's steps are
    # already 128 elements; few-tile Stream-K keeps 128-byte steps for its deeper pipeline.
    for dtype in (torch.bfloat16, torch.float16, torch.float8_e4m3fn):
        plan = make_plan(1024, 1024, 1024, dtype, H200)
        assert plan.schedule == "persistent" and plan.config.num_warps == 4 and plan.config.block_k == 128
    sk = make_plan(256, 1024, 16384, torch.bfloat16, H200)
    assert sk.schedule == "streamk" and sk.config.block_k * 2 == 128 and sk.config.num_stages == 6


def test_one_wave_of_64_by_64_tiles_takes_128_byte_steps():
    # plan._ONE_WAVE_STEP_BYTES: one persistent 64 x 64 tile a program above M = 64, K up to the measured 2560 and
    # not a multiple of 256 bytes, on the whole device: 128-byte steps where the skinny and long-step rules would
    # give 256-byte ones
    for dtype in (torch.bfloat16, torch.float16):
        for m, n, k in ((100, 1000, 1000), (881, 224, 2498), (362, 496, 1740), (219, 726, 1000), (415, 76, 770)):
            plan = make_plan(m, n, k, dtype, H200)
            assert plan.schedule == "persistent" and plan.num_tiles <= 132, (m, n, k, plan)
            assert (plan.config.block_m, plan.config.block_n, plan.config.block_k) == (64, 64, 64), (m, n, k, plan)
    # longer K (the skinny rule's measured 128 x 4096 x 4096), K in whole 256-byte steps, an SM budget, or M <= 64
    # keep their steps
    assert make_plan(128, 4096, 4096, torch.bfloat16, H200).config.block_k == 128
    for m, n, k in ((96, 1024, 1024), (512, 512, 512), (4096, 128, 1024)):
        assert make_plan(m, n, k, torch.bfloat16, H200).config.block_k == 128, (m, n, k)
    assert make_plan(219, 726, 1000, torch.bfloat16, H200, num_sms=66).config.block_k == 128
    assert make_plan(64, 1000, 1000, torch.bfloat16, H200).config.block_k == 128


def test_short_k_takes_short_steps_where_they_pad_less():
    # 16-bit tiles of 128-byte K steps take 64-byte ones where those pad K by more than plan._LONG_STEP_PADDING less
    # (K = 72: 96 against 128), and only there.
    from smgemm.plan import _LONG_STEP_PADDING, _padded_k

    for dtype in (torch.bfloat16, torch.float16):
        for m, n, k in ((640, 1600, 72), (1024, 1024, 136), (2048, 2048, 80), (1822, 2056, 92), (1024, 1024, 160)):
            cfg = make_plan(m, n, k, dtype, H200).config
            assert cfg.block_k == 32, (m, n, k, cfg)
            assert _padded_k(k, 64) > _LONG_STEP_PADDING * _padded_k(k, 32)
        # no less padding, or a K above the measured _SHORT_STEP_MAX_K (257: 288 against 320)
        for m, n, k in ((1024, 1024, 64), (1024, 1024, 128), (4096, 4096, 4096), (1024, 1024, 120), (901, 7763, 257),
                        (3542, 951, 219)):
            assert make_plan(m, n, k, dtype, H200).config.block_k >= 64, (m, n, k)
    # fp8 and fp32 keep their steps (measured on 16-bit tiles only)
    assert make_plan(1024, 1024, 72, torch.float8_e4m3fn, H200).config.block_k >= 64
    assert make_plan(1024, 1024, 72, torch.float32, H200).config.block_k * 4 >= 128


def test_short_k_over_a_wave_of_tiles_runs_data_parallel_on_the_whole_device():
    # plan._OVERLAP_MAX_K: one 4-warp 128 x 128 program per tile where one or two waves of them cover the output, so
    # that two on an SM overlap loads and stores
    from smgemm.plan import _OVERLAP_TILE

    for dtype in (torch.bfloat16, torch.float16):
        for m, n, k, batch in ((2048, 2048, 80, 1), (1822, 2056, 92, 1), (1408, 1536, 96, 1), (512, 1024, 128, 8)):
            plan = make_plan(m, n, k, dtype, H200, batch=batch)
            tiles = -(-m // 128) * -(-n // 128) * batch
            assert (plan.schedule, plan.config, plan.num_programs) == ("data_parallel", _OVERLAP_TILE, tiles)
            budgeted = make_plan(m, n, k, dtype, H200, num_sms=66, batch=batch)
            assert budgeted.num_programs <= 66 and budgeted.config != _OVERLAP_TILE
            forced = make_plan(m, n, k, dtype, H200, schedule="persistent", batch=batch)
            assert forced.schedule == "persistent" and forced.config != _OVERLAP_TILE
        # longer K, fewer tiles than SMs, more than two waves of them, or other dtypes: the model's plans
        for m, n, k, d in ((2048, 2048, 160, dtype), (1024, 1024, 96, dtype), (4096, 4096, 96, dtype),
                           (2048, 2048, 80, torch.float8_e4m3fn), (2048, 2048, 80, torch.float32)):
            assert make_plan(m, n, k, d, H200).config != _OVERLAP_TILE, (m, n, k, d)
        # nor where M or N is in the skinny range: a batched product of one row a matrix keeps its thin tiles
        for m, n, k, batch in ((1, 4096, 80, 8), (128, 16384, 64, 16), (33000, 100, 64, 1)):
            plan = make_plan(m, n, k, dtype, H200, batch=batch)
            assert plan.config != _OVERLAP_TILE and (m > 16 or plan.config.block_m == 16), (m, n, k, batch, plan)


def test_mxfp4_fused_plans_keep_their_measured_tiles():
    # The dense-only rules (short K steps, the overlap tile, 32-row Stream-K tiles) stay off for the fused MXFP4
    # kernel: its "ocp" K loop did not compile with 32-deep steps (benchmarks/compile_plans.py: "Illegal shared
    # layout"), which K <= 32 would give the dense model's tiles and mx_config's
    from smgemm.plan import _OVERLAP_TILE

    for m, n, k, budget in ((65, 4096, 80, 16), (1024, 4096, 80, None), (2048, 2048, 96, None), (72, 264, 5824, None),
                            (65, 129, 32, 1), (300, 129, 32, 1), (17, 129, 32, None), (1, 64, 32, None)):
        for a_mx in (False, True):
            cfg = make_mx_plan(m, n, k, torch.bfloat16, H200, num_sms=budget, a_mx=a_mx).config
            assert cfg.block_k >= 64 and cfg != _OVERLAP_TILE and cfg.block_m >= min(64, m), (m, n, k, a_mx, cfg)


def test_rates_of_other_devices_follow_their_memory_bandwidth():
    from types import SimpleNamespace

    from smgemm._device import H200_RATES, rates_for

    h200 = SimpleNamespace(name="NVIDIA H200", memory_clock_rate=3_200_000, memory_bus_width=6144)
    assert rates_for(h200) is H200_RATES
    h100 = SimpleNamespace(name="NVIDIA H100 80GB HBM3", memory_clock_rate=2_619_000, memory_bus_width=5120)
    rates = rates_for(h100)
    scale = 2 * 2.619e9 * 640 / 4.8e12  # 3.35 TB/s against 4.8
    assert rates.hbm_bytes_per_iter == pytest.approx(H200_RATES.hbm_bytes_per_iter * scale)
    assert rates.stage_bytes_per_iter == pytest.approx(H200_RATES.stage_bytes_per_iter * scale)
    # only the whole-device bandwidth terms change
    assert dataclasses.replace(rates, hbm_bytes_per_iter=H200_RATES.hbm_bytes_per_iter,
                               stage_bytes_per_iter=H200_RATES.stage_bytes_per_iter) == H200_RATES
    faster = SimpleNamespace(name="a GPU with more bandwidth", memory_clock_rate=8_000_000, memory_bus_width=8192)
    assert rates_for(faster) == H200_RATES  # never above the measured H200's
    assert rates_for(SimpleNamespace(name="NVIDIA A100")) is H200_RATES  # torch without the memory properties
    # a decode GEMM's plan is still valid and within budget with the slower memory
    spec = dataclasses.replace(H200, rates=rates)
    plan = make_plan(16, 4096, 4096, torch.bfloat16, spec, num_sms=66)
    assert plan.num_programs <= 66


def test_mxfp4_hopper_layout_plans():
    """A 'hopper' weight: swapped 64-row tiles (the register-operand path) up to M = 64 (8-row activation tiles up
    to M = 8: test_hopper_decode_with_bf16_activations_runs_eight_row_tiles); 512-deep K steps for data-parallel
    decode at M = 9-16, 256 with 4 stages where Stream-K splits; K steps of at least 128 everywhere."""
    plan = make_mx_plan(16, 14336, 4096, torch.bfloat16, H200, layout="hopper")
    assert plan.schedule == "data_parallel" and plan.num_programs == 224
    assert (plan.config.block_m, plan.config.block_n, plan.config.block_k, plan.config.mx_swap) == (16, 64, 512, True)
    plan = make_mx_plan(16, 4096, 4096, torch.bfloat16, H200, layout="hopper")  # 64 tiles: no 16 x 32 narrowing
    assert plan.schedule == "streamk" and plan.config.block_n == 64
    assert (plan.config.block_k, plan.config.num_stages) == (256, 4)
    assert H200.num_sms < plan.num_programs <= 2 * H200.num_sms  # split on the whole device: two programs per SM
    assert make_mx_plan(1, 4096, 4096, torch.bfloat16, H200, num_sms=100, layout="hopper").num_programs <= 100
    plan = make_mx_plan(64, 14336, 4096, torch.bfloat16, H200, layout="hopper")
    assert plan.schedule == "streamk" and (plan.config.block_m, plan.config.block_k) == (64, 256)
    assert plan.config.mx_swap
    assert make_mx_plan(16, 14336, 4096, torch.bfloat16, H200, num_sms=66, layout="hopper").num_programs <= 66
    forced = make_mx_plan(8, 64, 4096, torch.bfloat16, H200, config=TileConfig(16, 32, 64), layout="hopper")
    assert forced.config.block_k == 128
    assert make_mx_plan(300, 4096, 4096, torch.bfloat16, H200, layout="hopper").config.block_k >= 128
    near = make_mx_plan(16, 8192, 8192, torch.bfloat16, H200, layout="hopper")  # 128 tiles: split, 2 per SM
    assert (near.schedule, near.config.block_k) == ("streamk", 256) and near.num_programs > H200.num_sms
    # Weights of 2^27 elements and more (70B projections, lm_head): 16 x 128 x 128 tiles at M = 9-16, 4 stages, split
    # by Stream-K over two programs per SM (32 x 128 x 256 at 16 < M <= 32); under a budget, the 64-row tiles.
    for n, k in ((28672, 8192), (8192, 28672), (128256, 4096)):
        for m in (9, 16):
            wide = make_mx_plan(m, n, k, torch.bfloat16, H200, layout="hopper")
            assert wide.schedule == "streamk" and H200.num_sms < wide.num_programs <= 2 * H200.num_sms, (m, n, k)
            assert (wide.config.block_n, wide.config.block_k, wide.config.num_stages) == (128, 128, 4)
        assert make_mx_plan(16, n, k, torch.bfloat16, H200, layout="hopper", num_sms=66).config.block_n == 64
        cfg = make_mx_plan(32, n, k, torch.bfloat16, H200, layout="hopper").config  # 32 x 128 x 256 above M = 16
        assert (cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_stages) == (32, 128, 256, 3)
    assert make_mx_plan(33, 28672, 8192, torch.bfloat16, H200, layout="hopper").config.block_n == 64
    assert make_mx_plan(32, 14336, 4096, torch.bfloat16, H200, layout="hopper").config.block_n == 64
    assert make_mx_plan(1, 28672, 8192, torch.bfloat16, H200).config.block_n == 64  # the "ocp" layout
    # 64 < M <= 128: 64-row tiles two programs per SM; 128 x 128 x 128 of 8 warps, one per SM, for the widest weights;
    # under a budget, mx_config's 128-row tile within it
    for m in (65, 96, 128):
        mid = make_mx_plan(m, 14336, 4096, torch.bfloat16, H200, layout="hopper")
        assert (mid.config.block_m, mid.config.block_n, mid.config.block_k, mid.config.mx_swap) == (64, 64, 256, True)
        assert mid.schedule == "streamk" and H200.num_sms < mid.num_programs <= 2 * H200.num_sms
        wide = make_mx_plan(m, 28672, 8192, torch.bfloat16, H200, layout="hopper")
        assert (wide.config.block_m, wide.config.block_n, wide.config.block_k, wide.config.num_warps) == (
            128, 128, 128, 8)
        assert wide.schedule == "streamk" and wide.num_programs <= H200.num_sms
        budget = make_mx_plan(m, 14336, 4096, torch.bfloat16, H200, layout="hopper", num_sms=66)
        assert budget.config.block_m == 128 and budget.num_programs <= 66


def test_batched_256_row_tiles_on_the_whole_chip_where_they_make_fewer_rounds():
    """On the whole device a batched 16-bit product without a C matrix, N > 128, runs persistent 256 x 128 tiles where
    they make fewer rounds than 128 x 256 ones (64 x 512 x 1408 x 2048: 1408 tiles, 11 rounds, against 1536 and 12),
    and 128 x 256 tiles in as many rounds (64 x 256 x 1408 x 4096, 8 x 2048 x 1408 x 1408), with a C matrix, or in
    fp8."""
    for m, n, k, batch in ((512, 1408, 2048, 64), (1024, 1408, 8192, 64), (2048, 1408, 1408, 16)):
        plan = make_plan(m, n, k, torch.bfloat16, H200, batch=batch)
        cfg = plan.config
        assert (plan.schedule, cfg.block_m, cfg.block_n, cfg.num_stages) == ("persistent", 256, 128, 4), (m, n, k)
    for m, n, k, batch, dtype, c in ((256, 1408, 4096, 64, torch.bfloat16, False),
                                     (2048, 1408, 1408, 8, torch.bfloat16, False),
                                     (1024, 1408, 1408, 64, torch.bfloat16, True),
                                     (512, 1408, 2048, 64, torch.float8_e4m3fn, False)):
        cfg = make_plan(m, n, k, dtype, H200, batch=batch, c_matrix=c).config
        assert (cfg.block_m, cfg.block_n) != (256, 128), (m, n, k, batch, dtype, c)


def test_batched_tiles_of_one_column():
    """Batched products with N <= 128: 256 x 128 tiles (4 stages) under an SM budget, 128 x 128 tiles with 256-byte
    K steps on the whole device; a single product never takes 256 x 128 tiles (measured only batched). Wider batched
    products take them where N leaves half a 256-wide tile (fewer tile rounds than 128 x 256), and 128 x 256 tiles
    otherwise."""
    for budget in (32, 64):
        cfg = make_plan(256, 1408, 4096, torch.bfloat16, H200, batch=64, num_sms=budget).config
        assert (cfg.block_m, cfg.block_n, cfg.num_warps, cfg.num_stages) == (256, 128, 8, 4)
        for m, n, k, batch in ((2048, 2048, 2048, 8), (256, 4096, 1408, 64), (2048, 2048, 128, 32)):
            cfg = make_plan(m, n, k, torch.bfloat16, H200, batch=batch, num_sms=budget).config
            assert (cfg.block_m, cfg.block_n) == (128, 256), (m, n, k, budget, cfg)
    cfg = make_plan(256, 1408, 4096, torch.bfloat16, H200, batch=64).config
    assert (cfg.block_m, cfg.block_n) == (128, 256)
    cfg = make_plan(4096, 128, 4096, torch.bfloat16, H200, batch=8, num_sms=64).config
    assert (cfg.block_m, cfg.block_n, cfg.num_warps, cfg.num_stages) == (256, 128, 8, 4)
    cfg = make_plan(4096, 128, 4096, torch.bfloat16, H200, batch=8).config
    assert (cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_stages) == (128, 128, 128, 3)
    for budget in (None, 16, 64):
        for m, n, k in ((4096, 128, 4096), (8192, 64, 8192), (2048, 2048, 2048)):
            cfg = make_plan(m, n, k, torch.bfloat16, H200, num_sms=budget).config
            assert (cfg.block_m, cfg.block_n) != (256, 128)
        assert make_plan(2048, 256, 2048, torch.bfloat16, H200, batch=8, num_sms=budget).config.block_m <= 128


def test_batched_128_by_256_tiles_take_four_stages_from_k_256():
    """Batched 16-bit products on 128 x 256 tiles: 4 stages (output tiles stored in halves) from K = 256
    (plan._BATCHED_DEEP_MIN_K), 3 stages and whole stores below it, with a C matrix, for fp32 and single products."""
    for k in (256, 1408, 4096):
        for dtype in (torch.bfloat16, torch.float16):
            cfg = make_plan(256, 4096, k, dtype, H200, batch=64).config
            assert (cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_stages, cfg.whole_store) == (128, 256, 64, 4, False)
    for m, n, k, batch, kw in ((2048, 2048, 128, 32, {}), (256, 4096, 4096, 64, {"c_matrix": True}),
                               (256, 4096, 4096, 64, {"tf32": True}), (4096, 4096, 4096, 1, {})):
        dtype = torch.float32 if kw.get("tf32") else torch.bfloat16
        cfg = make_plan(m, n, k, dtype, H200, batch=batch, **kw).config
        assert (cfg.block_m, cfg.block_n, cfg.num_stages) == (128, 256, 3), (m, n, k, batch, kw, cfg)


def test_square_tiles_take_five_stages_over_long_k_loops_of_few_waves():
    """16-bit 128 x 128 tiles on the whole device take 5 stages over K loops of >= 64 steps and <= 3 waves of tiles,
    or over more waves with loops of exactly 64 steps whose last wave is nearly full (plan._SQUARE_DEEP_STAGES);
    shorter loops, more waves of longer loops, SM budgets, a C matrix and fp8 keep 4 at most."""
    for m, n, k in ((512, 4096, 4096), (1024, 6144, 4096), (256, 8192, 8192), (1500, 4096, 8192), (1100, 9000, 4096),
                    (512, 28672, 4096), (1024, 10240, 4096)):
        for dtype in (torch.bfloat16, torch.float16):
            cfg = make_plan(m, n, k, dtype, H200).config
            assert (cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_stages) == (128, 128, 64, 5), (m, n, k, cfg)
    deep = 0
    for m, n, k, dtype, kw in ((512, 4096, 2048, torch.bfloat16, {}),
                               (512, 4096, 4096, torch.bfloat16, {"c_matrix": True}),
                               (512, 4096, 4096, torch.float8_e4m3fn, {}), (10799, 1029, 6437, torch.bfloat16, {}),
                               (512, 4096, 4096, torch.bfloat16, {"num_sms": 66})):
        cfg = make_plan(m, n, k, dtype, H200, **kw).config
        assert cfg.num_stages <= 4 or (cfg.block_m, cfg.block_n) != (128, 128), (m, n, k, dtype, kw, cfg)
        deep += (cfg.block_m, cfg.block_n) == (128, 128)
    assert deep >= 4  # the rule's bounds, not another tile, keep those at 4 stages (765 tiles of 101 steps)


def test_stream_k_plans_that_split_every_tile_keep_four_stages():
    """A Stream-K plan over 5-stage-eligible 128 x 128 tiles runs them with 4 stages where it splits every tile (no
    data-parallel wave first) over more than two rows of tiles (1024 x 1024 x 32768: 64 tiles over 128 programs;
    950 x 2107 x 6940), and keeps 5 over two rows (256 x 10240 x 4096: 160 tiles over 132 programs) or where whole
    waves run first (512 x 10240 x 8192: 56 of 320 tiles split)."""
    for (m, n, k), stages, split_all in (((1024, 1024, 32768), 4, True), ((950, 2107, 6940), 4, True),
                                         ((256, 10240, 4096), 5, True), ((256, 4096, 24576), 5, True),
                                         ((512, 10240, 8192), 5, False)):
        plan = make_plan(m, n, k, torch.bfloat16, H200)
        assert plan.schedule == "streamk" and (plan.dp_tiles == 0) == split_all, (m, n, k, plan)
        assert (plan.config.block_m, plan.config.block_n, plan.config.num_stages) == (128, 128, stages), (m, n, k)


def test_five_stage_square_tiles_are_charged_their_measured_rate():
    """Persistent 5-stage 128 x 128 tiles cost `Rates.square_deep_factor` of the model's time: 512 x 28672 x 4096
    (896 tiles, 6.8 waves) takes them rather than Stream-K over 128 x 256 tiles, and without the factor it would
    not."""
    plan = make_plan(512, 28672, 4096, torch.bfloat16, H200)
    assert (plan.schedule, plan.config.block_n, plan.config.num_stages) == ("persistent", 128, 5)
    flat = dataclasses.replace(H200, rates=dataclasses.replace(H200.rates, square_deep_factor=1.0))
    assert make_plan(512, 28672, 4096, torch.bfloat16, flat).config.block_n == 256


@pytest.mark.parametrize(("m", "n", "k", "num_sms"), [
    (256, 4096, 8192, None), (192, 4096, 14336, None), (448, 2304, 8192, None), (1024, 1024, 16384, None),
    (320, 2048, 8192, None), (256, 4096, 6144, None), (2048, 512, 8192, None), (4096, 256, 14336, None),
    (200, 4096, 8192, None), (320, 2048, 8192, 100), (256, 2048, 8192, 66), (256, 1024, 16384, 32)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float8_e4m3fn])
def test_one_wave_of_64_x_128_tiles_over_long_k_loops(m, n, k, num_sms, dtype):
    """Where 64 x 128 tiles make one wave of at least 0.6 of the budget (M > 128, N a multiple of 128) over a K loop
    of 6144-16384 in whole 256-byte steps (256 elements in fp8, 128 in 16 bits), the model charges them
    `Rates.one_wave_64_factor` of its time and runs them persistent through pointers, each program one tile; without
    the factor it picks Stream-K over 128 x 128 tiles for 16-bit operands, which measured 1.03-1.91x slower."""
    plan = make_plan(m, n, k, dtype, H200, num_sms=num_sms)
    cfg = plan.config
    elem = 1 if dtype == torch.float8_e4m3fn else 2
    assert (plan.schedule, cfg.block_m, cfg.block_n, cfg.block_k * elem, cfg.num_warps, cfg.tma) == \
        ("persistent", 64, 128, 256, 4, False), plan
    assert plan.num_programs == plan.num_tiles >= 0.6 * plan.sm_budget
    if elem == 2:
        flat = dataclasses.replace(H200, rates=dataclasses.replace(H200.rates, one_wave_64_factor=1.0))
        old = make_plan(m, n, k, dtype, flat, num_sms=num_sms)
        assert (old.schedule, old.config.block_m, old.config.block_n) == ("streamk", 128, 128), old


def test_one_wave_of_64_x_128_tiles_only_where_measured():
    """Outside its measured region the factor changes no plan, and fp8 4-warp tiles above the skinny rows keep
    128-element K steps: longer or shorter K loops, a partial last column of tiles or K step, fewer tiles than 0.6 of
    the budget, skinny rows, fp32 and TF32, a C matrix, a batch, the fused MXFP4 kernel's tiles."""
    flat = dataclasses.replace(H200, rates=dataclasses.replace(H200.rates, one_wave_64_factor=1.0))
    cases = [((256, 4096, 24576), {}), ((1024, 1024, 32768), {}), ((496, 1479, 12632), {}), ((3351, 206, 6440), {}),
             ((256, 4096, 4096), {}), ((256, 2048, 8192), {}), ((128, 4096, 8192), {}), ((256, 4096, 8000), {}),
             ((256, 4000, 8192), {}), ((128, 6144, 8192), {}), ((256, 1024, 8192), {"num_sms": 66}),
             ((192, 4096, 8192), {"batch": 2}), ((256, 4096, 8192), {"c_matrix": True}),
             ((256, 4096, 8192), {"dense": False})]
    for (m, n, k), kw in cases:
        for dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float32):
            plan = make_plan(m, n, k, dtype, H200, **kw)
            assert plan == make_plan(m, n, k, dtype, flat, **kw), (m, n, k, kw)
            if dtype == torch.float8_e4m3fn and m > 128 and plan.config.num_warps == 4:  # (4-warp tiles: skinny ones
                assert plan.config.block_k <= 128, (m, n, k, kw, plan)  # take 256-element steps of their own)
    for m, n, k in ((256, 4096, 8192), (1024, 1024, 16384)):
        assert make_plan(m, n, k, torch.float32, H200, tf32=True) == make_plan(m, n, k, torch.float32, flat, tf32=True)


def test_hopper_tiles_store_whole_where_the_output_tile_fits_beside_the_pipeline():
    """`TileConfig.whole_store` (one TMA store a tile) wherever a 2-byte output tile fits in shared memory beside the
    plan's stages; 4-byte operands (TF32, fp32 outputs) keep two half stores."""
    seen = set()
    for m, n, k, batch in ((8192, 8192, 8192, 1), (4096, 14336, 4096, 1), (2048, 2048, 128, 32), (256, 1408, 4096, 64),
                           (1940, 3928, 120, 1), (300, 5000, 3000, 1)):
        for dtype in (torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float32):
            cfg = make_plan(m, n, k, dtype, H200, batch=batch).config
            elem = torch.tensor([], dtype=dtype).element_size()
            smem = cfg.num_stages * (cfg.block_m + cfg.block_n) * cfg.block_k * elem
            if cfg.whole_store:
                assert cfg.tma_store and elem <= 2 and smem + cfg.block_m * cfg.block_n * 2 <= 232448 - 16384, cfg
            elif cfg.tma_store and elem <= 2:
                assert smem + cfg.block_m * cfg.block_n * 2 > 232448 - 16384, cfg
            seen.add(cfg.whole_store)
    assert seen == {True, False}
    big = make_plan(8192, 8192, 8192, torch.bfloat16, H200).config
    assert (big.block_m, big.block_n, big.block_k, big.num_stages, big.whole_store) == (128, 256, 64, 3, True)
    assert not make_plan(8192, 8192, 8192, torch.float32, H200).config.whole_store
    # MXFP4 plans keep two half stores (whole ones are measured on dense tiles only), on the dense model's tiles too
    for m, n, k, budget in ((128, 28672, 8192, None), (129, 4096, 4096, 66), (96, 14336, 4096, 66)):
        cfg = make_mx_plan(m, n, k, torch.bfloat16, H200, num_sms=budget).config
        assert cfg.tma_store and not cfg.whole_store, (m, n, k, cfg)


def test_tiles_above_m_64_have_at_least_64_rows():
    # 32-row tiles move half again the bytes per multiply-add of 64-row ones (plan._MIN_ROWS_ABOVE_STREAMING): above
    # M = 64 only Stream-K plans, whose programs each stream a short part of a K loop, take them, and no thinner ones;
    # up to M = 64 a tile covers every row of A, so 16- and 32-row tiles remain there.
    for m, n, k in ((881, 224, 2498), (96, 2048, 4096), (72, 264, 5820), (1000, 200, 3000), (415, 76, 770),
                    (72, 90, 2718), (153, 177, 2961)):
        for dtype in (torch.bfloat16, torch.float16):
            for num_sms in (None, 16):
                plan = make_plan(m, n, k, dtype, H200, num_sms=num_sms)
                thin_ok = plan.schedule == "streamk" and num_sms is None
                assert plan.config.block_m >= (32 if thin_ok else 64), (m, n, k, dtype, plan)
    assert make_plan(72, 264, 5820, torch.bfloat16, H200).config.block_m == 32
    assert make_plan(110, 123, 2342, torch.bfloat16, H200, num_sms=16).config.block_m == 64  # whole device only
    assert make_plan(32, 4096, 4096, torch.bfloat16, H200).config.block_m == 32
    assert make_plan(48, 4096, 4096, torch.bfloat16, H200).config.block_m == 64
    # Where no 64-row tile fits its shared memory (64 KB a block: 128 x 128 elements of 2 bytes a stage, two stages
    # beside the reserve), 32-row ones run.
    assert make_plan(100, 4096, 4096, torch.float16, SMEM_64K).config.block_m == 32


def test_edge_tiles_end_at_the_edge_over_long_k_loops_of_tiles_up_to_128_x_128():
    """`clamps_edge_tiles`: the planner's persistent 128 x 128 plans of M = 160-240 (mostly empty edge tiles, 0.60-0.97x
    the time clamped) end their last row of tiles at M; short K loops (their stores repeat on the shared rows), larger
    tiles, other element sizes and whole last tiles keep tiles in place."""
    for m in (160, 192, 200, 240):
        plan = make_plan(m, 8192, 8192, torch.bfloat16, H200)
        assert (plan.schedule, plan.config.block_m, plan.config.block_n) == ("persistent", 128, 128)
        assert clamps_edge_tiles(plan.config, m, 8192, 8192, 2) == (True, False)
    square = TileConfig(128, 128, 64)
    assert clamps_edge_tiles(square, 300, 14300, 4096, 2) == (True, True)
    assert clamps_edge_tiles(square, 300, 14300, 511, 2) == (False, False)
    assert clamps_edge_tiles(square, 300, 14300, 4096, 1) == (True, True)  # fp8
    assert clamps_edge_tiles(square, 300, 14300, 4096, 4) == (False, False)  # fp32: not measured
    assert clamps_edge_tiles(square, 256, 100, 4096, 2) == (False, False)  # whole rows; N within one tile
    assert clamps_edge_tiles(TileConfig(64, 64, 64), 90, 100, 512, 2) == (True, True)
    assert clamps_edge_tiles(TileConfig(128, 256, 64), 300, 14300, 4096, 2) == (False, False)


@pytest.mark.parametrize("n,k,split", [(14336, 4096, 1), (28672, 8192, 1), (128256, 4096, 1), (4096, 4096, 2),
                                       (6144, 4096, 2), (4096, 14336, 4), (8192, 28672, 4), (8192, 8192, 4),
                                       (6144, 1024, 1)], ids=str)
def test_mx_ring_splits_tiles_only_below_a_wave_and_keeps_four_steps_a_part(n, k, split):
    assert mx_ring_split(1, n, k, H200, None, "hopper", torch.bfloat16, False) == split
    assert mx_ring_split(1, n, k, H200, 132, "hopper", torch.bfloat16, False) == split  # the whole device by number


@pytest.mark.parametrize("change", ["m", "n", "small_n", "k", "layout", "dtype", "bias", "budget", "ampere",
                                    "interpreter"])
def test_mx_ring_only_for_one_bf16_row_on_a_hopper_weight_on_the_whole_hopper_device(change):
    args = {"m": 1, "n": 4096, "k": 4096, "spec": H200, "num_sms": None, "layout": "hopper",
            "a_dtype": torch.bfloat16, "c_matrix": False}
    args.update({"m": {"m": 2}, "n": {"n": 4160 + 32}, "small_n": {"n": 1024}, "k": {"k": 4096 + 128},
                 "layout": {"layout": "kwords"}, "dtype": {"a_dtype": torch.float16}, "bias": {"c_matrix": True},
                 "budget": {"num_sms": 131}, "ampere": {"spec": SMALL_GPU},
                 "interpreter": {"spec": INTERPRETER_SPEC}}[change])
    assert mx_ring_split(**args) == 0


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32, torch.float16], ids=str)
def test_mx_ring_route_asks_for_a_bf16_output(out_dtype, monkeypatch):
    # `_gemm._ring_split` as on a Hopper GPU under Triton 3.6: the kernel stores bf16, so only a bf16 out takes it
    monkeypatch.setattr(smgemm._gemm, "ring_available", lambda device: True)
    monkeypatch.setattr(smgemm._gemm, "device_spec", lambda device: H200)
    x = torch.randn(1, 4096).to(torch.bfloat16)
    w = smgemm.quantize_mxfp4(torch.randn(4096, 4096), layout="hopper")
    out = torch.empty(1, 4096, dtype=out_dtype)
    split = smgemm._gemm._ring_split(x, w, None, out, 1.0, "auto", None, None, None)
    assert split == (2 if out_dtype == torch.bfloat16 else 0)


def test_mx_ring_left_out_under_overrides():
    args = (1, 4096, 4096, H200, None, "hopper", torch.bfloat16, False)
    assert mx_ring_split(*args) == 2
    with smgemm.plan.overrides(ring=False):
        assert mx_ring_split(*args) == 0
        with smgemm.plan.overrides(ring=True):
            assert mx_ring_split(*args) == 2
    with smgemm.plan.overrides(config=TileConfig(16, 64, 256, num_warps=4, num_stages=3)):
        assert mx_ring_split(*args) == 0
    with smgemm.plan.overrides(schedule="streamk"):
        assert mx_ring_split(*args) == 0
    with pytest.raises(TypeError, match="ring must be a bool"):
        with smgemm.plan.overrides(ring=1):
            pass
    assert mx_ring_split(*args) == 2
