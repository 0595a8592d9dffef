"""Argument checks of every GEMM call: each bad input raises before any launch, naming the argument.

Two kinds: `check_call`, `check_gemm` and `check_mxfp4` need no data (shapes, dtypes, devices, knobs), so the
public functions run them before dispatching to a custom op and the ops' fake kernels run them while tracing: a
bad call fails the same way eagerly, under autograd and under torch.compile. `check_memory` compares the
addresses of `out` and the operands and needs real tensors.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import torch

from ._device import interpreter_active
from .mxfp4 import MXFP4Tensor
from .plan import INPUT_DTYPES, OUTPUT_DTYPES, SCHEDULES

_INT32_MAX = 2**31 - 1
_FP8 = torch.float8_e4m3fn


def check_tensor(name: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.layout != torch.strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {t.layout}; convert it with "
                        ".to_dense()")
    return t


def resolve_neg(t: torch.Tensor | MXFP4Tensor | None) -> torch.Tensor | MXFP4Tensor | None:
    """`t` with its negative bit resolved: a view whose values are the negation of its memory (`x.conj().imag`,
    `torch._neg_view`) is materialized, since the kernels read memory as it is. Complex tensors, the only ones with
    a conjugate bit, are refused by the dtype checks."""
    if t is None or not isinstance(t, torch.Tensor) or not t.is_neg():
        return t
    return t.resolve_neg()


def check_device(name: str, t: torch.Tensor, device: torch.device) -> None:
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but a is on {device}: all tensors must be on one device")


def check_backend(device: torch.device) -> None:
    if device.type != "cuda" and not (device.type == "cpu" and interpreter_active()):
        raise ValueError(
            f"a is on {device}: smgemm runs on CUDA tensors (CPU tensors only under the Triton interpreter, "
            "TRITON_INTERPRET=1 set before triton is imported)"
        )


def check_knobs(schedule: object, num_sms: object) -> None:
    """Validate the two knobs; None means "not set" for both (defaults, modules, sm_budget)."""
    if num_sms is not None and (isinstance(num_sms, bool) or not isinstance(num_sms, int) or num_sms < 1):
        raise ValueError(f"num_sms must be None or an int >= 1, got {num_sms!r}")
    if schedule is not None and (not isinstance(schedule, str) or schedule not in SCHEDULES):
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")


_REALS = (float, int, bool)


def check_scalars(alpha: object, beta: object) -> None:
    """alpha and beta must be real numbers, as torch.addmm's (a str, None or complex is a TypeError)."""
    if type(alpha) in _REALS and type(beta) in _REALS:  # the common case, without the ABC check's cost
        return
    for name, value in (("alpha", alpha), ("beta", beta)):
        if not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be a real number (int or float), got {type(value).__name__} {value!r}")


def resolve_out_dtype(in_dtype: torch.dtype, out_dtype: object) -> torch.dtype:
    if out_dtype is None:
        return torch.bfloat16 if in_dtype == _FP8 else in_dtype
    if out_dtype not in OUTPUT_DTYPES:
        raise TypeError(f"out_dtype must be one of {OUTPUT_DTYPES}, got {out_dtype!r}")
    return out_dtype


def check_call(schedule: object, num_sms: object, alpha: object = 1.0, beta: object = 1.0,
               out_dtype: object = None) -> None:
    """The checks of a call's non-tensor arguments."""
    if schedule is not None or num_sms is not None:
        check_knobs(schedule, num_sms)
    check_scalars(alpha, beta)
    if out_dtype is not None:
        resolve_out_dtype(torch.float32, out_dtype)


def check_operands(a: torch.Tensor, b: torch.Tensor) -> tuple[int, int, int]:
    """(M, K, N) of a [M, K] @ [K, N] product, after checking types, ranks, shapes, dtypes and devices."""
    check_tensor("a", a)
    check_tensor("b", b)
    if a.dim() != 2:
        raise ValueError(f"a must be 2-D (M, K), got shape {tuple(a.shape)}")
    if b.dim() != 2:
        raise ValueError(f"b must be 2-D (K, N), got shape {tuple(b.shape)}")
    (m, k), (kb, n) = a.shape, b.shape
    if k != kb:
        raise ValueError(f"a.shape[1] (K={k}) must equal b.shape[0] (got {kb}): a is {tuple(a.shape)}, "
                         f"b is {tuple(b.shape)}")
    if a.dtype not in INPUT_DTYPES:
        raise TypeError(f"a has unsupported dtype {a.dtype}; supported: {INPUT_DTYPES}")
    if b.dtype != a.dtype:
        raise TypeError(f"a and b must have the same dtype, got a: {a.dtype}, b: {b.dtype}")
    check_device("b", b, a.device)
    return m, k, n


def _scale_stride(name: str, scale: torch.Tensor | None, length: int, device: torch.device, axis: str) -> int:
    """Validate an fp8 scale (one value, or one per row of a / column of b) and return its stride along it."""
    if scale is None:
        return 0
    check_tensor(name, scale)
    check_device(name, scale, device)
    if scale.dtype != torch.float32:
        raise TypeError(f"{name} must be float32, got {scale.dtype}")
    if scale.numel() == 1:
        return 0
    expected = (length, 1) if axis == "row" else (1, length)
    if tuple(scale.shape) not in (expected, (length,)):
        raise ValueError(
            f"{name} must hold one value (per-tensor) or have shape {expected} (one per {axis}), "
            f"got {tuple(scale.shape)}"
        )
    return scale.stride(0) if scale.dim() == 1 else scale.stride(0 if axis == "row" else 1)


def _dims(shape: tuple[int, ...]) -> str:
    """An output shape for a message: "(M, N) = (4, 5)", "(B, M, N) = (2, 4, 5)"."""
    return f"({', '.join(('B', 'M', 'N')[-len(shape):])}) = {shape}"


def _check_input(c: torch.Tensor | None, shape: tuple[int, ...], device: torch.device) -> torch.Tensor | None:
    """`input` (C) broadcast to the output's `shape` ([M, N] or [B, M, N]). Its dtype may be any of OUTPUT_DTYPES
    whatever the operands' (torch.addmm asks for the operands' dtype): it is read and added in fp32."""
    if c is None:
        return None
    check_tensor("input", c)
    check_device("input", c, device)
    if c.dtype not in OUTPUT_DTYPES:
        raise TypeError(f"input must be one of {OUTPUT_DTYPES}, got {c.dtype}")
    if c.dim() > len(shape) or any(s not in (1, t) for s, t in zip(reversed(c.shape), reversed(shape))):
        raise ValueError(f"input must be broadcastable to {_dims(shape)}, got shape {tuple(c.shape)}")
    return c.expand(shape)


def _check_out(out: torch.Tensor | None, shape: tuple[int, ...], out_dtype: torch.dtype,
               device: torch.device) -> None:
    if out is None:
        return
    check_tensor("out", out)
    check_device("out", out, device)
    if not torch.compiler.is_compiling() and out.is_neg():  # traced tensors have no negative bit
        raise ValueError("out is a negative view (its values are the negation of its memory, e.g. "
                         "x.conj().imag); pass out.resolve_neg() or a plain tensor")
    if tuple(out.shape) != shape:
        raise ValueError(f"out must have shape {_dims(shape)}, got {tuple(out.shape)}")
    if out.dtype != out_dtype:
        raise TypeError(f"out must have dtype {out_dtype} (the result dtype), got {out.dtype}")


class Checked(NamedTuple):
    """What the data-free checks derive from a call."""

    m: int
    k: int
    n: int
    out_dtype: torch.dtype
    c: torch.Tensor | None  # input expanded to [M, N], None when not read (absent, or beta == 0)
    stride_sa: int = 0
    stride_sb: int = 0


def check_gemm(a, b, c, beta, out, out_dtype, scale_a, scale_b) -> Checked:
    """Every check of `gemm(a, b, ...)` that needs no data."""
    m, k, n = check_operands(a, b)
    out_dtype = resolve_out_dtype(a.dtype, out_dtype)
    if (scale_a is not None or scale_b is not None) and a.dtype != _FP8:
        raise ValueError(f"scale_a / scale_b apply to float8_e4m3fn inputs only, got {a.dtype}")
    stride_sa = _scale_stride("scale_a", scale_a, m, a.device, "row")
    stride_sb = _scale_stride("scale_b", scale_b, n, a.device, "column")
    c = _check_input(c, (m, n), a.device)
    _check_out(out, (m, n), out_dtype, a.device)
    return Checked(m, k, n, out_dtype, c if beta != 0 else None, stride_sa, stride_sb)


class CheckedBatch(NamedTuple):
    """What the data-free checks derive from a batched call."""

    batch: int
    m: int
    k: int
    n: int
    out_dtype: torch.dtype
    c: torch.Tensor | None  # input expanded to [batch, M, N], None when not read


def check_batched_dims(a, b) -> None:
    """a and b are tensors of 3 dimensions (the batched entry points call this before `gemm`, which treats a 2-D
    pair as a plain product)."""
    check_tensor("a", a)
    check_tensor("b", b)
    if a.dim() != 3:
        raise ValueError(f"a must be 3-D (B, M, K), got shape {tuple(a.shape)}")
    if b.dim() != 3:
        raise ValueError(f"b must be 3-D (B, K, N), got shape {tuple(b.shape)}")


def check_bmm(a, b, c, beta, out, out_dtype) -> CheckedBatch:
    """Every check of a batched product a [B, M, K] @ b [B, K, N] that needs no data; `c` broadcasts to
    [B, M, N] (as torch.baddbmm's input)."""
    check_batched_dims(a, b)
    (batch, m, k), (bb, kb, n) = a.shape, b.shape
    if batch != bb:
        raise ValueError(f"a and b must have the same batch size, got {batch} and {bb}")
    if k != kb:
        raise ValueError(f"a.shape[2] (K={k}) must equal b.shape[1] (got {kb}): a is {tuple(a.shape)}, "
                         f"b is {tuple(b.shape)}")
    if a.dtype not in INPUT_DTYPES or a.dtype == _FP8:
        raise TypeError(f"a has unsupported dtype {a.dtype} for a batched product; supported: bf16, fp16, fp32")
    if b.dtype != a.dtype:
        raise TypeError(f"a and b must have the same dtype, got a: {a.dtype}, b: {b.dtype}")
    check_device("b", b, a.device)
    out_dtype = resolve_out_dtype(a.dtype, out_dtype)
    c = _check_input(c, (batch, m, n), a.device)
    _check_out(out, (batch, m, n), out_dtype, a.device)
    return CheckedBatch(batch, m, k, n, out_dtype, c if beta != 0 else None)


def mx_dot_dtype(a: torch.Tensor | MXFP4Tensor) -> torch.dtype:
    """The dtype an MXFP4 GEMM with activations `a` multiplies in: bf16 for MXFP4 activations, else a's."""
    return torch.bfloat16 if isinstance(a, MXFP4Tensor) else a.dtype


def check_mxfp4(a, w, c, beta, out, out_dtype) -> Checked:
    """Every check of `gemm_mxfp4(a, w, ...)` that needs no data."""
    if not isinstance(w, MXFP4Tensor):
        raise TypeError(f"w must be an MXFP4Tensor (smgemm.quantize_mxfp4), got {type(w).__name__}")
    if w.dim() != 2:
        raise ValueError(f"w must be a 2-D [N, K] MXFP4Tensor, got shape {tuple(w.shape)}")
    if isinstance(a, MXFP4Tensor):
        if a.dim() != 2:
            raise ValueError(f"a must be a 2-D [M, K] MXFP4Tensor, got shape {tuple(a.shape)}")
    else:
        check_tensor("a", a)
        if a.dim() != 2:
            raise ValueError(f"a must be 2-D (M, K), got shape {tuple(a.shape)}")
        if a.dtype not in (torch.bfloat16, torch.float16):
            raise TypeError(f"with an MXFP4 weight, a must be bfloat16, float16 or an MXFP4Tensor, got {a.dtype}")
    (m, k), (n, kw) = a.shape, w.shape
    if k != kw:
        raise ValueError(f"a.shape[1] (K={k}) must equal w.shape[1] (got {kw}): a is {tuple(a.shape)}, "
                         f"w is {tuple(w.shape)}")
    device = a.device
    for name, t in mx_parts(a, w):
        check_device(name, t, device)
        if name != "a" and t.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous along K (stride 1 in its last dim), got strides {t.stride()}")
    for name, t in (("a", a), ("w", w)):  # read as 16-byte aligned 32-bit words (kernels.common._load_words)
        if isinstance(t, MXFP4Tensor) and t.layout != "ocp" and (t.data.stride(0) % 16 or _address(t.data) % 16):
            raise ValueError(f"{name}.data of a {t.layout!r} MXFP4Tensor needs rows that start on 16-byte "
                             f"boundaries, got a row stride of {t.data.stride(0)} bytes at address {_address(t.data)} "
                             "(.contiguous() makes them)")
    out_dtype = resolve_out_dtype(mx_dot_dtype(a), out_dtype)
    c = _check_input(c, (m, n), device)
    _check_out(out, (m, n), out_dtype, device)
    return Checked(m, k, n, out_dtype, c if beta != 0 else None)


def _address(t: torch.Tensor) -> int:
    """t's address; 0 while torch.compile traces and for tensors without storage (fake, meta): the call checks
    again when it runs."""
    if torch.compiler.is_compiling():
        return 0
    try:
        return t.data_ptr()
    except RuntimeError:
        return 0


def mx_parts(a: torch.Tensor | MXFP4Tensor, w: MXFP4Tensor) -> list[tuple[str, torch.Tensor]]:
    """The named tensors of an MXFP4 GEMM's operands."""
    dense = [("a.data", a.data), ("a.scales", a.scales)] if isinstance(a, MXFP4Tensor) else [("a", a)]
    return [*dense, ("w.data", w.data), ("w.scales", w.scales)]


def _max_offset(t: torch.Tensor) -> int:
    return sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))


# Elements the kernels' offsets may reach past the end of an operand's last row or column: a K step of up to 512
# elements (its tail masked), counted twice for margin. Wrapped row / column offsets stay inside the tensor.
_OFFSET_SLACK = 1024


def needs_int64(*tensors: torch.Tensor | None) -> bool:
    """Whether an element offset the kernels form for one of `tensors` (a K step past its end included) may
    exceed int32."""
    return any(t is not None and t.numel() and _max_offset(t) + _OFFSET_SLACK * max(t.stride(), default=0) > _INT32_MAX
               for t in tensors)


def _byte_span(t: torch.Tensor) -> tuple[int, int]:
    start = t.data_ptr()
    return start, start + (_max_offset(t) + 1) * t.element_size()


def _rows(t: torch.Tensor) -> tuple[int, int, int, int] | None:
    """(first byte, row stride in bytes, rows, row width in bytes) of a non-empty `t` whose rows (its last dim,
    adjacent elements) are evenly spaced, else None. Dims of stride 0 repeat rows, so they add none."""
    if t.dim() == 0:  # a scalar (a per-tensor scale): one row of one element
        return t.data_ptr(), 0, 1, t.element_size()
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        return None
    rows, step = 1, 0
    for size, stride in reversed([(n, st) for n, st in zip(t.shape[:-1], t.stride()[:-1]) if n > 1 and st != 0]):
        if rows == 1:
            rows, step = size, stride
        elif stride == step * rows:
            rows *= size
        else:
            return None
    return t.data_ptr(), step * t.element_size(), rows, t.shape[-1] * t.element_size()


def _rows_meet(x: tuple[int, int, int, int], y: tuple[int, int, int, int]) -> bool:
    """Whether two sets of evenly spaced rows (`_rows`) may share a byte: exact for one spacing (row i of x and row
    j of y meet when -wy < (y0 - x0) + (j - i) r < wx, so an integer j - i in [-(mx - 1), my - 1] must lie in that
    open interval), True for two."""
    (x0, rx, mx, wx), (y0, ry, my, wy) = x, y
    d, r = y0 - x0, rx if mx > 1 else ry
    if r == 0:  # one row each
        return -wy < d < wx
    if mx > 1 and my > 1 and rx != ry:
        return True
    low = max(-(mx - 1), (-wy - d) // r + 1)
    high = min(my - 1, -((d - wx) // r) - 1)
    return low <= high


def _overlaps(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether x and y share memory: exact where the rows of each are evenly spaced with the same spacing (e.g.
    column slices of one buffer, which share its address range but no element), otherwise conservative (their
    address ranges intersect)."""
    if x.numel() == 0 or y.numel() == 0:
        return False
    (x0, x1), (y0, y1) = _byte_span(x), _byte_span(y)
    if not (x0 < y1 and y0 < x1):
        return False
    xr, yr = _rows(x), _rows(y)
    return xr is None or yr is None or _rows_meet(xr, yr)


def _has_internal_overlap(t: torch.Tensor) -> bool:
    """True when two elements of `t` may share memory (e.g. an expanded view)."""
    reach = 0
    for stride, size in sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz > 1):
        if stride <= reach:
            return True
        reach += stride * (size - 1)
    return False


def check_memory(out: torch.Tensor, c: torch.Tensor | None, operands: list[tuple[str, torch.Tensor | None]]) -> None:
    """A caller's `out` must be writable element by element and overlap no operand; it may be `c` itself (the
    same [M, N] view: an in-place update)."""
    if _has_internal_overlap(out):
        raise ValueError(f"out has overlapping elements (strides {out.stride()}); it must be writable "
                         "element by element")
    for name, t in operands:
        if t is not None and _overlaps(out, t):
            raise ValueError(f"out overlaps {name}'s memory; it must not overwrite an operand")
    if c is not None and not (out.data_ptr() == c.data_ptr() and out.stride() == c.stride()) and _overlaps(out, c):
        raise ValueError("out overlaps input without being the same (M, N) view of it; pass out=input "
                         "for an in-place update")
