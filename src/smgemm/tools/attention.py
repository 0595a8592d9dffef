"""Decode attention over a paged bf16 KV cache: the memory-bound partner of the overlap benchmarks.

A serving step runs the prefill chunk's GEMMs (compute-bound) beside the decode batch's attention (bound by
streaming the KV cache). This kernel is that attention, written to pull device-memory bandwidth from few SMs: a
persistent grid (`num_programs`), each program walking (sequence, KV head) items and streaming their pages through
tensor descriptors (TMA on Hopper), `stages - 1` pages in flight. One item is the GQA group of query heads that
share a KV head, so each K and V page is read once for all of them.

A page's K and V descriptor loads take their row from the block table; the table entry of the next page is loaded
one iteration ahead, so the pipeliner can issue the descriptor loads `stages - 1` pages ahead (loaded in the same
iteration, the entry would hold them to one page ahead: a third of the bandwidth). What then bounds one program is
the dependent chain of a page's dots, softmax reductions and barriers (~0.9 us a page on the H200), so an SM needs
several programs: 3 an SM pull ~70 GB/s an SM (3.1 TB/s from 44 SMs), 2 an SM ~59, 1 ~38; on the whole device two
an SM do best (4.4 TB/s), since 3 leave a tail of items.

Layout (vLLM's paged layout, heads before tokens): k_cache and v_cache [pages, kv_heads, page_size, head_dim] bf16
contiguous; block_table [batch, max_pages] int32 maps a sequence's i-th page to its page in the cache; seq_lens
[batch] int32; q [batch, q_heads, head_dim] bf16 (one new token per sequence). Out: [batch, q_heads, head_dim].

Not part of the library (the package never imports it): a benchmark partner, checked against torch's SDPA.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from triton.runtime import _allocation

PARTITION_PROGRAMS_PER_SM = 3  # programs an SM that stream fastest in a partition (module docstring)


@triton.jit
def _decode_attention_kernel(
    q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, out_ptr,
    batch, kv_heads, total_rows, max_pages, scale_log2, num_programs,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE: tl.constexpr,
    STAGES: tl.constexpr, INTERPRETER: tl.constexpr,
):
    # the caches as [pages * kv_heads * page_size, head_dim]: one page of one head is PAGE consecutive rows
    k_desc = tl.make_tensor_descriptor(k_ptr, [total_rows, HEAD_DIM], [HEAD_DIM, 1], [PAGE, HEAD_DIM])
    v_desc = tl.make_tensor_descriptor(v_ptr, [total_rows, HEAD_DIM], [HEAD_DIM, 1], [PAGE, HEAD_DIM])
    offs_g = tl.arange(0, GROUP_PAD)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_t = tl.arange(0, PAGE)
    for item in tl.range(tl.program_id(0), batch * kv_heads, num_programs):
        b = item // kv_heads
        h = item % kv_heads
        rows = h * GROUP + offs_g  # the query heads of this KV head (padded to a dot's 16 rows)
        p_q = q_ptr + (b * kv_heads * GROUP + rows)[:, None] * HEAD_DIM + offs_d[None, :]
        b_q = tl.load(p_q, mask=(offs_g < GROUP)[:, None], other=0.0)
        seq_len = tl.load(lens_ptr + b)
        m_i = tl.full((GROUP_PAD,), float("-inf"), tl.float32)
        l_i = tl.zeros((GROUP_PAD,), tl.float32)
        acc = tl.zeros((GROUP_PAD, HEAD_DIM), tl.float32)
        n_pages = tl.cdiv(seq_len, PAGE)
        page = tl.load(table_ptr + b * max_pages)
        for i in tl.range(0, n_pages, num_stages=STAGES):
            row = (page * kv_heads + h) * PAGE
            page = tl.load(table_ptr + b * max_pages + tl.minimum(i + 1, n_pages - 1))  # the next page's entry
            b_k = k_desc.load([row, 0])  # [PAGE, HEAD_DIM]
            b_v = v_desc.load([row, 0])
            if INTERPRETER:  # the interpreter's bf16 dot reads raw bits
                s = tl.dot(b_q.to(tl.float32), tl.trans(b_k.to(tl.float32)))
            else:
                s = tl.dot(b_q, tl.trans(b_k))  # [GROUP_PAD, PAGE]
            s = tl.where((i * PAGE + offs_t < seq_len)[None, :], s * scale_log2, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            if INTERPRETER:
                acc = acc * alpha[:, None] + tl.dot(p.to(tl.bfloat16).to(tl.float32), b_v.to(tl.float32))
            else:
                acc = acc * alpha[:, None] + tl.dot(p.to(tl.bfloat16), b_v)
            m_i = m_new
        out = acc / l_i[:, None]
        p_o = out_ptr + (b * kv_heads * GROUP + rows)[:, None] * HEAD_DIM + offs_d[None, :]
        tl.store(p_o, out.to(tl.bfloat16), mask=(offs_g < GROUP)[:, None])


def _scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    """Triton's global scratch for the descriptors, from PyTorch's caching allocator (set for this launch only)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                     seq_lens: torch.Tensor, *, num_programs: int | None = None, stages: int = 3,
                     warps: int = 4) -> torch.Tensor:
    """softmax(q K^T / sqrt(head_dim)) V for each sequence's one new token, GQA (q_heads a multiple of kv_heads),
    over the paged caches (layout in the module docstring). `num_programs`: the persistent grid (default two per
    SM of the device; in a green context of fewer SMs, pass `PARTITION_PROGRAMS_PER_SM` times its SM count). bf16 in
    and out, fp32 softmax and accumulation."""
    batch, q_heads, head_dim = q.shape
    pages, kv_heads, page_size, _ = k_cache.shape
    if q_heads % kv_heads or k_cache.shape != v_cache.shape or k_cache.shape[-1] != head_dim:
        raise ValueError(f"shapes do not fit: q {tuple(q.shape)}, k_cache {tuple(k_cache.shape)}, "
                         f"v_cache {tuple(v_cache.shape)}")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype != torch.bfloat16 or not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous bf16")
    group = q_heads // kv_heads
    out = torch.empty_like(q)
    if num_programs is None:
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 4
        num_programs = 2 * sms
    grid = max(1, min(num_programs, batch * kv_heads))
    interpreter = q.device.type == "cpu"
    token = _allocation._allocator.set(_scratch)  # device-built tensor descriptors live in a global scratch
    try:
        _decode_attention_kernel[(grid,)](
            q, k_cache, v_cache, block_table, seq_lens, out,
            batch, kv_heads, pages * kv_heads * page_size, block_table.shape[1],
            math.log2(math.e) / math.sqrt(head_dim), grid,
            GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD_DIM=head_dim, PAGE=page_size,
            STAGES=stages, INTERPRETER=interpreter, num_warps=warps,
        )
    finally:
        _allocation._allocator.reset(token)
    return out


def reference_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                        seq_lens: torch.Tensor) -> torch.Tensor:
    """The same attention through torch's scaled_dot_product_attention in float64, sequence by sequence."""
    batch, q_heads, head_dim = q.shape
    kv_heads, page_size = k_cache.shape[1], k_cache.shape[2]
    outs = []
    for b in range(batch):
        n = int(seq_lens[b])
        pages = block_table[b, : -(-n // page_size)].long()
        k = k_cache[pages].transpose(0, 1).reshape(kv_heads, -1, head_dim)[:, :n].double()
        v = v_cache[pages].transpose(0, 1).reshape(kv_heads, -1, head_dim)[:, :n].double()
        group = q_heads // kv_heads
        k, v = k.repeat_interleave(group, 0), v.repeat_interleave(group, 0)
        outs.append(torch.nn.functional.scaled_dot_product_attention(q[b].double()[:, None], k, v)[:, 0])
    return torch.stack(outs)


def paged_cache(batch: int, kv_heads: int, head_dim: int, context: int, page_size: int = 64, *,
                device: str | torch.device = "cuda", seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Random caches, queries and a shuffled block table for `batch` sequences of `context` tokens:
    (q for 4 query heads a KV head, k_cache, v_cache, block_table, seq_lens)."""
    gen = torch.Generator(device=device).manual_seed(seed)  # drawn where they live: caches of gigabytes
    per_seq = -(-context // page_size)
    pages = batch * per_seq

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device=device, dtype=torch.bfloat16)

    k_cache, v_cache = draw(pages, kv_heads, page_size, head_dim), draw(pages, kv_heads, page_size, head_dim)
    table = torch.randperm(pages, generator=gen, device=device).to(torch.int32).reshape(batch, per_seq)
    lens = torch.full((batch,), context, dtype=torch.int32, device=device)
    q = draw(batch, 4 * kv_heads, head_dim)
    return q, k_cache, v_cache, table, lens


def cache_bytes(k_cache: torch.Tensor, seq_lens: torch.Tensor) -> int:
    """Bytes of K and V that one decode step reads."""
    kv_heads, head_dim = k_cache.shape[1], k_cache.shape[3]
    return int(seq_lens.sum()) * kv_heads * head_dim * 2 * 2
