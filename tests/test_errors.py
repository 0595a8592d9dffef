"""Bad input fails early with an error that names the argument: the same error eagerly, with inputs that require
grad, and under torch.compile (one table drives all three)."""

import re

import pytest
import torch

import smgemm
import smgemm._checks

FP8 = torch.float8_e4m3fn


class Make:
    """Tensor factory of one mode: with `grad`, floating tensors (not fp8) require grad."""

    def __init__(self, device, grad):
        self.device, self.grad = device, grad

    def __call__(self, *shape, dtype=torch.float16):
        x = torch.randn(shape).to(dtype).to(self.device)
        if self.grad and dtype in (torch.float16, torch.bfloat16, torch.float32):
            x.requires_grad_(True)
        return x


def _mx(on, n=8, k=32):
    return smgemm.quantize_mxfp4(torch.randn(n, k)).to(on.device)


# (id, call(on), exception type, message regex). Every call is a public function.
BAD_CALLS = [
    ("a-0d", lambda on: smgemm.matmul(on(), on(4, 4)), ValueError, r"at least 1 dim"),
    ("batch-mismatch", lambda on: smgemm.matmul(on(3, 4, 4), on(2, 4, 4)), ValueError, r"do not broadcast"),
    ("bmm-2d", lambda on: smgemm.bmm(on(4, 4), on(2, 4, 4)), ValueError, r"a must be 3-D \(B, M, K\)"),
    ("bmm-batch", lambda on: smgemm.bmm(on(3, 4, 4), on(2, 4, 4)), ValueError, r"same batch size, got 3 and 2"),
    ("bmm-k", lambda on: smgemm.bmm(on(2, 4, 5), on(2, 4, 4)), ValueError, r"a.shape\[2\] \(K=5\) must equal"),
    ("bmm-fp8", lambda on: smgemm.bmm(on(2, 4, 32, dtype=FP8), on(2, 32, 4, dtype=FP8)), TypeError,
     r"unsupported dtype torch.float8_e4m3fn for a batched product"),
    ("baddbmm-input", lambda on: smgemm.baddbmm(on(3, 4, 4), on(2, 4, 4), on(2, 4, 4)), ValueError,
     r"input must be broadcastable to \(B, M, N\)"),
    ("bmm-num_sms", lambda on: smgemm.bmm(on(2, 4, 4), on(2, 4, 4), num_sms=0), ValueError, r"num_sms"),
    ("addmm-a-1d", lambda on: smgemm.addmm(on(4), on(4), on(4, 4)), ValueError, r"a must be 2-D"),
    ("addmm-batched", lambda on: smgemm.addmm(on(2, 4, 5), on(2, 4, 4), on(2, 4, 5)), ValueError,
     r"a must be 2-D \(M, K\) for addmm \(smgemm\.baddbmm"),
    ("addmm-b-3d", lambda on: smgemm.addmm(on(4, 5), on(4, 4), on(2, 4, 5)), ValueError, r"b must be 2-D \(K, N\)"),
    ("k-mismatch", lambda on: smgemm.matmul(on(4, 5), on(6, 4)), ValueError,
     r"a.shape\[1\] \(K=5\) must equal b.shape\[0\]"),
    ("dtype-mismatch", lambda on: smgemm.matmul(on(4, 4), on(4, 4, dtype=torch.float32)), TypeError, r"same dtype"),
    ("fp64", lambda on: smgemm.matmul(on(4, 4, dtype=torch.float64), on(4, 4, dtype=torch.float64)), TypeError,
     r"a has unsupported dtype torch.float64"),
    ("a-str", lambda on: smgemm.matmul("a", on(4, 4)), TypeError, r"a must be a torch.Tensor"),
    ("a-sparse", lambda on: smgemm.matmul(torch.eye(4, dtype=torch.float16).to_sparse().to(on.device), on(4, 4)),
     TypeError, r"a must be a dense \(strided\) tensor, got layout torch.sparse_coo"),
    ("b-sparse-csr", lambda on: smgemm.matmul(on(4, 4), torch.eye(4).to_sparse_csr().to(on.device)),
     TypeError, r"b must be a dense \(strided\) tensor"),
    ("num_sms-0", lambda on: smgemm.matmul(on(4, 4), on(4, 4), num_sms=0), ValueError, r"num_sms must be None or"),
    ("num_sms-float", lambda on: smgemm.matmul(on(4, 4), on(4, 4), num_sms=2.0), ValueError, r"num_sms.*got 2.0"),
    ("num_sms-str", lambda on: smgemm.matmul(on(4, 4), on(4, 4), num_sms="4"), ValueError, r"num_sms.*got '4'"),
    ("num_sms-bool", lambda on: smgemm.matmul(on(4, 4), on(4, 4), num_sms=True), ValueError, r"num_sms"),
    ("schedule-unknown", lambda on: smgemm.matmul(on(4, 4), on(4, 4), schedule="fast"), ValueError,
     r"schedule must be one of"),
    ("schedule-empty", lambda on: smgemm.matmul(on(4, 4), on(4, 4), schedule=""), ValueError,
     r"schedule must be one of .*got ''"),
    ("schedule-0", lambda on: smgemm.matmul(on(4, 4), on(4, 4), schedule=0), ValueError, r"schedule.*got 0"),
    ("schedule-int", lambda on: smgemm.matmul(on(4, 4), on(4, 4), schedule=123), ValueError, r"schedule.*got 123"),
    ("schedule-empty-shape", lambda on: smgemm.matmul(on(0, 4), on(4, 4), schedule="fast"), ValueError,
     r"schedule must be one of"),
    ("out_dtype-int", lambda on: smgemm.matmul(on(4, 4), on(4, 4), out_dtype=torch.int32), TypeError,
     r"out_dtype must be"),
    ("out_dtype-str", lambda on: smgemm.matmul(on(4, 4), on(4, 4), out_dtype="float32"), TypeError,
     r"out_dtype must be .*got 'float32'"),
    ("alpha-str", lambda on: smgemm.addmm(on(4, 4), on(4, 4), on(4, 4), alpha="2"), TypeError,
     r"alpha must be a real number .*got str '2'"),
    ("alpha-complex", lambda on: smgemm.addmm(on(4, 4), on(4, 4), on(4, 4), alpha=1j), TypeError,
     r"alpha must be a real number .*complex"),
    ("beta-none", lambda on: smgemm.addmm(on(4, 4), on(4, 4), on(4, 4), beta=None), TypeError,
     r"beta must be a real number .*NoneType"),
    ("input-shape", lambda on: smgemm.addmm(on(3), on(4, 4), on(4, 5)), ValueError, r"input must be broadcastable"),
    ("input-3d", lambda on: smgemm.addmm(on(1, 1, 5), on(4, 4), on(4, 5)), ValueError,
     r"input must be broadcastable"),
    ("input-fp64", lambda on: smgemm.addmm(on(5, dtype=torch.float64), on(4, 4), on(4, 5)), TypeError,
     r"input must be one"),
    ("scale-not-fp8", lambda on: smgemm.matmul(on(4, 4), on(4, 4), scale_a=on(1, dtype=torch.float32)), ValueError,
     r"scale_a / scale_b apply to float8_e4m3fn"),
    ("scale_a-shape", lambda on: smgemm.matmul(on(4, 8, dtype=FP8), on(8, 4, dtype=FP8),
                                               scale_a=on(3, 1, dtype=torch.float32)), ValueError,
     r"scale_a must hold one value"),
    ("scale_b-shape", lambda on: smgemm.matmul(on(4, 8, dtype=FP8), on(8, 4, dtype=FP8),
                                               scale_b=on(4, 1, dtype=torch.float32)), ValueError,
     r"scale_b must hold one value"),
    ("scale_b-dtype", lambda on: smgemm.matmul(on(4, 8, dtype=FP8), on(8, 4, dtype=FP8), scale_b=on(1)), TypeError,
     r"scale_b must be float32"),
    ("weight-1d", lambda on: smgemm.linear(on(3, 4), on(4)), ValueError, r"weight must be 2-D"),
    ("linear-k", lambda on: smgemm.linear(on(3, 4), on(5, 6)), ValueError, r"x.shape\[-1\] \(K=4\) must equal weight"),
    ("bias-shape", lambda on: smgemm.linear(on(3, 4), on(5, 4), on(4)), ValueError,
     r"bias must be broadcastable to the output shape \(3, 5\)"),
    ("bias-too-many-dims", lambda on: smgemm.linear(on(3, 4), on(5, 4), on(2, 3, 5)), ValueError,
     r"bias must be broadcastable"),
    ("mx-num_sms", lambda on: smgemm.linear(on(3, 32, dtype=torch.bfloat16), _mx(on), num_sms=1.5), ValueError,
     r"num_sms"),
    ("mx-out_dtype", lambda on: smgemm.linear(on(3, 32, dtype=torch.bfloat16), _mx(on), out_dtype="bf16"), TypeError,
     r"out_dtype must be"),
    ("mx-k", lambda on: smgemm.linear(on(3, 64, dtype=torch.bfloat16), _mx(on)), ValueError,
     r"a.shape\[1\] \(K=64\) must equal w.shape\[1\]"),
    ("mx-a-dtype", lambda on: smgemm.linear(on(3, 32, dtype=torch.float32), _mx(on)), TypeError,
     r"with an MXFP4 weight, a must be"),
    ("mx-bias", lambda on: smgemm.linear(on(3, 32, dtype=torch.bfloat16), _mx(on), on(7, dtype=torch.bfloat16)),
     ValueError, r"bias must be broadcastable"),
]
# Calls with `out=`: not under autograd (an out= call with an input that requires grad is itself an error).
BAD_OUT_CALLS = [
    ("out-shape", lambda on: smgemm.matmul(on(4, 4), on(4, 5), out=on(4, 4)), ValueError,
     r"out must have shape \(M, N\)"),
    ("out-dtype", lambda on: smgemm.matmul(on(4, 4), on(4, 4), out=on(4, 4, dtype=torch.float32)), TypeError,
     r"out must have dtype torch.float16"),
]
# Checks of what traced tensors do not have (addresses, the negative bit): eager only. (Traced, a negative-view out
# is refused by torch itself: torch 2.11's fake tensors fail on it.)
EAGER_ONLY_CALLS = [
    ("out-neg-view", lambda on: smgemm.matmul(on(4, 4), on(4, 4), out=torch._neg_view(on(4, 4))), ValueError,
     r"out is a negative view"),
    ("out-expanded", lambda on: smgemm.matmul(on(4, 4), on(4, 4), out=on(1, 4).expand(4, 4)), ValueError,
     r"out has overlapping elements"),
    ("out-is-a", lambda on: (lambda a: smgemm.matmul(a, on(4, 4), out=a))(on(4, 4)), ValueError, r"out overlaps a"),
    ("out-is-b", lambda on: (lambda b: smgemm.matmul(on(4, 4), b, out=b.t()))(on(4, 4)), ValueError,
     r"out overlaps b"),
    ("out-overlaps-input", lambda on: (lambda c: smgemm.addmm(c[:4], on(4, 4), on(4, 4), out=c[1:5]))(on(6, 4)),
     ValueError, r"out overlaps input"),
]


def _ids(cases):
    return [c[0] for c in cases]


def _raised(fn):
    with pytest.raises(Exception) as info:
        fn()
    return info.value


def _same_error(call, exc, match, modes):
    """`call` raises `exc`, with one message matching `match`, in every mode."""
    messages = set()
    for mode in modes:
        err = _raised(mode(call))
        assert type(err) is exc, f"{type(err).__name__}: {err}"
        assert re.search(match, str(err)), str(err)
        messages.add(str(err))
    assert len(messages) == 1, messages


def _eager(device):
    return lambda call: lambda: call(Make(device, grad=False))


def _grad(device):
    return lambda call: lambda: call(Make(device, grad=True))


def _compiled(device):
    def mode(call):
        torch._dynamo.reset()
        return torch.compile(lambda: call(Make(device, grad=False)), backend="eager")

    return mode


@pytest.mark.parametrize(("name", "call", "exc", "match"), BAD_CALLS, ids=_ids(BAD_CALLS))
def test_bad_call_same_error_eager_grad_compiled(name, call, exc, match, device):
    _same_error(call, exc, match, [_eager(device), _grad(device), _compiled(device)])


@pytest.mark.parametrize(("name", "call", "exc", "match"), BAD_OUT_CALLS, ids=_ids(BAD_OUT_CALLS))
def test_bad_out_same_error_eager_compiled(name, call, exc, match, device):
    _same_error(call, exc, match, [_eager(device), _compiled(device)])


@pytest.mark.parametrize(("name", "call", "exc", "match"), EAGER_ONLY_CALLS, ids=_ids(EAGER_ONLY_CALLS))
def test_bad_out_eager(name, call, exc, match, device):
    _same_error(call, exc, match, [_eager(device)])


def test_fullgraph_compile_reports_the_message(device):
    # fullgraph tracing cannot fall back to eager: Dynamo wraps the error, and its message carries ours.
    a = torch.randn(4, 4).half().to(device)
    torch._dynamo.reset()
    f = torch.compile(lambda a: smgemm.matmul(a, a, num_sms=0), fullgraph=True, backend="eager")
    with pytest.raises(Exception, match=r"num_sms must be None or an int >= 1, got 0"):
        f(a)


def test_out_requiring_grad_is_refused(device):
    a, b = torch.randn(4, 4, device=device).half(), torch.randn(4, 4, device=device).half()
    out = torch.empty(4, 4, dtype=torch.float16, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"out= do not support automatic differentiation"):
        smgemm.matmul(a, b, out=out)
    with pytest.raises(RuntimeError, match=r"out= do not support automatic differentiation"):
        smgemm.matmul(a.requires_grad_(), b, out=out.detach())
    with torch.no_grad():  # as torch: without grad mode, out= may be any tensor
        smgemm.matmul(a, b, out=out)


def test_huge_budget_means_the_whole_device(device):
    # Any int >= 1 is a valid budget (clamped to the device), with or without grad.
    a = torch.randn(8, 16, device=device).half()
    b = torch.randn(16, 8, device=device).half()
    expected = smgemm.matmul(a, b)
    assert torch.equal(smgemm.matmul(a, b, num_sms=2**70), expected)
    with smgemm.sm_budget(2**70):
        assert torch.equal(smgemm.matmul(a, b), expected)
    y = smgemm.matmul(a.requires_grad_(), b, num_sms=2**70)
    assert torch.equal(y.detach(), expected)
    y.sum().backward()
    assert a.grad is not None


def test_eight_row_tiles_are_for_mxfp4_weights_only(device):
    a, b = torch.randn(8, 64, device=device).half(), torch.randn(64, 64, device=device).half()
    eight = smgemm.TileConfig(8, 64, 64, mx_swap=True)
    with pytest.raises(ValueError, match=r"config.block_m = 8 is for the swapped tiles of an MXFP4 weight"):
        smgemm._gemm.gemm(a, b, config=eight)
    with smgemm.overrides(config=eight), pytest.raises(ValueError, match=r"config.block_m = 8 is for the swapped"):
        smgemm.matmul(a, b)


def test_tensors_on_different_devices():
    with pytest.raises(ValueError, match=r"b is on meta but a is on cpu"):
        smgemm.matmul(torch.randn(4, 4).half(), torch.empty(4, 4, dtype=torch.float16, device="meta"))


def test_cpu_tensors_without_the_interpreter(monkeypatch):
    monkeypatch.setattr(smgemm._checks, "interpreter_active", lambda: False)
    with pytest.raises(ValueError, match=r"a is on cpu: smgemm runs on CUDA tensors"):
        smgemm.matmul(torch.randn(4, 4).half(), torch.randn(4, 4).half())


def test_out_overlap_check_never_misses_a_shared_element():
    """`_checks._overlaps` against the element addresses of random strided views of one buffer (ranks 0 to 3,
    unit, wide, zero and overlapping strides, random offsets): it never calls two views disjoint that share an
    element, and it is exact whenever each view's rows are evenly spaced alike (the case it claims)."""
    import itertools
    import random

    rng = random.Random()
    buf = torch.zeros(2048, dtype=torch.float16)

    def view():
        shape = [rng.randint(1, 6) for _ in range(rng.choice([0, 1, 2, 2, 3]))]
        if not shape:
            return buf.as_strided((), (), rng.randint(0, 200))
        strides, reach = [rng.choice([1, 1, 1, 2, 0])], shape[-1]
        for size in reversed(shape[:-1]):
            strides.insert(0, rng.choice([reach, reach + rng.randint(1, 5), rng.randint(0, reach + 8), 0]))
            reach = max(reach, strides[0] * size)
        return buf.as_strided(shape, strides, rng.randint(0, 200))

    def elements(t):
        return {t.storage_offset() + sum(i * s for i, s in zip(ix, t.stride()))
                for ix in itertools.product(*(range(n) for n in t.shape))}

    exact = 0
    for _ in range(3000):
        x, y = view(), view()
        shared, said = bool(elements(x) & elements(y)), smgemm._checks._overlaps(x, y)
        case = " / ".join(f"{tuple(t.shape)} {t.stride()} +{t.storage_offset()}" for t in (x, y))
        assert said or not shared, f"missed a shared element: {case}"
        rows = smgemm._checks._rows(x), smgemm._checks._rows(y)
        if None not in rows and (rows[0][2] == 1 or rows[1][2] == 1 or rows[0][1] == rows[1][1]):
            assert said == shared, f"not exact: {case}"
            exact += 1
    assert exact >= 300  # at least a tenth of the draws are of the kind the exact comparison claims
