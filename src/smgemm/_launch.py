"""Launch the GEMM kernel for a plan: its arguments, the Stream-K workspace, and compiled launchers cached per
specialisation (host time: a cached launch calls Triton's C launch function directly)."""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable
from typing import NamedTuple

import torch
from triton import knobs
from triton.runtime import _allocation
from triton.runtime.errors import OutOfResources
from triton.tools.tensor_descriptor import TensorDescriptor

from ._device import device_spec
from .kernels.gemm import gemm_kernel
from .kernels.stage import stage_kernel
from .mxfp4 import MXFP4Tensor
from .plan import _OVERRIDES, Plan, TileConfig, clamps_edge_tiles, host_descriptors_pay


class Operands(NamedTuple):
    """The tensors of one launch. `a` is [M, K] and `b` [K, N], except that an MXFP4 `b` is the [N, K] weight
    (packed along K); `c` is the input expanded to [M, N], None when it is not read."""

    a: torch.Tensor | MXFP4Tensor
    b: torch.Tensor | MXFP4Tensor
    out: torch.Tensor
    c: torch.Tensor | None = None
    scale_a: torch.Tensor | None = None
    scale_b: torch.Tensor | None = None
    smid_out: torch.Tensor | None = None


def tensor_args(plan: Plan, ops: Operands) -> tuple:
    """gemm_kernel's pointer arguments, in signature order (None for an absent operand: Triton compiles the kernel
    without it)."""
    a, b, out = ops.a, ops.b, ops.out
    a_mx, b_mx = isinstance(a, MXFP4Tensor), isinstance(b, MXFP4Tensor)
    return (
        a.data if a_mx else a,
        b.data if b_mx else b,
        out,
        ops.c,
        ops.scale_a,
        ops.scale_b,
        a.scales if a_mx else None,
        b.scales if b_mx else None,
        workspace(plan, out.device) if plan.sk_tiles else None,
        ops.smid_out,
        None,  # D's store descriptor, where built on the host (`with_descriptors`)
    )


def static_args(plan: Plan, ops: Operands, stride_sa: int, stride_sb: int, use_int64: bool) -> tuple[tuple, dict]:
    """gemm_kernel's int arguments (its tuples, in signature order) and meta-parameters: functions of the shapes,
    strides, dtypes and alignment of the operands and of the plan only, never of the data (so repeat calls reuse
    them).
    A batched product has 3-D dense operands [batch, rows, cols] (`c` expanded to [batch, M, N]); it reads an
    operand, and writes the output, through a 3-D tensor descriptor where TMA's rules allow (`tma_mode` of one
    matrix, and a batch stride that is a positive multiple of 16 bytes; a broadcast operand, stride 0, reads through
    pointers)."""
    a, b, out, c, scale_a, scale_b, smid_out = ops
    cfg = plan.config
    batched = out.dim() == 3
    batch = (1, 0, 0, 0, 0)
    if batched:  # the batch count and strides; the rest as for one [rows, cols] matrix of each
        batch = (out.shape[0], a.stride(0), b.stride(0), c.stride(0) if c is not None else 0, out.stride(0))
        a, b, out, c = a[0], b[0], out[0], (c[0] if c is not None else None)
    a_mx, b_mx = isinstance(a, MXFP4Tensor), isinstance(b, MXFP4Tensor)
    stride_cm, stride_cn = c.stride() if c is not None else (0, 0)
    tma = cfg.tma and not (batched and (a_mx or b_mx)) and (
        a.device.type == "cpu" or device_spec(a.device).capability >= (9, 0))
    a_mode = 0 if a_mx or not tma or not _batch_stride_ok(batch[1], a, batched) else tma_mode(a)
    b_mode = 0 if b_mx or not tma or not _batch_stride_ok(batch[2], b, batched) else tma_mode(b)
    # TMA stores clip at the tensor's edge only to 16-byte granularity (triton-lang/triton#11583): a row whose
    # length is not a multiple of 16 bytes would spill into the memory beside a view. Such outputs use pointers.
    # A 4-byte C matrix is added and stored a column quarter at a time (`kernels.common.epilogue`); each store's box
    # must span at least 16 bytes.
    parts = 4 if c is not None and stride_cm != 0 and c.element_size() > 2 else 2
    store_tma = (tma and cfg.tma_store and out.shape[1] * out.element_size() % 16 == 0
                 and cfg.block_n // parts * out.element_size() >= 16 and _batch_stride_ok(batch[4], out, batched))
    d_mode = tma_mode(out) if store_tma else 0
    # A whole-tile store (plan.whole_store_fits, which counts a 2-byte output and no C) is taken without a C matrix
    # only: a C tile's layout conversion takes another 32 KB (128 x 256 x 64 at 3 stages: 246 KB whole, 213 KB in
    # halves, benchmarks/compile_report.py on triton 3.6), and a 4-byte C is added and stored in quarters anyway.
    whole = cfg.whole_store and out.element_size() <= 2 and (c is None or stride_cm == 0)
    a_vec = 1 if a_mx or a_mode else _batch_vector(vector_elements(a, 1), batch[1])
    b_vec = 1 if b_mx or b_mode else _batch_vector(vector_elements(b, 0), batch[2])
    ints = (  # gemm_kernel's groups: shape, the strides of A, B, D, C, the scales, the MXFP4 scales, batch, schedule
        (out.shape[0], out.shape[1], a.shape[1]),
        (a.data.stride(0), 1) if a_mx else tuple(a.stride()),
        (1, b.data.stride(0)) if b_mx else tuple(b.stride()),
        tuple(out.stride()), (stride_cm, stride_cn), (stride_sa, stride_sb),
        (a.scales.stride(0) if a_mx else 0, b.scales.stride(0) if b_mx else 0),
        batch, (plan.num_programs, plan.dp_tiles),
    )
    meta = dict(
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        EVEN_K=plan.even_k, HAS_C=c is not None, C_ROW=c is not None and stride_cm == 0,
        HAS_SCALE_A=scale_a is not None, HAS_SCALE_B=scale_b is not None,
        INTERPRETER=a.device.type == "cpu",
        INPUT_PRECISION=plan.input_precision, USE_INT64=use_int64,
        STREAMK=plan.sk_tiles > 0, FIXUP_N=fixup_columns(cfg), FLAG_LANES=32 * cfg.num_warps,
        RECORD_SMID=smid_out is not None,
        A_MX=a.layout if a_mx else "", B_MX=b.layout if b_mx else "",
        MX_FP16=b_mx and not a_mx and a.dtype == torch.float16,
        A_DESC=_READS[a_mode], B_DESC=_READS[b_mode],
        FLATTEN=cfg.flatten, D_DESC=0 if d_mode != 1 else 1 if whole else 2,
        MX_SWAP=b_mx and cfg.mx_swap, MX_PREFETCH=b_mx and cfg.mx_prefetch,
        BATCHED=batched, A_VEC=a_vec, B_VEC=b_vec,
        # a dense 2-D A of at most a quarter of a tile's rows, read through pointers, loads only those (`k_loop_dense`;
        # measured on 2-D products only)
        MASK_M=not (a_mx or b_mx or batched) and a_mode == 0 and 4 * out.shape[0] <= cfg.block_m,
        ONE_ROW=b_mx and not a_mx and a_mode == 0 and out.shape[0] == 1,  # an MXFP4 weight's one-row A (`k_loop_mx`)
    )
    meta["CLAMP_M"], meta["CLAMP_N"] = edge_tiles_clamped(plan, ints[0], 1 if a_mx else a.element_size(),
                                                          dense=not (a_mx or b_mx),
                                                          c_matrix=c is not None and stride_cm != 0)
    return ints, meta


def edge_tiles_clamped(plan: Plan, shape: tuple[int, int, int], elem: int, dense: bool,
                       c_matrix: bool) -> tuple[bool, bool]:
    """Whether the last row (column) of tiles of an (M, N, K) `shape` starts a tile before the edge, at M - BLOCK_M (N -
    BLOCK_N) rounded up to 16 elements, rather than past the previous tile's end (`kernels.gemm._origin`): where the
    planner asks for it (`plan.clamps_edge_tiles`) and it is safe. The rows (columns) two tiles share are computed
    twice, alike, and written twice; so not with split tiles (a split tile's sum may differ in its last bit from a whole
    one's, and the shared rows would depend on which store lands last), nor with a C matrix (`out` may be C itself,
    which the second tile would read after the first wrote it), nor with MXFP4 operands (their tiles keep their measured
    layout)."""
    if not dense or c_matrix or plan.sk_tiles:
        return False, False
    return clamps_edge_tiles(plan.config, *shape, elem)


_READS = ("pointers", "stored", "transposed")  # the kernel's A_DESC / B_DESC for each tma_mode


def _batch_stride_ok(stride: int, t: torch.Tensor, batched: bool) -> bool:
    """Whether a batched operand's batch stride fits a 3-D tensor descriptor: positive and 16-byte aligned."""
    return not batched or (stride > 0 and stride * t.element_size() % 16 == 0)


def fixup_columns(cfg: TileConfig) -> int:
    """Columns of a split tile that a Stream-K finisher reduces at a time: at most 32 fp32 values per thread per
    partial, so that the partials it loads together (kernels.gemm._FIXUP_UNROLL) fit in registers."""
    return min(cfg.block_n, 64, 1024 * cfg.num_warps // cfg.block_m)


def tma_mode(t: torch.Tensor) -> int:
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



def row_alignment(t: torch.Tensor) -> int:
    """The elements (1, 2, 4, 8 or 16) to which every row (column, for a column-major `t`) of dense 2-D operand `t`
    starts aligned, from its base address and its outer stride; 0 when neither stride is 1.

    TMA needs 16 bytes. Pointer loads are vectorized only where Triton knows the alignment, which it takes from
    integer arguments divisible by 16: an outer stride of 16 elements."""
    if t.stride(1) == 1:
        outer = t.stride(0)
    elif t.stride(0) == 1:
        outer = t.stride(1)
    else:
        return 0
    elem = t.element_size()
    base = (t.data_ptr() & -t.data_ptr()) // elem if t.data_ptr() else 16
    return min(16, base, outer & -outer if outer else 16)


def vector_elements(t: torch.Tensor, k_dim: int) -> int:
    """The elements (1, 2, 4, 8 or 16) at which every K-contiguous run of dense 2-D operand `t` starts, for the
    kernel's pointer loads (`kernels.common._dense_pointers`): the alignment of its outer stride where its K axis
    (`k_dim`: 1 for A [M, K], 0 for B [K, N]) has unit stride and its base is 16-byte aligned, 1 otherwise. Only a
    16-byte aligned base counts: that is what Triton knows of a pointer argument, and what a repeat call's key
    (`_gemm._tensor_signature`) records besides the strides."""
    if t.stride(k_dim) != 1 or t.data_ptr() % 16:
        return 1
    outer = t.stride(1 - k_dim)
    return min(16, outer & -outer) if outer > 0 else 1


def operand_alignment(t: torch.Tensor, k_dim: int) -> tuple[int, int, int] | None:
    """(elements, `row_alignment`, `vector_elements`) of dense operand `t` whose K axis is `k_dim` in each matrix (1
    for A [M, K], 0 for B [K, N]): what the planner weighs before it reads `t` in place (`plan.decide`'s `operands`).
    A batched (3-D) operand counts its batch stride into both alignments and its distinct elements (a broadcast
    batch, stride 0, holds one matrix); None where `stage` could not copy it (`_rows`)."""
    if t.dim() == 2:
        return t.numel(), row_alignment(t), vector_elements(t, k_dim)
    if _rows(t) is None:
        return None
    first, step = t[0], t.stride(0)
    rows, runs = row_alignment(first), vector_elements(first, k_dim)
    if step == 0:
        return first.numel(), rows, runs
    return t.numel(), min(rows, step & -step), _batch_vector(runs, step)


def operands_alignment(a: torch.Tensor, b: torch.Tensor) -> tuple[tuple[int, int, int], tuple[int, int, int]] | None:
    """A [.., M, K] and B [.., K, N] as `plan.decide` takes them (`operands`): each one's `operand_alignment`, or None
    where either could not be copied (the planner then leaves both where they lie)."""
    ops = (operand_alignment(a, 1), operand_alignment(b, 0))
    return None if None in ops else ops


def _rows(t: torch.Tensor) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]] | None:
    """A 2-D view of dense operand `t` (2-D, or 3-D batched) whose rows are its unit-stride runs (a 2-D `t` without
    one: `t` itself), with the function that gives a copy of `t` from a copy of that view (`stage`); None for a 3-D
    `t` with no such view: no unit stride in its matrices, or batch and outer matrix dims that do not nest (a copy
    would need one launch per matrix)."""
    if t.dim() == 2:
        column_major = t.stride(0) == 1 and t.stride(1) != 1
        return (t.t(), torch.Tensor.t) if column_major else (t, lambda d: d)
    if t.stride(0) == 0:  # one matrix, broadcast over the batch
        inner = _rows(t[0])
        if inner is None:
            return None
        view, rebuild = inner
        return view, lambda d: rebuild(d).expand(t.shape)
    unit = 2 if t.stride(2) == 1 else 1 if t.stride(1) == 1 else None
    if unit is None:
        return None
    outer = sorted((0, 3 - unit), key=t.stride, reverse=True)
    order = (*outer, unit)
    try:
        view = t.permute(order).view(-1, t.shape[unit])
    except RuntimeError:  # the outer dims do not nest
        return None
    back = [order.index(d) for d in range(3)]
    sizes = [t.shape[d] for d in outer]
    return view, lambda d: d.view(*sizes, d.shape[1]).permute(back)


def _batch_vector(vec: int, batch_stride: int) -> int:
    """`vector_elements` of a batched operand's matrices: each matrix's base is a multiple of the batch stride
    past the first's (0: one matrix broadcast, every base the same)."""
    return min(vec, batch_stride & -batch_stride) if batch_stride > 0 else vec


# The staging copy's blocks and warps: under an SM budget a persistent grid of at most that many programs; on the
# whole device one program per block, many resident per SM (a streaming kernel wants loads in flight).
_STAGE = {"block_r": 32, "block_c": 256, "warps": 8}
_STAGE_CHIP = {"block_r": 32, "block_c": 256, "warps": 4}


def stage(tensors: list[torch.Tensor], budget: int) -> list[torch.Tensor]:
    """Copies of one or two dense operands `tensors` (2-D, or 3-D batched; on one device) whose rows are aligned to
    16 elements (`row_alignment`), made in one launch on at most `budget` SMs. Each is copied as the 2-D view of its
    unit-stride runs (`_rows`: a column-major matrix stays column-major, the orientation the GEMM reads fastest; a
    batch folds into its rows; a broadcast batch is one matrix, broadcast again). Each copy is a view of exactly its
    tensor's shape into a buffer with padded rows, from PyTorch's caching allocator on the current stream."""
    views, copies = [], []
    for t in tensors:
        src, rebuild = _rows(t)
        rows, cols = src.shape
        dst = torch.empty(rows, -(-cols // 16) * 16, dtype=t.dtype, device=t.device)[:, :cols]
        views.append((src, dst))
        copies.append(rebuild(dst))
    device = tensors[0].device
    whole = budget >= device_spec(device).num_sms
    opts = _STAGE_CHIP if whole else _STAGE
    tiles = sum(-(-src.shape[0] // opts["block_r"]) * -(-src.shape[1] // opts["block_c"]) for src, _ in views)
    grid = tiles if whole else max(1, min(tiles, budget))
    args = []
    for src, dst in views:
        args += [src, dst, src.shape[0], src.shape[1], src.stride(0), src.stride(1), dst.stride(0)]
    if len(views) == 1:  # the kernel's second operand: the first again, with no rows
        args += [*args[:2], 0, *args[3:7]]
    args.append(grid)
    meta = dict(BLOCK_R=opts["block_r"], BLOCK_C=opts["block_c"])
    if device.type != "cuda":
        stage_kernel[(grid,)](*args, **meta)
    else:
        ints = tuple(x for x in args if isinstance(x, int))
        key = ("stage", device.index, tensors[0].dtype, ints, opts["warps"],
               tuple(src.data_ptr() % 16 == 0 for src, _ in views))
        with torch.cuda.device(device):
            run_cached(stage_kernel, grid, tuple(args), meta, device.index, key, num_warps=opts["warps"])
    return copies


def staged(plan: Plan, ops: Operands) -> Operands:
    """`ops` with the operands the plan stages (`Plan.stage_a`, `stage_b`) replaced by aligned copies."""
    if not (plan.stage_a or plan.stage_b):
        return ops
    chosen = [t for t, yes in ((ops.a, plan.stage_a), (ops.b, plan.stage_b)) if yes]
    copies = iter(stage(chosen, plan.sm_budget))
    return ops._replace(a=next(copies) if plan.stage_a else ops.a, b=next(copies) if plan.stage_b else ops.b)


# Stream-K launch ids. A private generator, so that user code seeding `random` cannot make ids repeat (which would
# still be safe: flags are reset by their reader within the launch; a fresh id only guards against stale memory).
_EPOCHS = random.Random()


def workspace(plan: Plan, device: torch.device) -> torch.Tensor:
    """Stream-K scratch for one launch, from PyTorch's caching allocator on the current stream.

    Never zeroed: a flag counts as raised only when it equals this launch's epoch (a random 62-bit id), and
    readers reset the flags they consume, so neither leftovers of earlier launches nor other tensors' bytes
    are mistaken for a published partial. Allocating per launch makes two streams, CUDA graphs (the graph's
    private pool) and other devices independent, with no state kept here.
    """
    return torch.empty(plan.workspace_numel, dtype=torch.float32, device=device)


def epoch() -> int:
    """A Stream-K launch id in [2**62, 2**63): nonzero and always passed to the kernel as int64."""
    return _EPOCHS.getrandbits(62) | (1 << 62)


# Launchers of compiled kernels, keyed on everything Triton specializes a compilation on (and more): device,
# plan, meta-parameters, the int arguments' values, the tensors' dtypes and 16-byte alignment. Filled on first
# use of a key; calling the launcher directly saves ~20 us of host time per call over Triton's launch path.
LAUNCHERS: dict[tuple, Launcher] = {}
LAUNCHERS_MAX = 1024


class Launcher:
    """One compiled kernel on one grid, launched with as little host work as Triton allows.

    Triton's own per-call path (`CompiledKernel[grid](...)`: a Python runner, launch metadata, `CudaLauncher`'s
    scratch allocation, two calls of empty hook chains) costs ~6 us of host time on the H200's host above its C
    launch function, which this calls directly with the same arguments (docs/performance.md, host overhead): in
    Triton 3.6 a function generated for the kernel, taking its arguments one by one; from Triton 3.7 one shared
    function, taking them as one sequence with the kernel's argument annotations and signature. Tensors reach it as
    their device addresses: given a tensor, it would call its `data_ptr` through Python and ask the driver about the
    address (`cuPointerGetAttribute`), once per pointer argument; the checks before every launch already placed each
    tensor on the launch's device; tensor descriptors built on the host reach it encoded, each once per
    `HostDescriptor` (`descriptor_launch`). The global scratch in which device-built tensor descriptors live comes
    from PyTorch's caching allocator on the current device and stream. While Triton's launch hooks are set (a profiler),
    and where the compiled kernel is laid out as neither Triton lays it out or its launch function refuses the
    arguments (a TypeError, raised before anything is launched: another Triton), launches go through Triton's runner
    (tests/test_launcher.py checks both conventions on the CPU).
    """

    def __init__(self, compiled, grid: int):
        self.runner = compiled[(grid, 1, 1)]
        self.grid = grid
        self.c_launch = None
        try:
            run = compiled.run
            if run.profile_scratch_size == 0 and callable(run.launch):
                self.c_launch = run.launch
                self.shared = hasattr(run, "arg_annotations") and hasattr(run, "kernel_signature")  # Triton >= 3.7
                if self.shared:
                    self.annotations, self.signature = run.arg_annotations, run.kernel_signature
            self.fixed = (compiled.function, run.launch_cooperative_grid, run.launch_pdl)
            self.scratch_bytes = grid * run.num_ctas * run.global_scratch_size
            self.metadata = compiled.packed_metadata
        except AttributeError:  # another Triton's internals: its runner only
            self.c_launch = None
        # Where the kernel takes tensor descriptors, Triton's launch function is a Python wrapper that encodes each
        # one on every launch (`make_tensordesc_arg`) before its C launch function: launch through that function
        # with encodings made once per HostDescriptor instead (`_encoded`). Elsewhere the wrapper encodes them.
        self.descriptors = None
        if self.c_launch is not None:
            found = descriptor_launch(self.c_launch)
            if found is not None:
                self.c_launch, self.descriptors, self.encode = found
                self.layout = tuple(position for position, _ in self.descriptors)

    def __call__(self, args: tuple, stream: int) -> None:
        """Launch with `args` in the kernel's order, tensors given as their device addresses (`addresses`); the
        caller keeps the tensors alive until this returns (the launch is then queued on `stream`)."""
        hooks = knobs.runtime
        # Whether a launch hook does anything: Triton 3.6 keeps an always-present chain of hooks, empty unless a
        # profiler adds one; a plain callable counts as active (inline: this runs once a launch)
        enter, leave = hooks.launch_enter_hook, hooks.launch_exit_hook
        if self.c_launch is None or (enter is not None and getattr(enter, "calls", True)) or (
                leave is not None and getattr(leave, "calls", True)):
            token = _allocation._allocator.set(_scratch)
            try:
                self.runner(*args, stream=stream)
            finally:
                _allocation._allocator.reset(token)
            return
        given = args
        if self.descriptors is not None:
            args = self._encoded(args)
        scratch = _scratch(self.scratch_bytes, 128, stream) if self.scratch_bytes else None  # alive until queued
        address = scratch.data_ptr() if scratch is not None else None
        try:
            if self.shared:
                self.c_launch(self.grid, 1, 1, stream, *self.fixed, self.metadata, None, None, None, address, None,
                              self.annotations, self.signature, args)
            else:
                self.c_launch(self.grid, 1, 1, stream, *self.fixed, address, None, self.metadata, None, None, None,
                              *args)
        except TypeError:  # a Triton whose launch function parses other arguments (nothing was launched): its runner
            self.c_launch = self.descriptors = None
            self(given, stream)

    def _encoded(self, args: tuple) -> tuple | list:
        """`args` with each tensor descriptor (a HostDescriptor, or Triton's own) replaced by the arguments its
        encoding passes to the kernel, as Triton's wrapper would make them; a HostDescriptor keeps its encoding.
        First, in one step, the usual cases: encoded HostDescriptors of A and B, or of A, B and D (`tensor_args`
        positions 0, 1 and 10)."""
        layout = self.layout
        if layout == (0, 1):
            first, second = getattr(args[0], "encoded", None), getattr(args[1], "encoded", None)
            if first is not None and second is not None:
                return (*first, *second, *args[2:])
        elif layout == (0, 1, 10):
            first, second, store = (getattr(args[i], "encoded", None) for i in layout)
            if first is not None and second is not None and store is not None:
                return (*first, *second, *args[2:10], *store, *args[11:])
        flat, start = [], 0
        for position, meta in self.descriptors:
            flat += args[start:position]
            descriptor = args[position]
            encoded = getattr(descriptor, "encoded", None)
            if encoded is None:
                encoded = self.encode(descriptor, meta)
                if isinstance(descriptor, HostDescriptor):
                    descriptor.encoded = encoded
            flat += encoded
            start = position + 1
        flat += args[start:]
        return flat


def descriptor_launch(launch) -> tuple[Callable, tuple, Callable] | None:
    """Triton's launch function behind `launch` where `launch` is the wrapper that encodes the kernel's tensor
    descriptors (`wrap_handle_tensordesc` of triton.backends.nvidia.driver: Triton 3.6-3.8): (that function, the
    (argument position, descriptor metadata) of each descriptor in order, `encode(descriptor, metadata)` giving
    what the wrapper passes for it). None for any other `launch`: a kernel without descriptors, or a wrapper this
    does not know (launches then go through it)."""
    try:
        closure = inspect.getclosurevars(launch)
    except TypeError:  # a builtin: no wrapper
        return None
    names = {**closure.globals, **closure.nonlocals}
    inner, metas = names.get("launcher"), names.get("tensordesc_meta")
    make = names.get("make_tensordesc_arg")
    if "tensordesc_indices" in names:  # Triton 3.6, 3.7
        positions = sorted(names["tensordesc_indices"])
    elif isinstance(names.get("relevant_paths"), dict):  # Triton 3.8: paths into the (nested) arguments
        paths = names["relevant_paths"]
        if any(paths.values()):  # a descriptor inside a tuple argument
            return None
        positions = sorted(paths)
    else:
        return None
    if not callable(inner) or not callable(make) or not metas or len(metas) != len(positions):
        return None  # descriptors without metadata are decomposed, not encoded: left to the wrapper
    takes = len(inspect.signature(make).parameters)
    if takes == 2:
        encode = make
    elif takes == 3:  # Triton 3.8 passes the launch's leading arguments too, unused for tiled descriptors
        def encode(descriptor, meta):
            return make(descriptor, meta, None)
    else:
        return None
    return inner, tuple(zip(positions, metas)), encode


def run_cached(kernel, grid: int, args: tuple, meta: dict, device_index: int, key: tuple | None,
               **compile_opts) -> Launcher:
    """Launch `kernel` on the current stream through the cached launcher of `key`; the first launch of a key
    compiles (and runs) through Triton and caches the launcher. Returns the launcher.

    Triton asks the allocator in its context variable for the global scratch in which device-built tensor
    descriptors live; ours is set for the compiling launch only, so that other Triton users' allocator (or none) is
    left as it was (cached launches allocate their scratch themselves).

    The planner sizes pipelines from a model of shared memory; where Triton's build of a specialisation needs more
    than the device has (its layout conversions depend on the operands' alignment), the compile fails before
    anything runs and is retried with one pipeline stage fewer, down to one."""
    launcher = LAUNCHERS.get(key)
    if launcher is None:
        token = _allocation._allocator.set(_scratch)
        try:
            compiled = kernel[(grid,)](*args, **meta, **compile_opts)
        except OutOfResources:
            stages = compile_opts.get("num_stages", 1)
            if stages <= 1:
                raise
            fewer = {**compile_opts, "num_stages": stages - 1}
            return run_cached(kernel, grid, args, meta, device_index, key, **fewer)
        finally:
            _allocation._allocator.reset(token)
        if len(LAUNCHERS) >= LAUNCHERS_MAX:  # bounded: a dropped key is found again in Triton's own cache
            LAUNCHERS.clear()
        launcher = LAUNCHERS[key] = Launcher(compiled, grid)
    else:
        flat = tuple(x.data_ptr() if isinstance(x, torch.Tensor) else x for x in (*args, *meta.values()))
        launcher(flat, torch._C._cuda_getCurrentRawStream(device_index))
    return launcher


def addresses(tensors: tuple, descriptors: bool = False) -> tuple:
    """`tensor_args`' tensors as device addresses (None stays None; with `descriptors`, so do host-built descriptors,
    `with_descriptors`)."""
    if descriptors:
        return tuple(t.data_ptr() if isinstance(t, torch.Tensor) else t for t in tensors)
    return tuple(None if t is None else t.data_ptr() for t in tensors)


def reads_host_descriptors(plan: Plan, meta: dict) -> bool:
    """Whether a launch gives the kernel A's and B's tensor descriptors built on the host (`with_descriptors`) rather
    than letting each program build them in global scratch as it starts (`kernels.gemm._descriptor`): for dense
    products whose kernel reads A or B through TMA, where the planner finds it pays (`plan.host_descriptors_pay`) or
    `plan.overrides(host_descriptors=True)` asks for it, unless `host_descriptors=False` does not; D's store
    descriptor then too, where `descriptor_boxes` gives it. MXFP4 products' stay on the device."""
    forced = _OVERRIDES.host_descriptors
    if forced is False or meta["A_MX"] or meta["B_MX"] or meta["A_DESC"] == meta["B_DESC"] == "pointers":
        return False
    return forced is True or host_descriptors_pay(plan, meta["BATCHED"])


def descriptor_boxes(ints: tuple, meta: dict) -> tuple[tuple | None, tuple | None, tuple | None]:
    """(shape, strides, block) of the tensor descriptors the kernel reads A and B and stores D through, as
    `kernels.gemm` builds them on the device (None for an operand read through pointers, and for D where the kernel
    builds its own: D stored through pointers, beside a C matrix, whose stores may take quarter-wide boxes, or by a
    Stream-K plan, which measured slower with it host-built on the H200, 768 x 6144 x 4096 63.1 -> 64.4-65.1 us):
    A [M, K] or, column-major, A^T [K, M]; B [K, N] or B^T [N, K]; D [M, N] in boxes of a tile (D_DESC 1) or half a
    tile (2); with a batch, 3-D over it with blocks of one matrix."""
    (m, n, k), (stride_am, stride_ak), (stride_bk, stride_bn), (stride_dm, _) = ints[:4]
    bm, bn, bk = meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"]
    views_a = {"stored": ([m, k], [stride_am, 1], [bm, bk]), "transposed": ([k, m], [stride_ak, 1], [bk, bm])}
    views_b = {"stored": ([k, n], [stride_bk, 1], [bk, bn]), "transposed": ([n, k], [stride_bn, 1], [bn, bk])}
    store = meta["D_DESC"] and not meta["STREAMK"] and not (meta["HAS_C"] and not meta["C_ROW"])
    boxes = [views_a.get(meta["A_DESC"]), views_b.get(meta["B_DESC"]),
             ([m, n], [stride_dm, 1], [bm, bn // meta["D_DESC"]]) if store else None]
    if meta["BATCHED"]:
        matrices, batch = ints[7][0], ints[7]
        boxes = [None if box is None else ([matrices, *box[0]], [stride, *box[1]], [1, *box[2]])
                 for box, stride in zip(boxes, (batch[1], batch[2], batch[4]))]
    return boxes[0], boxes[1], boxes[2]


class HostDescriptor:
    """A tensor descriptor built on the host for a cached launch: what Triton's launcher reads of its own
    `TensorDescriptor` (`base.data_ptr()`, shape, strides, padding, TF32 rounding), over a device address, and the
    descriptor's encoding once `Launcher` made it. A repeat call's operand at an address it saw before reuses its
    `HostDescriptor` (`Repeat`), so the encoding (~0.5 us of host time) is made once per address, not per launch.
    The launch copies the encoded descriptor into the kernel's parameters, so one may serve launches still queued or
    captured in a CUDA graph."""

    __slots__ = ("address", "block_shape", "encoded", "shape", "strides")
    padding = "zero"
    round_f32_to_tf32 = False

    def __init__(self, address: int, shape: list, strides: list, block_shape: list):
        self.address, self.shape, self.strides, self.block_shape = address, shape, strides, block_shape
        self.encoded = None

    @property
    def base(self) -> HostDescriptor:
        return self

    def data_ptr(self) -> int:
        return self.address


def with_descriptors(tensors: tuple, ints: tuple, meta: dict, make=TensorDescriptor) -> tuple:
    """`tensor_args`' tensors with A and B, where the kernel reads them through TMA, and D's store descriptor, where
    it stores through one (`descriptor_boxes`), as descriptors built on the host: Triton's `TensorDescriptor`s
    (`make`; a first launch, which compiles, and the interpreter), or `HostDescriptor`s (launches of a cached
    launcher; make=`host_descriptor`)."""
    box_a, box_b, box_d = descriptor_boxes(ints, meta)
    a, b = tensors[0], tensors[1]
    if box_a is not None:
        a = make(a, *box_a)
    if box_b is not None:
        b = make(b, *box_b)
    store = make(tensors[2], *box_d) if box_d is not None else None
    return (a, b, *tensors[2:10], store)


def host_descriptor(t: torch.Tensor, shape: list, strides: list, block_shape: list) -> HostDescriptor:
    """A `HostDescriptor` over tensor `t` (`with_descriptors`' `make` for cached launchers)."""
    return HostDescriptor(t.data_ptr(), shape, strides, block_shape)


class Repeat:
    """The launch of a remembered call, for its repeats: plan, ints, meta-parameters and launcher are fixed, so a
    repeat passes only what is new (the tensors' device addresses, a Stream-K workspace and epoch, alpha and beta),
    in the order `launch` gives the launcher (`tensor_args`, then the ints, the epoch, the floats, the meta-parameters).
    For calls whose operands are launched as given (no staged copies) on a CUDA device. Returns False, launching
    nothing, when the current device is not the remembered one (the caller then takes `launch`'s way)."""

    __slots__ = ("a_mx", "b_mx", "boxes", "descriptors", "index", "ints", "last", "launcher", "tail",
                 "workspace_numel")

    def __init__(self, plan: Plan, ints: tuple, meta: dict, launcher: Launcher, index: int, a_mx: bool, b_mx: bool):
        self.index, self.a_mx, self.b_mx, self.launcher = index, a_mx, b_mx, launcher
        self.workspace_numel = plan.workspace_numel if plan.sk_tiles else 0
        # Without Stream-K the kernel never reads the epoch: one constant int64 (`epoch`'s range) spares drawing one
        self.ints = ints if self.workspace_numel else (*ints, 1 << 62)
        self.tail = tuple(meta.values())
        # Host-built descriptors (`reads_host_descriptors`) of A, B and D: their boxes, fixed by the signature, and
        # the HostDescriptors made so far, by address (a few: the caching allocator hands a call's operands the same
        # few addresses again and again)
        self.boxes = descriptor_boxes(ints, meta) if reads_host_descriptors(plan, meta) else None
        self.descriptors = ({}, {}, {})
        # (A's, B's and D's addresses, their kernel arguments) of the last launch
        self.last = (None, None, None, (None, None, None))

    def _operand(self, which: int, address: int) -> int | HostDescriptor | None:
        """A's (`which` 0) or B's (1) kernel argument, its address or its host-built descriptor at that address; or
        (2) D's store descriptor at that address, None where the kernel builds it or stores through pointers."""
        box = self.boxes[which]
        if box is None:
            return address if which < 2 else None
        return host_descriptor_at(self.descriptors[which], address, box)

    def __call__(self, a, b, out: torch.Tensor, c, scale_a, scale_b, floats: tuple) -> bool:
        index = self.index
        if torch._C._cuda_getDevice() != index:
            return False
        ints, ws = self.ints, None
        if self.workspace_numel:  # alive until the launch is queued
            ws = torch.empty(self.workspace_numel, dtype=torch.float32, device=out.device)
            ints = (*ints, epoch())
        a_mx, b_mx = self.a_mx, self.b_mx
        arg_a, arg_b, arg_d = (a.data if a_mx else a).data_ptr(), (b.data if b_mx else b).data_ptr(), out.data_ptr()
        store = None
        if self.boxes is not None:
            last_a, last_b, last_d, made = self.last
            if arg_a != last_a or arg_b != last_b or arg_d != last_d:
                made = (self._operand(0, arg_a), self._operand(1, arg_b), self._operand(2, arg_d))
                self.last = (arg_a, arg_b, arg_d, made)
            arg_a, arg_b, store = made
        self.launcher((
            arg_a, arg_b, arg_d,
            None if c is None else c.data_ptr(), None if scale_a is None else scale_a.data_ptr(),
            None if scale_b is None else scale_b.data_ptr(), a.scales.data_ptr() if a_mx else None,
            b.scales.data_ptr() if b_mx else None, None if ws is None else ws.data_ptr(), None, store,
            *ints, floats, *self.tail), torch._C._cuda_getCurrentRawStream(index))
        return True


_DESCRIPTORS_PER_OPERAND = 8


def host_descriptor_at(seen: dict, address: int, box: tuple) -> HostDescriptor:
    """The `HostDescriptor` of an operand at `address` with `box` (shape, strides, block), from `seen` (the ones made
    so far for that operand, by address: a few, as the caching allocator hands a call's operands the same few
    addresses again and again) or made and kept there."""
    descriptor = seen.get(address)
    if descriptor is None:
        if len(seen) >= _DESCRIPTORS_PER_OPERAND:
            seen.clear()
        descriptor = seen[address] = HostDescriptor(address, *box)
    return descriptor


def launch(plan: Plan, tensors: tuple, ints: tuple, floats: tuple, meta: dict, launcher=None):
    """Launch gemm_kernel on the tensors' device; returns the compiled kernel's launcher (None in the interpreter),
    which a caller may pass back for a launch with the same ints, meta, dtypes and alignment."""
    device = tensors[2].device
    # Triton launches on the current device: make it the tensors' device (cuda:1 ...) for the launch.
    if device.type == "cuda" and device.index != torch._C._cuda_getDevice():  # torch.cuda.current_device, less host
        with torch.cuda.device(device):
            return _launch_on(device, plan, tensors, ints, floats, meta, launcher)
    return _launch_on(device, plan, tensors, ints, floats, meta, launcher)


def _scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    """Triton's per-launch global scratch (where each program builds its TMA descriptors), from PyTorch's caching
    allocator on the current device and stream: ordered with the launch, and private to a graph being captured.
    """
    return torch.empty(size, dtype=torch.int8, device="cuda")  # 512-byte aligned, more than Triton's 128 asks


def _launch_on(device: torch.device, plan: Plan, tensors: tuple, ints: tuple, floats: tuple, meta: dict, launcher):
    grid = plan.num_programs
    host = reads_host_descriptors(plan, meta)
    if device.type != "cuda":  # the interpreter: nothing compiled, nothing to cache
        args = with_descriptors(tensors, ints, meta) if host else tensors
        gemm_kernel[(grid,)](*args, *ints, epoch(), floats, **meta)
        return None
    if launcher is None:
        key = (device.index, plan, host, *meta.values(), ints, tuple(t is not None and t.dtype for t in tensors),
               tuple(t is not None and t.data_ptr() % 16 == 0 for t in tensors))
        launcher = LAUNCHERS.get(key)
        if launcher is None:  # compile (and launch)
            args = with_descriptors(tensors, ints, meta) if host else tensors
            return run_cached(gemm_kernel, grid, (*args, *ints, epoch(), floats), meta, device.index, key,
                              num_warps=plan.config.num_warps, num_stages=plan.config.num_stages)
    args = with_descriptors(tensors, ints, meta, host_descriptor) if host else tensors
    launcher((*addresses(args, host), *ints, epoch(), floats, *meta.values()),
             torch._C._cuda_getCurrentRawStream(device.index))
    return launcher
