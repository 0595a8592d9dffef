"""Dispatch: check a GEMM call (`_checks`), plan it (`plan`), launch it (`_launch`).

`gemm` and `gemm_mxfp4` are the entry points every public op goes through:

    out = alpha * (scale_a * scale_b * (a @ b)) + beta * c

with `c` anything broadcastable to (M, N) (a bias along N, a full matrix, ...), per-row `scale_a` and per-column
`scale_b` (fp8 only). Every check runs before any launch and names the offending argument. A call whose signature
passed them before skips them (`_SEEN_CALLS`).
"""

from __future__ import annotations

import torch

from ._checks import (
    check_backend,
    check_bmm,
    check_call,
    check_gemm,
    check_memory,
    check_mxfp4,
    mx_dot_dtype,
    mx_parts,
    needs_int64,
    resolve_neg,
)
from ._device import device_spec, tf32_enabled
from ._launch import Operands, Repeat, launch, operands_alignment, run_cached, staged, static_args, tensor_args
from ._ring import RingLaunch
from ._ring import available as ring_available
from .kernels.mx_expand import mx_expand_kernel
from .mxfp4 import MXFP4Tensor
from .plan import _OVERRIDES, Plan, TileConfig, decide, mx_expands, mx_ring_split, resolve_budget, whole_device
from .tuning import lookup, tuning_version


def _empty(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Every output smgemm allocates comes from here (tests poison it with NaN to catch unwritten tiles). The sizes
    as separate ints: torch parses them faster than a tuple (~0.4 us of host time a call)."""
    return torch.empty(*shape, dtype=dtype, device=device)


def _empty_product(out: torch.Tensor, c: torch.Tensor | None, beta: float) -> torch.Tensor:
    """No product to add (K == 0, or alpha == 0, which as in torch never reads it): out = beta * input, or zeros."""
    return out.copy_(c.to(torch.float32) * beta) if c is not None else out.zero_()


def gemm(
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
    schedule: str = "auto",
    num_sms: int | None = None,
    config: TileConfig | None = None,
    smid_out: torch.Tensor | None = None,
) -> torch.Tensor:
    """alpha * (scale_a * scale_b * (a @ b)) + beta * c, written to `out` (allocated when None).

    A 3-D `a` or `b` makes the call batched: `b` is then [B, K, N], `c` broadcasts to [B, M, N], no scales, and
    the tiles of all B products share one launch whose grid obeys `num_sms` across the whole batch (one persistent or
    Stream-K schedule). `config` forces a tile configuration (tests, tuning); `smid_out` (int32, at least grid-size
    elements) receives the SM id each program ran on (GPU only).
    """
    key, repeated = _seen("gemm", a, b, c, alpha, beta, out is None and smid_out is None, out_dtype, scale_a, scale_b,
                          schedule, num_sms, config)
    if repeated is not None:
        return repeated
    check_call(schedule, num_sms, alpha, beta)
    a, b, c, scale_a, scale_b = (resolve_neg(t) for t in (a, b, c, scale_a, scale_b))
    batched = getattr(a, "ndim", 2) == 3 or getattr(b, "ndim", 2) == 3
    if batched:
        for name, scale in (("scale_a", scale_a), ("scale_b", scale_b)):
            if scale is not None:
                raise ValueError(f"{name} is for fp8 2-D products; a batched product takes none")
        batch, m, k, n, out_dtype, c = check_bmm(a, b, c, beta, out, out_dtype)
        shape, stride_sa, stride_sb = (batch, m, n), 0, 0
    else:
        m, k, n, out_dtype, c, stride_sa, stride_sb = check_gemm(a, b, c, beta, out, out_dtype, scale_a, scale_b)
        batch, shape = 1, (m, n)
    check_backend(a.device)
    out = _output(out, c, [("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b)], shape, out_dtype,
                  a.device)
    if batch == 0 or m == 0 or n == 0:
        return out
    if k == 0 or alpha == 0:
        return _empty_product(out, c, beta)

    spec = device_spec(a.device)
    tuned = lookup(spec, m, n, k, a.dtype, resolve_budget(num_sms, spec)) if config is None and not batched else None
    plan = decide(m, n, k, a.dtype, spec, schedule=schedule, num_sms=num_sms,
                  tf32=a.dtype == torch.float32 and tf32_enabled(), config=config, tuned=tuned, batch=batch,
                  operands=operands_alignment(a, b),
                  c_matrix=c is not None and c.dim() >= 2 and c.stride(-2) != 0)
    ops = staged(plan, Operands(a, b, out, c, scale_a, scale_b, smid_out))
    ints, meta = static_args(plan, ops, stride_sa, stride_sb, needs_int64(ops.a, ops.b, out, c, scale_a, scale_b))
    return _finish(key, plan, ops, ints, meta, alpha, beta)


def _output(out: torch.Tensor | None, c: torch.Tensor | None, operands: list, shape: tuple[int, ...],
            out_dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The caller's `out` once its memory is checked against the operands', else a new tensor of `shape`."""
    if out is None:
        return _empty(shape, out_dtype, device)
    check_memory(out, c, operands)
    return out


def _finish(key: tuple | None, plan: Plan, ops: Operands, ints: tuple, meta: dict, alpha, beta) -> torch.Tensor:
    """Launch a checked call and remember what a repeat of its signature can reuse; returns its output."""
    if ops.smid_out is not None and ops.smid_out.numel() < plan.num_programs:
        raise ValueError(f"smid_out needs {plan.num_programs} elements, got {ops.smid_out.numel()}")
    launcher = launch(plan, tensor_args(plan, ops), ints, (float(alpha), float(beta)), meta)
    out = ops.out
    repeat = None
    if launcher is not None and not (plan.stage_a or plan.stage_b):
        repeat = Repeat(plan, ints, meta, launcher, out.device.index, isinstance(ops.a, MXFP4Tensor),
                        isinstance(ops.b, MXFP4Tensor))
    _remember(key, (plan, tuple(out.shape), out.dtype, ops.c is not None, ints, meta, launcher, repeat))
    return out


# Calls whose signature passed every check, with what the checks and the planner derived from it (and the
# compiled kernel's launcher). A signature
# holds everything those depend on (devices, dtypes, shapes, strides, 16-byte alignment of every input, the
# knobs, the TF32 setting for fp32, the loaded tuning table); data never enters. Only calls that allocate their
# output are remembered (an `out` given by the caller needs its overlap checks on every call). Bounded.
_SEEN_CALLS: dict[tuple, tuple] = {}
_SEEN_CALLS_MAX = 4096
PLAIN = (torch.Tensor, torch.nn.Parameter)  # dense operands whose views are plain tensors


def _tensor_signature(t: torch.Tensor | MXFP4Tensor | None) -> tuple | None:
    if t is None:
        return None
    if isinstance(t, MXFP4Tensor):
        return MXFP4Tensor, t.layout, _tensor_signature(t.data), _tensor_signature(t.scales)
    if t.is_neg():  # resolved (copied) on every call: never a repeat call
        raise TypeError("a negative view")
    return type(t), t.device, t.dtype, t.shape, t.stride(), t.data_ptr() % 16 == 0


def _dense_signature(entry, a, b, c, beta, out_dtype, schedule, num_sms, b_t: bool = False) -> tuple | None:
    """`_signature` of a call of plain tensors a and b (`PLAIN`) without scales or a config: one flat tuple, built
    and hashed on every eager call."""
    if a.is_neg() or b.is_neg():  # resolved (copied) on every call: never a repeat call
        return None
    if b_t:
        (n, k), (s0, s1) = b.shape, b.stride()
        b_shape, b_stride = (k, n), (s1, s0)
    else:
        b_shape, b_stride = b.shape, b.stride()
    dtype = a.dtype
    return (entry, a.device, dtype, a.shape, a.stride(), b.device, b.dtype, b_shape, b_stride,
            (a.data_ptr() % 16 == 0) + 2 * (b.data_ptr() % 16 == 0),
            None if c is None else (_tensor_signature(c), beta != 0), out_dtype, schedule, type(num_sms), num_sms,
            dtype == torch.float32 and tf32_enabled(), tuning_version(), _OVERRIDES.version)


def _mx_weight_signature(entry, a, w, c, beta, out_dtype, schedule, num_sms) -> tuple | None:
    """`_signature` of a call of a plain tensor `a` and an MXFP4 weight `w` without scales or a config (an MXFP4Linear's
    forward): one flat tuple."""
    data, scales = w.data, w.scales
    if a.is_neg() or data.is_neg() or scales.is_neg():  # resolved (copied) on every call: never a repeat call
        return None
    return (entry, a.device, a.dtype, a.shape, a.stride(), w.layout, data.device, data.dtype, data.shape,
            data.stride(), scales.device, scales.dtype, scales.shape, scales.stride(),
            (a.data_ptr() % 16 == 0) + 2 * (data.data_ptr() % 16 == 0) + 4 * (scales.data_ptr() % 16 == 0),
            None if c is None else (_tensor_signature(c), beta != 0), out_dtype, schedule, type(num_sms), num_sms,
            tuning_version(), _OVERRIDES.version)


def _signature(entry, a, b, c, beta, out_dtype, scale_a, scale_b, schedule, num_sms, config) -> tuple | None:
    """The key of a call of `entry` ("gemm", "gemm_mxfp4") in _SEEN_CALLS, or None when an argument is not
    what a key can describe. Absent tensors cost no call: this runs on every eager call."""
    try:
        if scale_a is None and scale_b is None and config is None and type(a) in PLAIN:
            if type(b) in PLAIN:
                return _dense_signature(entry, a, b, c, beta, out_dtype, schedule, num_sms)
            if type(b) is MXFP4Tensor:
                return _mx_weight_signature(entry, a, b, c, beta, out_dtype, schedule, num_sms)
        return (
            entry, _tensor_signature(a), _tensor_signature(b),
            None if c is None else (_tensor_signature(c), beta != 0),
            None if scale_a is None else _tensor_signature(scale_a),
            None if scale_b is None else _tensor_signature(scale_b), out_dtype, schedule, type(num_sms), num_sms,
            config, getattr(a, "dtype", None) == torch.float32 and tf32_enabled(), tuning_version(),
            _OVERRIDES.version,
        )
    except (AttributeError, TypeError, RuntimeError):  # not tensors (the checks will say so), unhashable knobs
        return None


def _repeat_call(key, a, b, c, scale_a, scale_b, alpha, beta, b_t: bool = False) -> torch.Tensor | None:
    """Launch a call whose signature passed every check before (same plan, same launch); None if it did not.
    `b_t`: the call's B is `b.t()` (a view has b's address, so only a launch through `launch` makes it)."""
    seen = _SEEN_CALLS.get(key) if key is not None else None
    if seen is None:
        return None
    plan, shape, dtype, has_c, ints, meta, launcher, repeat = seen
    out = _empty(shape, dtype, a.device)
    c, floats = c if has_c else None, (float(alpha), float(beta))
    if repeat is None or not repeat(a, b, out, c, scale_a, scale_b, floats):
        ops = Operands(a, b.t() if b_t else b, out, c, scale_a, scale_b)
        launch(plan, tensor_args(plan, staged(plan, ops)), ints, floats, meta, launcher)
    return out


def repeat_call(entry, a, b, c, alpha, beta, out_dtype, scale_a, scale_b, schedule, num_sms) -> torch.Tensor | None:
    """`entry`'s output ("gemm", "gemm_mxfp4") for a call that allocates its output and repeats a remembered signature,
    launched from what was remembered; None for any other call, which the caller then makes in full. The
    operations' eager path asks this first: a repeat call then costs a key, a lookup and a launch."""
    if alpha == 0:
        return None
    key = _signature(entry, a, b, c, beta, out_dtype, scale_a, scale_b, schedule, num_sms, None)
    return _repeat_call(key, a, b, c, scale_a, scale_b, alpha, beta)


def repeat_dense(a, b, c, alpha, beta, out_dtype, schedule, num_sms, b_t: bool = False) -> torch.Tensor | None:
    """`repeat_call` of a dense product of plain tensors (`PLAIN`; `c` a plain tensor or None, no scales), in one
    step: the eager path of matmul, mm, addmm and linear (`b_t`: the call's B is `b.t()`). None for any other call."""
    if alpha == 0 or type(a) not in PLAIN or type(b) not in PLAIN:
        return None
    try:
        key = _dense_signature("gemm", a, b, c, beta, out_dtype, schedule, num_sms, b_t)
    except (AttributeError, TypeError, RuntimeError):  # a `c` that is not a tensor, unhashable knobs
        return None
    return _repeat_call(key, a, b, c, None, None, alpha, beta, b_t)


def _seen(entry, a, b, c, alpha, beta, allocates, out_dtype, scale_a, scale_b, schedule, num_sms, config):
    """(key, output) of a call of `entry`: the output when the call repeats a remembered signature (launched from
    what it remembered), else None with the key to remember it under (None too for a call that cannot be remembered:
    one that is given its output or an SM-id buffer (`allocates` False), or alpha == 0)."""
    if not allocates or alpha == 0:
        return None, None
    key = _signature(entry, a, b, c, beta, out_dtype, scale_a, scale_b, schedule, num_sms, config)
    return key, _repeat_call(key, a, b, c, scale_a, scale_b, alpha, beta)


def _remember(key: tuple | None, seen: tuple) -> None:
    if key is not None:
        if len(_SEEN_CALLS) >= _SEEN_CALLS_MAX:
            _SEEN_CALLS.clear()
        _SEEN_CALLS[key] = seen


def gemm_mxfp4(
    a: torch.Tensor | MXFP4Tensor,
    w: MXFP4Tensor,
    *,
    c: torch.Tensor | None = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    out: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    schedule: str = "auto",
    num_sms: int | None = None,
    config: TileConfig | None = None,
    smid_out: torch.Tensor | None = None,
    expand: bool | None = None,
) -> torch.Tensor:
    """alpha * a @ w.T + beta * c with an MXFP4 weight `w` [N, K] and `a` [M, K] bf16 / fp16 (weight-only) or MXFP4.

    Both are dequantized exactly (to bf16; to fp16 when `a` is fp16) and multiplied with fp32 accumulation: inside
    the GEMM's K loop, or, for compute-bound shapes (`plan.mx_expands`; `expand` forces either way), into bf16
    copies by a pass of their own, followed by the dense GEMM. Every schedule and `num_sms` work as for dense
    operands (both passes stay within the budget); `config` and `smid_out` as for `gemm`.
    """
    key, repeated = _seen("gemm_mxfp4", a, w, c, alpha, beta, out is None and smid_out is None, out_dtype, None, None,
                          schedule, num_sms, config)
    if repeated is not None:
        return repeated
    check_call(schedule, num_sms, alpha, beta)
    a, c_in = resolve_neg(a), resolve_neg(c)
    m, k, n, out_dtype, c, _, _ = check_mxfp4(a, w, c_in, beta, out, out_dtype)
    check_backend(a.device)
    operands = mx_parts(a, w)
    dot_dtype = mx_dot_dtype(a)
    if expand is None:
        expand = config is None and m * n * k > 0 and alpha != 0 and mx_expands(m, n, k, isinstance(a, MXFP4Tensor))
    if expand:  # two passes; `gemm` checks input and out (only an out that overlaps an MXFP4 operand is left)
        if out is not None:
            check_memory(out, None, operands)
        if isinstance(a, MXFP4Tensor):
            a_dense, w_dense = expand_mxfp4_pair(a, w, dot_dtype, num_sms)
        else:
            a_dense, w_dense = a, expand_mxfp4(w, dot_dtype, num_sms)
        return gemm(a_dense, w_dense.t(), c=c_in, alpha=alpha, beta=beta, out=out,
                    out_dtype=out_dtype, schedule=schedule, num_sms=num_sms, config=config, smid_out=smid_out)
    out = _output(out, c, operands, (m, n), out_dtype, a.device)
    if m == 0 or n == 0:
        return out
    if k == 0 or alpha == 0:
        return _empty_product(out, c, beta)
    split = _ring_split(a, w, c, out, alpha, schedule, num_sms, config, smid_out)
    if split:  # `kernels.mx_ring`
        ring = RingLaunch(n, k, split)
        ring(a, w, out, None, None, None, (float(alpha), float(beta)))
        _remember(key, (None, tuple(out.shape), out.dtype, False, None, None, None, ring))
        return out
    # a word layout ("hopper", "kwords": K steps >= 128) on either operand plans as the weight's
    layout = w.layout if w.layout != "ocp" or not isinstance(a, MXFP4Tensor) else a.layout
    plan = decide(m, n, k, dot_dtype, device_spec(a.device), schedule=schedule, num_sms=num_sms, config=config,
                  mxfp4=True, mx_layout=layout, mx_a=isinstance(a, MXFP4Tensor))
    if plan.config.block_k < 32:
        raise ValueError(f"MXFP4 operands need block_k >= 32 (one scale group), got {plan.config}")
    ops = Operands(a, w, out, c, smid_out=smid_out)
    ints, meta = static_args(plan, ops, 0, 0, needs_int64(*(t for _, t in operands), out, c))
    return _finish(key, plan, ops, ints, meta, alpha, beta)


def _ring_split(a, w: MXFP4Tensor, c, out: torch.Tensor, alpha, schedule: str, num_sms: int | None, config,
                smid_out) -> int:
    """`plan.mx_ring_split` for a checked call and its output, 0 unless the ring kernel can read and write
    its operands as they are: TMA reads x's row, the weight's words and its scales (16-byte aligned bases and row
    strides, unit last strides), and the kernel stores the row of out, in bf16, contiguously from a 16-byte aligned
    start (its compiled launch assumes both: a given `out` is not part of the remembered key, and an `out_dtype`
    other than bf16 takes the `tl` plans)."""
    if (config is not None or schedule != "auto" or smid_out is not None or c is not None or alpha == 0
            or isinstance(a, MXFP4Tensor) or not ring_available(a.device)):
        return 0
    data, scales = w.data, w.scales
    if not (a.stride(1) == 1 and a.data_ptr() % 16 == 0 and out.dtype == torch.bfloat16 and out.stride(1) == 1
            and out.data_ptr() % 16 == 0 and data.stride(1) == 1 and scales.stride(1) == 1 and data.stride(0) % 16 == 0
            and scales.stride(0) % 16 == 0 and data.data_ptr() % 16 == 0 and scales.data_ptr() % 16 == 0):
        return 0
    m, k = a.shape
    return mx_ring_split(m, data.shape[0], k, device_spec(a.device), num_sms, w.layout, a.dtype, False)


# The expansion kernel's blocks and warps. Under an SM budget: a persistent grid of at most `num_sms` programs
# with 128 x 512 blocks and 8 warps (3.1 TB/s of bytes moved on the H200, device copy 4.0; 64 x 256 with 4 warps
# gave 2.2). On the whole chip: one program per 32 x 512 block with 4 warps, many resident per SM (a streaming
# kernel wants warps in flight): 4096 x 4096 15.8 -> 13.0 us, 14336 x 4096 47.6 -> 42.7 (docs/performance.md,
# benchmarks/sweep_expand.py).
_EXPAND = {"block_r": 128, "block_k": 512, "warps": 8}
_EXPAND_CHIP = {"block_r": 32, "block_k": 512, "warps": 4, "per_sm": 0}


def expand_mxfp4(t: MXFP4Tensor, dtype: torch.dtype, num_sms: int | None = None, **blocks: int) -> torch.Tensor:
    """The values of a 2-D MXFP4Tensor as a new [rows, K] `dtype` tensor (bf16: exact; fp16: rounded once), computed
    by at most `num_sms` programs (the GEMM's SM budget). `blocks` overrides the blocks, warps and `per_sm`
    (programs per SM, 0 for one per block; whole chip only) of `_EXPAND` / `_EXPAND_CHIP` (sweeps)."""
    return _expand((t,), dtype, num_sms, blocks)[0]


def expand_mxfp4_pair(a: MXFP4Tensor, w: MXFP4Tensor, dtype: torch.dtype, num_sms: int | None = None,
                      **blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`expand_mxfp4` of two MXFP4Tensors with the same K (a GEMM's activations and weight), in one launch."""
    return _expand((a, w), dtype, num_sms, blocks)


def _expand(ts: tuple[MXFP4Tensor, ...], dtype: torch.dtype, num_sms: int | None, blocks: dict) -> list:
    device, k = ts[0].device, ts[0].shape[1]
    spec = device_spec(device)
    whole = whole_device(num_sms, spec)
    opts = {**(_EXPAND_CHIP if whole else _EXPAND), **blocks}
    outs = [_empty((t.shape[0], k), dtype, device) for t in ts]
    block_k = min(opts["block_k"], max(32, 1 << (k - 1).bit_length()))
    if any(t.layout != "ocp" for t in ts):
        block_k = max(block_k, 128)  # whole 64-byte groups
    tiles = sum(-(-t.shape[0] // opts["block_r"]) for t in ts) * -(-k // block_k)
    budget = resolve_budget(num_sms, spec)
    if whole and opts.get("per_sm") is not None:
        budget = tiles if opts["per_sm"] == 0 else budget * opts["per_sm"]
    grid = max(1, min(tiles, budget))
    ops = [(t.data, t.scales, out, t.shape[0], t.data.stride(0), t.scales.stride(0), out.stride(0))
           for t, out in zip(ts, outs)]
    args = (*ops[0], *ops[-1], k, grid)
    meta = dict(BLOCK_R=opts["block_r"], BLOCK_K=block_k, EVEN_K=k % block_k == 0,
                INTERPRETER=device.type == "cpu", FP16=dtype == torch.float16, TWO=len(ts) == 2,
                LAYOUT0=ts[0].layout, LAYOUT1=ts[-1].layout)
    if device.type != "cuda":
        mx_expand_kernel[(grid,)](*args, **meta)
        return outs
    key = ("expand", device.index, tuple(a for a in args if isinstance(a, int)), *meta.values(), opts["warps"],
           *(x.data_ptr() % 16 == 0 for x in args if isinstance(x, torch.Tensor)))
    with torch.cuda.device(device):
        run_cached(mx_expand_kernel, grid, args, meta, device.index, key, num_warps=opts["warps"])
    return outs
