"""The Hopper path: operands read and D stored through device-built tensor descriptors (TMA), flattened tile loop.

On the CPU the same kernel runs in the Triton interpreter, descriptors included; each case also asserts which
operands really went through a descriptor, so that a silent fallback to pointers cannot pass for coverage.
"""

import dataclasses

import pytest
import torch

from cases import DTYPES, Case
from reference import assert_gemm_close, randn
from smgemm._device import DeviceSpec, device_spec
from smgemm._gemm import gemm
from smgemm._launch import Operands, operands_alignment, staged, static_args
from smgemm._launch import tma_mode as _tma_mode
from smgemm.plan import TileConfig, decide, make_plan

HOPPER = TileConfig(32, 64, 32, num_warps=4, num_stages=2, tma=True, tma_store=True, flatten=True)


def test_tma_mode_follows_layout_and_alignment():
    x = torch.empty(64, 72, dtype=torch.float16)
    assert _tma_mode(x) == 1  # row-major, 144-byte rows
    assert _tma_mode(x.t()) == 2  # column-major view
    assert _tma_mode(x[:, 1:]) == 0  # base 2 bytes past a 16-byte boundary
    assert _tma_mode(torch.empty(64, 70, dtype=torch.float16)) == 0  # 140-byte rows
    assert _tma_mode(torch.empty(64, 70, dtype=torch.float16).t()) == 0
    assert _tma_mode(x[:, ::2]) == 0  # no unit stride
    assert _tma_mode(torch.empty(1, 72, dtype=torch.float16).expand(64, 72)) == 0  # stride 0
    assert _tma_mode(torch.empty(64, 8, dtype=torch.float8_e4m3fn)) == 0  # 8-byte rows
    assert _tma_mode(torch.empty(64, 16, dtype=torch.float8_e4m3fn)) == 1


@pytest.mark.parametrize("schedule", ["persistent", "streamk"])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32", "fp8"])
def test_descriptor_operands_every_layout(dtype, layout, schedule, device):
    # 80 x 96 x 160: every tile edge crossed (80 = 2 * 32 + 16 rows), TMA-legal strides in every dtype and layout.
    cfg = dataclasses.replace(HOPPER, block_k=32 if dtype == "fp8" else 16)
    a, b = Case(80, 96, 160, dtype, layout).operands(device)
    assert (_tma_mode(a), _tma_mode(b)) == ({"n": 1, "t": 2}[layout[0]], {"n": 1, "t": 2}[layout[1]])
    out = gemm(a, b, config=cfg, schedule=schedule, num_sms=4)
    assert _tma_mode(out) == 1
    assert_gemm_close(out, a, b)


@pytest.mark.parametrize("schedule", ["persistent", "streamk"])
def test_descriptor_store_with_epilogue_and_in_place(schedule, device):
    a = randn((72, 96), torch.float16, device)
    b = randn((128, 96), torch.float16, device).t()
    bias = randn((128,), torch.float32, device)
    out = gemm(a, b, c=bias, alpha=0.5, beta=2.0, config=HOPPER, schedule=schedule, num_sms=3)
    assert_gemm_close(out, a, b, alpha=0.5, beta=2.0, c=bias)
    c = randn((72, 128), torch.float16, device)
    expected_c = c.clone()
    gemm(a, b, c=c, beta=-1.0, out=c, config=HOPPER, schedule=schedule, num_sms=3)
    assert_gemm_close(c, a, b, beta=-1.0, c=expected_c)
    c32 = randn((72, 128), torch.float32, device)  # 4 bytes: read and stored a column quarter at a time
    out = gemm(a, b, c=c32, beta=-1.0, out_dtype=torch.float32, config=HOPPER, schedule=schedule, num_sms=3)
    assert_gemm_close(out, a, b, beta=-1.0, c=c32)


@pytest.mark.parametrize("schedule", ["persistent", "streamk"])
def test_whole_tile_store(schedule, device):
    """`TileConfig.whole_store`: one descriptor store a tile (D_DESC 1), 2-D and batched, tiles cut at both edges,
    with a bias; with a C matrix (2- or 4-byte) the tile is stored in parts (D_DESC 2)."""
    from smgemm._launch import Operands, static_args

    whole = dataclasses.replace(HOPPER, whole_store=True)
    a = randn((72, 96), torch.float16, device)
    b = randn((136, 96), torch.float16, device).t()
    c = randn((72, 136), torch.float16, device)
    out = gemm(a, b, c=c, alpha=0.5, beta=2.0, config=whole, schedule=schedule, num_sms=3)
    assert_gemm_close(out, a, b, alpha=0.5, beta=2.0, c=c)
    plan = make_plan(72, 136, 96, torch.float16, device_spec(a.device), schedule=schedule, num_sms=3, config=whole)
    assert static_args(plan, Operands(a, b, out, c), 0, 0, False)[1]["D_DESC"] == 2
    bias = randn((136,), torch.float16, device)
    out = gemm(a, b, c=bias, alpha=0.5, beta=2.0, config=whole, schedule=schedule, num_sms=3)
    assert_gemm_close(out, a, b, alpha=0.5, beta=2.0, c=bias)
    assert static_args(plan, Operands(a, b, out, bias.expand(72, 136)), 0, 0, False)[1]["D_DESC"] == 1
    c32 = c.float()
    out = gemm(a, b, c=c32, beta=-1.0, out_dtype=torch.float32, config=whole, schedule=schedule, num_sms=3)
    assert_gemm_close(out, a, b, beta=-1.0, c=c32)
    assert static_args(plan, Operands(a, b, out, c32), 0, 0, False)[1]["D_DESC"] == 2
    a3, b3 = randn((3, 40, 96), torch.float16, device), randn((3, 96, 72), torch.float16, device)
    out3 = torch.full((3, 40, 72), float("nan"), dtype=torch.float16, device=device)
    gemm(a3, b3, out=out3, config=whole, schedule=schedule, num_sms=3)
    plan3 = make_plan(40, 72, 96, torch.float16, device_spec(a.device), schedule=schedule, num_sms=3, config=whole,
                      batch=3)
    assert static_args(plan3, Operands(a3, b3, out3), 0, 0, False)[1]["D_DESC"] == 1
    for i in range(3):
        assert_gemm_close(out3[i], a3[i], b3[i])


def test_four_byte_c_quarters_narrower_than_a_store_box_use_pointers(device):
    """A 4-byte C matrix is stored a column quarter at a time; a quarter of a 16-column tile of 2-byte output spans 8
    bytes, less than a TMA store box may, so that output is stored through pointers (D_DESC 0), and right."""
    from smgemm._launch import Operands, static_args

    narrow = dataclasses.replace(HOPPER, block_n=16, block_k=16)
    a = randn((72, 96), torch.float16, device)
    b = randn((136, 96), torch.float16, device).t()
    c32 = randn((72, 136), torch.float32, device)
    out = gemm(a, b, c=c32, beta=-1.0, config=narrow, num_sms=3)
    assert out.dtype == torch.float16
    assert_gemm_close(out, a, b, beta=-1.0, c=c32)
    plan = make_plan(72, 136, 96, torch.float16, device_spec(a.device), num_sms=3, config=narrow)
    assert static_args(plan, Operands(a, b, out, c32), 0, 0, False)[1]["D_DESC"] == 0
    assert static_args(plan, Operands(a, b, out, c32.half()), 0, 0, False)[1]["D_DESC"] == 2


def test_fp8_scales_through_descriptors(device):
    a, b = Case(72, 96, 64, "fp8", "nt").operands(device)
    sa = torch.rand(72, 1, device=device) + 0.5
    sb = torch.rand(1, 96, device=device) + 0.5
    out = gemm(a, b, scale_a=sa, scale_b=sb, config=dataclasses.replace(HOPPER, block_k=32), num_sms=5)
    assert_gemm_close(out, a, b, scale_a=sa, scale_b=sb)


def test_layouts_tma_cannot_read_fall_back_to_pointers(device):
    # K = 70 fp16: 140-byte rows; an offset view: a misaligned base; a column-major out: no descriptor store.
    a = randn((72, 70), torch.float16, device)
    b_full = randn((96, 71), torch.float16, device)
    b = b_full[:, 1:].t()
    assert _tma_mode(a) == 0 and _tma_mode(b) == 0
    out = torch.full((96, 72), float("nan"), dtype=torch.float16, device=device).t()
    assert _tma_mode(out) == 2
    gemm(a, b, out=out, config=HOPPER, num_sms=4)
    assert_gemm_close(out, a, b)
    # A readable through TMA beside a B that is not: each operand decides on its own.
    a2 = randn((72, 64), torch.float16, device)
    b2 = randn((64, 96), torch.float16, device)[:, :90]  # rows 192 bytes apart, but 90 columns
    assert _tma_mode(a2) == 1 and _tma_mode(b2) == 1
    assert_gemm_close(gemm(a2, b2, config=HOPPER, num_sms=4), a2, b2)


def test_planner_takes_the_hopper_path_on_large_tiles_only():
    spec = DeviceSpec("NVIDIA H200", 132, 232448, (9, 0))
    large = make_plan(4096, 4096, 4096, torch.bfloat16, spec).config
    assert (large.block_m, large.block_n) == (128, 256)
    assert large.tma and large.tma_store and large.flatten
    assert make_plan(1024, 6144, 4096, torch.bfloat16, spec).config.tma  # 128 x 128 tiles (measured faster)
    shapes = [(16, 4096, 4096), (128, 4096, 4096), (128, 14336, 4096), (1024, 1024, 1024), (64, 8192, 8192)]
    for m, n, k in shapes:
        cfg = make_plan(m, n, k, torch.bfloat16, spec).config
        hopper = cfg.block_m * cfg.block_n >= 128 * 128
        assert cfg.tma == cfg.tma_store == cfg.flatten == hopper, (m, n, k, cfg)
    assert not make_plan(16, 4096, 4096, torch.bfloat16, spec).config.tma


H200 = DeviceSpec("NVIDIA H200", 132, 232448, (9, 0))


def _decided(m, n, k, dtype=torch.bfloat16, rows=16, **kw):
    """decide()'s plan and the model's own (make_plan) for operands whose rows start aligned to `rows` elements."""
    operands = ((m * k, rows, rows), (n * k, rows, rows))
    return decide(m, n, k, dtype, H200, operands=operands, **kw), make_plan(m, n, k, dtype, H200, **{
        key: value for key, value in kw.items() if key in ("num_sms", "c_matrix")})


def test_planner_moves_persistent_four_warp_tiles_onto_the_hopper_path_where_tma_reads_them():
    # plan.hopper_path: the model's persistent 64 x 128 / 128 x 64 / 64 x 64 tiles (4 warps, 16 bits, K steps of >= 128
    # bytes, M > 64, no C matrix) take TMA loads, a flattened loop and a whole TMA store, after the staging decision.
    for m, n, k, num_sms in ((520, 1030, 128, None), (1461, 693, 480, None), (66, 4917, 152, 66),
                             (73, 142, 232, None), (801, 160, 2336, 66)):
        plan, modelled = _decided(m, n, k, num_sms=num_sms)
        cfg = plan.config
        assert (cfg.block_m, cfg.block_n, cfg.num_warps) in ((64, 128, 4), (128, 64, 4), (64, 64, 4)), (m, n, k)
        assert plan.sk_tiles == 0
        assert not modelled.config.tma and modelled.config == dataclasses.replace(
            cfg, tma=False, tma_store=False, flatten=False, whole_store=False), (m, n, k)
        assert cfg.tma and cfg.tma_store and cfg.flatten and cfg.whole_store, (m, n, k)
        assert _decided(m, n, k, torch.float16, num_sms=num_sms)[0].config == cfg
        # not with a C matrix, nor for 4-byte elements (TF32), nor at M = 64 (measured level or slower there)
        assert not _decided(m, n, k, num_sms=num_sms, c_matrix=True)[0].config.tma
        assert not decide(m, n, k, torch.float32, H200, tf32=True, num_sms=num_sms).config.tma
    plan, modelled = _decided(64, 28672, 4096)
    assert (plan.config.block_m, plan.config.block_n) == (64, 128) and plan.config == modelled.config
    assert not plan.config.tma


def test_planner_moves_streamk_four_warp_tiles_whose_last_row_tile_is_partial():
    # plan.hopper_path, `_hopper_streamk`: Stream-K grids of those tiles with 256-byte K steps move where M > 64 leaves
    # the last row tile partial; where M fills its row tiles (the Llama rows of M = 64 and 128) they stay.
    for m, n, k, num_sms in ((67, 2055, 10441, None), (105, 4272, 8273, None), (102, 6581, 3789, 66),
                             (75, 846, 11968, 66)):
        plan, modelled = _decided(m, n, k, num_sms=num_sms)
        cfg = plan.config
        assert plan.schedule == "streamk" and plan.sk_tiles > 0 and cfg.num_warps == 4, (m, n, k, plan)
        assert m % cfg.block_m and cfg.block_k * 2 >= 256
        assert cfg.tma and cfg.tma_store and cfg.flatten and cfg.whole_store, (m, n, k)
        assert modelled.config == dataclasses.replace(cfg, tma=False, tma_store=False, flatten=False, whole_store=False)
        assert not _decided(m, n, k, num_sms=num_sms, c_matrix=True)[0].config.tma
        # 8-byte rows read in place stay on the pointer path
        in_place, _ = _decided(m, n, k, num_sms=num_sms, rows=4)
        assert not in_place.config.flatten or (in_place.stage_a and in_place.stage_b), (m, n, k, in_place)
    # M filling its row tiles (the Llama rows), and 32 x 64 Stream-K tiles (measured slower there), stay
    for m, n, k, num_sms in ((128, 4096, 14336, None), (128, 4096, 8192, None), (64, 4096, 14336, 66),
                             (90, 228, 4455, None), (127, 98, 15782, None)):
        plan, modelled = _decided(m, n, k, num_sms=num_sms)
        assert plan.schedule == "streamk" and plan.config == modelled.config and not plan.config.tma, (m, n, k, plan)


def test_a_streamk_hopper_tile_planned_for_the_device_runs_through_descriptors(device):
    # 65 x 192 x 4096 fp16 on 2 SMs plans Stream-K over three 128 x 64 tiles (one row tile, 65 of its 128 rows real)
    # on the Hopper path: A, B and D through descriptors, the partial tiles' sums fixed up, checked against float64.
    a = randn((65, 4096), torch.float16, device)
    b = randn((192, 4096), torch.float16, device).t()
    plan = decide(65, 192, 4096, torch.float16, device_spec(a.device), num_sms=2, operands=operands_alignment(a, b))
    assert plan.schedule == "streamk" and plan.sk_tiles > 0 and plan.config.tma and plan.config.flatten
    out = torch.empty(65, 192, dtype=torch.float16, device=device)
    meta = static_args(plan, staged(plan, Operands(a, b, out)), 0, 0, False)[1]
    assert (meta["A_DESC"], meta["B_DESC"], meta["D_DESC"]) == ("stored", "transposed", 1)
    assert_gemm_close(gemm(a, b, num_sms=2), a, b)


@pytest.mark.parametrize("m, n, k", [(720, 1030, 764), (263, 2830, 3004), (1712, 377, 482), (3248, 303, 276)])
def test_small_tiles_take_the_hopper_path_only_where_tma_reads_every_operand(m, n, k):
    # Rows aligned to 4 bf16 elements (8 bytes) with 8-byte K-runs: read in place through pointers, never in a
    # flattened TMA loop (measured 3-6x slower); rows of 16 bytes, or operands staged into such copies, go through TMA.
    for rows in (1, 2, 4, 8, 16):
        plan, _ = _decided(m, n, k, rows=rows)
        cfg = plan.config
        if cfg.block_m * cfg.block_n >= 128 * 128 or cfg.num_warps != 4:
            continue  # the in-place 8-warp tiles of 1- and 2-element rows
        readable = all(staged or rows * 2 >= 16 for staged in (plan.stage_a, plan.stage_b))
        assert cfg.tma == cfg.flatten == readable, (m, n, k, rows, plan)
        assert readable == (rows != 4), (m, n, k, rows, plan)


def test_a_small_hopper_tile_planned_for_the_device_runs_through_descriptors(device):
    # 520 x 1024 x 64 fp16 plans persistent 64 x 128 tiles on the Hopper path (72 programs): A, B and D through
    # descriptors, checked element by element against float64.
    a = randn((520, 64), torch.float16, device)
    b = randn((1024, 64), torch.float16, device).t()
    plan = decide(520, 1024, 64, torch.float16, device_spec(a.device), operands=operands_alignment(a, b))
    assert (plan.config.block_m, plan.config.block_n) == (64, 128) and plan.config.tma and plan.schedule == "persistent"
    out = torch.empty(520, 1024, dtype=torch.float16, device=device)
    meta = static_args(plan, staged(plan, Operands(a, b, out)), 0, 0, False)[1]
    assert (meta["A_DESC"], meta["B_DESC"], meta["D_DESC"], meta["FLATTEN"]) == ("stored", "transposed", 1, True)
    assert_gemm_close(gemm(a, b), a, b)
    # with a bias row (the whole store, C read as a row), and into an fp32 output (stored in halves)
    bias = randn((1024,), torch.float16, device)
    assert_gemm_close(gemm(a, b, c=bias, beta=0.5), a, b, beta=0.5, c=bias)
    assert_gemm_close(gemm(a, b, out_dtype=torch.float32), a, b)
    # 73 x 142 x 232 plans six persistent 64 x 64 tiles on the Hopper path, every tile cut at an edge
    a = randn((73, 232), torch.float16, device)
    b = randn((142, 232), torch.float16, device).t()
    plan = decide(73, 142, 232, torch.float16, device_spec(a.device), operands=operands_alignment(a, b))
    assert (plan.config.block_m, plan.config.block_n) == (64, 64) and plan.config.tma and plan.schedule == "persistent"
    assert_gemm_close(gemm(a, b), a, b)


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_default_plan_on_a_large_tile_shape(dtype, device):
    # On 2 SMs, 256 x 256 x 128 plans 128 x 256 tiles: the Hopper path users get by default, run on the CPU too.
    a, b = Case(256, 256, 128, dtype, "nt").operands(device)
    plan = make_plan(256, 256, 128, DTYPES[dtype], device_spec(a.device), num_sms=2)
    assert plan.config.tma and (plan.config.block_m, plan.config.block_n) == (128, 256)
    assert_gemm_close(gemm(a, b, num_sms=2), a, b)


@pytest.mark.parametrize("width", [90, 96])
def test_descriptor_store_stays_inside_a_view(width, device):
    # out is a 72 x width window (rows 128 elements apart) of a larger buffer. 96 halves (192 bytes) go through the
    # TMA store, which clips at the view's edge; 90 (180 bytes) would spill to the next 16 bytes on a GPU
    # (triton-lang/triton#11583), so it must take the pointer store.
    a = randn((72, 64), torch.float16, device)
    b = randn((width, 64), torch.float16, device).t()
    buf = torch.full((80, 128), 7.0, dtype=torch.float16, device=device)
    out = buf[:72, :width]
    assert _tma_mode(out) == 1
    gemm(a, b, out=out, config=HOPPER, num_sms=4)
    assert_gemm_close(out, a, b)
    outside = torch.ones_like(buf, dtype=torch.bool)
    outside[:72, :width] = False
    assert (buf[outside] == 7.0).all()


def test_sm_scaling_plot(tmp_path):
    from smgemm.tools.bench import plot_budgets

    rows = [{"M": 64, "N": 64, "K": 64, "num_sms": n, "smgemm TFLOP/s": 3.0 * n, "cuBLASLt carve-out TFLOP/s": 2.9 * n}
            for n in (16, 32, 66)]
    path = tmp_path / "plot.png"
    message = plot_budgets(rows, str(path))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "matplotlib is not installed" in message and not path.exists()
    else:
        assert message == f"wrote {path}" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_hopper_path_plans_read_only_what_tma_can_read_on_random_draws():
    # Over random draws, alignments, budgets and both 16-bit dtypes: every plan whose loop is flattened on the Hopper
    # path reads operands that TMA can read (16-byte rows, or staged copies); the small tiles that take it do so only
    # as `plan.hopper_path` allows (the model's own plan otherwise, on the pointer path).
    from smgemm.plan import _HOPPER_SMALL_TILES, _STREAMING_MAX_M
    from smgemm.tools.bench import random_shapes

    for seed in (0, 7, 16, 18):
        for m, n, k, _ in random_shapes(seed):
            for rows, dtype, num_sms in ((16, torch.bfloat16, None), (8, torch.float16, 66), (4, torch.bfloat16, None),
                                         (2, torch.float16, 16), (1, torch.bfloat16, 66)):
                plan, _ = _decided(m, n, k, dtype, rows=rows, num_sms=num_sms)
                cfg = plan.config
                if cfg.flatten:
                    assert all(staged or rows >= 8 for staged in (plan.stage_a, plan.stage_b)), (m, n, k, rows, plan)
                small = (cfg.block_m, cfg.block_n) in _HOPPER_SMALL_TILES and cfg.num_warps == 4
                if small and cfg.tma:
                    assert m > _STREAMING_MAX_M and (plan.schedule == "persistent" or (
                        m % cfg.block_m and cfg.block_k * 2 >= 256)), (m, n, k, rows, plan)
