"""MXFP4 decode in Gluon (Triton 3.6's `triton.experimental.gluon`, Hopper): one bf16 activation row times a "hopper"
MXFP4 weight, its bytes read through a ring of TMA copies. The planner takes it where it is faster than the
`tl` kernels (`smgemm.plan.mx_ring_split`); they stay for everything else, other Triton versions and the interpreter.

A program takes 64 weight rows (4 warps of 16, each its own mma.sync rows) over a range of K steps, the tile's K split
SPLIT ways; the last split of a tile adds the others' partials, published under an epoch flag as
`kernels.gemm`'s Stream-K fixup does. Each ring slot holds a 512-element step: two 128-byte boxes of words a row,
the row's 16 scale bytes and the activations, all TMA copies signalling one mbarrier. A step waits for its slot, loads
its words, scales and activations into registers (the activations by ldmatrix as the B operand, broadcast over its
8 columns), joins the warps at one barrier, refills the slot STAGES steps ahead, and only then expands the words
(`common._e2m1x8_words_asm`) and multiplies on mma.sync. The expansion folds e2m1's 2^126 bias into the scale (one
multiply a pair), exact while every scale is <= 2^1: each step ORs its scale words into `top` (two a thread: 723
instructions a step against 718), and a program whose OR has a byte of more than 128 runs its steps again with the
scales unfolded, as `common.k_loop_mx`'s caller does (a byte of 128 ORed with another may rerun a tile that did not
need it; no tile that needs it is missed).
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from .common import _e2m1x8_words_asm

ROWS = 64  # weight rows a program
STAGES = 2  # ring slots: two beat four on the H200 (more programs an SM)
WARPS = 4
_FOLDED = gl.constexpr(_e2m1x8_words_asm(True))
_UNFOLDED = gl.constexpr(_e2m1x8_words_asm(False))
WORDS_LAYOUT = gl.NVMMASharedLayout.get_default_for([ROWS, 32], gl.int32)
SCALES_LAYOUT = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=8, rank=2)
X_LAYOUT = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=2)


@gluon.jit
def _issue(w_desc, s_desc, x_desc, w_smem, s_smem, x_smem, bar, slot, row0, step, ok, NBYTES: gl.constexpr):
    """A step's copies into ring slot `slot` (if `ok`): its words (two boxes), scales and activations (two boxes)."""
    mbarrier.expect(bar, NBYTES, pred=ok)
    tma.async_copy_global_to_shared(w_desc, [row0, step * 64], bar, w_smem.index(slot).slice(0, 64), pred=ok)
    tma.async_copy_global_to_shared(w_desc, [row0, step * 64 + 32], bar, w_smem.index(slot).slice(64, 64), pred=ok)
    tma.async_copy_global_to_shared(s_desc, [row0, step * 16], bar, s_smem.index(slot), pred=ok)
    tma.async_copy_global_to_shared(x_desc, [0, step * 512], bar, x_smem.index(slot).slice(0, 1), pred=ok)
    tma.async_copy_global_to_shared(x_desc, [0, step * 512 + 256], bar, x_smem.index(slot).slice(1, 1), pred=ok)


@gluon.jit
def _step(acc, w3, sc, xt, a_op: gl.constexpr, FOLD: gl.constexpr):
    """acc [2, 64, 8] += a step's two halves (256 elements of K each): words w3 [2, 64, 32] (word 16 g + 4 t + jw of a
    row: the "ocp" bytes 16 jw + 4 jj + t of its 64-byte group g; `mxfp4.WORD_BITS` places their bits), scale bytes
    sc [64, 16] (byte 8 h + 4 g + jw of a row: half h), activations xt [2, 256, 8]."""
    w5 = w3.reshape([2, 64, 2, 4, 4])  # (half, row, g, t, jw)
    s4 = sc.reshape([64, 2, 2, 4]).permute([1, 0, 2, 3]).to(gl.uint32)  # (half, row, g, jw)
    if FOLD:  # bf16 bits of 2^(s - 1), twice: exact while s <= 128
        f = s4 * 0x00800080 + 0x3F003F00
        asm: gl.constexpr = _FOLDED
    else:  # of 2^(s - 127): s = 0 the subnormal 2^-127, s = 255 NaN
        f = gl.where(s4 == 0, 0x0040, gl.where(s4 == 255, 0x7FC0, s4 << 7))
        f = f | (f << 16)
        asm: gl.constexpr = _UNFOLDED
    f = gl.convert_layout(f, gl.SliceLayout(3, w5.type.layout))  # a renaming: the same registers
    f5 = gl.broadcast(gl.expand_dims(f, 3), w5)[0]
    o0, o1, o2, o3 = gl.inline_asm_elementwise(asm, "=r,=r,=r,=r,r,r", [w5, f5],
                                               dtype=(gl.uint32, gl.uint32, gl.uint32, gl.uint32), is_pure=True,
                                               pack=1)
    # output k of the asm is the pair at position 2 (k % 2) + k // 2 of the word's four in K order
    pairs = gl.join(gl.join(o0, o2), gl.join(o1, o3))  # [.., i, j]: position jj = 2 i + j
    vals = gl.join((pairs & 0xFFFF).to(gl.uint16).to(gl.bfloat16, bitcast=True),
                   (pairs >> 16).to(gl.uint16).to(gl.bfloat16, bitcast=True))  # [h, row, g, t, jw, i, j, e]
    # element k = 128 g + 32 jw + 8 jj + 2 t + e = 128 g + 32 jw + 16 i + 8 j + 2 t + e of half h
    vals = vals.permute([0, 1, 2, 4, 5, 6, 3, 7]).reshape([2, 64, 256])
    return mma_v2(gl.convert_layout(vals, a_op), xt, acc)


@gluon.jit
def _steps(acc, top, it, first, n, row0, w_desc, s_desc, x_desc, w_smem, s_smem, x_smem, bars,
           wl: gl.constexpr, sl: gl.constexpr, swl: gl.constexpr, a_op: gl.constexpr, b_op: gl.constexpr,
           FOLD: gl.constexpr, STAGES: gl.constexpr):
    """K steps [first, first + n) of the tile at row0 through the ring, its slots and phases counted on from `it`;
    returns the accumulator, with FOLD the OR of every scale word met (`top`, layout swl), and the count."""
    NBYTES: gl.constexpr = 2 * w_desc.block_type.nbytes + s_desc.block_type.nbytes + 2 * x_desc.block_type.nbytes
    for s in gl.static_range(STAGES):
        _issue(w_desc, s_desc, x_desc, w_smem, s_smem, x_smem, bars.index((it + s) % STAGES), (it + s) % STAGES,
               row0, first + s, s < n, NBYTES)
    for i in range(n):
        slot = it % STAGES
        bar = bars.index(slot)
        mbarrier.wait(bar, (it // STAGES) & 1)
        w3 = w_smem.index(slot).reshape([2, 64, 32]).load(wl)
        sc = s_smem.index(slot).load(sl)
        if FOLD:  # the slot's scale words once each over the CTA (two a thread)
            top = top | s_smem.index(slot)._reinterpret(gl.int32, [64, 4], s_smem.layout).load(swl)
        x_col = x_smem.index(slot).reshape([2, 1, 256]).permute((0, 2, 1)).load(b_op)  # [2, 256, 1]
        xt = gl.broadcast(x_col, gl.zeros([2, 256, 8], gl.bfloat16, layout=b_op))[0]
        gl.thread_barrier()  # every warp holds its part of the slot: it takes the copies STAGES steps ahead
        _issue(w_desc, s_desc, x_desc, w_smem, s_smem, x_smem, bar, slot, row0, first + i + STAGES,
               i + STAGES < n, NBYTES)
        acc = _step(acc, w3, sc, xt, a_op, FOLD)
        it += 1
    return acc, top, it


@gluon.jit
def mx_ring_kernel(x_desc, w_desc, s_desc, y_ptr, ws_ptr, flags_ptr, epoch, K, alpha,
                   SPLIT: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr):
    """y [1, N] (bf16, contiguous) = alpha * x [1, K] (bf16) @ W^T, W a "hopper" MXFP4 weight [N, K / 2] (N a
    multiple of 64, K of 512) read through w_desc (words, int32 [N, K / 8], boxes [64, 32]) and s_desc (scales, uint8
    [N, K / 32], boxes [64, 16]); x through x_desc (boxes [1, 256]). Grid: N / 64 tiles times SPLIT, program
    `tile * SPLIT + split`; ws_ptr (fp32, 512 a program) and flags_ptr (int64, one a program) hold the splits'
    partials."""
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 4, 1], instr_shape=[1, 16, 8])
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    b_op: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
    # a slot's words [2 (half), 64, 32]: thread (warp w, lane l) holds rows 16 w + l // 4 (+ 8), words 16 g +
    # 4 (l % 4) + jw of both halves, the words of its mma.sync fragments
    wl: gl.constexpr = gl.DistributedLinearLayout(
        reg_bases=[[0, 0, 1], [0, 0, 2], [0, 0, 16], [0, 8, 0], [1, 0, 0]],
        lane_bases=[[0, 0, 4], [0, 0, 8], [0, 1, 0], [0, 2, 0], [0, 4, 0]],
        warp_bases=[[0, 16, 0], [0, 32, 0]], block_bases=[], shape=[2, 64, 32])
    # its scales [64, 16]: each thread its two rows' 16 bytes
    sl: gl.constexpr = gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [0, 2], [0, 4], [8, 0], [0, 8]], lane_bases=[[0, 0], [0, 0], [1, 0], [2, 0], [4, 0]],
        warp_bases=[[16, 0], [32, 0]], block_bases=[], shape=[64, 16])
    # the same scales as words [64, 4], each once: thread (warp w, lane l) word l % 4 of rows 16 w + l // 4 (+ 8)
    swl: gl.constexpr = gl.DistributedLinearLayout(
        reg_bases=[[8, 0]], lane_bases=[[0, 1], [0, 2], [1, 0], [2, 0], [4, 0]], warp_bases=[[16, 0], [32, 0]],
        block_bases=[], shape=[64, 4])
    pid = gl.program_id(0)
    split = pid % SPLIT
    row0 = (pid // SPLIT) * 64
    steps = K // 512
    first = split * steps // SPLIT
    n = (split + 1) * steps // SPLIT - first
    w_smem = gl.allocate_shared_memory(gl.int32, [STAGES, 128, 32], w_desc.layout)
    s_smem = gl.allocate_shared_memory(gl.uint8, [STAGES, 64, 16], s_desc.layout)
    x_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, 2, 256], x_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(bars.index(s), count=1)
    fence_async_shared()
    zero = gl.zeros([2, 64, 8], gl.float32, layout=mma)
    top = gl.zeros([64, 4], gl.int32, layout=swl)
    acc, top, it = _steps(zero, top, pid * 0, first, n, row0, w_desc, s_desc, x_desc, w_smem, s_smem, x_smem, bars,
                          wl, sl, swl, a_op, b_op, True, STAGES)
    # A byte of `top` with its high bit and another set: maybe a scale the folded expansion cannot hold (> 128, or a
    # NaN 255), maybe a 128 ORed with others (then the exact steps only cost time): the steps again, unfolded.
    over = (((top & 0x7F7F7F7F) + 0x7F7F7F7F) & top) >> 7 & 0x01010101
    if gl.max(gl.max(over, axis=1), axis=0) != 0:
        acc, top, it = _steps(zero, top, it, first, n, row0, w_desc, s_desc, x_desc, w_smem, s_smem, x_smem, bars,
                              wl, sl, swl, a_op, b_op, False, STAGES)
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(s))
    acc2 = gl.sum(acc, axis=0)  # the halves' sums [64, 8]; its 8 columns alike
    rows = gl.arange(0, 64, layout=gl.SliceLayout(1, acc2.type.layout))
    cols = gl.arange(0, 8, layout=gl.SliceLayout(0, acc2.type.layout))
    if SPLIT > 1:
        p_ws = ws_ptr + pid * 512 + rows[:, None] * 8 + cols[None, :]
        if split < SPLIT - 1:  # publish this partial for the tile's last split
            gl.store(p_ws, acc2)
            gl.thread_barrier()
            gl.atomic_xchg(flags_ptr + pid, epoch, sem="release", scope="gpu")
        else:  # the lower programs of the tile started first: wait for each, resetting its flag
            for j in range(SPLIT - 1):
                seen = gl.atomic_xchg(flags_ptr + pid - 1 - j, 0 * epoch, sem="acquire", scope="gpu")
                while seen != epoch:
                    seen = gl.atomic_xchg(flags_ptr + pid - 1 - j, 0 * epoch, sem="acquire", scope="gpu")
                acc2 += gl.load(p_ws - (1 + j) * 512)
    if split == SPLIT - 1:
        gl.store(y_ptr + (row0 + rows)[:, None] + cols[None, :] * 0, (acc2 * alpha).to(gl.bfloat16),
                 mask=(cols == 0)[None, :])


def boxes(k: int, words: torch.Tensor, scales: torch.Tensor) -> tuple:
    """(shape, strides, block) of the kernel's three descriptors: the activation row [1, K] (one row: its stride is
    never used, K stands in for it), the weight's words (its data viewed as int32 [N, K / 8]) and scales [N, K / 32]."""
    n = words.shape[0]
    return (([1, k], [k, 1], [1, 256]), ([n, k // 8], [words.stride(0), 1], [ROWS, 32]),
            ([n, k // 32], [scales.stride(0), 1], [ROWS, 16]))


def descriptors(x: torch.Tensor, words: torch.Tensor, scales: torch.Tensor) -> tuple:
    """Triton's host-built descriptors of x [1, K], the words and the scales (`boxes`), in the kernel's layouts."""
    return tuple(TensorDescriptor(t, *box, layout) for t, box, layout in
                 zip((x, words, scales), boxes(x.shape[1], words, scales), (X_LAYOUT, WORDS_LAYOUT, SCALES_LAYOUT)))
