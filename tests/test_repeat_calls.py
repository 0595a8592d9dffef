"""Repeat calls skip the checks and the planner (smgemm._gemm._SEEN_CALLS), and only when nothing they depend on
has changed."""

import pytest
import torch

import smgemm
import smgemm._gemm as G
from reference import assert_gemm_close, randn


@pytest.fixture
def checks(monkeypatch):
    """Count full (checked) calls."""
    calls = []
    real = G.check_backend
    monkeypatch.setattr(G, "check_backend", lambda device: (calls.append(1), real(device))[1])
    monkeypatch.setattr(G, "_SEEN_CALLS", {})
    return calls


def test_second_call_skips_checks_and_is_right(checks, device):
    for i in range(3):  # fresh data every time, same signature
        a = randn((40, 48), torch.float16, device)
        b = randn((56, 48), torch.float16, device).t()
        bias = randn((56,), torch.float16, device)
        out = G.gemm(a, b, c=bias, alpha=0.5 + i, num_sms=3)
        assert_gemm_close(out, a, b, alpha=0.5 + i, beta=1.0, c=bias)
    assert len(checks) == 1


def test_any_change_in_the_signature_checks_again(checks, device):
    a = randn((40, 48), torch.float16, device)
    b = randn((48, 56), torch.float16, device)
    G.gemm(a, b)
    variants = [
        (a.t().contiguous().t(), b),  # other strides
        (randn((40, 64), torch.float16, device)[:, 8:56], b),  # another row stride
        (a.float(), b.float()),  # other dtype
        (a[:39], b),  # other shape
    ]
    for x, y in variants:
        assert_gemm_close(G.gemm(x, y), x, y)
    assert len(checks) == 1 + len(variants)
    G.gemm(a, b, num_sms=2)
    G.gemm(a, b, schedule="persistent")
    G.gemm(a, b, out_dtype=torch.float32)
    G.gemm(a, b, c=randn((56,), torch.float16, device), beta=0.0)
    G.gemm(a, b, c=randn((56,), torch.float16, device), beta=1.0)
    assert len(checks) == 1 + len(variants) + 5


def test_alignment_is_part_of_the_signature(checks, device):
    # Same shapes, strides and dtypes; only the base address moves off a 16-byte boundary (no TMA for it).
    buf = randn((40, 72), torch.float16, device)
    b = randn((48, 64), torch.float16, device)
    for x in (buf[:, :48], buf[:, 1:49], buf[:, 8:56]):
        assert_gemm_close(G.gemm(x, b, num_sms=2), x, b)
    assert len(checks) == 2


def test_errors_are_raised_every_time(checks, device):
    a = randn((40, 48), torch.float16, device)
    b = randn((48, 56), torch.float16, device)
    G.gemm(a, b, num_sms=1)
    for _ in range(2):
        with pytest.raises(ValueError, match="num_sms must be None or an int"):
            G.gemm(a, b, num_sms=True)  # equal to 1 as a dict key: the type is part of the signature
        with pytest.raises(ValueError, match="must equal"):
            G.gemm(a, b.t())
        with pytest.raises(TypeError, match=r"must be a torch\.Tensor"):
            G.gemm(a, b.tolist())


def test_tf32_setting_is_part_of_the_signature(checks, device, monkeypatch):
    a = randn((40, 48), torch.float32, device)
    b = randn((48, 56), torch.float32, device)
    monkeypatch.setattr(G, "tf32_enabled", lambda: False)
    assert_gemm_close(G.gemm(a, b), a, b)
    monkeypatch.setattr(G, "tf32_enabled", lambda: True)
    assert_gemm_close(G.gemm(a, b), a, b, tf32=True)
    assert len(checks) == 2


def test_given_out_is_checked_every_call(checks, device):
    a = randn((40, 48), torch.float16, device)
    b = randn((48, 56), torch.float16, device)
    out = torch.empty(40, 56, dtype=torch.float16, device=device)
    for _ in range(2):
        smgemm.matmul(a, b, out=out)
    assert len(checks) == 2


@pytest.mark.parametrize("both", [False, True])
def test_mxfp4_repeat_calls(both, checks, device, monkeypatch):
    full = []
    real = G.check_backend
    monkeypatch.setattr(G, "check_backend", lambda d: (full.append(1), real(d))[1])
    for _ in range(3):
        x = randn((24, 64), torch.bfloat16, device)
        w = smgemm.quantize_mxfp4(randn((40, 64), torch.bfloat16, device))
        a = smgemm.quantize_mxfp4(x) if both else x
        out = G.gemm_mxfp4(a, w, num_sms=2)
        dense = a.dequantize(torch.float32) if both else x.float()
        assert_gemm_close(out, dense, w.dequantize(torch.float32).t())
    assert len(full) == 1
    with pytest.raises(TypeError, match="must be an MXFP4Tensor"):
        G.gemm_mxfp4(a, w.dequantize())


def test_operations_repeat_through_the_remembered_call(checks, device):
    """smgemm.matmul / addmm / linear (2-D) ask for a remembered call before their dispatch and checks: a repeat runs
    no checks and is right; autocast, grad and another SM budget still take their own ways."""
    a, w = randn((24, 40), torch.float16, device), randn((56, 40), torch.float16, device)
    bias = randn((56,), torch.float16, device)
    for _ in range(3):
        x = randn((24, 40), torch.float16, device)
        assert_gemm_close(smgemm.linear(x, w, bias), x, w.t(), beta=1.0, c=bias)
    assert len(checks) == 1
    for i in range(2):
        assert_gemm_close(smgemm.matmul(a, w.t()), a, w.t())
        assert_gemm_close(smgemm.addmm(bias, a, w.t(), alpha=0.5 + i), a, w.t(), alpha=0.5 + i, beta=1.0, c=bias)
    assert len(checks) == 2  # matmul's call is new (no C); addmm's with a bias repeats linear's
    with smgemm.sm_budget(2):
        smgemm.matmul(a, w.t())
    assert len(checks) == 3
    with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
        assert smgemm.matmul(a, w.t()).dtype == torch.bfloat16
    wg = w.clone().requires_grad_()
    smgemm.linear(a, wg).sum().backward()
    torch.testing.assert_close(wg.grad, a.sum(0, dtype=torch.float32).expand(56, 40).to(torch.float16),
                               rtol=2e-3, atol=2e-3)


def test_remembered_eager_calls_still_meet_modes_transforms_and_bad_knobs(checks, device):
    """The eager repeat (`ops._eager_repeat`) runs before any check: a call remembered outside a torch mode, a
    functorch transform or autocast still meets them inside (FlopCounterMode counts it, vmap batches it, autocast
    casts it), and knobs or scalars the checks refuse are refused after the same call with valid ones is remembered.
    A 3-D product remembered by bmm is not addmm's (torch.addmm takes 2-D operands only)."""
    from torch.func import vmap
    from torch.utils.flop_counter import FlopCounterMode

    a, w = randn((16, 32), torch.float32, device), randn((8, 32), torch.float32, device)
    bias = randn((8,), torch.float32, device)
    calls = {"matmul": lambda: smgemm.matmul(a, w.t(), num_sms=1), "addmm": lambda: smgemm.addmm(bias, a, w.t()),
             "linear": lambda: smgemm.linear(a, w, bias)}
    for name, call in calls.items():
        for _ in range(2):
            call()
        with FlopCounterMode(display=False) as counter:
            call()
        assert counter.get_total_flops() == 2 * 16 * 32 * 8, name
        with torch.autocast(torch.device(device).type, dtype=torch.float16):
            assert call().dtype == torch.float16, name
    # matmul's and addmm's calls in fp32 and in autocast's fp16, each checked once (linear's repeat addmm's)
    assert len(checks) == 4
    for _ in range(2):  # N-D a folds into the 2-D call's key
        assert_gemm_close(smgemm.matmul(a.reshape(2, 8, 32), w.t(), num_sms=1).reshape(16, 8), a, w.t())
    assert len(checks) == 4
    rows = vmap(lambda row: smgemm.matmul(row, w.t(), num_sms=1))(a.unsqueeze(1))
    assert_gemm_close(rows.squeeze(1), a, w.t())
    for _ in range(2):
        with pytest.raises(ValueError, match="num_sms must be None or an int"):
            smgemm.matmul(a, w.t(), num_sms=True)  # equal to 1 as a dict key
        with pytest.raises(ValueError, match="schedule must be one of"):
            smgemm.matmul(a, w.t(), num_sms=1, schedule="fast")
        with pytest.raises(TypeError, match="alpha must be a real number"):
            smgemm.addmm(bias, a, w.t(), alpha="1")
    a3, b3 = randn((2, 16, 32), torch.float32, device), randn((2, 32, 8), torch.float32, device)
    assert_gemm_close(smgemm.bmm(a3, b3)[1], a3[1], b3[1])
    assert_gemm_close(smgemm.matmul(a3, b3)[1], a3[1], b3[1])  # torch.matmul's batched product: bmm's
    with pytest.raises(ValueError, match="2-D"):
        smgemm.addmm(randn((2, 16, 8), torch.float32, device), a3, b3)


def test_mxfp4_linear_repeats_through_the_eager_step(checks, device, monkeypatch):
    """linear with an MXFP4 weight takes the same eager repeat as dense weights (`ops._eager_repeat`: no `route`, no
    checks), 2-D and N-D x, with a bias; a mode still sees a remembered call."""
    from torch.utils.flop_counter import FlopCounterMode

    import smgemm.ops as ops

    routed, route = [], ops.route
    monkeypatch.setattr(ops, "route", lambda *tensors: (routed.append(1), route(*tensors))[1])
    w = smgemm.quantize_mxfp4(randn((40, 64), torch.bfloat16, device))
    bias = randn((40,), torch.bfloat16, device)
    dense = w.dequantize(torch.float32).t()
    for shape in ((3, 64), (2, 3, 64)):
        for _ in range(3):
            x = randn(shape, torch.bfloat16, device)
            y = smgemm.linear(x, w, bias)
            assert y.shape == (*shape[:-1], 40)
            assert_gemm_close(y.reshape(3 * (len(shape) - 1), 40), x.reshape(-1, 64).float(), dense, beta=1.0,
                              c=bias)
    assert len(checks) == len(routed) == 2  # [3, 64] and [2, 3, 64] -> [6, 64]
    with FlopCounterMode(display=False) as counter:
        smgemm.linear(x, w, bias)
    assert counter.get_total_flops() == 2 * 6 * 64 * 40
    x = randn((3, 64), torch.bfloat16, device)  # linear's call of these operands is remembered: not matmul's
    for _ in range(2):
        with pytest.raises(TypeError, match=r"b must be a torch\.Tensor, got MXFP4Tensor"):
            smgemm.matmul(x, w)
        with pytest.raises(TypeError, match=r"b must be a torch\.Tensor, got MXFP4Tensor"):
            smgemm.addmm(bias, x, w)


def test_bmm_and_baddbmm_repeat_through_the_eager_step(checks, device, monkeypatch):
    """bmm and baddbmm take the same eager repeat (no `route`, no checks); a mode still sees a remembered call, and
    a 2-D call of either is refused after a 2-D product of the same operands is remembered."""
    from torch.utils.flop_counter import FlopCounterMode

    import smgemm.ops as ops

    routed, route = [], ops.route
    monkeypatch.setattr(ops, "route", lambda *tensors: (routed.append(1), route(*tensors))[1])
    c = randn((1, 1, 24), torch.float16, device)
    for _ in range(3):
        a, b = randn((3, 16, 32), torch.float16, device), randn((3, 32, 24), torch.float16, device)
        got = smgemm.bmm(a, b), smgemm.baddbmm(c, a, b, alpha=0.5, beta=2.0)
        for i in range(3):
            assert_gemm_close(got[0][i], a[i], b[i])
            assert_gemm_close(got[1][i], a[i], b[i], alpha=0.5, beta=2.0, c=c[0])
    assert len(checks) == len(routed) == 2
    with FlopCounterMode(display=False) as counter:
        smgemm.bmm(a, b)
    assert counter.get_total_flops() == 2 * 3 * 16 * 32 * 24
    smgemm.matmul(a[0], b[0])
    for _ in range(2):
        with pytest.raises(ValueError, match=r"a must be 3-D \(B, M, K\)"):
            smgemm.bmm(a[0], b[0])
        with pytest.raises(ValueError, match=r"a must be 3-D \(B, M, K\)"):
            smgemm.baddbmm(c[0], a[0], b[0])


def test_a_repeat_launch_passes_what_the_full_launch_passes(monkeypatch, device):
    """`_launch.Repeat` (the launch of a remembered call on a GPU) gives the launcher the arguments `launch` gives it:
    the tensors' addresses in `tensor_args`' order, the ints, the epoch (a Stream-K launch's own; without Stream-K,
    which never reads it, any int64), alpha and beta, the meta-parameters; a Stream-K workspace of its own; nothing
    when the current device is another."""
    import smgemm._launch as L
    from smgemm.mxfp4 import quantize_mxfp4

    monkeypatch.setattr(L, "epoch", lambda: 7)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 1000 + index, raising=False)
    current = {"device": 0}
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: current["device"], raising=False)
    captured = []
    monkeypatch.setattr(G, "launch", lambda plan, tensors, ints, floats, meta, launcher=None: captured.append(
        (plan, tensors, ints, floats, meta)))
    a, w = randn((40, 64), torch.float16, device), randn((48, 64), torch.float16, device)
    bias = randn((48,), torch.float16, device)
    x8 = randn((40, 64), torch.float16, device).to(torch.float8_e4m3fn)
    w8 = randn((48, 64), torch.float16, device).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(40, 1, device=device) + 0.5, torch.rand(1, 48, device=device) + 0.5
    wq = quantize_mxfp4(w.float())
    cases = [  # (a, b, c, scale_a, scale_b) as the call takes them, the call
        ((a, w.t(), bias, None, None), lambda: G.gemm(a, w.t(), c=bias, alpha=0.5, num_sms=3)),
        ((a, w.t(), None, None, None), lambda: G.gemm(a, w.t(), schedule="streamk", num_sms=3)),
        ((x8, w8.t(), None, sa, sb), lambda: G.gemm(x8, w8.t(), scale_a=sa, scale_b=sb, num_sms=2)),
        ((a, wq, bias, None, None), lambda: G.gemm_mxfp4(a, wq, c=bias, num_sms=3)),
    ]
    for operands, call in cases:
        captured.clear()
        out = call()
        plan, tensors, ints, floats, meta = captured[0]
        seen = []
        repeat = L.Repeat(plan, ints, meta, lambda args, stream, seen=seen: seen.append((args, stream)), 0, False,
                          isinstance(operands[1], smgemm.MXFP4Tensor))
        a_, b_, c_, sa_, sb_ = operands
        assert repeat(a_, b_, out, c_, sa_, sb_, floats)
        args, stream = seen[0]
        expected = (*L.addresses(tensors), *ints, 7, floats, *meta.values())
        assert stream == 1000 and len(args) == len(expected)
        workspace = 8  # tensor_args' position of the Stream-K workspace: an allocation of each launch
        at = len(tensors) + len(ints)  # the epoch's
        assert args[:workspace] + args[workspace + 1:at] + args[at + 1:] == \
            expected[:workspace] + expected[workspace + 1:at] + expected[at + 1:]
        assert (args[workspace] is None) == (tensors[workspace] is None) == (plan.sk_tiles == 0)
        assert args[at] == 7 if plan.sk_tiles else 2**62 <= args[at] < 2**63
        current["device"] = 1
        assert not repeat(a_, b_, out, c_, sa_, sb_, floats) and len(seen) == 1
        current["device"] = 0
    assert {len(captured)} == {1}


def test_linear_repeats_without_the_weight_view(checks, device):
    """linear keys a repeat on the weight as its transposed view would be keyed (`_dense_signature`'s `b_t`), for any
    weight layout; N-D x repeats too; errors stay the full path's, before and after a call is remembered."""
    buf = randn((80, 72), torch.float16, device)
    weights = [randn((48, 64), torch.float16, device), buf.t()[:48, :64], buf[8:56, 8:72],
               torch.nn.Parameter(randn((48, 64), torch.float16, device))]
    x = randn((24, 64), torch.float16, device)
    for w in weights:
        assert G._dense_signature("gemm", x, w, None, 1.0, None, "auto", None, b_t=True) == G._signature(
            "gemm", x, w.t(), None, 1.0, None, None, None, "auto", None, None)
    with torch.no_grad():
        for w in weights:
            for shape in ((24, 64), (3, 8, 64)):
                for _ in range(2):
                    x = randn(shape, torch.float16, device)
                    y = smgemm.linear(x, w)
                    assert y.shape == (*shape[:-1], 48)
                    assert_gemm_close(y.reshape(-1, 48), x.reshape(-1, 64), w.t())
    # one full call a weight layout (the Parameter's view is a plain Tensor like the first weight's); [3, 8, 64] x
    # folds to [24, 64], the 2-D call's key
    assert len(checks) == len({G._tensor_signature(w.t())[1:] for w in weights}) == 3
    for _ in range(2):
        with pytest.raises(ValueError, match="num_sms"):
            smgemm.linear(x, weights[0], num_sms=0)
        with pytest.raises(ValueError, match=r"must equal weight\.shape"):
            smgemm.linear(randn((24, 40), torch.float16, device), weights[0])
