"""Correctness of the GEMM kernels (through the Triton interpreter on CPU, compiled on a GPU)."""

import pytest
import torch

import smgemm
from cases import DTYPES, Case, all_cases
from reference import assert_gemm_close, randn
from smgemm._device import device_spec
from smgemm._gemm import gemm
from smgemm.plan import TileConfig, make_plan

SMALL = TileConfig(16, 32, 16, num_warps=4, num_stages=2)  # many tiles and K-iterations on small shapes
SMALL_FP8 = TileConfig(16, 32, 32, num_warps=4, num_stages=2)  # fp8 dots need K >= 32


@pytest.mark.parametrize("case", all_cases(), ids=lambda c: c.id)
def test_matmul_matches_float64(case: Case, device):
    a, b = case.operands(device)
    out = smgemm.matmul(a, b)
    assert out.shape == (case.m, case.n)
    assert out.dtype == (torch.bfloat16 if case.dtype == "fp8" else DTYPES[case.dtype])
    assert_gemm_close(out, a, b)


@pytest.mark.parametrize("schedule", ["data_parallel", "persistent", "streamk", "auto"])
@pytest.mark.parametrize("num_sms", [None, 1, 3, 10_000])
def test_schedules_and_budgets_cover_every_tile(schedule, num_sms, device):
    # 7 x 5 tiles of 16 x 32 with a K tail: every program runs several tiles when the budget is small.
    a = randn((100, 70), torch.float16, device)
    b = randn((70, 130), torch.float16, device, transposed=True)
    out = torch.full((100, 130), float("nan"), dtype=torch.float16, device=device)
    gemm(a, b, out=out, schedule=schedule, num_sms=num_sms, config=SMALL)
    assert_gemm_close(out, a, b)


@pytest.mark.parametrize("group_m", [1, 3, 7, 16])
@pytest.mark.parametrize("schedule", ["persistent", "streamk"])
def test_tile_groups_of_any_depth_cover_every_tile(group_m, schedule, device):
    # 7 x 5 tiles walked in groups of 1, 3 (a last group of one row), 7 (all rows) and 16 (more than there are): a
    # tuning file may set any group_m
    a = randn((100, 70), torch.float16, device)
    b = randn((70, 130), torch.float16, device, transposed=True)
    out = torch.full((100, 130), float("nan"), dtype=torch.float16, device=device)
    config = TileConfig(16, 32, 16, group_m=group_m, num_warps=4, num_stages=2)
    gemm(a, b, out=out, schedule=schedule, num_sms=3, config=config)
    assert_gemm_close(out, a, b)


@pytest.mark.parametrize("dtype", ["bf16", "fp32", "fp8"])
def test_small_tiles_all_dtypes(dtype, device):
    a, b = Case(40, 50, 70, dtype, "tn").operands(device)
    assert_gemm_close(gemm(a, b, num_sms=3, config=SMALL_FP8 if dtype == "fp8" else SMALL), a, b)


def test_k_loop_even_and_tail(device):
    for k in (64, 65, 16, 17):
        a, b = Case(33, 40, k, "fp16", "nt").operands(device)
        assert_gemm_close(gemm(a, b, config=SMALL), a, b)


@pytest.mark.parametrize("schedule", ["persistent", "streamk"])
@pytest.mark.parametrize("dtype", ["fp16", "fp8"])
def test_fewer_rows_than_a_tile_mask_them(dtype, schedule, device):
    """A dense 2-D A of at most a quarter of the tile's rows, read through pointers, loads only its rows (MASK_M),
    with a K tail and without; with more rows, batched, or through a descriptor, they are wrapped as everywhere
    else."""
    from smgemm._launch import Operands, static_args

    cfg = SMALL_FP8 if dtype == "fp8" else SMALL
    spec = device_spec(torch.device(device))
    for m, k in ((1, 64), (4, 70), (5, 70), (16, 70)):
        a, b = Case(m, 50, k, dtype, "nt").operands(device)
        out = gemm(a, b, num_sms=3, config=cfg, schedule=schedule)
        assert_gemm_close(out, a, b)
        plan = make_plan(m, 50, k, a.dtype, spec, schedule=schedule, num_sms=3, config=cfg)
        assert static_args(plan, Operands(a, b, out), 0, 0, False)[1]["MASK_M"] == (4 * m <= cfg.block_m)
    if dtype == "fp16":
        a3, b3 = randn((3, 3, 70), torch.float16, device), randn((3, 70, 40), torch.float16, device)
        out3 = gemm(a3, b3, num_sms=3, config=cfg, schedule=schedule)
        for i in range(3):
            assert_gemm_close(out3[i], a3[i], b3[i])
        plan = make_plan(3, 40, 70, torch.float16, spec, schedule=schedule, num_sms=3, config=cfg, batch=3)
        assert not static_args(plan, Operands(a3, b3, out3), 0, 0, False)[1]["MASK_M"]
        tma = TileConfig(16, 32, 16, num_warps=4, num_stages=2, tma=True)  # A through a descriptor: TMA zero-fills
        a, b = Case(2, 48, 64, dtype, "nt").operands(device)
        plan = make_plan(2, 48, 64, a.dtype, spec, schedule=schedule, num_sms=3, config=tma)
        assert not static_args(plan, Operands(a, b, gemm(a, b, config=tma)), 0, 0, False)[1]["MASK_M"]


@pytest.mark.parametrize("tma", [False, True])
@pytest.mark.parametrize("dtype", ["fp16", "fp8"])
def test_edge_tiles_end_at_the_edge(dtype, tma, device, monkeypatch):
    """Whole tiles over a long K loop, without a C matrix: the last row and column of tiles start one tile before the
    edge (`_launch.edge_tiles_clamped`), overlapping the tiles before them. Every element is right (rows and columns
    shared by two tiles, a bias and fp8's per-row and per-column scales at the shifted rows and columns, a K tail, a
    batch), out's neighbours in a wider buffer are untouched, and plans with split tiles, a C matrix or a short K loop
    keep their tiles in place."""
    from smgemm._launch import Operands, static_args

    fp8 = dtype == "fp8"
    # 3 x 2 tiles; the last row starts at 48 (not 64), the last column at 32 (not 64): 16-element multiples
    cfg = TileConfig(32, 64, 32 if fp8 else 16, num_warps=4, num_stages=2, tma=tma, tma_store=tma)
    spec = device_spec(torch.device(device))
    m, n, k = 70, 90, 520
    out_dtype = torch.bfloat16 if fp8 else torch.float16

    def clamps(plan, a, b, out, c=None, scale_a=None, scale_b=None):
        meta = static_args(plan, Operands(a, b, out, c, scale_a, scale_b), 0, 0, False)[1]
        return meta["CLAMP_M"], meta["CLAMP_N"]

    a, b = Case(m, n, k, dtype, "nt").operands(device)
    sa = torch.rand(m, 1, device=device) + 0.5 if fp8 else None
    sb = torch.rand(1, n, device=device) + 0.5 if fp8 else None
    bias = torch.arange(n, dtype=out_dtype, device=device) * 0.25
    for schedule, num_sms in (("data_parallel", None), ("persistent", 3)):
        big = torch.full((m, n + 24), float("nan"), dtype=out_dtype, device=device)
        out = big[:, 8:8 + n]
        plan = make_plan(m, n, k, a.dtype, spec, schedule=schedule, num_sms=num_sms, config=cfg)
        assert clamps(plan, a, b, out, bias.expand(m, n), sa, sb) == (True, True)
        gemm(a, b, c=bias, out=out, scale_a=sa, scale_b=sb, schedule=schedule, num_sms=num_sms, config=cfg)
        assert_gemm_close(out, a, b, beta=1.0, c=bias, scale_a=sa, scale_b=sb)
        assert big[:, :8].isnan().all() and big[:, 8 + n:].isnan().all()
        if device == "cuda":  # a shared row is the same bits from either tile: no race between the two stores
            with monkeypatch.context() as patch:
                patch.setattr(smgemm._launch, "edge_tiles_clamped", lambda *args, **kwargs: (False, False))
                in_place = gemm(a, b, c=bias, scale_a=sa, scale_b=sb, schedule=schedule, num_sms=num_sms, config=cfg)
            smgemm._gemm._SEEN_CALLS.clear()  # that call's remembered launch has its tiles in place
            assert torch.equal(out, in_place)
    plan = make_plan(m, n, k, a.dtype, spec, schedule="streamk", num_sms=7, config=cfg)
    assert plan.sk_tiles
    out = gemm(a, b, scale_a=sa, scale_b=sb, schedule="streamk", num_sms=7, config=cfg)
    assert_gemm_close(out, a, b, scale_a=sa, scale_b=sb)
    assert clamps(plan, a, b, out, None, sa, sb) == (False, False)
    if fp8:
        return
    a3, b3 = randn((2, m, k), torch.float16, device), randn((2, k, n), torch.float16, device)
    out3 = gemm(a3, b3, num_sms=3, config=cfg, schedule="persistent")
    for i in range(2):
        assert_gemm_close(out3[i], a3[i], b3[i])
    c = randn((m, n), torch.float16, device)
    plan = make_plan(m, n, k, a.dtype, spec, schedule="persistent", num_sms=3, config=cfg, c_matrix=True)
    assert clamps(plan, a, b, c, c) == (False, False)
    a, b = Case(m, n, 72, "fp16", "nt").operands(device)  # a short K loop
    plan = make_plan(m, n, 72, a.dtype, spec, schedule="persistent", num_sms=3, config=cfg)
    assert clamps(plan, a, b, gemm(a, b, config=cfg)) == (False, False)


def test_out_dtype_override(device):
    a, b = Case(20, 30, 40, "bf16", "nt").operands(device)
    out = smgemm.matmul(a, b, out_dtype=torch.float32)
    assert out.dtype == torch.float32
    assert_gemm_close(out, a, b)


# ---------------------------------------------------------------- epilogue: alpha, beta, C / bias, in place


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("c_shape", [(50,), (1, 50), (40, 1), (), (40, 50)], ids=str)
def test_addmm_broadcast_input(dtype, c_shape, device):
    a, b = Case(40, 50, 24, dtype, "nt").operands(device)
    c = randn(c_shape, DTYPES[dtype], device)
    out = smgemm.addmm(c, a, b, alpha=0.5, beta=-1.5)
    assert_gemm_close(out, a, b, alpha=0.5, beta=-1.5, c=c)
    torch.testing.assert_close(out, torch.addmm(c.double(), a.double(), b.double(), alpha=0.5, beta=-1.5)
                               .to(out.dtype), atol=1e-1, rtol=2e-2)


def test_bias_is_along_n_in_every_tile(device):
    # Distinct values per column, M != N, several tiles: a bias added along M or dropped in some tile fails.
    # Stream-K on 4 programs: 12 whole tiles, then 3 tiles whose 4 K-iterations are split.
    a, b = Case(70, 90, 60, "fp32", "nt").operands(device)
    bias = torch.arange(90, dtype=torch.float32, device=device) * 10.0
    for schedule, num_sms in (("data_parallel", None), ("persistent", 2), ("streamk", 4)):
        plan = make_plan(70, 90, 60, torch.float32, device_spec(a.device), schedule=schedule, num_sms=num_sms,
                         config=SMALL)
        assert plan.schedule == schedule
        out = gemm(a, b, c=bias, schedule=schedule, num_sms=num_sms, config=SMALL)
        assert_gemm_close(out, a, b, beta=1.0, c=bias)


def test_four_byte_c_matrix_in_every_tile(device):
    # A 4-byte C matrix is added a column quarter at a time: distinct values in every row and column, tiles cut at both
    # edges, and Stream-K's finishing programs (which add C to column blocks narrower than the tile).
    a, b = Case(70, 90, 60, "fp32", "nt").operands(device)
    c = randn((70, 90), torch.float32, device)
    for schedule, num_sms in (("data_parallel", None), ("persistent", 2), ("streamk", 4)):
        out = gemm(a, b, c=c, alpha=0.5, beta=-1.5, schedule=schedule, num_sms=num_sms, config=SMALL)
        assert_gemm_close(out, a, b, alpha=0.5, beta=-1.5, c=c)


def test_in_place_c_update(device):
    a, b = Case(48, 64, 32, "fp32", "tn").operands(device)
    c = randn((48, 64), torch.float32, device)
    c0 = c.clone()
    out = smgemm.addmm(c, a, b, alpha=2.0, beta=0.25, out=c)
    assert out.data_ptr() == c.data_ptr()
    assert_gemm_close(c, a, b, alpha=2.0, beta=0.25, c=c0)


def test_beta_zero_ignores_nan_input_and_out(device):
    a, b = Case(33, 45, 16, "bf16", "nn").operands(device)
    c = torch.full((33, 45), float("nan"), dtype=torch.bfloat16, device=device)
    out = smgemm.addmm(c, a, b, beta=0.0, out=c)  # C is NaN and is the output: must not be read
    assert_gemm_close(out, a, b)


def test_strided_out_is_written_only_in_place(device):
    a, b = Case(30, 20, 16, "fp16", "nn").operands(device)
    big = torch.full((30, 50), 7.0, dtype=torch.float16, device=device)
    view = big[:, 10:30]  # non-contiguous rows
    smgemm.matmul(a, b, out=view)
    assert_gemm_close(view, a, b)
    assert (big[:, :10] == 7).all() and (big[:, 30:] == 7).all()


def test_out_beside_its_operands_in_one_buffer(device):
    """Column slices of one buffer share its address range but no element: out may be one of them while A, B and C
    are others (e.g. a fused projection's outputs beside its inputs), and the operands keep their values. Slices
    that do share an element are refused, naming the operand."""
    buf = randn((30, 80), torch.float16, device)
    a, c, out = buf[:, :16], buf[:, 16:36], buf[:, 40:60]
    b = randn((16, 20), torch.float16, device)
    a0, c0, rest = a.clone(), c.clone(), buf[:, 60:].clone()
    smgemm.addmm(c, a, b, out=out)
    assert_gemm_close(out, a0, b, beta=1.0, c=c0)
    assert torch.equal(a, a0) and torch.equal(c, c0) and torch.equal(buf[:, 60:], rest)
    w = randn((20, 16), torch.float16, device)
    smgemm.matmul(buf[:, :16], w.t(), out=buf[:, 16:36])  # B = w.t(): a transposed view of another buffer
    assert_gemm_close(buf[:, 16:36], a0, w.t())
    with pytest.raises(ValueError, match="out overlaps a"):
        smgemm.matmul(buf[:, :16], b, out=buf[:, 10:30])  # columns 10-15 are in both
    with pytest.raises(ValueError, match="out overlaps a"):
        smgemm.matmul(buf[1:, :16], b, out=buf[:-1, 15:35])  # buf[i, 15] is in A's row i - 1 and out's row i
    rows = randn((32, 20), torch.float16, device)  # B in the even rows, out in the odd ones
    x, b_even = randn((16, 16), torch.float16, device), rows[0::2]
    b0 = b_even.clone()
    smgemm.matmul(x, b_even, out=rows[1::2])
    assert_gemm_close(rows[1::2], x, b0)
    assert torch.equal(b_even, b0)
    with pytest.raises(ValueError, match="out overlaps b"):
        smgemm.matmul(x, rows[0::2], out=rows[:16])  # rows 0-15 hold B's rows 0-7


def test_linear_matches_torch(device):
    x = randn((2, 3, 40), torch.float16, device)
    w = randn((24, 40), torch.float16, device)
    bias = randn((24,), torch.float16, device)
    y = smgemm.linear(x, w, bias)
    assert y.shape == (2, 3, 24)
    assert_gemm_close(y.reshape(6, 24), x.reshape(6, 40), w.t(), beta=1.0, c=bias)


# ---------------------------------------------------------------- fp8 scales


@pytest.mark.parametrize("kind", ["tensor", "row-col", "mixed"])
def test_fp8_scales(kind, device):
    m, n, k = 36, 40, 48
    a, b = Case(m, n, k, "fp8", "nt").operands(device)
    if kind == "tensor":
        sa, sb = torch.tensor(0.5, device=device), torch.tensor([3.0], device=device)
    elif kind == "row-col":
        sa = torch.rand(m, 1, device=device) + 0.5
        sb = torch.rand(1, n, device=device) + 0.5
    else:
        sa, sb = torch.rand(m, 1, device=device) + 0.5, torch.tensor(2.0, device=device)
    bias = randn((n,), torch.bfloat16, device)
    out = smgemm.addmm(bias, a, b, scale_a=sa, scale_b=sb)
    assert out.dtype == torch.bfloat16
    assert_gemm_close(out, a, b, beta=1.0, c=bias, scale_a=sa, scale_b=sb)


def test_fp8_linear_per_channel_scales(device):
    x = randn((5, 32), torch.float8_e4m3fn, device)
    w = randn((24, 32), torch.float8_e4m3fn, device)
    sx, sw = torch.rand(5, 1, device=device) + 0.5, torch.rand(24, device=device) + 0.5
    y = smgemm.linear(x, w, scale_a=sx, scale_b=sw, out_dtype=torch.float32)
    assert_gemm_close(y, x, w.t(), scale_a=sx, scale_b=sw)


# ---------------------------------------------------------------- zero-size problems


def test_zero_sized_m_and_n(device):
    for m, n in ((0, 5), (5, 0)):
        a, b = randn((m, 8), torch.float16, device), randn((8, n), torch.float16, device)
        out = smgemm.matmul(a, b)
        assert out.shape == (m, n)


def test_zero_k_gives_beta_input(device):
    a, b = randn((4, 0), torch.float32, device), randn((0, 6), torch.float32, device)
    c = randn((6,), torch.float32, device)
    torch.testing.assert_close(smgemm.addmm(c, a, b, beta=2.0), (2.0 * c).expand(4, 6))
    torch.testing.assert_close(smgemm.matmul(a, b), torch.zeros(4, 6, device=device))


def test_linear_with_empty_k_and_leading_dims(device):
    x, w = randn((2, 3, 0), torch.float32, device), randn((5, 0), torch.float32, device)
    bias = randn((5,), torch.float32, device)
    torch.testing.assert_close(smgemm.linear(x, w, bias), bias.expand(2, 3, 5))


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k", "dtype", "num_sms"), [
    (256, 4096, 8192, torch.bfloat16, None), (200, 4096, 8192, torch.bfloat16, None),
    (1024, 1024, 16384, torch.float16, None), (256, 2048, 8192, torch.bfloat16, 66),
    (256, 4096, 8192, torch.float8_e4m3fn, None), (320, 2048, 8192, torch.float8_e4m3fn, 100)])
def test_one_wave_of_64_x_128_tiles_over_long_k_loops(m, n, k, dtype, num_sms):
    """The planner's one-wave 64 x 128 plans (`plan._one_wave_64`; fp8 on 256-element K steps) compute within the
    dtypes' bounds."""
    a = randn((m, k), dtype, "cuda")
    w = randn((n, k), dtype, "cuda")
    spec = device_spec(a.device)
    if spec.num_sms == 132:  # (the H200's and H100's count, at which these sizes make one wave)
        plan = make_plan(m, n, k, dtype, spec, num_sms=num_sms)
        assert (plan.schedule, plan.config.block_m, plan.config.block_n, plan.config.tma) == \
            ("persistent", 64, 128, False), plan
    assert_gemm_close(smgemm.matmul(a, w.t(), num_sms=num_sms), a, w.t())
