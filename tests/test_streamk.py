"""Stream-K: split tiles, the fixup through the workspace, the epilogue once per element, determinism.

CPU runs go through the interpreter, which runs programs in order (pid 0 first): the same kernel, with its
waits on lower programs, runs unchanged there. GPU-only tests are marked `gpu`.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import smgemm
import smgemm._gemm
import smgemm._launch
import smgemm.plan
from cases import DTYPES, Case
from reference import assert_gemm_close, randn
from smgemm._device import device_spec
from smgemm._gemm import gemm
from smgemm.plan import TileConfig, make_plan

SMALL = TileConfig(16, 32, 16, num_warps=4, num_stages=2)
SMALL_FP8 = TileConfig(16, 32, 32, num_warps=4, num_stages=2)


@pytest.fixture
def split_waves(monkeypatch):
    """Call with 1 or 2: Stream-K plans made in the test split the last that many waves (plan.streamk_split)."""
    def force(waves):
        monkeypatch.setattr(smgemm.plan, "_candidates", lambda schedules: [(s, waves) for s in schedules])
        forget()

    def forget():
        smgemm.plan.make_plan.cache_clear()
        smgemm._gemm._SEEN_CALLS.clear()

    yield force
    monkeypatch.undo()
    forget()


def _flags(plan, ws):
    """The int64 flags after the partial tiles in a Stream-K workspace, one per program."""
    flags = ws[plan.num_programs * plan.config.block_m * plan.config.block_n:].view(torch.int64)
    assert flags.shape == (plan.num_programs,)
    return flags


def _plan(a, b, num_sms, config=SMALL, schedule="streamk"):
    m, k = a.shape
    return make_plan(m, b.shape[1], k, a.dtype, device_spec(a.device), schedule=schedule, num_sms=num_sms,
                     config=config)


@pytest.mark.parametrize("programs", [2, 3, 4, 5])
@pytest.mark.parametrize("k", [160, 150])  # 10 K-iterations, the last one a tail when k = 150
def test_one_tile_split_over_programs(programs, k, device):
    # One 16 x 32 output tile: every program holds a slice of its K-iterations; the last one runs the epilogue.
    a, b = Case(16, 30, k, "fp16", "nt").operands(device)
    bias = torch.arange(30, dtype=torch.float32, device=device)
    plan = _plan(a, b, programs)
    assert (plan.schedule, plan.dp_tiles, plan.sk_tiles, plan.num_programs) == ("streamk", 0, 1, programs)
    out = gemm(a, b, c=bias, alpha=0.5, beta=2.0, schedule="streamk", num_sms=programs, config=SMALL)
    assert_gemm_close(out, a, b, alpha=0.5, beta=2.0, c=bias)


def test_finisher_sums_each_column_block(device):
    # A 32 x 128 tile with 1 warp is finished 32 columns at a time (_launch.fixup_columns): 4 blocks, each the sum
    # of the lower programs' partials and the finisher's own, picked from its registers. N = 120 ends in block 4.
    cfg = TileConfig(32, 128, 16, num_warps=1, num_stages=2)
    assert smgemm._launch.fixup_columns(cfg) == 32
    a, b = Case(32, 120, 160, "fp16", "nt").operands(device)
    bias = torch.arange(120, dtype=torch.float32, device=device)
    assert _plan(a, b, 3, cfg).sk_tiles == 1
    out = gemm(a, b, c=bias, beta=1.0, schedule="streamk", num_sms=3, config=cfg)
    assert_gemm_close(out, a, b, beta=1.0, c=bias)


def test_a_tile_shared_by_more_programs_than_the_finisher_has_threads(device, monkeypatch):
    # One 16 x 16 tile of 70 K-iterations over 35 programs (2 each), with 1 warp: the finisher acquires 34 flags,
    # more than its 32 threads take at once (kernels.gemm: FLAG_LANES), and sums 34 lower partials two at a time.
    seen = []

    def garbage_workspace(plan, dev):
        seen.append(torch.randn(plan.workspace_numel, dtype=torch.float32, device=dev))
        return seen[-1]

    monkeypatch.setattr(smgemm._launch, "workspace", garbage_workspace)
    cfg = TileConfig(16, 16, 16, num_warps=1, num_stages=2)
    a, b = Case(16, 16, 70 * 16, "fp16", "nt").operands(device)
    bias = torch.randn(16, device=device)
    plan = _plan(a, b, 40, cfg)
    assert (plan.schedule, plan.sk_tiles, plan.num_programs) == ("streamk", 1, 35)
    out = gemm(a, b, c=bias, schedule="streamk", num_sms=40, config=cfg)
    assert_gemm_close(out, a, b, beta=1.0, c=bias)
    assert torch.equal(out, gemm(a, b, c=bias, schedule="streamk", num_sms=40, config=cfg))
    assert (_flags(plan, seen[-1])[:34] == 0).all(), \
        "every published flag, in both chunks of lanes, read and reset by the finisher"


def test_full_waves_then_split_tiles_with_edges(device, split_waves):
    # 7 x 5 = 35 tiles on 4 programs: 32 whole tiles (8 waves), then 3 tiles x 5 K-iterations over 4 programs.
    # M, N and K are not multiples of the tile.
    split_waves(1)
    a, b = Case(100, 130, 70, "fp16", "tn").operands(device)
    plan = _plan(a, b, 4)
    assert (plan.schedule, plan.dp_tiles, plan.sk_tiles, plan.k_iters) == ("streamk", 32, 3, 5)
    assert not plan.even_k
    assert_gemm_close(gemm(a, b, schedule="streamk", num_sms=4, config=SMALL), a, b)


def test_split_over_the_last_two_waves(device, split_waves):
    # 35 tiles on 4 programs, the last whole wave split too: 28 whole tiles, then 7 tiles x 5 K-iterations over 4
    # programs (8 or 9 each): ranges that finish one tile, hold a whole one and start a third.
    split_waves(2)
    a, b = Case(100, 130, 70, "fp16", "tn").operands(device)
    bias = torch.arange(130, dtype=torch.float32, device=device)
    plan = _plan(a, b, 4)
    assert (plan.schedule, plan.dp_tiles, plan.sk_tiles, plan.num_programs) == ("streamk", 28, 7, 4)
    out = gemm(a, b, c=bias, alpha=0.5, beta=2.0, schedule="streamk", num_sms=4, config=SMALL)
    assert_gemm_close(out, a, b, alpha=0.5, beta=2.0, c=bias)
    assert torch.equal(out, gemm(a, b, c=bias, alpha=0.5, beta=2.0, schedule="streamk", num_sms=4, config=SMALL))


@pytest.mark.parametrize("dtype", ["bf16", "fp32", "fp8"])
def test_every_dtype(dtype, device):
    a, b = Case(40, 50, 200, dtype, "nt").operands(device)
    cfg = SMALL_FP8 if dtype == "fp8" else SMALL
    assert _plan(a, b, 4, cfg).sk_tiles > 0  # 6 tiles: 4 whole, 2 split over 4 programs
    out = gemm(a, b, schedule="streamk", num_sms=4, config=cfg)
    assert out.dtype == (torch.bfloat16 if dtype == "fp8" else DTYPES[dtype])
    assert_gemm_close(out, a, b)


def test_fp8_scales_and_bias_applied_once(device):
    a, b = Case(20, 40, 128, "fp8", "nt").operands(device)
    sa, sb = torch.rand(20, 1, device=device) + 0.5, torch.rand(1, 40, device=device) + 0.5
    bias = randn((40,), torch.bfloat16, device)
    assert _plan(a, b, 5, SMALL_FP8).sk_tiles > 0
    out = gemm(a, b, c=bias, scale_a=sa, scale_b=sb, schedule="streamk", num_sms=5, config=SMALL_FP8)
    assert_gemm_close(out, a, b, beta=1.0, c=bias, scale_a=sa, scale_b=sb)


@pytest.mark.parametrize("c_shape", [(50,), (40, 1), (40, 50)], ids=str)
def test_epilogue_forms_once_per_element(c_shape, device):
    # Column ramp bias (distinct per N, M != N), a per-row input, and a full matrix: a term added along the
    # wrong axis, twice (once per partial), or never in some split tile fails the per-element bound.
    a, b = Case(40, 50, 200, "fp32", "nn").operands(device)
    c = torch.arange(torch.Size(c_shape).numel(), dtype=torch.float32, device=device).reshape(c_shape) * 10.0
    assert _plan(a, b, 4).sk_tiles > 0
    out = gemm(a, b, c=c, alpha=-1.5, beta=0.75, schedule="streamk", num_sms=4, config=SMALL)
    assert_gemm_close(out, a, b, alpha=-1.5, beta=0.75, c=c)


def test_in_place_c(device):
    a, b = Case(40, 50, 200, "fp32", "tn").operands(device)
    c = randn((40, 50), torch.float32, device)
    c0 = c.clone()
    assert _plan(a, b, 4).sk_tiles > 0
    gemm(a, b, c=c, alpha=2.0, beta=0.25, out=c, schedule="streamk", num_sms=4, config=SMALL)
    assert_gemm_close(c, a, b, alpha=2.0, beta=0.25, c=c0)


def test_bitwise_deterministic(device):
    a, b = Case(100, 130, 70, "bf16", "nt").operands(device)
    first = gemm(a, b, schedule="streamk", num_sms=4, config=SMALL)
    for _ in range(2):
        assert torch.equal(gemm(a, b, schedule="streamk", num_sms=4, config=SMALL), first)


def test_workspace_needs_no_reset_and_is_left_clean(device, monkeypatch):
    # The workspace arrives full of garbage (as from the caching allocator); flags of the programs that published a
    # partial are consumed back to 0, the others keep their bytes: nothing needs a memset before the next launch.
    seen = []

    def garbage_workspace(plan, dev):
        ws = torch.randn(plan.workspace_numel, dtype=torch.float32, device=dev)
        seen.append((plan, ws))
        return ws

    monkeypatch.setattr(smgemm._launch, "workspace", garbage_workspace)
    a, b = Case(16, 30, 160, "fp16", "nt").operands(device)
    for _ in range(2):
        assert_gemm_close(gemm(a, b, schedule="streamk", num_sms=5, config=SMALL), a, b)
    plan, ws = seen[-1]
    assert (_flags(plan, ws)[:-1] == 0).all(), "programs 0..3 each published a partial, read and reset by program 4"


@pytest.mark.parametrize(("num_sms", "programs"), [(8, 8), (11, 11), (12, 12), (20, 20)])
def test_grid_aligned_to_the_tiles(num_sms, programs, device):
    # 2 x 2 tiles of 10 K-iterations. 8 SMs: 4 tiles x 2 parts of 5 iterations, each program one part of one tile;
    # 12 SMs: 3 parts of 3, 3 and 4 (parts need not divide the K-loop); 20 SMs: 5 parts of 2. 11 SMs: no multiple
    # of 4 tiles within 10% of 11 (8 is too few), so the 40 iterations are split evenly over all 11 programs and
    # the ranges cross tile boundaries.
    a, b = Case(32, 64, 160, "fp16", "nt").operands(device)
    bias = torch.randn(64, device=device)
    plan = _plan(a, b, num_sms)
    assert (plan.schedule, plan.dp_tiles, plan.sk_tiles, plan.num_programs) == ("streamk", 0, 4, programs)
    out = torch.full((32, 64), float("nan"), dtype=torch.float16, device=device)
    gemm(a, b, c=bias, out=out, schedule="streamk", num_sms=num_sms, config=SMALL)
    assert_gemm_close(out, a, b, beta=1.0, c=bias)
    assert torch.equal(out, gemm(a, b, c=bias, schedule="streamk", num_sms=num_sms, config=SMALL))


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 80), n=st.integers(1, 80), k=st.integers(1, 200), num_sms=st.integers(1, 9))
def test_random_shapes_and_budgets(m, n, k, num_sms):
    # Any split the planner makes (or declines) gives the right answer in every element.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a, b = randn((m, k), torch.float16, device), randn((k, n), torch.float16, device, transposed=True)
    bias = randn((n,), torch.float32, device)
    out = torch.full((m, n), float("nan"), dtype=torch.float16, device=device)
    gemm(a, b, c=bias, out=out, schedule="streamk", num_sms=num_sms, config=SMALL)
    assert_gemm_close(out, a, b, beta=1.0, c=bias)


def test_schedule_name_is_validated(device):
    with pytest.raises(ValueError, match="schedule must be one of"):
        smgemm.matmul(torch.ones(2, 2, device=device), torch.ones(2, 2, device=device), schedule="stream-k")


# ---------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_many_launches_are_bitwise_identical():
    m, n, k = 256, 384, 8192  # 6 tiles of 128 x 128 (or fewer), split over all SMs
    a, b = randn((m, k), torch.bfloat16, "cuda"), randn((k, n), torch.bfloat16, "cuda", transposed=True)
    bias = randn((n,), torch.bfloat16, "cuda")
    assert _plan(a, b, None, None, "auto").schedule == "streamk"
    ref = smgemm.addmm(bias, a, b)
    assert_gemm_close(ref, a, b, beta=1.0, c=bias)
    outs = torch.empty((1000, m, n), dtype=torch.bfloat16, device="cuda")
    mismatches = torch.zeros((), dtype=torch.int64, device="cuda")
    for _ in range(10):  # 10,000 back-to-back launches, checked on the device in batches of 1000
        outs.fill_(float("nan"))
        for i in range(1000):
            smgemm.addmm(bias, a, b, out=outs[i])
        mismatches += (outs != ref).flatten(1).any(1).sum()
    assert mismatches.item() == 0


@pytest.mark.gpu
@pytest.mark.parametrize("schedule", ["streamk", "persistent", "data_parallel", "auto"])
def test_cuda_graph_replays_match_eager(schedule):
    shapes = [(256, 384, 8192), (100, 4000, 3000), (1000, 1000, 1000)]
    ops = [(randn((m, k), torch.float16, "cuda"), randn((k, n), torch.float16, "cuda")) for m, n, k in shapes]
    eager = [smgemm.matmul(a, b, schedule=schedule, num_sms=100) for a, b in ops]
    outs = [torch.full_like(e, float("nan")) for e in eager]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up (compile) outside the capture
        for (a, b), o in zip(ops, outs):
            smgemm.matmul(a, b, schedule=schedule, num_sms=100, out=o)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for (a, b), o in zip(ops, outs):
            smgemm.matmul(a, b, schedule=schedule, num_sms=100, out=o)
    mismatches = torch.zeros((), dtype=torch.int64, device="cuda")
    for _ in range(1000):
        for o in outs:
            o.fill_(float("nan"))
        graph.replay()
        for o, e in zip(outs, eager):
            mismatches += (o != e).any()
    assert mismatches.item() == 0


@pytest.mark.gpu
def test_two_streams_run_streamk_concurrently():
    shapes = [(256, 384, 8192), (128, 256, 16384)]
    ops = [(randn((m, k), torch.bfloat16, "cuda"), randn((k, n), torch.bfloat16, "cuda")) for m, n, k in shapes]
    refs = [smgemm.matmul(a, b, num_sms=60) for a, b in ops]
    for (a, b), r in zip(ops, refs):
        assert _plan(a, b, 60, None, "auto").schedule == "streamk"
        assert_gemm_close(r, a, b)
    streams = [torch.cuda.Stream() for _ in ops]
    outs = [[torch.empty_like(r) for _ in range(200)] for r in refs]
    torch.cuda.synchronize()
    for i in range(200):
        for s, (a, b), o in zip(streams, ops, outs):
            with torch.cuda.stream(s):
                smgemm.matmul(a, b, num_sms=60, out=o[i])
    torch.cuda.synchronize()
    for o, r in zip(outs, refs):
        assert all(torch.equal(x, r) for x in o)


@pytest.mark.gpu
def test_streamk_on_second_gpu():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs a second GPU")
    a, b = randn((256, 8192), torch.bfloat16, "cuda:1"), randn((8192, 384), torch.bfloat16, "cuda:1")
    out = smgemm.matmul(a, b, schedule="streamk")
    assert out.device == torch.device("cuda:1")
    assert_gemm_close(out, a, b)
    assert torch.equal(smgemm.matmul(a, b, schedule="streamk"), out)
