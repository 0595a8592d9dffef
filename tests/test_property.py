"""Property: every GEMM smgemm accepts is computed right, and so are its gradients, whatever the shapes, views, dtypes,
schedule and budget.

Hypothesis draws the problem; the result is compared with a float64 reference element by element
(`reference.assert_gemm_close`, bounds from the dtypes and K). Operands come as contiguous tensors, transposed
views, slices of larger tensors (offset base, padded row stride), expanded views (stride 0) and negative-bit views;
operands whose rows are not aligned are copied into aligned buffers first or read in place, as the planner decides
or as forced.
`SMGEMM_PROPERTY_EXAMPLES` sets the number of examples (the CPU default keeps CI short; the GPU run in the docs
uses 2,000).
"""

import os

import pytest
import torch
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import smgemm
from reference import assert_gemm_close

_EXAMPLES = int(os.environ.get("SMGEMM_PROPERTY_EXAMPLES", "0")) or (200 if torch.cuda.is_available() else 150)
_MAX_DIM = 700 if torch.cuda.is_available() else 72
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float8_e4m3fn]
VIEWS = ["contiguous", "transposed", "sliced", "expanded", "negative"]
# The batched and gradient properties: a third of the examples each.
_A_THIRD = settings(max_examples=max(1, _EXAMPLES // 3), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _operand(draw, rows: int, cols: int, dtype: torch.dtype, device: str, expand_dim: int) -> torch.Tensor:
    """A [rows, cols] operand in one of VIEWS; `expand_dim` is the dim an expanded view repeats along."""
    views = VIEWS if dtype != torch.float8_e4m3fn else VIEWS[:-1]  # fp8 has no negation
    view = draw(st.sampled_from(views))
    if view == "transposed":
        return torch.randn(cols, rows, device=device).to(dtype).t()
    if view == "sliced":
        pad_r, pad_c = draw(st.integers(0, 3)), draw(st.integers(0, 9))
        base = torch.randn(rows + pad_r, cols + pad_c, device=device).to(dtype)
        return base[pad_r:, pad_c:] if draw(st.booleans()) else base[:rows, :cols]
    if view == "expanded":
        shape = (1, cols) if expand_dim == 0 else (rows, 1)
        return torch.randn(shape, device=device).to(dtype).expand(rows, cols)
    x = torch.randn(rows, cols, device=device).to(dtype)
    return torch._neg_view(x) if view == "negative" else x


@st.composite
def problems(draw, device):
    dtype = draw(st.sampled_from(DTYPES))
    m, n, k = (draw(st.integers(1, _MAX_DIM)) for _ in range(3))
    a = _operand(draw, m, k, dtype, device, expand_dim=0)
    b = _operand(draw, k, n, dtype, device, expand_dim=1)
    entry = draw(st.sampled_from(["matmul", "addmm", "linear"]))
    kwargs = {
        "schedule": draw(st.sampled_from([None, *smgemm.SCHEDULES])),
        "num_sms": draw(st.sampled_from([None, 1, 2, 3, 7, 16, 132, 10_000])),
    }
    scales = {}
    if dtype == torch.float8_e4m3fn:
        scales["scale_a"] = draw(st.sampled_from([None, torch.rand(1, device=device) + 0.5,
                                                  torch.rand(m, 1, device=device) + 0.5]))
        scales["scale_b"] = draw(st.sampled_from([None, torch.rand(1, device=device) + 0.5,
                                                  torch.rand(1, n, device=device) + 0.5]))
    out_dtype = torch.bfloat16 if dtype == torch.float8_e4m3fn else dtype
    c = None
    alpha, beta = 1.0, 1.0
    if entry in ("addmm", "linear"):
        c_shape = draw(st.sampled_from([(n,), (1, n), (m, n), (m, 1), ()]))
        c = torch.randn(c_shape, device=device).to(draw(st.sampled_from([out_dtype, torch.float32])))
        if draw(st.booleans()):
            c = torch._neg_view(c)
    if entry == "addmm":
        alpha = draw(st.sampled_from([1.0, -0.5, 0.0, 2]))
        beta = draw(st.sampled_from([1.0, 0.0, 0.25]))
    if entry == "linear" and c is not None and c.dim() == 2 and c.shape[1] == 1 and c.shape[0] != 1:
        c = None  # linear's bias broadcasts along N, not M: [M, 1] is an addmm input
    kwargs["stage"] = draw(st.sampled_from([None, True, False]))  # copy unaligned operands first: the planner's
    return entry, a, b, c, alpha, beta, scales, kwargs  # call (None), always, never


def _run(entry, a, b, c, alpha, beta, scales, kwargs):
    kwargs = dict(kwargs)
    stage = kwargs.pop("stage", None)
    if stage is not None:
        with smgemm.overrides(stage=stage):
            return _run(entry, a, b, c, alpha, beta, scales, kwargs)
    if entry == "matmul":
        return smgemm.matmul(a, b, **scales, **kwargs)
    if entry == "addmm":
        return smgemm.addmm(c, a, b, alpha=alpha, beta=beta, **scales, **kwargs)
    sb = scales.get("scale_b")
    scales = dict(scales, scale_b=sb.reshape(-1, 1) if sb is not None and sb.numel() > 1 else sb)
    return smgemm.linear(a, b.t(), c, **scales, **kwargs)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_every_accepted_gemm_is_right(device, monkeypatch):
    checked, repeats = [], []
    remembered = smgemm._gemm._repeat_call

    def counted(*args, **kwargs):  # how many calls run a remembered launch
        out = remembered(*args, **kwargs)
        repeats.append(out is not None)
        return out

    monkeypatch.setattr(smgemm._gemm, "_repeat_call", counted)

    @settings(max_examples=_EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(problems(device))
    def check(problem):
        entry, a, b, c, alpha, beta, scales, kwargs = problem
        note(f"{entry} {a.dtype} a {tuple(a.shape)} {a.stride()} @{a.data_ptr() % 16} neg={a.is_neg()}, "
             f"b {tuple(b.shape)} {b.stride()} @{b.data_ptr() % 16} neg={b.is_neg()}, "
             f"c {None if c is None else (tuple(c.shape), c.stride(), c.dtype)}, alpha={alpha}, beta={beta}, "
             f"scales {[None if v is None else tuple(v.shape) for v in scales.values()]}, {kwargs}")
        # then the same call on fresh operands of the same layout: it repeats the first one's signature, so it runs
        # the remembered launch where the call is one a repeat may take (`_gemm._SEEN_CALLS`)
        for x, y, z in ((a, b, c), tuple(_fresh_like(t) for t in (a, b, c))):
            out = _run(entry, x, y, z, alpha, beta, scales, kwargs)
            assert_gemm_close(out, x.resolve_neg(), y.resolve_neg(), alpha=alpha, beta=beta,
                              c=None if z is None else z.resolve_neg(), scale_a=scales.get("scale_a"),
                              scale_b=scales.get("scale_b"))
        checked.append(entry)

    check()
    print(f"\n{len(checked)} GEMMs (each twice) checked against float64 on {device}, {sum(repeats)} through a "
          f"remembered launch")
    # a repeat needs the same knobs block (each `stage` override is a new one), no negative view, alpha != 0: about a
    # fifth of the draws (30-44 of 150 on the CPU)
    assert sum(repeats) >= len(checked) // 10


def _fresh_like(t: torch.Tensor | None) -> torch.Tensor | None:
    """New random values in `t`'s exact layout (sizes, strides, storage offset, so the same 16-byte alignment, and
    negative view or not): another call of the same signature."""
    if t is None:
        return None
    numel = t.untyped_storage().nbytes() // t.element_size()
    base = torch.randn(numel, device=t.device).to(t.dtype)
    view = base.as_strided(t.size(), t.stride(), t.storage_offset())
    return torch._neg_view(view) if t.is_neg() else view


def _batched_operand(draw, batch: int, rows: int, cols: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    """A [batch, rows, cols] operand: contiguous, each matrix transposed, one matrix repeated (batch stride 0), a
    slice of a larger tensor, or a negative view."""
    view = draw(st.sampled_from(["contiguous", "transposed", "repeated", "sliced", "negative"]))
    if view == "transposed":
        return torch.randn(batch, cols, rows, device=device).to(dtype).transpose(1, 2)
    if view == "repeated":
        return torch.randn(1, rows, cols, device=device).to(dtype).expand(batch, rows, cols)
    if view == "sliced":
        return torch.randn(batch + 1, rows + 2, cols + 3, device=device).to(dtype)[1:, 2:, 3:]
    x = torch.randn(batch, rows, cols, device=device).to(dtype)
    return torch._neg_view(x) if view == "negative" else x


def _knobs(draw) -> dict:
    """A schedule and an SM budget (the batched and gradient properties)."""
    return {"schedule": draw(st.sampled_from([None, *smgemm.SCHEDULES])),
            "num_sms": draw(st.sampled_from([None, 1, 3, 7, 132]))}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_every_accepted_batched_gemm_is_right(device):
    checked = []

    @_A_THIRD
    @given(st.data())
    def check(data):
        draw = data.draw
        dtype = draw(st.sampled_from(DTYPES[:3]))
        batch = draw(st.integers(1, 3))
        m, n, k = (draw(st.integers(1, _MAX_DIM // 2)) for _ in range(3))
        a = _batched_operand(draw, batch, m, k, dtype, device)
        b = _batched_operand(draw, batch, k, n, dtype, device)
        kwargs = _knobs(draw)
        c = None
        alpha, beta = 1.0, 0.0
        if draw(st.booleans()):
            c = torch.randn(draw(st.sampled_from([(n,), (batch, 1, n), (batch, m, n), (m, 1)])), device=device)
            alpha, beta = draw(st.sampled_from([1.0, 0.5, 0.0])), draw(st.sampled_from([1.0, 0.0, -2.0]))
        note(f"{dtype} a {tuple(a.shape)} {a.stride()} neg={a.is_neg()}, b {tuple(b.shape)} {b.stride()} "
             f"neg={b.is_neg()}, c {None if c is None else tuple(c.shape)}, alpha={alpha}, beta={beta}, {kwargs}")
        out = smgemm.bmm(a, b, **kwargs) if c is None else smgemm.baddbmm(c, a, b, alpha=alpha, beta=beta, **kwargs)
        for i in range(batch):
            ci = None if c is None else c.expand(batch, m, n)[i]
            assert_gemm_close(out[i], a[i].resolve_neg(), b[i].resolve_neg(), alpha=alpha, beta=beta, c=ci)
        checked.append(batch)

    check()
    print(f"\n{len(checked)} batched GEMMs checked against float64 on {device}")


def _sum_bound(terms: torch.Tensor, shape: torch.Size, count: int, dtype: torch.dtype) -> torch.Tensor:
    """Error bound of summing `count` terms per element into `shape` with fp32 accumulation, then rounding to
    `dtype`: count * u32 + u_dtype of the terms' absolute sum, plus a subnormal step."""
    u = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}[dtype]
    return terms.abs().sum_to_size(shape) * (count * 2.0**-24 + u) + 2.0**-24


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_every_gradient_is_right(device):
    """The gradients of matmul / addmm / linear, eager under autograd (`_library.route`; the second of two identical
    calls, so a remembered one), against float64 products of the same operands: dA = alpha * dD @ B^T,
    dB = alpha * A^T @ dD, dC = beta * dD summed over C's broadcast dims."""
    checked = []

    @_A_THIRD
    @given(st.data())
    def check(data):
        draw = data.draw
        dtype = draw(st.sampled_from(DTYPES[:3]))
        m, n, k = (draw(st.integers(1, _MAX_DIM // 2)) for _ in range(3))
        # Each operand view is a leaf of its own (its base does not require grad): its .grad is what the GEMM's
        # backward returns for it.
        a = _operand(draw, m, k, dtype, device, expand_dim=0).requires_grad_()
        b = _operand(draw, k, n, dtype, device, expand_dim=1).requires_grad_()
        entry = draw(st.sampled_from(["matmul", "addmm", "linear"]))
        kwargs = _knobs(draw)
        c, alpha, beta = None, 1.0, 1.0
        if entry != "matmul":
            shapes = [(n,), (m, n), (1, n)] + ([(m, 1), ()] if entry == "addmm" else [])
            c = torch.randn(draw(st.sampled_from(shapes)), device=device).to(dtype).requires_grad_()
        if entry == "addmm":
            alpha, beta = draw(st.sampled_from([1.0, -0.5, 0.0])), draw(st.sampled_from([1.0, 0.0, 0.25]))
        note(f"{entry} {dtype} a {tuple(a.shape)} {a.stride()} neg={a.is_neg()}, b {tuple(b.shape)} {b.stride()} "
             f"neg={b.is_neg()}, "
             f"c {None if c is None else tuple(c.shape)}, alpha={alpha}, beta={beta}, {kwargs}")

        def call():
            if entry == "matmul":
                return smgemm.matmul(a, b, **kwargs)
            if entry == "addmm":
                return smgemm.addmm(c, a, b, alpha=alpha, beta=beta, **kwargs)
            return smgemm.linear(a, b.t(), c, **kwargs)

        call()
        y = call()
        g = torch.randn(m, n, device=device).to(dtype)
        y.backward(g)
        a_, b_ = a.detach().resolve_neg(), b.detach().resolve_neg()
        assert_gemm_close(a.grad, g, b_.t(), alpha=alpha)
        assert_gemm_close(b.grad, a_.t(), g, alpha=alpha)
        if c is not None:
            terms = g.double() * beta
            want = terms.sum_to_size(c.shape)
            assert c.grad.dtype == c.dtype and not c.grad.isnan().any()
            assert ((c.grad.double() - want).abs() <= _sum_bound(terms, c.shape, m * n, dtype)).all()
        checked.append(entry)

    check()
    print(f"\n{len(checked)} gradients checked against float64 on {device}")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_every_accepted_mxfp4_gemm_is_right(device):
    """MXFP4 weights in every byte layout (`mxfp4.LAYOUTS`; K a multiple of 128 for the word layouts) with bf16,
    fp16 (contiguous or row-sliced) or MXFP4 activations, a bias or none, alpha, every schedule and budget, fused or
    expanded first: against float64 products of the dequantized values."""
    from smgemm._gemm import gemm_mxfp4
    from smgemm.mxfp4 import LAYOUTS

    checked = []

    @settings(max_examples=_EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.data())
    def check(data):
        draw = data.draw
        layout = draw(st.sampled_from(LAYOUTS))
        group = 32 if layout == "ocp" else 128
        m, n = draw(st.integers(1, _MAX_DIM)), draw(st.integers(1, _MAX_DIM))
        k = group * draw(st.integers(1, max(1, 3 * 128 // group)))
        act = draw(st.sampled_from(["bf16", "fp16", "mxfp4"]))
        a_layout = draw(st.sampled_from([t for t in LAYOUTS if t == "ocp" or k % 128 == 0]))
        pad = draw(st.sampled_from([0, 8, 3]))  # a dense a's row stride k + pad: aligned or not
        has_bias = draw(st.booleans())
        alpha = draw(st.sampled_from([1.0, 0.5, -2.0]))
        kwargs = {**_knobs(draw), "expand": draw(st.sampled_from([None, True]))}
        kwargs["schedule"] = kwargs["schedule"] or "auto"  # gemm_mxfp4 is the internal entry: no None
        note(f"{layout} weight [{n}, {k}], {act} a [{m}, {k}] ({a_layout if act == 'mxfp4' else f'pad {pad}'}), "
             f"bias={has_bias}, alpha={alpha}, {kwargs}")
        # twice, on fresh operands of the same layout: the second call repeats the first one's signature (the
        # remembered launch, where the call is one a repeat may take)
        for _ in range(2):
            w = smgemm.quantize_mxfp4(torch.randn(n, k, device=device), layout=layout)
            if act == "mxfp4":
                a = smgemm.quantize_mxfp4(torch.randn(m, k, device=device), layout=a_layout)
                a_ref = a.dequantize(torch.float32)
            else:
                dtype = torch.bfloat16 if act == "bf16" else torch.float16
                a = a_ref = torch.randn(m, k + pad, device=device).to(dtype)[:, :k]
            bias = torch.randn(n, device=device).to(torch.bfloat16 if act != "fp16" else torch.float16) \
                if has_bias else None
            out = gemm_mxfp4(a, w, c=bias, alpha=alpha, **kwargs)
            assert_gemm_close(out, a_ref, w.dequantize(torch.float32).t(), alpha=alpha, beta=1.0, c=bias)
        checked.append(layout)

    check()
    print(f"\n{len(checked)} MXFP4 GEMMs (each twice) checked against float64 on {device}")
