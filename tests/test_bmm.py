"""Batched products (smgemm.bmm, baddbmm, batched matmul): one launch for the whole batch, every schedule and
budget, against float64; autograd, torch.compile."""

import pytest
import torch

import smgemm
from reference import assert_gemm_close, randn
from smgemm._device import device_spec

CASES = [(3, 20, 24, 40), (4, 64, 48, 300), (2, 1, 7, 33), (5, 33, 130, 64)]


def _check(out, a, b, *, alpha=1.0, beta=0.0, c=None):
    for i in range(a.shape[0]):
        ci = None if c is None else c.expand(out.shape)[i]
        assert_gemm_close(out[i], a[i], b[i], alpha=alpha, beta=beta, c=ci)


@pytest.mark.parametrize("shape", CASES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize(("schedule", "num_sms"), [("auto", None), ("persistent", 3), ("streamk", 5),
                                                   ("data_parallel", None)])
def test_bmm_every_schedule(shape, dtype, schedule, num_sms, device):
    batch, m, n, k = shape
    a = randn((batch, m, k), dtype, device)
    b = randn((batch, n, k), dtype, device).transpose(1, 2)  # a transposed view: no copy
    out = smgemm.bmm(a, b, schedule=schedule, num_sms=num_sms)
    assert out.shape == (batch, m, n) and out.dtype == dtype
    _check(out, a, b)


def test_one_launch_within_the_budget_across_the_batch(device, monkeypatch):
    import smgemm._gemm as G

    plans = []
    launch = G.launch
    monkeypatch.setattr(G, "launch", lambda plan, *rest: (plans.append(plan), launch(plan, *rest))[1])
    a, b = randn((6, 64, 64), torch.float16, device), randn((6, 64, 48), torch.float16, device)
    for num_sms in (2, 5):
        out = smgemm.bmm(a, b, num_sms=num_sms)
        _check(out, a, b)
        assert plans[-1].num_programs <= num_sms and plans[-1].num_tiles >= 6  # one launch, every matrix's tiles
    spec = device_spec(torch.device(device))
    plan = smgemm.make_plan(64, 48, 64, torch.float16, spec, batch=6)
    assert plan.num_tiles == 6 * smgemm.make_plan(64, 48, 64, torch.float16, spec).num_tiles


def test_batched_stream_k_splits_across_matrices(device):
    # 2 x (64 x 64) tiles, long K, 8 programs: Stream-K splits the tiles of both matrices
    spec = device_spec(torch.device(device))
    plan = smgemm.make_plan(64, 64, 2048, torch.float16, spec, schedule="streamk", num_sms=8, batch=2)
    assert plan.schedule == "streamk" and plan.sk_tiles >= 2
    a, b = randn((2, 64, 2048), torch.float16, device), randn((2, 2048, 64), torch.float16, device)
    _check(smgemm.bmm(a, b, schedule="streamk", num_sms=8), a, b)


@pytest.mark.parametrize("schedule", ["persistent", "streamk", "data_parallel"])
def test_batched_descriptors_stay_inside_each_matrix(device, schedule):
    # A Hopper-path tile on a batch: 3-D descriptors, one matrix a block. M = 40 and N = 24 leave most of each
    # 32 x 32 tile past the matrix's edge, where the next matrix's rows lie in memory: they must read as zeros, and
    # the store must leave them alone (out is NaN-poisoned around each matrix).
    from smgemm._launch import Operands, static_args
    from smgemm.plan import decide

    cfg = smgemm.TileConfig(32, 32, 16, num_warps=4, num_stages=2, tma=True, tma_store=True, flatten=True)
    f16 = torch.float16
    w = randn((3, 24, 48), f16, device)
    operands = [
        ("stored", "transposed", randn((3, 40, 48), f16, device), w.transpose(1, 2)),
        ("transposed", "stored", randn((3, 48, 40), f16, device).transpose(1, 2), randn((3, 48, 24), f16, device)),
        ("stored", "pointers", randn((3, 40, 48), f16, device), randn((48, 24), f16, device).expand(3, 48, 24)),
    ]
    for a_desc, b_desc, a, b in operands:
        poisoned = torch.full((3, 48, 32), float("nan"), dtype=f16, device=device)
        out = poisoned[:, :40, :24]
        with smgemm.plan.overrides(config=cfg, schedule=schedule):
            smgemm.bmm(a, b, num_sms=4, out=out)
            plan = decide(40, 24, 48, f16, device_spec(torch.device(device)), batch=3)
        _check(out, a, b)
        assert poisoned[:, 40:].isnan().all() and poisoned[:, :, 24:].isnan().all()  # nothing written past the edges
        _, meta = static_args(plan, Operands(a, b, out), 0, 0, False)
        assert (meta["A_DESC"], meta["B_DESC"], meta["D_DESC"], meta["BATCHED"]) == (a_desc, b_desc, 2, True)


def test_baddbmm_broadcasts_input_and_updates_in_place(device):
    a, b = randn((3, 16, 32), torch.float16, device), randn((3, 32, 24), torch.float16, device)
    for c_shape in [(24,), (1, 24), (16, 1), (3, 1, 24), (3, 16, 24)]:
        c = randn(c_shape, torch.float32, device)
        out = smgemm.baddbmm(c, a, b, alpha=0.5, beta=2.0)
        _check(out, a, b, alpha=0.5, beta=2.0, c=c)
    c = randn((3, 16, 24), torch.float16, device)
    expected = smgemm.baddbmm(c, a, b, beta=0.5)
    smgemm.baddbmm(c, a, b, beta=0.5, out=c)
    torch.testing.assert_close(c, expected, rtol=0, atol=0)
    nan = torch.full((3, 16, 24), float("nan"), dtype=torch.float16, device=device)
    assert not smgemm.baddbmm(nan, a, b, beta=0).isnan().any()  # beta == 0 never reads input


def test_bmm_gradients_match_torch(device):
    a = randn((3, 8, 16), torch.float32, device).requires_grad_()
    b = randn((3, 16, 12), torch.float32, device).requires_grad_()
    c = randn((12,), torch.float32, device).requires_grad_()
    y = smgemm.baddbmm(c, a, b, alpha=0.5, beta=2.0)
    g = randn(tuple(y.shape), torch.float32, device)
    y.backward(g)
    ad, bd, cd = (t.detach().double().requires_grad_() for t in (a, b, c))
    torch.baddbmm(cd, ad, bd, alpha=0.5, beta=2.0).backward(g.double())
    for got, want in ((a.grad, ad.grad), (b.grad, bd.grad), (c.grad, cd.grad)):
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_bmm_compiles_without_graph_breaks(device):
    a, b = randn((2, 16, 32), torch.float16, device), randn((2, 32, 8), torch.float16, device)
    torch._dynamo.reset()
    f = torch.compile(lambda a, b: smgemm.bmm(a, b, num_sms=4) * 2, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(f(a, b), smgemm.bmm(a, b, num_sms=4) * 2, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("num_sms", [3, 32, 66])
@pytest.mark.parametrize("schedule", ["auto", "persistent", "streamk"])
def test_batched_sm_budget_is_observed(num_sms, schedule):
    from smgemm._gemm import gemm

    a, b = randn((8, 512, 1024), torch.bfloat16, "cuda"), randn((8, 1024, 512), torch.bfloat16, "cuda")
    plan = smgemm.make_plan(512, 512, 1024, torch.bfloat16, device_spec(a.device), schedule=schedule,
                            num_sms=num_sms, batch=8)
    smids = torch.full((plan.num_programs,), -1, dtype=torch.int32, device="cuda")
    out = gemm(a, b, schedule=schedule, num_sms=num_sms, smid_out=smids)
    torch.cuda.synchronize()
    seen = set(smids.tolist())
    assert -1 not in seen and len(seen) <= num_sms and plan.num_programs <= num_sms
    _check(out, a, b)


def _unaligned_batches(device):
    """(name, a, b) batched operands of which at least one has rows that break 16-byte alignment, in the layouts
    `_launch.stage` folds into one 2-D copy."""
    f16 = torch.float16
    return [
        ("odd-k", randn((3, 20, 37), f16, device), randn((3, 37, 24), f16, device)),
        ("odd-k-b-transposed", randn((3, 20, 37), f16, device), randn((3, 24, 37), f16, device).transpose(1, 2)),
        ("odd-n", randn((3, 20, 32), f16, device), randn((3, 32, 41), f16, device)),
        ("batch-inside-rows", randn((20, 3, 37), f16, device).transpose(0, 1), randn((3, 37, 24), f16, device)),
        ("broadcast-a", randn((1, 20, 37), f16, device).expand(3, 20, 37), randn((3, 37, 24), f16, device)),
        ("sliced", randn((3, 20, 40), f16, device)[:, :, :37], randn((3, 37, 24), f16, device)),
        ("one-matrix", randn((1, 144, 65), f16, device).transpose(1, 2).contiguous().transpose(1, 2),
         randn((1, 65, 3), f16, device)),
    ]


@pytest.mark.parametrize("stage_them", [True, False])
def test_batched_unaligned_operands_staged_or_not(device, stage_them, monkeypatch):
    """Batched operands with unaligned rows are copied into aligned buffers in one launch (`_launch.stage`) where
    the planner says so (here forced), or read in place; right either way, with and without a C matrix."""
    import smgemm._launch as L

    copies = []
    monkeypatch.setattr(L, "stage", lambda tensors, budget, stage=L.stage: copies.append(len(tensors)) or
                        stage(tensors, budget))
    with smgemm.plan.overrides(stage=stage_them):
        for name, a, b in _unaligned_batches(device):
            copies.clear()
            _check(smgemm.bmm(a, b, num_sms=3), a, b)
            assert bool(copies) == stage_them, name
            c = randn((a.shape[0], a.shape[1], b.shape[2]), torch.float16, device)
            _check(smgemm.baddbmm(c, a, b, beta=0.5, alpha=2.0), a, b, alpha=2.0, beta=0.5, c=c)


def test_stage_copies_batched_operands_exactly(device):
    """`_launch.stage` on batched operands: each copy has its tensor's shape and values, 16-element rows and a
    16-byte aligned batch stride (0 for a broadcast batch)."""
    from smgemm._launch import row_alignment, stage

    for name, a, b in _unaligned_batches(device):
        for t in (a, b):
            (copy,) = stage([t], budget=2)
            assert copy.shape == t.shape and torch.equal(copy, t), name
            assert row_alignment(copy[0]) == 16, name
            assert copy.stride(0) * copy.element_size() % 16 == 0 and (copy.stride(0) == 0) == (t.stride(0) == 0), name


def test_batched_operands_that_do_not_fold_are_read_in_place(device):
    """A batched operand whose batch and row strides do not nest (no 2-D view holds its rows) is never staged: the
    planner is not told its alignment (`_launch.operand_alignment` is None), and the product reads it in place."""
    from smgemm._launch import operand_alignment

    flat = randn((2000,), torch.float16, device)
    a = flat.as_strided((3, 20, 37), (7, 41, 1))  # matrices 7 apart, rows 41 apart: they interleave
    b = randn((3, 37, 24), torch.float16, device)
    assert operand_alignment(a, 1) is None
    with smgemm.plan.overrides(stage=True):
        _check(smgemm.bmm(a, b, num_sms=2), a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("schedule", ["auto", "streamk", "data_parallel"])
@pytest.mark.parametrize("b_layout", ["stored", "transposed"])
def test_batched_products_with_64_bit_offsets(schedule, b_layout):
    """An output of two 2048 x 2048 matrices already takes the kernel's int64 offsets (a K step past the end is
    counted against the batch stride): the compiled variant the small cases never reach."""
    from smgemm._checks import needs_int64

    a = randn((2, 2048, 128), torch.bfloat16, "cuda")
    b = randn((2, 128, 2048), torch.bfloat16, "cuda")
    if b_layout == "transposed":
        b = b.transpose(1, 2).contiguous().transpose(1, 2)
    out = smgemm.bmm(a, b, schedule=schedule)
    assert needs_int64(out)
    _check(out, a, b)


@pytest.mark.parametrize(("m", "n", "num_sms"), [(300, 100, 4), (256, 384, 3)])
def test_batched_256_row_tiles_under_a_budget(m, n, num_sms, device):
    """A batched product on a few SMs runs 256 x 128 tiles (plan.py, _CANDIDATE_TILES) where they need fewer tile
    rounds: one tile column, or N leaving half a 256-wide tile (here three columns of 128 against two of 256). Rows
    past M and columns past N of each matrix stay out of the result."""
    a, b = randn((2, m, 64), torch.float16, device), randn((2, 64, n), torch.float16, device)
    plan = smgemm.make_plan(m, n, 64, torch.float16, device_spec(a.device), num_sms=num_sms, batch=2)
    assert (plan.config.block_m, plan.config.block_n) == (256, 128)
    out = smgemm.bmm(a, b, num_sms=num_sms)
    _check(out, a, b)
