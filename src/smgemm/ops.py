"""The public GEMM functions, with torch's semantics plus two knobs: `schedule` and `num_sms`.

`num_sms` is the SM budget: None lets the GEMM use every SM of the tensors' device, and so does an int at or above
the device's SM count; a smaller int >= 1 caps the launch grid, so the GEMM never occupies more SMs than that and
the rest of the chip stays free for other work. `schedule` is "auto", "data_parallel", "persistent" or "streamk"
(README.md, docs/streamk.md); every schedule gives the same result for the same inputs and budget on every run.

Arguments left as None take the values of the innermost `sm_budget(...)` block (then the whole device and
"auto"). Calls traced by torch.compile or seen by a torch subsystem (a mode, a subclass, a functorch transform) go
through the `smgemm::gemm` custom op (`_library.py`); other eager calls run the same kernel without the dispatcher,
under an autograd.Function with the op's backward where autograd must record them (`_library.route`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch

from . import _library
from ._checks import check_batched_dims, check_bmm, check_call, check_gemm, check_knobs, check_mxfp4
from ._gemm import PLAIN, gemm, gemm_mxfp4, repeat_call, repeat_dense
from ._library import AUTOGRAD, KERNEL, OP, plain_kernel, route
from .mxfp4 import MXFP4Tensor


class _Defaults:
    """The defaults `sm_budget` sets: process-wide, like torch.backends flags.

    Not thread-local on purpose: torch.compile must see the value to guard on it, and torch 2.11's Dynamo reads
    `threading.local` attributes as their class defaults (measured on the H200 machine: a compiled call inside
    `sm_budget(4)` got None), which would silently drop the budget. Threads that need different budgets at the
    same time pass `num_sms=` (or set it on their modules) instead.
    """

    num_sms: int | None = None
    schedule: str | None = None


_DEFAULTS = _Defaults()


@contextlib.contextmanager
def sm_budget(num_sms: int | None, schedule: str | None = None) -> Iterator[None]:
    """Run the smgemm GEMMs of this block (and modules inside it) on at most `num_sms` SMs, with `schedule`.

    Explicit `num_sms=` / `schedule=` arguments and module settings win over the block's. Blocks nest; the setting
    is process-wide (see `_Defaults`) and is read when a GEMM is called, or traced: torch.compile guards on it and
    recompiles when it changes. `num_sms=None` inside an outer block restores the whole device.

        with smgemm.sm_budget(66):
            y = model(x)          # every swapped Linear uses <= 66 SMs
    """
    check_knobs(schedule, num_sms)
    saved = _DEFAULTS.num_sms, _DEFAULTS.schedule
    _DEFAULTS.num_sms = num_sms
    if schedule is not None:
        _DEFAULTS.schedule = schedule
    try:
        yield
    finally:
        _DEFAULTS.num_sms, _DEFAULTS.schedule = saved


# Budgets above this are the same as the whole device; clamping them keeps them within the custom ops' int64.
_MAX_BUDGET = 2**31 - 1


def _resolve(schedule: str | None, num_sms: int | None) -> tuple[str, int | None]:
    """Explicit values, else the innermost sm_budget block's, else "auto" on the whole device. The caller has
    checked them (`check_call`)."""
    if schedule is None:
        schedule = _DEFAULTS.schedule if _DEFAULTS.schedule is not None else "auto"
    if num_sms is None:
        num_sms = _DEFAULTS.num_sms
    return schedule, num_sms if num_sms is None or num_sms <= _MAX_BUDGET else _MAX_BUDGET


def _eager_repeat(a, b, c, alpha, beta, schedule, num_sms, b_t: bool = False) -> torch.Tensor | None:
    """The output of an eager call of plain tensors (`PLAIN`; linear's `b` may be an MXFP4 weight) without out,
    out_dtype or scales that repeats a remembered signature, launched at once (`repeat_dense`, `repeat_call`); None
    for any other call, which then takes the full path (its checks and errors, in their order: nothing here raises).
    The first step of matmul, addmm, linear, bmm and baddbmm (each asks only where a remembered key of its `a`'s
    rank is a product of its kind: 2-D, or batched): one pass over what `route` and `_autocast` look at
    (`plain_kernel`), the knobs resolved (`_resolve`), then a key and a launch. A key is remembered only after
    every check passed, so knobs of other types than the checks accept (a bool num_sms, a str subclass) take the
    full path here, to be refused there."""
    mx = b_t and type(b) is MXFP4Tensor  # linear's MXFP4 weight; any other call's MXFP4 b is refused in full
    if not plain_kernel(a, None if mx else b, c):
        return None
    if (schedule is not None and type(schedule) is not str) or (num_sms is not None and type(num_sms) is not int) \
            or type(alpha) not in _SCALARS or type(beta) not in _SCALARS:
        return None
    schedule, num_sms = _resolve(schedule, num_sms)
    if mx:
        return repeat_call("gemm_mxfp4", a, b, c, alpha, beta, None, None, None, schedule, num_sms)
    return repeat_dense(a, b, c, alpha, beta, None, schedule, num_sms, b_t)


_SCALARS = (float, int)
_OUT_GRAD = ("smgemm: functions with out= do not support automatic differentiation, but an argument requires grad; "
             "call without out= (or under torch.no_grad())")


def _tracked(*tensors) -> bool:
    """Whether autograd must record this call. A plain loop: on every eager call, where a generator expression cost
    0.4 µs more."""
    if torch.is_grad_enabled():
        for t in tensors:
            if getattr(t, "requires_grad", False):  # None, non-tensors (rejected later by name), MXFP4Tensor: False
                return True
    return False


def _via_dispatcher(*tensors) -> bool:
    """Whether a call must not go straight to the kernel (`_library.route`): for out= (which autograd cannot record
    and only the custom op traces) and linear's repeat-call entry."""
    return route(*tensors) != KERNEL


_AUTOCAST_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _autocast(*tensors, where: int | None = None):
    """`tensors` as torch.autocast casts the inputs of matmul / addmm / linear (its lower-precision ops): floating
    tensors to the autocast dtype of the first tensor's device type while autocast is on for it; others (MXFP4, None,
    bad arguments the checks will name) as they are, and all of them when the first tensor is fp8 (an fp8 product
    keeps its own rule). One C query when autocast is off (Dynamo cannot trace it; it sees autocast itself). `where`:
    the call's `route`, when the caller has it (any route but OP is an eager call, not traced by Dynamo); casts keep
    what it looked at."""
    traced = torch.compiler.is_compiling() if where is None else where == OP
    if not traced and not torch._C._is_any_autocast_enabled():
        return tensors
    first = next((t for t in tensors if isinstance(t, torch.Tensor)), None)
    if first is None or first.dtype == torch.float8_e4m3fn:
        return tensors
    device = first.device
    kind = device.type if device.type in ("cuda", "cpu") else None
    if kind is None or not torch.is_autocast_enabled(kind):
        return tensors
    dtype = torch.get_autocast_dtype(kind)
    return tuple(t.to(dtype) if isinstance(t, torch.Tensor) and t.dtype in _AUTOCAST_DTYPES else t for t in tensors)


def _run(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    c: torch.Tensor | None = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    out: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    scale_a: torch.Tensor | None = None,
    scale_b: torch.Tensor | None = None,
    schedule: str | None = None,
    num_sms: int | None = None,
) -> torch.Tensor:
    """Check the knobs, resolve defaults, then call the kernel directly or through the custom op (autograd,
    torch.compile)."""
    check_call(schedule, num_sms, alpha, beta, out_dtype)
    schedule, num_sms = _resolve(schedule, num_sms)
    if out is not None:
        a, b, c = _autocast(a, b, c)
        if _tracked(a, b, c, scale_a, scale_b, out):
            raise RuntimeError(_OUT_GRAD)
        if _via_dispatcher(a, b, c, scale_a, scale_b, out):
            check_gemm(a, b, c, beta, out, out_dtype, scale_a, scale_b)
            _library.gemm_out_op(a, b, c, float(alpha), float(beta), scale_a, scale_b, schedule, num_sms, out)
            return out
        return gemm(a, b, c=c, alpha=alpha, beta=beta, out=out, out_dtype=out_dtype, scale_a=scale_a,
                    scale_b=scale_b, schedule=schedule, num_sms=num_sms)
    where = route(a, b, c, scale_a, scale_b)
    a, b, c = _autocast(a, b, c, where=where)
    if where == OP:
        check_gemm(a, b, c, beta, None, out_dtype, scale_a, scale_b)  # as the eager path does, before the op
        return _library.call_gemm(a, b, c, float(alpha), float(beta), out_dtype, scale_a, scale_b, schedule, num_sms)
    if where == AUTOGRAD:
        return _library.autograd_gemm(a, b, c, float(alpha), float(beta), out_dtype, scale_a, scale_b, schedule,
                                      num_sms)
    if scale_a is None and scale_b is None:
        y = repeat_dense(a, b, c, alpha, beta, out_dtype, schedule, num_sms)
    else:
        y = repeat_call("gemm", a, b, c, alpha, beta, out_dtype, scale_a, scale_b, schedule, num_sms)
    return y if y is not None else gemm(a, b, c=c, alpha=alpha, beta=beta, out_dtype=out_dtype, scale_a=scale_a,
                                        scale_b=scale_b, schedule=schedule, num_sms=num_sms)


def _run_mxfp4(x: torch.Tensor | MXFP4Tensor, w: MXFP4Tensor, bias: torch.Tensor | None, out_dtype,
               schedule: str | None, num_sms: int | None) -> torch.Tensor:
    """linear with an MXFP4 weight: x [..., K] dense or MXFP4 -> [..., N]."""
    check_call(schedule, num_sms, out_dtype=out_dtype)
    schedule, num_sms = _resolve(schedule, num_sms)
    if isinstance(x, MXFP4Tensor):
        lead = x.shape[:-1]
        x2 = MXFP4Tensor(x.data.reshape(math.prod(lead), x.data.shape[-1]),
                         x.scales.reshape(math.prod(lead), x.scales.shape[-1]), x.layout)
    elif isinstance(x, torch.Tensor) and x.dim() >= 1:
        lead = x.shape[:-1]
        x2 = x if x.dim() == 2 else x.reshape(math.prod(lead), x.shape[-1])  # (a view costs host time)
    else:
        raise ValueError("x must be a tensor of shape [..., K] (or an MXFP4Tensor)")
    n = w.data.shape[0]
    bias = _bias_2d(bias, lead, n)
    where = route(x2, bias)
    x2, bias = _autocast(x2, bias, where=where)
    if where != KERNEL:
        a, a_scales = (x2.data, x2.scales) if isinstance(x2, MXFP4Tensor) else (x2, None)
        args = (a, a_scales, w.data, w.scales, bias, 1.0, 1.0, out_dtype, schedule, num_sms,
                x2.layout if isinstance(x2, MXFP4Tensor) else "ocp", w.layout)
        if where == OP:
            check_mxfp4(x2, w, bias, 1.0, None, out_dtype)  # as the eager path does, before the op
            y = _library.call_gemm_mxfp4(*args)
        else:
            y = _library.autograd_gemm_mxfp4(*args)
    else:
        y = repeat_call("gemm_mxfp4", x2, w, bias, 1.0, 1.0, out_dtype, None, None, schedule, num_sms)
        if y is None:
            y = gemm_mxfp4(x2, w, c=bias, out_dtype=out_dtype, schedule=schedule, num_sms=num_sms)
    return y if len(lead) == 1 else y.reshape(*lead, n)


def _bias_2d(bias: torch.Tensor | None, lead: torch.Size, n: int) -> torch.Tensor | None:
    """A linear's bias as the GEMM's input: as F.linear, anything broadcastable to the output [*lead, N]. Up to 1-D
    it broadcasts over the rows as it is; otherwise it is expanded to the output's shape and folded to [M, N] (a
    view where the layout allows, else a copy)."""
    if bias is None:
        return None
    if not isinstance(bias, torch.Tensor):
        raise TypeError(f"bias must be a torch.Tensor or None, got {type(bias).__name__}")
    if bias.dim() == 1 and bias.shape[0] == n:  # the usual [N] bias
        return bias
    shape = (*lead, n)
    if bias.dim() > len(shape) or any(s not in (1, t) for s, t in zip(reversed(bias.shape), reversed(shape))):
        raise ValueError(f"bias must be broadcastable to the output shape {tuple(shape)} (e.g. [N] = [{n}]), got "
                         f"{tuple(bias.shape)}")
    if bias.dim() <= 1:
        return bias
    return bias.expand(shape).reshape(math.prod(lead), n)


def matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    scale_a: torch.Tensor | None = None,
    scale_b: torch.Tensor | None = None,
    schedule: str | None = None,
    num_sms: int | None = None,
) -> torch.Tensor:
    """`a @ b` with torch.matmul's rules for a: [..., M, K] (or [K]) and b: [K, N] (or [K]), any strides
    (transposed views need no copy).

    Batch dims of `a` fold into M (a view where the layout allows, else one copy), so one launch covers them; 1-D
    operands are treated as a row / column and that dim is dropped from the result. A `b` with batch dims (a
    batched product) is refused. dtypes: bf16, fp16, fp32 (TF32 when torch allows it for matmuls) and
    float8_e4m3fn. The result has the inputs' dtype (bf16 for fp8) unless `out_dtype` says otherwise; under
    torch.autocast the inputs are cast as torch casts matmul's. For fp8, `scale_a` (one value or one per row of a)
    and `scale_b` (one value or [1, N]) dequantize the product as in `torch._scaled_mm`. Differentiable (not fp8).

    Example::

        c = smgemm.matmul(a, b.t(), num_sms=66)  # uses at most 66 SMs
    """
    if out is None and out_dtype is None and scale_a is None and scale_b is None and type(a) in PLAIN and \
            a.dim() == 2:  # 2-D a: a remembered key then is a 2-D product's (a batched one has 3-D a and b)
        y = _eager_repeat(a, b, None, 1.0, 1.0, schedule, num_sms)
        if y is not None:
            return y
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and (a.dim() != 2 or b.dim() != 2):
        return _matmul_nd(a, b, out=out, out_dtype=out_dtype, scale_a=scale_a, scale_b=scale_b, schedule=schedule,
                          num_sms=num_sms)
    return _run(a, b, out=out, out_dtype=out_dtype, scale_a=scale_a, scale_b=scale_b, schedule=schedule,
                num_sms=num_sms)


def _matmul_nd(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None, scale_a: torch.Tensor | None,
               **kwargs) -> torch.Tensor:
    """matmul with a 1-D operand or batch dims in `a`: folded to one 2-D product, unfolded after."""
    if a.dim() == 0 or b.dim() == 0:
        raise ValueError(f"a and b must have at least 1 dim each, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    if b.dim() > 2:
        if scale_a is not None or kwargs.get("scale_b") is not None:
            raise ValueError("scale_a / scale_b apply to 2-D fp8 products; a batched product takes none")
        return _matmul_batched(a, b, out=out, out_dtype=kwargs["out_dtype"], schedule=kwargs["schedule"],
                               num_sms=kwargs["num_sms"])
    a2 = a.unsqueeze(0) if a.dim() == 1 else a
    b2 = b.unsqueeze(1) if b.dim() == 1 else b
    lead, (m, k) = a2.shape[:-2], a2.shape[-2:]
    if isinstance(scale_a, torch.Tensor) and scale_a.numel() > 1:
        scale_a = scale_a.reshape(-1, 1)  # one per row of a, batch dims included
    a2 = a2.reshape(math.prod(lead) * m, k)
    if out is not None:
        _check_out_shape(out, a, b, (*lead, m, b2.shape[1]))
        return _into(out, (a2.shape[0], b2.shape[1]), lambda o: _run(a2, b2, out=o, scale_a=scale_a, **kwargs))
    y = None
    if scale_a is None and kwargs["scale_b"] is None and kwargs["out_dtype"] is None:
        y = _eager_repeat(a2, b2, None, 1.0, 1.0, kwargs["schedule"], kwargs["num_sms"])
    if y is None:
        y = _run(a2, b2, scale_a=scale_a, **kwargs)
    y = y.reshape(*lead, m, b2.shape[1])
    if a.dim() == 1:
        y = y.squeeze(-2)
    return y.squeeze(-1) if b.dim() == 1 else y


def _matmul_batched(a: torch.Tensor, b: torch.Tensor, *, out, out_dtype, schedule, num_sms) -> torch.Tensor:
    """torch.matmul's batched case: batch dims broadcast, 1-D operands as a row / column; one batched launch."""
    a2 = a.unsqueeze(0) if a.dim() == 1 else a
    b2 = b.unsqueeze(-1) if b.dim() == 1 else b
    (m, k), n = a2.shape[-2:], b2.shape[-1]
    if b2.shape[-2] != k:
        raise ValueError(f"a's last dim (K={k}) must equal b's second-to-last (got {b2.shape[-2]}): a is "
                         f"{tuple(a.shape)}, b is {tuple(b.shape)}")
    lead = _broadcast(a2.shape[:-2], b2.shape[:-2])
    if lead is None:
        raise ValueError(f"the batch dims of a {tuple(a.shape)} and b {tuple(b.shape)} do not broadcast")
    batch = math.prod(lead)
    a3, b3 = a2.expand(*lead, m, k).reshape(batch, m, k), b2.expand(*lead, k, n).reshape(batch, k, n)
    if out is not None:
        _check_out_shape(out, a, b, (*lead, m, n))
        return _into(out, (batch, m, n), lambda o: bmm(a3, b3, out=o, out_dtype=out_dtype, schedule=schedule,
                                                       num_sms=num_sms))
    y = bmm(a3, b3, out_dtype=out_dtype, schedule=schedule, num_sms=num_sms)
    y = y.reshape(*lead, m, n)
    if a.dim() == 1:
        y = y.squeeze(-2)
    return y.squeeze(-1) if b.dim() == 1 else y


def _check_out_shape(out, a: torch.Tensor, b: torch.Tensor, shape: tuple) -> None:
    """`out` of matmul(a, b) must have the product's shape: `shape` ([..., M, N]) without the dim of a 1-D a or b."""
    expected = shape[:-2] + shape[-2:-1] * (a.dim() > 1) + shape[-1:] * (b.dim() > 1)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != expected:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"out must have the product's shape {expected} (a {tuple(a.shape)} @ b {tuple(b.shape)}), "
                         f"got {got}")


def _into(out: torch.Tensor, shape: tuple, run) -> torch.Tensor:
    """`run(o)` writes the folded product into `o`, `out` viewed as `shape` (2-D, or 3-D batched) where its layout
    allows; else into a buffer of `out`'s dtype (the same checks of out=), copied into `out` after."""
    if _tracked(out):
        raise RuntimeError(_OUT_GRAD)
    if out.numel() == 0 or _nests(out.shape, out.stride(), shape):
        run(out.view(shape))
        return out
    buffer = torch.empty(shape, dtype=out.dtype, device=out.device)
    run(buffer)
    out.copy_(buffer.view(out.shape))
    return out


def _nests(sizes, strides, shape) -> bool:
    """Whether a tensor of `sizes` and `strides` has a view of `shape` (torch's rule for `Tensor.view`: each run of
    dims merged or split must be contiguous in memory), decided without trying it, so that Dynamo traces the choice.
    The tensor has at least one element."""
    if len(sizes) == 0:  # one element: every shape of one element views it
        return True
    view_d = len(shape) - 1
    base = strides[-1] if len(strides) else 1
    tensor_numel = view_numel = 1
    for d in range(len(sizes) - 1, -1, -1):
        tensor_numel *= sizes[d]
        if d == 0 or (sizes[d - 1] != 1 and strides[d - 1] != tensor_numel * base):
            while view_d >= 0 and (view_numel < tensor_numel or shape[view_d] == 1):
                view_numel *= shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return False
            if d > 0:
                base, tensor_numel, view_numel = strides[d - 1], 1, 1
    return view_d == -1


def _broadcast(x: torch.Size, y: torch.Size) -> tuple | None:
    """The broadcast of two batch shapes (torch's rule), or None where they do not broadcast."""
    x, y = (1,) * (len(y) - len(x)) + tuple(x), (1,) * (len(x) - len(y)) + tuple(y)
    if any(p != q and p != 1 and q != 1 for p, q in zip(x, y)):
        return None
    return tuple(q if p == 1 else p for p, q in zip(x, y))


def _run_batched(a, b, *, c=None, alpha=1.0, beta=1.0, out=None, out_dtype=None, schedule=None,
                 num_sms=None) -> torch.Tensor:
    """bmm / baddbmm: check the knobs, resolve defaults, then the kernel directly or the custom op."""
    check_call(schedule, num_sms, alpha, beta, out_dtype)
    check_batched_dims(a, b)
    schedule, num_sms = _resolve(schedule, num_sms)
    a, b, c = _autocast(a, b, c)
    if out is not None:
        if _tracked(a, b, c, out):
            raise RuntimeError(_OUT_GRAD)
        if _via_dispatcher(a, b, c, out):
            raise RuntimeError("smgemm.bmm / baddbmm with out= run eagerly only (not traced, not under torch modes)")
        return gemm(a, b, c=c, alpha=alpha, beta=beta, out=out, out_dtype=out_dtype, schedule=schedule,
                    num_sms=num_sms)
    where = route(a, b, c)
    if where == OP:
        check_bmm(a, b, c, beta, None, out_dtype)  # as the eager path does, before the op
        return _library.call_bmm(a, b, c, float(alpha), float(beta), out_dtype, schedule, num_sms)
    if where == AUTOGRAD:
        return _library.autograd_bmm(a, b, c, float(alpha), float(beta), out_dtype, schedule, num_sms)
    return gemm(a, b, c=c, alpha=alpha, beta=beta, out_dtype=out_dtype, schedule=schedule, num_sms=num_sms)


def bmm(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    schedule: str | None = None,
    num_sms: int | None = None,
) -> torch.Tensor:
    """`torch.bmm`: a [B, M, K] @ b [B, K, N] -> [B, M, N] (bf16, fp16, fp32), any strides, in one launch whose grid
    obeys `num_sms` across the whole batch: the tiles of all B products share one persistent or Stream-K schedule.
    Differentiable; traced by torch.compile as `torch.ops.smgemm.bmm`."""
    if out is None and out_dtype is None and type(a) in PLAIN and a.dim() == 3:
        y = _eager_repeat(a, b, None, 1.0, 1.0, schedule, num_sms)  # a remembered 3-D a: a batched product's
        if y is not None:
            return y
    return _run_batched(a, b, out=out, out_dtype=out_dtype, schedule=schedule, num_sms=num_sms)


def baddbmm(
    input: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    beta: float = 1.0,
    alpha: float = 1.0,
    out: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    schedule: str | None = None,
    num_sms: int | None = None,
) -> torch.Tensor:
    """`torch.baddbmm`: beta * input + alpha * (a @ b), batched as `bmm`; `input` broadcasts to [B, M, N] and is not
    read when beta == 0; `out=input` updates it in place."""
    if out is None and out_dtype is None and type(a) in PLAIN and a.dim() == 3:
        y = _eager_repeat(a, b, input, alpha, beta, schedule, num_sms)  # a remembered 3-D a: a batched product's
        if y is not None:
            return y
    return _run_batched(a, b, c=input, alpha=alpha, beta=beta, out=out, out_dtype=out_dtype, schedule=schedule,
                        num_sms=num_sms)


def addmm(
    input: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    beta: float = 1.0,
    alpha: float = 1.0,
    out: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    scale_a: torch.Tensor | None = None,
    scale_b: torch.Tensor | None = None,
    schedule: str | None = None,
    num_sms: int | None = None,
) -> torch.Tensor:
    """`beta * input + alpha * (a @ b)` as `torch.addmm`; `input` broadcasts to [M, N] (e.g. a bias [N]).

    `out=input` updates a [M, N] `input` in place (C = alpha * A @ B + beta * C). With beta == 0 `input` is not
    read, so NaN in it does not propagate.
    """
    if out is None and out_dtype is None and scale_a is None and scale_b is None and type(a) in PLAIN \
            and a.dim() == 2:  # 2-D a: a remembered key then is a 2-D product's (a batched one has 3-D a and b)
        y = _eager_repeat(a, b, input, alpha, beta, schedule, num_sms)
        if y is not None:
            return y
    for name, t, dims in (("a", a, "(M, K)"), ("b", b, "(K, N)")):
        if isinstance(t, torch.Tensor) and t.dim() != 2:  # torch.addmm's rule: a batched product is baddbmm's
            raise ValueError(f"{name} must be 2-D {dims} for addmm (smgemm.baddbmm for batches), got shape "
                             f"{tuple(t.shape)}")
    return _run(a, b, c=input, alpha=alpha, beta=beta, out=out, out_dtype=out_dtype, scale_a=scale_a,
                scale_b=scale_b, schedule=schedule, num_sms=num_sms)


def _repeat_linear(x, weight, bias, schedule, num_sms) -> torch.Tensor | None:
    """linear's output where the call repeats a remembered one (dense x [..., K] and weight [N, K], dense or MXFP4, a
    bias [N] or none, no out_dtype or scales), launched without making the weight's transposed view nor checking
    again (`_eager_repeat`); None for any other call."""
    if type(x) not in PLAIN or (type(weight) is not MXFP4Tensor and (type(weight) not in PLAIN or weight.dim() != 2)):
        return None
    dims = x.dim()
    if dims == 2:
        return _eager_repeat(x, weight, bias, 1.0, 1.0, schedule, num_sms, b_t=True)
    if dims < 2 or (bias is not None and (type(bias) not in PLAIN or bias.dim() != 1)):
        return None
    lead = x.shape[:-1]
    y = _eager_repeat(x.reshape(math.prod(lead), x.shape[-1]), weight, bias, 1.0, 1.0, schedule, num_sms, b_t=True)
    return None if y is None else y.reshape(*lead, weight.shape[0])


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    out_dtype: torch.dtype | None = None,
    scale_a: torch.Tensor | None = None,
    scale_b: torch.Tensor | None = None,
    schedule: str | None = None,
    num_sms: int | None = None,
) -> torch.Tensor:
    """`x @ weight.T + bias` as `torch.nn.functional.linear`: x [..., K], weight [N, K], bias [N] -> [..., N].

    For fp8, `scale_a` is one value or one per row of x ([..., 1]) and `scale_b` one value or one per output
    feature ([N] or [N, 1]). `weight` may be an `MXFP4Tensor` (`smgemm.quantize_mxfp4`), with `x` bf16 / fp16 or
    also an MXFP4Tensor; the result is then bf16 (fp16 for fp16 x) unless `out_dtype` says otherwise.
    """
    if scale_a is None and scale_b is None and out_dtype is None:
        y = _repeat_linear(x, weight, bias, schedule, num_sms)
        if y is not None:
            return y
    if isinstance(weight, MXFP4Tensor):
        if scale_a is not None or scale_b is not None:
            raise ValueError("scale_a / scale_b apply to float8 inputs; MXFP4 carries its own scales")
        return _run_mxfp4(x, weight, bias, out_dtype, schedule, num_sms)
    if isinstance(x, MXFP4Tensor):
        raise TypeError("an MXFP4Tensor x needs an MXFP4Tensor weight (quantize the weight with "
                        "smgemm.quantize_mxfp4)")
    if not isinstance(x, torch.Tensor) or x.dim() < 1:
        raise ValueError("x must be a tensor of shape [..., K]")
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise ValueError(f"weight must be 2-D [N, K], got {getattr(weight, 'shape', type(weight).__name__)}")
    if x.shape[-1] != weight.shape[1]:
        raise ValueError(f"x.shape[-1] (K={x.shape[-1]}) must equal weight.shape[1] (got {weight.shape[1]})")
    lead, n = x.shape[:-1], weight.shape[0]
    bias = _bias_2d(bias, lead, n)
    flat = x.dim() == 2  # no reshape either way (each view costs host time on every call)
    x2 = x if flat else x.reshape(math.prod(lead), x.shape[-1])  # not -1: K may be 0
    if scale_a is not None and isinstance(scale_a, torch.Tensor) and scale_a.numel() > 1:
        scale_a = scale_a.reshape(-1, 1)
    if scale_b is not None and isinstance(scale_b, torch.Tensor) and scale_b.numel() > 1:
        scale_b = scale_b.reshape(1, -1)
    y = _run(x2, weight.t(), c=bias, out_dtype=out_dtype, scale_a=scale_a, scale_b=scale_b, schedule=schedule,
             num_sms=num_sms)
    return y if flat else y.reshape(*lead, n)
