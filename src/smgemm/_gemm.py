"""Validate a GEMM call, plan it, launch the kernel.

`gemm` is the one entry point every public op goes through:

    out = alpha * (scale_a * scale_b * (a @ b)) + beta * c

with `c` anything broadcastable to (M, N) (a bias along N, a full matrix, ...), per-row `scale_a` and per-column
`scale_b` (fp8 only). All argument checks happen here, before any launch, and name the offending argument.
"""

from __future__ import annotations

import random
from typing import NamedTuple

import torch
from triton import knobs
from triton.runtime import _allocation
from triton.runtime.errors import OutOfResources

from ._checks import (
    check_backend,
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
from .mxfp4 import MXFP4Tensor
from .plan import (
    Plan,
    TileConfig,
    make_mx_plan,
    make_plan,
    mx_expands,
    resolve_budget,
)
from .tuning import lookup, tuning_version


def _empty(shape: tuple[int, int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Every output smgemm allocates comes from here (tests poison it with NaN to catch unwritten tiles)."""
    return torch.empty(shape, dtype=dtype, device=device)


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

    `config` forces a tile configuration (tests, tuning); `smid_out` (int32, at least grid-size elements) receives
    the SM id each program ran on (GPU only).
    """
    key = None
    if out is None and smid_out is None and alpha != 0:
        key = _signature("gemm", a, b, c, beta, out_dtype, scale_a, scale_b, schedule, num_sms, config)
        repeated = _repeat_call(key, a, b, c, scale_a, scale_b, alpha, beta)
        if repeated is not None:
            return repeated

    check_call(schedule, num_sms, alpha, beta)
    a, b, c, scale_a, scale_b = (resolve_neg(t) for t in (a, b, c, scale_a, scale_b))
    m, k, n, out_dtype, c, stride_sa, stride_sb = check_gemm(a, b, c, beta, out, out_dtype, scale_a, scale_b)
    check_backend(a.device)
    out = _output(out, c, [("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b)], m, n, out_dtype, a.device)
    if m == 0 or n == 0:
        return out
    if k == 0 or alpha == 0:
        return _empty_product(out, c, beta)

    spec = device_spec(a.device)
    if config is None and schedule == "auto":  # a configuration measured by smgemm.tuning, if one is loaded
        config, schedule = lookup(spec, m, n, k, a.dtype, resolve_budget(num_sms, spec)) or (None, schedule)
    plan = make_plan(m, n, k, a.dtype, spec, schedule=schedule, num_sms=num_sms,
                     tf32=a.dtype == torch.float32 and tf32_enabled(), config=config)
    ops = _Operands(a, b, out, c, scale_a, scale_b, smid_out)
    ints, meta = _static_args(plan, ops, stride_sa, stride_sb, needs_int64(a, b, out, c, scale_a, scale_b))
    return _finish(key, plan, ops, ints, meta, alpha, beta)


def _output(out: torch.Tensor | None, c: torch.Tensor | None, operands: list, m: int, n: int,
            out_dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The caller's `out` once its memory is checked against the operands', else a new [M, N] tensor."""
    if out is None:
        return _empty((m, n), out_dtype, device)
    check_memory(out, c, operands)
    return out


def _finish(key: tuple | None, plan: Plan, ops: _Operands, ints: tuple, meta: dict, alpha, beta) -> torch.Tensor:
    """Launch a checked call and remember what a repeat of its signature can reuse; returns its output."""
    if ops.smid_out is not None and ops.smid_out.numel() < plan.num_programs:
        raise ValueError(f"smid_out needs {plan.num_programs} elements, got {ops.smid_out.numel()}")
    launcher = _launch(plan, _tensor_args(plan, ops), ints, (float(alpha), float(beta)), meta)
    out = ops.out
    _remember(key, (plan, tuple(out.shape), out.dtype, ops.c is not None, ints, meta, launcher))
    return out


# Calls whose signature passed every check, with what the checks and the planner derived from it (and the
# compiled kernel's launcher). A signature
# holds everything those depend on (devices, dtypes, shapes, strides, 16-byte alignment of every input, the
# knobs, the TF32 setting for fp32, the loaded tuning table); data never enters. Only calls that allocate their
# output are remembered (an `out` given by the caller needs its overlap checks on every call). Bounded.
_SEEN_CALLS: dict[tuple, tuple] = {}
_SEEN_CALLS_MAX = 4096


def _tensor_signature(t: torch.Tensor | MXFP4Tensor | None) -> tuple:
    if t is None:
        return (None,)
    if isinstance(t, MXFP4Tensor):
        return (MXFP4Tensor, *_tensor_signature(t.data), *_tensor_signature(t.scales))
    if t.is_neg():  # resolved (copied) on every call: never a repeat call
        raise TypeError("a negative view")
    return type(t), t.device, t.dtype, t.shape, t.stride(), t.data_ptr() % 16 == 0


def _signature(entry, a, b, c, beta, out_dtype, scale_a, scale_b, schedule, num_sms, config) -> tuple | None:
    """The key of a call of `entry` ("gemm", "gemm_mxfp4") in _SEEN_CALLS, or None when an argument is not
    what a key can describe."""
    try:
        return (
            entry, *_tensor_signature(a), *_tensor_signature(b), *_tensor_signature(c), c is not None and beta != 0,
            *_tensor_signature(scale_a), *_tensor_signature(scale_b), out_dtype, schedule, type(num_sms), num_sms,
            config, getattr(a, "dtype", None) == torch.float32 and tf32_enabled(), tuning_version(),
        )
    except (AttributeError, TypeError, RuntimeError):  # not tensors (the checks will say so), unhashable knobs
        return None


def _repeat_call(key, a, b, c, scale_a, scale_b, alpha, beta) -> torch.Tensor | None:
    """Launch a call whose signature passed every check before (same plan, same launch); None if it did not."""
    seen = _SEEN_CALLS.get(key) if key is not None else None
    if seen is None:
        return None
    plan, shape, dtype, has_c, ints, meta, launcher = seen
    out = _empty(shape, dtype, a.device)
    tensors = _tensor_args(plan, _Operands(a, b, out, c if has_c else None, scale_a, scale_b))
    _launch(plan, tensors, ints, (float(alpha), float(beta)), meta, launcher)
    return out


def _remember(key: tuple | None, seen: tuple) -> None:
    if key is not None:
        if len(_SEEN_CALLS) >= _SEEN_CALLS_MAX:
            _SEEN_CALLS.clear()
        _SEEN_CALLS[key] = seen


class _Operands(NamedTuple):
    """The tensors of one launch. `a` is [M, K] and `b` [K, N], except that an MXFP4 `b` is the [N, K] weight
    (packed along K); `c` is the input expanded to [M, N], None when it is not read."""

    a: torch.Tensor | MXFP4Tensor
    b: torch.Tensor | MXFP4Tensor
    out: torch.Tensor
    c: torch.Tensor | None = None
    scale_a: torch.Tensor | None = None
    scale_b: torch.Tensor | None = None
    smid_out: torch.Tensor | None = None


def _tensor_args(plan: Plan, ops: _Operands) -> tuple:
    """gemm_kernel's pointer arguments, in signature order (unused ones point at `out`)."""
    a, b, out = ops.a, ops.b, ops.out
    a_mx, b_mx = isinstance(a, MXFP4Tensor), isinstance(b, MXFP4Tensor)
    return (
        a.data if a_mx else a,
        b.data if b_mx else b,
        out,
        ops.c if ops.c is not None else out,
        ops.scale_a if ops.scale_a is not None else out,
        ops.scale_b if ops.scale_b is not None else out,
        a.scales if a_mx else out,
        b.scales if b_mx else out,
        _workspace(plan, out.device) if plan.sk_tiles else out,
        ops.smid_out if ops.smid_out is not None else out,
    )


def _static_args(plan: Plan, ops: _Operands, stride_sa: int, stride_sb: int, use_int64: bool) -> tuple[tuple, dict]:
    """gemm_kernel's int arguments (signature order) and meta-parameters: functions of the shapes, strides,
    dtypes and alignment of the operands and of the plan only, never of the data (so repeat calls reuse them).
    """
    a, b, out, c, scale_a, scale_b, smid_out = ops
    cfg = plan.config
    a_mx, b_mx = isinstance(a, MXFP4Tensor), isinstance(b, MXFP4Tensor)
    stride_cm, stride_cn = c.stride() if c is not None else (0, 0)
    tma = cfg.tma and (a.device.type == "cpu" or device_spec(a.device).capability >= (9, 0))
    a_mode = 0 if a_mx or not tma else _tma_mode(a)
    b_mode = 0 if b_mx or not tma else _tma_mode(b)
    # TMA stores clip at the tensor's edge only to 16-byte granularity (triton-lang/triton#11583): a row whose
    # length is not a multiple of 16 bytes would spill into the memory beside a view. Such outputs use pointers.
    store_tma = tma and cfg.tma_store and out.shape[1] * out.element_size() % 16 == 0
    d_mode = _tma_mode(out) if store_tma else 0
    ints = (
        out.shape[0], out.shape[1], a.shape[1],
        *((a.data.stride(0), 1) if a_mx else a.stride()),
        *((1, b.data.stride(0)) if b_mx else b.stride()),
        a.scales.stride(0) if a_mx else 0, b.scales.stride(0) if b_mx else 0,
        out.stride(0), out.stride(1), stride_cm, stride_cn, stride_sa, stride_sb,
        plan.num_programs, plan.dp_tiles,
    )
    meta = dict(
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        EVEN_K=plan.even_k, HAS_C=c is not None,
        HAS_SCALE_A=scale_a is not None, HAS_SCALE_B=scale_b is not None,
        INTERPRETER=a.device.type == "cpu",
        INPUT_PRECISION=plan.input_precision, USE_INT64=use_int64,
        STREAMK=plan.sk_tiles > 0, FIXUP_N=fixup_columns(cfg), FLAG_LANES=32 * cfg.num_warps,
        RECORD_SMID=smid_out is not None,
        A_MX=a_mx, B_MX=b_mx, MX_FP16=b_mx and not a_mx and a.dtype == torch.float16, A_DESC=a_mode, B_DESC=b_mode,
        FLATTEN=cfg.flatten, D_DESC=d_mode == 1, MX_SPLIT=b_mx and cfg.mx_split, MX_SWAP=b_mx and cfg.mx_swap,
        MX_PREFETCH=b_mx and cfg.mx_prefetch and not cfg.mx_split,
    )
    return ints, meta


def fixup_columns(cfg: TileConfig) -> int:
    """Columns of a split tile that a Stream-K finisher reduces at a time: at most 32 fp32 values per thread per
    partial, so that the partials it loads together (kernels.gemm._FIXUP_UNROLL) fit in registers."""
    return min(cfg.block_n, 64, 1024 * cfg.num_warps // cfg.block_m)


def _tma_mode(t: torch.Tensor) -> int:
    """How the kernel may read 2-D `t` through a tensor descriptor (TMA): 1, as stored (row-major); 2, as `t.T`
    (column-major); 0, not at all. TMA needs a 16-byte aligned base, one unit stride and the other a positive
    multiple of 16 bytes.
    """
    if t.data_ptr() % 16:
        return 0
    for mode, (unit, other) in ((1, (1, 0)), (2, (0, 1))):
        stride = t.stride(other)
        if t.stride(unit) == 1 and stride > 0 and stride * t.element_size() % 16 == 0:
            return mode
    return 0


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
    key = None
    if out is None and smid_out is None and alpha != 0:
        key = _signature("gemm_mxfp4", a, w, c, beta, out_dtype, None, None, schedule, num_sms, config)
        repeated = _repeat_call(key, a, w, c, None, None, alpha, beta)
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
    out = _output(out, c, operands, m, n, out_dtype, a.device)
    if m == 0 or n == 0:
        return out
    if k == 0 or alpha == 0:
        return _empty_product(out, c, beta)
    plan = make_mx_plan(m, n, k, dot_dtype, device_spec(a.device), schedule=schedule, num_sms=num_sms, config=config)
    if plan.config.block_k < 32:
        raise ValueError(f"MXFP4 operands need block_k >= 32 (one scale group), got {plan.config}")
    ops = _Operands(a, w, out, c, smid_out=smid_out)
    ints, meta = _static_args(plan, ops, 0, 0, needs_int64(*(t for _, t in operands), out, c))
    return _finish(key, plan, ops, ints, meta, alpha, beta)


# The expansion kernel's blocks and warps. Under an SM budget: a persistent grid of at most `num_sms` programs
# with 128 x 512 blocks and 8 warps (3.1 TB/s of bytes moved on the H200, device copy 4.0; 64 x 256 with 4 warps
# gave 2.2). On the whole chip: one program per 32 x 512 block with 4 warps, many resident per SM (a streaming
# kernel wants warps in flight): 4096 x 4096 15.8 -> 13.0 us, 14336 x 4096 47.6 -> 42.7 (docs/performance.md,
# stop 16; scripts/sweep_expand.py).
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
    from .kernels.mx_expand import mx_expand_kernel

    opts = {**(_EXPAND if num_sms is not None else _EXPAND_CHIP), **blocks}
    device, k = ts[0].device, ts[0].shape[1]
    outs = [_empty((t.shape[0], k), dtype, device) for t in ts]
    block_k = min(opts["block_k"], max(32, 1 << (k - 1).bit_length()))
    tiles = sum(-(-t.shape[0] // opts["block_r"]) for t in ts) * -(-k // block_k)
    budget = resolve_budget(num_sms, device_spec(device))
    if num_sms is None and opts.get("per_sm") is not None:
        budget = tiles if opts["per_sm"] == 0 else budget * opts["per_sm"]
    grid = max(1, min(tiles, budget))
    ops = [(t.data, t.scales, out, t.shape[0], t.data.stride(0), t.scales.stride(0), out.stride(0))
           for t, out in zip(ts, outs)]
    args = (*ops[0], *ops[-1], k, grid)
    meta = dict(BLOCK_R=opts["block_r"], BLOCK_K=block_k, EVEN_K=k % block_k == 0,
                INTERPRETER=device.type == "cpu", FP16=dtype == torch.float16, TWO=len(ts) == 2)
    if device.type != "cuda":
        mx_expand_kernel[(grid,)](*args, **meta)
        return outs
    key = ("expand", device.index, tuple(a for a in args if isinstance(a, int)), *meta.values(), opts["warps"],
           *(x.data_ptr() % 16 == 0 for x in args if isinstance(x, torch.Tensor)))
    with torch.cuda.device(device):
        _run_cached(mx_expand_kernel, grid, args, meta, device.index, key, num_warps=opts["warps"])
    return outs


# Stream-K launch ids. A private generator, so that user code seeding `random` cannot make ids repeat (which would
# still be safe: flags are reset by their reader within the launch; a fresh id only guards against stale memory).
_EPOCHS = random.Random()


def _workspace(plan: Plan, device: torch.device) -> torch.Tensor:
    """Stream-K scratch for one launch, from PyTorch's caching allocator on the current stream.

    Never zeroed: a flag counts as raised only when it equals this launch's epoch (a random 62-bit id), and
    readers reset the flags they consume, so neither leftovers of earlier launches nor other tensors' bytes
    are mistaken for a published partial. Allocating per launch makes two streams, CUDA graphs (the graph's
    private pool) and other devices independent, with no state kept here.
    """
    return torch.empty(plan.workspace_numel, dtype=torch.float32, device=device)


def _epoch() -> int:
    """A Stream-K launch id in [2**62, 2**63): nonzero and always passed to the kernel as int64."""
    return _EPOCHS.getrandbits(62) | (1 << 62)


# Launchers of compiled kernels, keyed on everything Triton specializes a compilation on (and more): device,
# plan, meta-parameters, the int arguments' values, the tensors' dtypes and 16-byte alignment. Filled on first
# use of a key; calling the launcher directly saves ~20 us of host time per call over Triton's launch path.
_LAUNCHERS: dict[tuple, _Launcher] = {}


class _Launcher:
    """One compiled kernel on one grid, launched with as little host work as Triton 3.6 allows.

    Triton's own per-call path (`CompiledKernel[grid](...)`: a Python runner, launch metadata, `CudaLauncher`'s
    scratch allocation, two calls of empty hook chains) costs ~6 us of host time on the H200's host above its
    generated C launch function, which this calls directly with the same arguments (docs/performance.md, host
    overhead). The global scratch in which device-built tensor descriptors live comes from PyTorch's caching
    allocator on the current device and stream. While Triton's launch hooks are set (a profiler), and where the
    compiled kernel is not laid out as expected, the launch goes through Triton's runner instead.
    """

    def __init__(self, compiled, grid: int):
        self.runner = compiled[(grid, 1, 1)]
        self.grid = grid
        try:
            run = compiled.run
            direct = run.profile_scratch_size == 0 and callable(run.launch)
            self.c_launch = run.launch if direct else None
            self.fixed = (compiled.function, run.launch_cooperative_grid, run.launch_pdl)
            self.scratch_bytes = grid * run.num_ctas * run.global_scratch_size
            self.metadata = compiled.packed_metadata
        except AttributeError:  # another Triton's internals: its runner only
            self.c_launch = None

    def __call__(self, args: tuple, stream: int) -> None:
        hooks = knobs.runtime
        if self.c_launch is None or _hooked(hooks.launch_enter_hook) or _hooked(hooks.launch_exit_hook):
            token = _allocation._allocator.set(_scratch)
            try:
                self.runner(*args, stream=stream)
            finally:
                _allocation._allocator.reset(token)
            return
        scratch = _scratch(self.scratch_bytes, 128, stream) if self.scratch_bytes else None
        self.c_launch(self.grid, 1, 1, stream, *self.fixed, scratch, None, self.metadata, None, None, None, *args)


def _hooked(hook) -> bool:
    """Whether a Triton launch hook does anything (Triton 3.6 keeps an always-present chain of hooks, empty unless a
    profiler adds one; a plain callable counts as active)."""
    return hook is not None and bool(getattr(hook, "calls", True))


def _run_cached(kernel, grid: int, args: tuple, meta: dict, device_index: int, key: tuple | None,
                launcher: _Launcher | None = None, **compile_opts) -> _Launcher:
    """Launch `kernel` on the current stream through the cached launcher of `key` (or the `launcher` given); the
    first launch of a key compiles (and runs) through Triton and caches the launcher. Returns the launcher.

    Triton asks the allocator in its context variable for the global scratch in which device-built tensor
    descriptors live; ours is set for the compiling launch only, so that other Triton users' allocator (or none) is
    left as it was (cached launches allocate their scratch themselves).

    The planner sizes pipelines from a model of shared memory; where Triton's build of a specialisation needs more
    than the device has (its layout conversions depend on the operands' alignment), the compile fails before
    anything runs and is retried with one pipeline stage fewer, down to one."""
    if launcher is None:
        launcher = _LAUNCHERS.get(key)
    if launcher is None:
        token = _allocation._allocator.set(_scratch)
        try:
            compiled = kernel[(grid,)](*args, **meta, **compile_opts)
        except OutOfResources:
            stages = compile_opts.get("num_stages", 1)
            if stages <= 1:
                raise
            fewer = {**compile_opts, "num_stages": stages - 1}
            return _run_cached(kernel, grid, args, meta, device_index, key, **fewer)
        finally:
            _allocation._allocator.reset(token)
        launcher = _LAUNCHERS[key] = _Launcher(compiled, grid)
    else:
        launcher((*args, *meta.values()), torch._C._cuda_getCurrentRawStream(device_index))
    return launcher


def _launch(plan: Plan, tensors: tuple, ints: tuple, floats: tuple, meta: dict, launcher=None):
    """Launch gemm_kernel on the tensors' device; returns the compiled kernel's launcher (None in the interpreter),
    which a caller may pass back for a launch with the same ints, meta, dtypes and alignment."""
    device = tensors[2].device
    # Triton launches on the current device: make it the tensors' device (cuda:1 ...) for the launch.
    if device.type == "cuda" and device.index != torch.cuda.current_device():
        with torch.cuda.device(device):
            return _launch_on(device, plan, tensors, ints, floats, meta, launcher)
    return _launch_on(device, plan, tensors, ints, floats, meta, launcher)


def _scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    """Triton's per-launch global scratch (where each program builds its TMA descriptors), from PyTorch's caching
    allocator on the current device and stream: ordered with the launch, and private to a graph being captured.
    """
    return torch.empty(size, dtype=torch.int8, device="cuda")  # 512-byte aligned, more than Triton's 128 asks


def _launch_on(device: torch.device, plan: Plan, tensors: tuple, ints: tuple, floats: tuple, meta: dict, launcher):
    from .kernels.gemm import gemm_kernel

    grid = plan.num_programs
    if device.type != "cuda":  # the interpreter: nothing compiled, nothing to cache
        gemm_kernel[(grid,)](*tensors, *ints, _epoch(), *floats, **meta)
        return None
    key = None if launcher is not None else (
        device.index, plan, *meta.values(), ints,
        tuple(t.dtype for t in tensors), tuple(t.data_ptr() % 16 == 0 for t in tensors))
    return _run_cached(gemm_kernel, grid, (*tensors, *ints, _epoch(), *floats), meta, device.index, key,
                       launcher, num_warps=plan.config.num_warps, num_stages=plan.config.num_stages)
