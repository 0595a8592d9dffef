"""Decode attention in Gluon (Triton 3.6's `triton.experimental.gluon` API, Hopper): the overlap partner's fast
kernel, behind `smgemm.tools.attention.decode_attention` (which keeps its `tl` kernel for other GPUs, other Triton
versions and the interpreter).

A persistent grid of one-warpgroup programs walks (sequence, KV head) items, the last round's in chunks of their
pages (`smgemm.tools.attention.tail_chunks`). Each program keeps a ring of `stages` page slots, each filled by two
TMA copies (the page's K and V, [page, head_dim]) that signal one mbarrier; an item's first copies go out before its
queries are read, and each page's table entry is loaded one iteration before its copies. Each of the 4 warps owns 16
tokens of every 64-token page: it loads them from the slot into registers as the operands of its own mma.sync
products, and once every warp has them the slot takes the copies of the page `stages` ahead, so all `stages` slots
are in flight while the page is computed. Per warp and page, with the GQA group (up to 8 query heads) as the
products' 8-wide side:

    S^T [16, 8]  = K [16, head_dim] @ Q^T [head_dim, 8]
    O^T [head_dim, 8] += V^T [head_dim, 16] @ P^T [16, 8]

and the softmax between them runs within the warp (its own running max and sum, merged across warps once an item,
through the idle slots). No barrier joins the warps' chains but the one that frees a slot: a page's chain is one
warp's work on 16 tokens, not a warpgroup's on 64.

On the H200 (64 sequences of 16k tokens, 8 KV heads, green contexts) three programs an SM of two slots pulled
2.07 / 2.85 / 3.12 / 4.24 TB/s from 16 / 24 / 32 / 48 SMs, where the `tl` kernel pulls 1.58 / 2.18 / 2.91 / 4.10 in
the same run (`PYTHONPATH=src python benchmarks/sweep_attention_gluon.py --sms 16,24,32,48 --pipe warps --configs
3x2,2x3,4x1`, 8ac521e); two programs of three slots pulled 2.56 from 24 SMs, four of one slot 2.24. With the first
copies ahead of the queries, 2.85 / 3.01 / 4.29 from 24 / 28 / 48 SMs and 4.51 on the whole chip, where the `tl`
kernel pulls 2.17 / 2.52 / 4.15 / 4.45 (`--sms 24,28,48 --pipe warps --configs 3x2 --chunks 1`, d2c3373; the run's
`--chunks auto` rows are the one-off rule that `smgemm.tools.attention`'s docstring records).
"""

from __future__ import annotations

import math

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

PAGE = 64  # tokens a page: 4 warps of 16 (one mma.sync row block each)
WARPS = 4
MAX_GROUP = 8  # query heads a KV head: the products' 8-wide side
HEAD_DIM = 128
PROGRAMS_PER_SM = 3  # of two 32 KB slots and 8 KB for Q each: 221 KB of shared memory an SM
STAGES = 2


@gluon.jit
def _issue(k_desc, v_desc, k_smem, v_smem, bars, page, ok, slot, kv_heads, h, PAGE: gl.constexpr):
    """Both TMA copies of one page of one KV head into ring slot `slot`, signalling its mbarrier (if `ok`)."""
    row = (page * kv_heads + h) * PAGE
    bar = bars.index(slot)
    mbarrier.expect(bar, 2 * k_desc.block_type.nbytes, pred=ok)
    tma.async_copy_global_to_shared(k_desc, [row, 0], bar, k_smem.index(slot), pred=ok)
    tma.async_copy_global_to_shared(v_desc, [row, 0], bar, v_smem.index(slot), pred=ok)


@gluon.jit
def _warp_attention_kernel(q_ptr, k_desc, v_desc, table_ptr, lens_ptr, out_ptr, part_ml_ptr, part_acc_ptr,
                           kv_heads, max_pages, scale_log2, num_programs, whole, tail, units,
                           GROUP: gl.constexpr, GROUP_PAD: gl.constexpr, HEAD_DIM: gl.constexpr, PAGE: gl.constexpr,
                           STAGES: gl.constexpr, num_warps: gl.constexpr):
    """Each warp takes its own PAGE / num_warps tokens of every page and keeps its own running softmax (merged once an
    item), on mma.sync with the GQA group as the 8-wide side: S^T = K Q^T, O^T += V^T P^T. A page's K and V go to
    registers as soon as it lands, and its slot is refilled before they are computed on. The first `whole`
    (sequence, KV head) pairs are one work unit each; every later pair is `tail` units, chunks of its pages, whose
    states go to part_ml / part_acc (the layout of `smgemm.tools.attention._chunks_kernel`, which merges them)."""
    SUB: gl.constexpr = PAGE // num_warps
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[num_warps, 1, 1],
                                                  instr_shape=[1, 16, 8])
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    b_op: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
    state: gl.constexpr = gl.SliceLayout(1, mma)  # [warps, GROUP_PAD]
    tokens: gl.constexpr = gl.SliceLayout(2, mma)  # [warps, SUB]
    merged: gl.constexpr = gl.BlockedLayout([num_warps, 1, 1], [1, 4, 8], [1, num_warps, 1], [2, 1, 0])
    outs: gl.constexpr = gl.SliceLayout(0, merged)  # [HEAD_DIM, GROUP_PAD]
    q3: gl.constexpr = gl.BlockedLayout([1, 1, 8], [1, 2, 16], [num_warps, 1, 1], [2, 1, 0])
    plain: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [2, 1, 0])
    k_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, PAGE, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, PAGE, HEAD_DIM], v_desc.layout)
    q_smem = gl.allocate_shared_memory(gl.bfloat16, [num_warps, GROUP_PAD, HEAD_DIM], plain)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(bars.index(s), count=1)
    fence_async_shared()  # the barriers' initialization before the first copies signal them
    offs_qw = gl.arange(0, num_warps, layout=gl.SliceLayout(1, gl.SliceLayout(2, q3)))
    offs_qg = gl.arange(0, GROUP_PAD, layout=gl.SliceLayout(0, gl.SliceLayout(2, q3)))
    offs_qd = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, gl.SliceLayout(1, q3)))
    offs_w = gl.arange(0, num_warps, layout=gl.SliceLayout(1, tokens))
    offs_t = gl.arange(0, SUB, layout=gl.SliceLayout(0, tokens))
    tok = offs_w[:, None] * SUB + offs_t[None, :]  # [warps, SUB]: token in the page
    offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(1, outs))
    offs_g = gl.arange(0, GROUP_PAD, layout=gl.SliceLayout(0, outs))
    offs_gs = gl.arange(0, GROUP_PAD, layout=gl.SliceLayout(0, state))
    zero_s = gl.zeros([num_warps, SUB, GROUP_PAD], gl.float32, layout=mma)
    it = 0
    for unit in range(gl.program_id(0), units, num_programs):
        split = gl.maximum(unit - whole, 0)  # a later pair's units: pair whole + split // tail, chunk split % tail
        pair = gl.where(unit < whole, unit, whole + split // tail)
        chunk = gl.where(unit < whole, 0, split % tail)
        chunks = gl.where(unit < whole, 1, tail)
        b = pair // kv_heads
        h = pair % kv_heads
        seq_len = gl.load(lens_ptr + b)
        n_pages = gl.cdiv(seq_len, PAGE)
        first = chunk * n_pages // chunks  # this chunk's pages: [first, last)
        last = (chunk + 1) * n_pages // chunks
        row_base = b * max_pages
        for j in gl.static_range(STAGES):  # the first pages' copies before anything else of the item
            page = gl.load(table_ptr + row_base + gl.maximum(gl.minimum(first + j, last - 1), 0))
            _issue(k_desc, v_desc, k_smem, v_smem, bars, page, first + j < last, (it + j) % STAGES, kv_heads, h, PAGE)
        nxt = gl.load(table_ptr + row_base + gl.maximum(gl.minimum(first + STAGES, last - 1), 0))
        # Q^T as each warp's B operand
        q_row0 = b * kv_heads * GROUP + h * GROUP
        p_q = (q_ptr + (q_row0 + offs_qg)[None, :, None] * HEAD_DIM + offs_qd[None, None, :] +
               0 * offs_qw[:, None, None])
        q_smem.store(gl.load(p_q, mask=(offs_qg < GROUP)[None, :, None], other=0.0))
        gl.thread_barrier()
        q_t = q_smem.permute((0, 2, 1)).load(b_op)
        m_i = gl.full([num_warps, GROUP_PAD], float("-inf"), gl.float32, layout=state)
        l_i = gl.zeros([num_warps, GROUP_PAD], gl.float32, layout=state)
        o = gl.zeros([num_warps, HEAD_DIM, GROUP_PAD], gl.float32, layout=mma)
        for i in range(first, last):
            slot = it % STAGES
            mbarrier.wait(bars.index(slot), (it // STAGES) & 1)
            k_reg = k_smem.index(slot).reshape((num_warps, SUB, HEAD_DIM)).load(a_op)
            v_reg = v_smem.index(slot).reshape((num_warps, SUB, HEAD_DIM)).permute((0, 2, 1)).load(a_op)
            gl.thread_barrier()  # every warp holds its tokens of the page: the slot is free again
            _issue(k_desc, v_desc, k_smem, v_smem, bars, nxt, i + STAGES < last, slot, kv_heads, h, PAGE)
            nxt = gl.load(table_ptr + row_base + gl.minimum(i + STAGES + 1, last - 1))
            s_t = mma_v2(k_reg, q_t, zero_s)  # S^T [warps, SUB, GROUP_PAD]
            s_t = gl.where((i * PAGE + tok < seq_len)[:, :, None], s_t * scale_log2, float("-inf"))
            m_new = gl.maximum(m_i, gl.max(s_t, axis=1))
            m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # a warp whose tokens so far are all past the end
            alpha = gl.exp2(m_i - m_use)
            p = gl.exp2(s_t - m_use[:, None, :])
            l_i = l_i * alpha + gl.sum(p, axis=1)
            o = mma_v2(v_reg, gl.convert_layout(p.to(gl.bfloat16), b_op), o * alpha[:, None, :])
            m_i = m_new
            it += 1
        # the warps' states merged through the (idle) K slots
        top = gl.max(m_i, axis=0)
        w = gl.exp2(m_i - gl.where(top == float("-inf"), 0.0, top)[None, :])
        o_s = k_smem._reinterpret(gl.float32, [num_warps, HEAD_DIM, GROUP_PAD], plain)
        o_s.store(o * w[:, None, :])
        gl.thread_barrier()
        o_sum = gl.sum(o_s.load(merged), axis=0)
        l_sum = gl.sum(l_i * w, axis=0)
        if unit < whole:
            o_sum = o_sum / gl.convert_layout(l_sum, gl.SliceLayout(0, outs))[None, :]
            gl.store(out_ptr + (q_row0 + offs_g)[None, :] * HEAD_DIM + offs_d[:, None], o_sum.to(gl.bfloat16),
                     mask=(offs_g < GROUP)[None, :])
        else:  # this chunk's state (max, sum, weighted values), merged with the others' by _chunks_kernel
            gl.store(part_ml_ptr + split * 2 * GROUP_PAD + offs_gs, top)
            gl.store(part_ml_ptr + split * 2 * GROUP_PAD + GROUP_PAD + offs_gs, l_sum)
            gl.store(part_acc_ptr + (split * GROUP_PAD + offs_g)[None, :] * HEAD_DIM + offs_d[:, None], o_sum)
        gl.thread_barrier()  # every warp is past the K slots' and Q's generic accesses ...
        fence_async_shared()  # ... and they come before the slots' next copies
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(s))



def page_descriptors(k_cache: torch.Tensor, v_cache: torch.Tensor) -> tuple:
    """Host-built TMA descriptors of the caches as [pages * kv_heads * page_size, head_dim], one page a box."""
    pages, kv_heads, page_size, head_dim = k_cache.shape
    layout = gl.NVMMASharedLayout.get_default_for([page_size, head_dim], gl.bfloat16)
    return tuple(TensorDescriptor(t.view(-1, head_dim), [pages * kv_heads * page_size, head_dim], [head_dim, 1],
                                  [page_size, head_dim], layout) for t in (k_cache, v_cache))


def fits(q: torch.Tensor, k_cache: torch.Tensor) -> bool:
    """Whether this kernel reads these operands (the caller has checked shapes and dtypes): a Hopper GPU, pages of
    64 tokens, head_dim 128, at most 8 query heads a KV head."""
    return (q.is_cuda and torch.cuda.get_device_capability(q.device) == (9, 0) and k_cache.shape[2] == PAGE
            and k_cache.shape[3] == HEAD_DIM and q.shape[1] // k_cache.shape[1] <= MAX_GROUP)


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                     seq_lens: torch.Tensor, out: torch.Tensor, num_programs: int, stages: int, whole: int,
                     tail: int, part_ml: torch.Tensor | None, part_acc: torch.Tensor | None) -> torch.Tensor:
    """`smgemm.tools.attention.decode_attention`'s result, into `out` (like q), through `_warp_attention_kernel` on a
    persistent grid of at most `num_programs` (operands as there, and `fits`). The first `whole` (sequence, KV head)
    pairs run whole; each later one runs as `tail` chunks, whose states are left for the caller to merge from
    part_ml [chunks, 2, MAX_GROUP] and part_acc [chunks, MAX_GROUP, head_dim] fp32 (chunks = (pairs - whole) *
    tail)."""
    batch, q_heads, head_dim = q.shape
    kv_heads = k_cache.shape[1]
    group = q_heads // kv_heads
    pairs = batch * kv_heads
    units = whole + (pairs - whole) * tail
    if part_ml is None:  # never written (no pair is split), but typed: the kernel compiles its branch either way
        part_ml = part_acc = torch.empty(1, dtype=torch.float32, device=q.device)
    k_desc, v_desc = page_descriptors(k_cache, v_cache)
    grid = max(1, min(num_programs, units))
    _warp_attention_kernel[(grid,)](
        q, k_desc, v_desc, block_table, seq_lens, out, part_ml, part_acc, kv_heads, block_table.shape[1],
        math.log2(math.e) / math.sqrt(head_dim), grid, whole, tail, units, GROUP=group, GROUP_PAD=MAX_GROUP,
        HEAD_DIM=head_dim, PAGE=PAGE, STAGES=stages, num_warps=WARPS)
    return out
