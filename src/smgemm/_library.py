"""The torch.library ops (namespace `smgemm`) around `_gemm.gemm`, with fake kernels and autograd.

They are what `torch.compile` traces (an opaque op with a fake implementation: no graph break, dynamic M),
what autograd differentiates, and what CUDA graphs capture. Each differentiable op NAME has a twin NAME_nograd
without autograd, which is what runs below NAME's autograd kernel and what compiled graphs call (`_define`,
`_caller`). Eager calls that no torch subsystem must see skip the dispatcher (`route`): they call `gemm` directly,
or, where autograd must record them, `autograd_gemm` / `autograd_bmm` / `autograd_gemm_mxfp4`, the same kernel
under an autograd.Function with the op's backward. A backward's products are routed the same way (`_routed`).

    smgemm::gemm(a, b, c, alpha, beta, out_dtype, scale_a, scale_b, schedule, num_sms) -> Tensor
    smgemm::gemm_out(a, b, c, alpha, beta, scale_a, scale_b, schedule, num_sms, out!) -> ()
    smgemm::gemm_mxfp4(a, a_scales, w_data, w_scales, c, alpha, beta, out_dtype, schedule, num_sms, a_layout,
                       w_layout) -> Tensor
    smgemm::bmm(a, b, c, alpha, beta, out_dtype, schedule, num_sms) -> Tensor
    smgemm::gemm_nograd, smgemm::gemm_mxfp4_nograd, smgemm::bmm_nograd: the same schemas

Backward: for D = alpha * A @ B + beta * C, dA = alpha * dD @ B^T and dB = alpha * A^T @ dD, each computed by the
same kernel on transposed *views* and laid out like the input it is the gradient of (a column-major B, such as
`weight.t()` in a Linear, gets its gradient as the transpose of a row-major product, so `weight.grad` comes out
contiguous); dC = beta * dD summed to C's broadcast shape.
"""

from __future__ import annotations

import torch
import torch.autograd.forward_ad as _forward_ad
from torch.utils.flop_counter import register_flop_formula

from ._checks import check_batched_dims, check_bmm, check_gemm, check_knobs, check_mxfp4
from ._gemm import PLAIN, gemm, gemm_mxfp4
from .mxfp4 import MXFP4Tensor

_FP8 = torch.float8_e4m3fn


def _gemm_kernel(a, b, c, alpha, beta, out_dtype, scale_a, scale_b, schedule, num_sms):
    """What smgemm::gemm computes (`gemm_op`, `autograd_gemm`)."""
    return gemm(a, b, c=c, alpha=alpha, beta=beta, out_dtype=out_dtype, scale_a=scale_a, scale_b=scale_b,
                schedule=schedule, num_sms=num_sms)


def _gemm_fake(a, b, c, alpha, beta, out_dtype, scale_a, scale_b, schedule, num_sms):
    check_knobs(schedule, num_sms)
    checked = check_gemm(a, b, c, beta, None, out_dtype, scale_a, scale_b)
    return a.new_empty((checked.m, checked.n), dtype=checked.out_dtype)


@torch.library.custom_op("smgemm::gemm_out", mutates_args=("out",))
def gemm_out_op(
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor | None,
    alpha: float,
    beta: float,
    scale_a: torch.Tensor | None,
    scale_b: torch.Tensor | None,
    schedule: str,
    num_sms: int | None,
    out: torch.Tensor,
) -> None:
    gemm(a, b, c=c, alpha=alpha, beta=beta, out=out, out_dtype=out.dtype, scale_a=scale_a, scale_b=scale_b,
         schedule=schedule, num_sms=num_sms)


@gemm_out_op.register_fake
def _gemm_out_fake(a, b, c, alpha, beta, scale_a, scale_b, schedule, num_sms, out):
    check_knobs(schedule, num_sms)
    check_gemm(a, b, c, beta, out, out.dtype, scale_a, scale_b)


_FUNCTORCH = getattr(torch._C, "_functorch", None)
# The batched tensors of torch's older vmap, which `torch.autograd.grad(..., is_grads_batched=True)` and
# `torch.autograd.functional.jacobian(..., vectorize=True)` run a backward under: plain tensors with no storage.
_LEGACY_BATCHED = getattr(_FUNCTORCH, "is_legacy_batchedtensor", lambda t: False)


# Where an eager call runs (`route`): the kernel directly, the kernel under an autograd.Function (autograd must
# record the call, nothing else needs the dispatcher), or the custom op.
KERNEL, AUTOGRAD, OP = 0, 1, 2


def route(*tensors) -> int:
    """OP where a call must go through the op: torch.compile traces it, or a torch subsystem must see it (a
    dispatch or function mode such as FakeTensorMode or FlopCounterMode, a tensor subclass such as DTensor, a
    functorch transform such as vmap or grad, a forward-AD dual level, a meta tensor); else AUTOGRAD where autograd
    must record it, else KERNEL. Cheap C queries first and one pass over the tensors: this runs on every eager call.
    (A backward's products also look for the batched tensors of torch's older vmap: `_routed`.)"""
    if torch.compiler.is_compiling():  # first: Dynamo cannot trace the C queries below
        return OP
    if torch._C._len_torch_dispatch_stack() or torch._C._is_torch_function_mode_enabled() or (
            _FUNCTORCH is not None and _FUNCTORCH.maybe_current_level() is not None) or _forward_ad._current_level >= 0:
        return OP
    grad = torch.is_grad_enabled()
    route = KERNEL
    for t in tensors:
        if t is None:
            continue
        kind = type(t)
        if kind is torch.Tensor or kind is torch.nn.Parameter:
            if t.is_meta:
                return OP
            if grad and t.requires_grad:
                route = AUTOGRAD
        elif isinstance(t, torch.Tensor):  # a subclass (DTensor, ...)
            register_dtensor_rules()
            return OP
    return route


def plain_kernel(a, b, c) -> bool:
    """Whether an eager call of plain tensors a, b and c (b and c may be None; `_gemm.PLAIN`) runs the kernel
    directly with nothing to cast: `route` would say KERNEL and autocast is off. Meta tensors are not looked at: a
    meta call is never remembered (`_gemm._SEEN_CALLS` keys hold the device), so a key of one finds nothing. The
    first step of every eager call of the operations: type checks, then the C queries `route` makes."""
    kinds = PLAIN
    if type(a) not in kinds or (b is not None and type(b) not in kinds) or (c is not None and type(c) not in kinds):
        return False
    if torch.compiler.is_compiling():  # before the C queries, which Dynamo cannot trace
        return False
    queries = torch._C
    if queries.is_grad_enabled() and (a.requires_grad or (b is not None and b.requires_grad) or
                                      (c is not None and c.requires_grad)):  # first: every training step's call
        return False
    return not (queries._len_torch_dispatch_stack() or queries._is_torch_function_mode_enabled() or
                queries._is_any_autocast_enabled() or (_FUNCTORCH is not None and
                                                       _FUNCTORCH.maybe_current_level() is not None)
                or _forward_ad._current_level >= 0)


def _eager_autograd(kernel, setup_context, backward, jvp, name: str = "Eager"):
    """`apply` of an autograd.Function running `kernel` (what an op wraps) with the op's backward: for eager calls
    that only autograd must record (no torch.compile, torch mode, functorch transform or tensor subclass: those take
    the op, `route`). It skips the dispatcher and torch.library's generated autograd wrapper. The Function saves its
    context in forward and is applied through the C base's apply: `Function.apply`'s per-call signature binding
    (inspect.signature) and functorch unwrapping serve calls this route never takes. `jvp`: the op's forward-mode
    derivative (`torch.autograd.forward_ad`)."""

    def forward(ctx, *args):
        out = kernel(*args)
        setup_context(ctx, args, out)
        return out

    eager = type(name, (torch.autograd.Function,), {
        "forward": staticmethod(forward),
        "backward": staticmethod(lambda ctx, grad: backward(ctx, grad)),
        "jvp": staticmethod(lambda ctx, *tangents: jvp(ctx, *tangents)),
    })
    return super(torch.autograd.Function, eager).apply


_LIB = torch.library.Library("smgemm", "FRAGMENT")


def _define(name: str, schema: str, kernel, fake, setup_context, backward, jvp, defaults: tuple = ()):
    """Define smgemm::NAME, the differentiable op, and smgemm::NAME_nograd, the same computation (`kernel`, output
    metadata from `fake`) with no autograd kernel of its own; returns both ops' overloads.

    NAME's autograd kernel runs NAME_nograd, recorded with `backward` where an input requires grad (and with `jvp`
    under a forward-AD dual level): so autograd sees NAME, and what runs below it (torch modes, tensor subclasses,
    the graphs torch.compile and torch.export trace) is NAME_nograd, which a compiled graph calls through the
    dispatcher's C++ path and one Python function: ~2.8 us of host time a call on the CPU where a
    `torch.library.custom_op`, whose generated autograd kernel and aliasing checks run in Python on every call, took
    ~9.9 (`benchmarks/host_ops.py`). NAME_nograd called directly with an input that requires grad gives it no
    gradient (torch warns at the backward); smgemm calls it only where nothing is recorded. `defaults`: the values
    of the schema's trailing arguments that have defaults, which the dispatcher leaves out of a call that passes
    them."""
    for op_name in (name, f"{name}_nograd"):
        _LIB.define(op_name + schema, tags=(torch.Tag.pt2_compliant_tag,))
        _LIB.impl(op_name, kernel, "CompositeExplicitAutograd")
        torch.library.register_fake(f"smgemm::{op_name}", fake, lib=_LIB)
    nograd = getattr(torch.ops.smgemm, f"{name}_nograd").default
    recorded = _eager_autograd(nograd, setup_context, backward, jvp, f"smgemm_{name}")  # grad_fn smgemm_NAMEBackward
    arity = len(nograd._schema.arguments)

    def autograd_kernel(*args):
        if len(args) < arity:
            args = (*args, *defaults[len(defaults) - (arity - len(args)):])
        if (torch.is_grad_enabled() and torch._C._any_requires_grad(*args)) or _forward_ad._current_level >= 0:
            return recorded(*args)
        return nograd(*args)

    _LIB.impl(name, autograd_kernel, "Autograd")
    return getattr(torch.ops.smgemm, name).default, nograd


def _caller(op, nograd, setup_context, backward, jvp):
    """A caller of op smgemm::NAME for the calls that go through the dispatcher (`route` OP): NAME where autograd
    must record the call (or a forward-AD dual level is active), else NAME_nograd (`_define`), so that a graph
    torch.compile traces without gradients holds NAME_nograd too. Under a torch.func transform (grad, vjp, jvp,
    vmap, ...), an autograd.Function that runs NAME with its `setup_context`, `backward` and `jvp` (the ops'
    autograd kernels do not serve those transforms, and vmap of one would loop over the batch, torch's fallback for
    the op)."""
    twin = type("Twin", (torch.autograd.Function,), {
        "generate_vmap_rule": True,
        "forward": staticmethod(lambda *args: op(*args)),
        "setup_context": staticmethod(lambda ctx, inputs, output: setup_context(ctx, inputs, output)),
        "backward": staticmethod(lambda ctx, grad: backward(ctx, grad)),
        "jvp": staticmethod(lambda ctx, *tangents: jvp(ctx, *tangents)),
    })

    def call(*args) -> torch.Tensor:
        if _FUNCTORCH is not None and _FUNCTORCH.maybe_current_level() is not None:
            if _FUNCTORCH.peek_interpreter_stack().key() == _FUNCTORCH.TransformType.Functionalize:
                return op(*args)  # functionalization sees ops, not autograd.Functions
            return twin.apply(*args)
        if _forward_ad._current_level >= 0:  # dual tensors: NAME's forward-mode derivative
            return op(*args)
        if torch.is_grad_enabled():
            for t in args:  # a plain loop: Dynamo traces it, guarding on grad mode and requires_grad
                if isinstance(t, torch.Tensor) and t.requires_grad:
                    return op(*args)
        return nograd(*args)

    return call


def _product_like(like: torch.Tensor, x: torch.Tensor, y: torch.Tensor, alpha: float, schedule: str,
                  num_sms: int | None) -> torch.Tensor:
    """alpha * x @ y in `like`'s dtype and layout: a column-major `like` gets (y^T @ x^T)^T, a view of a row-major
    product, so neither operand nor result is ever copied into a transposed layout."""
    if like.stride(0) == 1 and like.stride(1) != 1:
        return _product(y.t(), x.t(), alpha, like.dtype, schedule, num_sms).t()
    return _product(x, y, alpha, like.dtype, schedule, num_sms)


def _routed(tensors: tuple, kernel, autograd, op, *args) -> torch.Tensor:
    """`args` run where `route` sends `tensors`: `kernel` directly, under `autograd` (an `_eager_autograd`), or
    through `op` (a custom op's caller, which a torch mode sees: FlopCounterMode counts a backward's products). A
    backward that torch batches with its older vmap (`torch.autograd.grad(..., is_grads_batched=True)`, a vectorized
    `jacobian`) hands it batched tensors, which only the op takes (that vmap loops over it)."""
    where = OP if any(t is not None and _LEGACY_BATCHED(t) for t in tensors) else route(*tensors)
    return (kernel if where == KERNEL else autograd if where == AUTOGRAD else op)(*args)


def _product(x: torch.Tensor, y: torch.Tensor, alpha: float, out_dtype: torch.dtype, schedule: str,
             num_sms: int | None) -> torch.Tensor:
    """alpha * x @ y for a backward, routed (`_routed`; under autograd only for a double backward)."""
    return _routed((x, y), _gemm_kernel, autograd_gemm, call_gemm, x, y, None, alpha, 0.0, out_dtype, None, None,
                   schedule, num_sms)


def _grad_c(ctx, grad: torch.Tensor) -> torch.Tensor:
    """d(beta * C) = beta * dD, summed over the dims C was broadcast along, in C's dtype."""
    return (grad * ctx.beta).sum_to_size(ctx.c_shape).to(ctx.c_dtype)


def _primal(t: torch.Tensor) -> torch.Tensor:
    """`t` without its forward-AD tangent (a jvp's products are of primal values); under a torch.func transform,
    which hands a jvp its inputs unwrapped, `t` itself."""
    if _forward_ad._current_level < 0 or (_FUNCTORCH is not None and _FUNCTORCH.maybe_current_level() is not None):
        return t
    return _forward_ad.unpack_dual(t).primal


def _tangent_sum(ctx, parts: list, tc) -> torch.Tensor:
    """A jvp's output tangent: the fp32 `parts` (products with alpha applied) plus beta * dC, in D's dtype and shape
    (torch has one forward-AD dual level at a time)."""
    total = torch.zeros(ctx.out_shape, dtype=torch.float32, device=ctx.out_device)
    for part in parts:
        total = total + part
    if tc is not None:
        total = total + ctx.beta * tc.float()
    return total.to(ctx.out_dtype)


def _save(ctx, saved: tuple, output: torch.Tensor, c, alpha, beta, schedule, num_sms) -> None:
    """What every op's backward and jvp read: the tensors `saved` (for the jvp too while a forward-mode derivative
    may be asked, with the output's shape, dtype and device), C's shape and dtype, and the scalars."""
    ctx.save_for_backward(*saved)
    if _forward_ad._current_level >= 0 or (_FUNCTORCH is not None and _FUNCTORCH.maybe_current_level() is not None):
        ctx.save_for_forward(*saved)
        ctx.out_shape, ctx.out_dtype, ctx.out_device = output.shape, output.dtype, output.device
    ctx.c_shape, ctx.c_dtype = (c.shape, c.dtype) if c is not None else (None, None)
    ctx.alpha, ctx.beta, ctx.schedule, ctx.num_sms = alpha, beta, schedule, num_sms


def _setup_context(ctx, inputs, output):
    a, b, c, alpha, beta, _, scale_a, scale_b, schedule, num_sms = inputs
    _save(ctx, (a, b), output, c, alpha, beta, schedule, num_sms)
    ctx.scaled = a.dtype == _FP8 or scale_a is not None or scale_b is not None


def _backward(ctx, grad):
    a, b = ctx.saved_tensors
    need_a, need_b, need_c = ctx.needs_input_grad[:3]
    if ctx.scaled and (need_a or need_b or any(ctx.needs_input_grad[6:8])):
        raise NotImplementedError("smgemm: autograd through float8 GEMMs and their scales is not supported")
    g = grad if grad.dtype == a.dtype else grad.to(a.dtype)
    grad_a = _product_like(a, g, b.t(), ctx.alpha, ctx.schedule, ctx.num_sms) if need_a else None
    grad_b = _product_like(b, a.t(), g, ctx.alpha, ctx.schedule, ctx.num_sms) if need_b else None
    grad_c = _grad_c(ctx, grad) if need_c else None
    return grad_a, grad_b, grad_c, None, None, None, None, None, None, None


def _product_rule(ctx, product, ta, tb, tc) -> torch.Tensor:
    """A jvp's tangent dD = alpha * (dA @ B + A @ dB) + beta * dC, each product in fp32 by `product` (`_product`, or
    `_batched_product` matrix by matrix)."""
    a, b = (_primal(t) for t in ctx.saved_tensors)
    parts = [product(x.to(a.dtype), y.to(a.dtype), ctx.alpha, torch.float32, ctx.schedule, ctx.num_sms)
             for x, y in ((ta, b), (a, tb)) if x is not None and y is not None]
    return _tangent_sum(ctx, parts, tc)


def _jvp(ctx, ta, tb, tc, *others):
    """Forward mode (`_product_rule`); float8 products and their scales are refused as in `_backward`."""
    if ctx.scaled and (ta is not None or tb is not None or any(t is not None for t in others)):
        raise NotImplementedError("smgemm: autograd through float8 GEMMs and their scales is not supported")
    return _product_rule(ctx, _product, ta, tb, tc)


gemm_op, gemm_nograd = _define(
    "gemm", "(Tensor a, Tensor b, Tensor? c, float alpha, float beta, ScalarType? out_dtype, Tensor? scale_a, "
    "Tensor? scale_b, str schedule, SymInt? num_sms) -> Tensor", _gemm_kernel, _gemm_fake, _setup_context, _backward,
    _jvp)
call_gemm = _caller(gemm_op, gemm_nograd, _setup_context, _backward, _jvp)
autograd_gemm = _eager_autograd(_gemm_kernel, _setup_context, _backward, _jvp)


def _mxfp4_kernel(a, a_scales, w_data, w_scales, c, alpha, beta, out_dtype, schedule, num_sms, a_layout="ocp",
                  w_layout="ocp"):
    """What smgemm::gemm_mxfp4 computes (`gemm_mxfp4_op`, `autograd_gemm_mxfp4`): alpha * a @ w.T + beta * c; w an
    MXFP4 [N, K] weight (data, scales, byte layout); a bf16/fp16, or MXFP4 with a_scales (and a_layout)."""
    a_op = MXFP4Tensor(a, a_scales, a_layout) if a_scales is not None else a
    return gemm_mxfp4(a_op, MXFP4Tensor(w_data, w_scales, w_layout), c=c, alpha=alpha, beta=beta,
                      out_dtype=out_dtype, schedule=schedule, num_sms=num_sms)


def _gemm_mxfp4_fake(a, a_scales, w_data, w_scales, c, alpha, beta, out_dtype, schedule, num_sms, a_layout="ocp",
                     w_layout="ocp"):
    check_knobs(schedule, num_sms)
    a_op = MXFP4Tensor(a, a_scales, a_layout) if a_scales is not None else a
    checked = check_mxfp4(a_op, MXFP4Tensor(w_data, w_scales, w_layout), c, beta, None, out_dtype)
    return a.new_empty((checked.m, checked.n), dtype=checked.out_dtype)


def _mx_setup_context(ctx, inputs, output):
    a, _, w_data, w_scales, c, alpha, beta, _, schedule, num_sms, _, ctx.w_layout = inputs
    _save(ctx, (w_data, w_scales), output, c, alpha, beta, schedule, num_sms)
    ctx.a_dtype = a.dtype


def _mx_backward(ctx, grad):
    """Gradients for the activations and C; the MXFP4 weight is frozen (its uint8 data has no gradient).

    dA = alpha * dD @ W with W dequantized once to A's dtype (exact in bf16): an [N, K] temporary, then the dense
    kernel. (The fused path would need an MXFP4 operand packed along the reduction's output dim.)"""
    w_data, w_scales = ctx.saved_tensors
    grad_a = grad_c = None
    if ctx.needs_input_grad[0]:
        w = MXFP4Tensor(w_data, w_scales, ctx.w_layout).dequantize(ctx.a_dtype)
        g = grad if grad.dtype == ctx.a_dtype else grad.to(ctx.a_dtype)
        grad_a = _product(g, w, ctx.alpha, ctx.a_dtype, ctx.schedule, ctx.num_sms)
    if ctx.needs_input_grad[4]:
        grad_c = _grad_c(ctx, grad)
    return grad_a, None, None, None, grad_c, None, None, None, None, None, None, None


def _mx_jvp(ctx, ta, *others):
    """Forward mode: dD = alpha * dA @ W^T + beta * dC (W dequantized as in `_mx_backward`; the MXFP4 bytes and
    scales carry no tangent)."""
    tc = others[3]
    parts = []
    if ta is not None:
        w = MXFP4Tensor(*(_primal(t) for t in ctx.saved_tensors), ctx.w_layout).dequantize(ctx.a_dtype)
        parts.append(_product(ta.to(ctx.a_dtype), w.t(), ctx.alpha, torch.float32, ctx.schedule, ctx.num_sms))
    return _tangent_sum(ctx, parts, tc)


gemm_mxfp4_op, gemm_mxfp4_nograd = _define(
    "gemm_mxfp4", "(Tensor a, Tensor? a_scales, Tensor w_data, Tensor w_scales, Tensor? c, float alpha, float beta, "
    "ScalarType? out_dtype, str schedule, SymInt? num_sms, str a_layout=\"ocp\", str w_layout=\"ocp\") -> Tensor",
    _mxfp4_kernel, _gemm_mxfp4_fake, _mx_setup_context, _mx_backward, _mx_jvp, defaults=("ocp", "ocp"))
call_gemm_mxfp4 = _caller(gemm_mxfp4_op, gemm_mxfp4_nograd, _mx_setup_context, _mx_backward, _mx_jvp)
autograd_gemm_mxfp4 = _eager_autograd(_mxfp4_kernel, _mx_setup_context, _mx_backward, _mx_jvp)


def _bmm_kernel(a, b, c, alpha, beta, out_dtype, schedule, num_sms):
    """What smgemm::bmm computes (`bmm_op`, `autograd_bmm`): alpha * a[i] @ b[i] + beta * c[i], a [B, M, K],
    b [B, K, N], c broadcastable to [B, M, N]; one launch."""
    check_batched_dims(a, b)
    return gemm(a, b, c=c, alpha=alpha, beta=beta, out_dtype=out_dtype, schedule=schedule, num_sms=num_sms)


def _bmm_fake(a, b, c, alpha, beta, out_dtype, schedule, num_sms):
    check_knobs(schedule, num_sms)
    checked = check_bmm(a, b, c, beta, None, out_dtype)
    return a.new_empty((checked.batch, checked.m, checked.n), dtype=checked.out_dtype)


def _bmm_setup_context(ctx, inputs, output):
    a, b, c, alpha, beta, _, schedule, num_sms = inputs
    _save(ctx, (a, b), output, c, alpha, beta, schedule, num_sms)


def _bmm_backward(ctx, grad):
    """dA[i] = alpha * dD[i] @ B[i]^T, dB[i] = alpha * A[i]^T @ dD[i] (batched, on transposed views), dC as for gemm."""
    a, b = ctx.saved_tensors
    need_a, need_b, need_c = ctx.needs_input_grad[:3]
    g = grad if grad.dtype == a.dtype else grad.to(a.dtype)
    grad_a = _batched_product(g, b.transpose(1, 2), ctx.alpha, a.dtype, ctx.schedule, ctx.num_sms) if need_a else None
    grad_b = _batched_product(a.transpose(1, 2), g, ctx.alpha, b.dtype, ctx.schedule, ctx.num_sms) if need_b else None
    grad_c = _grad_c(ctx, grad) if need_c else None
    return grad_a, grad_b, grad_c, None, None, None, None, None


def _bmm_jvp(ctx, ta, tb, tc, *_):
    """Forward mode, each matrix of the batch as in `_jvp`."""
    return _product_rule(ctx, _batched_product, ta, tb, tc)


bmm_op, bmm_nograd = _define(
    "bmm", "(Tensor a, Tensor b, Tensor? c, float alpha, float beta, ScalarType? out_dtype, str schedule, "
    "SymInt? num_sms) -> Tensor", _bmm_kernel, _bmm_fake, _bmm_setup_context, _bmm_backward, _bmm_jvp)
call_bmm = _caller(bmm_op, bmm_nograd, _bmm_setup_context, _bmm_backward, _bmm_jvp)
autograd_bmm = _eager_autograd(_bmm_kernel, _bmm_setup_context, _bmm_backward, _bmm_jvp)


def _batched_product(x: torch.Tensor, y: torch.Tensor, alpha: float, out_dtype: torch.dtype, schedule: str,
                     num_sms: int | None) -> torch.Tensor:
    """alpha * x[i] @ y[i] for a backward, routed (`_routed`)."""
    return _routed((x, y), _bmm_kernel, autograd_bmm, call_bmm, x, y, None, alpha, 0.0, out_dtype, schedule, num_sms)


# FLOP counts for torch.utils.flop_counter.FlopCounterMode (MFU tools): 2 * M * N * K per product, as for aten.mm.
def _dense_flops(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    (m, k), n = a_shape, b_shape[1]
    return 2 * m * n * k


def _mxfp4_flops(a_shape, a_scales_shape, w_shape, *args, out_shape=None, **kwargs) -> int:
    return 2 * a_shape[0] * w_shape[0] * w_shape[1] * 2  # w_data packs two values per byte along K


for _name, _flops in (("gemm", _dense_flops), ("gemm_nograd", _dense_flops), ("gemm_out", _dense_flops),
                      ("gemm_mxfp4", _mxfp4_flops), ("gemm_mxfp4_nograd", _mxfp4_flops)):  # modes meet both
    register_flop_formula(getattr(torch.ops.smgemm, _name))(_flops)


def _batched_flops(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    (batch, m, k), n = a_shape, b_shape[2]
    return 2 * batch * m * n * k


register_flop_formula(torch.ops.smgemm.bmm)(_batched_flops)
register_flop_formula(torch.ops.smgemm.bmm_nograd)(_batched_flops)


# vmap (torch.func) batching rules: a vmapped GEMM is one launch, not torch's fallback loop over the batch. An
# operand mapped over dim d has that dim moved to the front. Only `a` (and `c`) mapped: the map folds into M (one
# GEMM of B * M rows); `b` mapped too: one batched launch (`smgemm::bmm`), unmapped operands broadcast along the
# batch with stride 0. fp8 scales that are mapped, or a mapped MXFP4 weight, run one product per batch element.
# The rules call the ops themselves: a torch.func transform around the map (vmap of grad) differentiates through
# the autograd.Function of `_caller`, whose generated vmap rule lands here.
def _front(x: torch.Tensor | None, dim: int | None) -> torch.Tensor | None:
    return x if x is None or dim is None else x.movedim(dim, 0)


def _loop(op, info, in_dims, args) -> tuple[torch.Tensor, int]:
    """One call of `op` per batch element: element i of each mapped argument, unmapped ones as they are."""
    fronts = [_front(x, d) for x, d in zip(args, in_dims)]
    outs = [op(*(x[i] if d is not None else x for x, d in zip(fronts, in_dims))) for i in range(info.batch_size)]
    return torch.stack(outs), 0


def _batched_input(c: torch.Tensor | None, c_dim: int | None, batch: int) -> torch.Tensor | None:
    """A mapped input c (each element broadcastable to [M, N]) as [batch, rows, cols] broadcastable to
    [batch, M, N]; an unmapped one as it is (it broadcasts along the batch)."""
    if c is None or c_dim is None:
        return c
    c = c.movedim(c_dim, 0)
    return c.reshape(batch, *(1,) * (3 - c.dim()), *c.shape[1:])


def _folded_input(c: torch.Tensor | None, c_dim: int | None, batch: int, m: int, n: int) -> torch.Tensor | None:
    """The input c of a product whose map folds into M, as [batch * M, N] (an unmapped row or scalar stays as it
    is: it broadcasts over every row, folded or not)."""
    if c is None:
        return None
    if c_dim is None and (c.dim() <= 1 or (c.dim() == 2 and c.shape[0] == 1)):
        return c
    return _batched_input(c, c_dim, batch).expand(batch, m, n).reshape(batch * m, n)


@torch.library.register_vmap("smgemm::gemm")
def _gemm_vmap(info, in_dims, a, b, c, alpha, beta, out_dtype, scale_a, scale_b, schedule, num_sms):
    args = (a, b, c, alpha, beta, out_dtype, scale_a, scale_b, schedule, num_sms)
    a_dim, b_dim, c_dim, _, _, _, sa_dim, sb_dim, _, _ = in_dims
    batch = info.batch_size
    a_f, b_f = _front(a, a_dim), _front(b, b_dim)
    m, k = a_f.shape[-2:]
    n = b_f.shape[-1]
    if a_dim is not None and b_dim is None and sa_dim is None and sb_dim is None:
        if scale_a is not None and scale_a.numel() > 1:  # one scale per row: the same rows in every element
            scale_a = scale_a.reshape(1, m).expand(batch, m).reshape(batch * m, 1)
        y = gemm_op(a_f.reshape(batch * m, k), b, _folded_input(c, c_dim, batch, m, n), alpha, beta, out_dtype,
                    scale_a, scale_b, schedule, num_sms)
        return y.reshape(batch, m, n), 0
    if scale_a is not None or scale_b is not None:  # the batched kernel takes no scales
        return _loop(gemm_op, info, in_dims, args)
    a_f = a_f if a_dim is not None else a.expand(batch, m, k)
    b_f = b_f if b_dim is not None else b.expand(batch, k, n)
    return bmm_op(a_f, b_f, _batched_input(c, c_dim, batch), alpha, beta, out_dtype, schedule, num_sms), 0


@torch.library.register_vmap("smgemm::bmm")
def _bmm_vmap(info, in_dims, a, b, c, alpha, beta, out_dtype, schedule, num_sms):
    """A map over batched products: one launch over (map x batch) products."""
    a_dim, b_dim, c_dim = in_dims[:3]
    vmap_batch = info.batch_size
    a_f = _front(a, a_dim) if a_dim is not None else a.expand(vmap_batch, *a.shape)
    b_f = _front(b, b_dim) if b_dim is not None else b.expand(vmap_batch, *b.shape)
    inner, m, k = a_f.shape[1:]
    n = b_f.shape[-1]
    if c is not None:  # each element broadcastable to [inner, M, N]: as [map, inner, M, N], then folded
        c_f = _front(c, c_dim) if c_dim is not None else c.unsqueeze(0)
        c_f = c_f.reshape(c_f.shape[0], *(1,) * (4 - c_f.dim()), *c_f.shape[1:])
        c = c_f.expand(vmap_batch, inner, m, n).reshape(vmap_batch * inner, m, n)
    y = bmm_op(a_f.reshape(vmap_batch * inner, m, k), b_f.reshape(vmap_batch * inner, k, n), c, alpha, beta,
               out_dtype, schedule, num_sms)
    return y.reshape(vmap_batch, inner, m, n), 0


@torch.library.register_vmap("smgemm::gemm_mxfp4")
def _gemm_mxfp4_vmap(info, in_dims, a, a_scales, w_data, w_scales, c, alpha, beta, out_dtype, schedule, num_sms,
                     a_layout="ocp", w_layout="ocp"):
    """Mapped activations (and input) fold into M; a mapped weight runs one product per element."""
    args = (a, a_scales, w_data, w_scales, c, alpha, beta, out_dtype, schedule, num_sms, a_layout, w_layout)
    a_dim, as_dim, w_dim, ws_dim, c_dim = in_dims[:5]
    if w_dim is not None or ws_dim is not None or (a_scales is not None and (a_dim is None) != (as_dim is None)):
        return _loop(gemm_mxfp4_op, info, in_dims, args)
    batch = info.batch_size
    if a_dim is None:  # only the input is mapped
        a = a.expand(batch, *a.shape)
        a_scales = a_scales.expand(batch, *a_scales.shape) if a_scales is not None else None
    else:
        a, a_scales = _front(a, a_dim), _front(a_scales, as_dim)
    m, n = a.shape[1], w_data.shape[0]
    y = gemm_mxfp4_op(a.reshape(batch * m, a.shape[-1]),
                      a_scales.reshape(batch * m, a_scales.shape[-1]) if a_scales is not None else None,
                      w_data, w_scales, _folded_input(c, c_dim, batch, m, n), alpha, beta, out_dtype, schedule,
                      num_sms, a_layout, w_layout)
    return y.reshape(batch, m, n), 0


# DTensor sharding rules, so that smgemm's ops take DTensor operands (tensor-parallel weights): the output's
# placements from the operands', as for aten.mm / aten.bmm. For an (M, N) product on a 1-D mesh: rows sharded (A's
# rows) -> rows; columns (B's) -> columns; the reduction dim (A's columns with B's rows) -> a partial sum, only with
# no input C (beta * C would be added once a rank) and no scales; anything else is replicated first. An input C, a
# per-row or per-column scale follows the output dim it spans and is replicated where it broadcasts. Registered
# when a tensor subclass first reaches an smgemm function (ops._via_dispatcher), not at import: importing
# torch.distributed.tensor takes ~0.5 s.
_DTENSOR_RULES: list[bool] = []  # holds True once registered (torch keeps the rules for the process)


def register_dtensor_rules() -> None:
    """Register the sharding rules of smgemm::gemm and smgemm::bmm with DTensor, once."""
    if _DTENSOR_RULES:
        return
    _DTENSOR_RULES.append(True)
    try:
        from torch.distributed.tensor import Partial, Replicate, Shard
        from torch.distributed.tensor.experimental import register_sharding
    except ImportError:  # a torch built without distributed
        return

    def follow(spec, out_ndim: int, dim: int | None):
        """The placement of an input that broadcasts to the output when the output is sharded along `dim`."""
        if spec is None or not hasattr(spec, "shape"):
            return None
        if dim is None:
            return Replicate()
        own = dim - (out_ndim - len(spec.shape))
        return Shard(own) if own >= 0 and spec.shape[own] != 1 else Replicate()

    def strategies(a, b, c, scale_a, scale_b, batch: int):
        """(output, inputs a b c scale_a scale_b) placements: replicated, rows, columns, batch, reduction."""
        out_ndim = batch + 2
        rows, cols, red_a, red_b = batch, batch + 1, batch + 1, batch
        options = [(None, Replicate(), Replicate(), Replicate())]
        options += [(rows, Shard(rows), Replicate(), Shard(rows)), (cols, Replicate(), Shard(cols), Shard(cols))]
        if batch:
            options.append((0, Shard(0), Shard(0), Shard(0)))
        result = [([out], [pa, pb, follow(c, out_ndim, d), follow(scale_a, out_ndim, d), follow(scale_b, out_ndim, d)])
                  for d, pa, pb, out in options]
        if c is None and scale_a is None and scale_b is None:
            result.append(([Partial()], [Shard(red_a), Shard(red_b), None, None, None]))
        return result

    def gemm_sharding(a, b, c, alpha, beta, out_dtype, scale_a, scale_b, schedule, num_sms):
        return [(out, [pa, pb, pc, None, None, None, psa, psb, None, None])
                for out, (pa, pb, pc, psa, psb) in strategies(a, b, c, scale_a, scale_b, 0)]

    def bmm_sharding(a, b, c, alpha, beta, out_dtype, schedule, num_sms):
        return [(out, [pa, pb, pc, None, None, None, None, None])
                for out, (pa, pb, pc, _, _) in strategies(a, b, c, None, None, 1)]

    for op in (torch.ops.smgemm.gemm, torch.ops.smgemm.gemm_nograd):  # a DTensor meets both (`_define`)
        register_sharding(op.default)(gemm_sharding)
    for op in (torch.ops.smgemm.bmm, torch.ops.smgemm.bmm_nograd):
        register_sharding(op.default)(bmm_sharding)
