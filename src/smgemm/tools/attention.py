"""Decode attention over a paged bf16 KV cache: the memory-bound partner of the overlap benchmarks.

A serving step runs the prefill chunk's GEMMs (compute-bound) beside the decode batch's attention (bound by
streaming the KV cache). This kernel is that attention, written to pull device-memory bandwidth from few SMs: a
persistent grid (`num_programs`), each program walking (sequence, KV head) items and streaming their pages through
tensor descriptors (TMA on Hopper), `stages - 1` pages in flight. One item is the GQA group of query heads that
share a KV head, so each K and V page is read once for all of them.

A page's K and V descriptor loads take their row from the block table; the table entry of the next page is loaded
one iteration ahead, so the pipeliner can issue the descriptor loads `stages - 1` pages ahead (loaded in the same
iteration, the entry would hold them to one page ahead: a third of the bandwidth). Each warp takes its own tokens of
every page (the dots are batched over warps, [warps, group, head_dim] @ [warps, head_dim, page / warps], which
Triton gives one warp per batch entry) and keeps its own running softmax, merged once an item: a page's chain of
dots, reductions and exponentials then runs within each warp, with no exchange through shared memory and no barrier
between warps. On the H200 (64 sequences of 16k tokens, 8 KV heads, three programs an SM in a green context of n
SMs; a one-off script timing this kernel and the one it replaced, with one running softmax a program over 4 warps,
in one run on the tree of 317e108): from 24 / 36 / 48 SMs 2 warps pulled 2.21 / 3.56 / 3.66 TB/s against
1.68 / 2.65 / 3.34 before (4 warps, split the same way: 1.36 / 2.10 / 2.68); on the whole device both 4.41.
What bounds a program is its chain of work on one page (wait, two dots, softmax), ~0.7 us on the H200, not the
pipeline's depth: one program an SM with 5 to 8 stages pulled 1.09-1.10 TB/s from 24 SMs whatever the depth, and
three programs an SM (three chains) 2.19, each computing on one page while the next is in flight. Computing
the next page's scores during this page's softmax (its K one iteration ahead of its V) did not shorten the chain:
2.11 against 2.19 TB/s from 24 SMs with 3 programs of 2 warps, 1.25 against 1.10 with one program of 4 warps and 7
stages (a one-off script, both kernels in one run on the tree of ea26e37). The same loads without the attention
(a per-page max in its place, one warp a program) pulled 3.10 TB/s from 24 SMs and 4.44 from 48 with 3 programs an
SM, so this kernel reaches 0.71 of its access pattern's ceiling from 24 SMs (2.19 TB/s) and 0.95 from 48 (4.20);
shorter chains on half pages (`parts` 2: six programs of one warp an SM, 32 KB of shared memory each) pulled 2.29
TB/s from 24 SMs but 3.95 from 48 (`PYTHONPATH=src python benchmarks/sweep_attention.py --sms 24,48 --loads-only`,
tree of 36cf42e). Asking L2 for the pages 4-16 iterations ahead (`cp.async.bulk.prefetch.L2`, one thread a
program) was slower everywhere: 1.86-1.88 TB/s from 24 SMs, 2.5-3.1 on the whole device (a one-off variant of this
kernel, one run on the tree of 7cef882).
Where Triton 3.6's Gluon runs on a Hopper GPU, `decode_attention` runs `smgemm.tools.attention_gluon`'s kernel
instead (`kernel`): its warps take 16 tokens of a page each on mma.sync with their own running softmax, K and V go to
registers as each page lands and its slot is refilled at once, and it pulled 2.85 TB/s from 24 SMs and 4.24 from 48
with three programs an SM, where this kernel pulls 2.18 and 4.10 in the same run
(`benchmarks/sweep_attention_gluon.py --pipe warps`, 8ac521e). The same attention on one warpgroup's wgmma chain a
page (that script's other loops) was level with this kernel: 2.20 TB/s from 24 SMs with two programs an SM.
The `tl` kernel splits sequences into chunks (`chunks`, merged by a second kernel) only where there are fewer items
than programs: with enough items they were slower (`benchmarks/sweep_attention.py`: 2.98 against 3.12 TB/s from 36
SMs, 4.10 against 4.41 on the whole device), since each chunk refills the pipeline. Chunks of every item were slower
for the Gluon kernel too (2.73-2.77 TB/s from 24 SMs against 2.83-2.85 whole, `benchmarks/sweep_attention_gluon.py
--pipe warps --configs 3x2 --chunks auto,1` with a one-off rule of 4 or 8 chunks, 5443d32), while whole items leave
programs idle for the grid's last round (512 items on 72 programs from 24 SMs: 64 of them idle for one item's time;
504 items, whole rounds, pulled 3.06-3.07 TB/s, `--batch 63`, f9a57e7). So the Gluon kernel splits only the items of
the last round (`tail_chunks`), into as many chunks as one more round holds, as Stream-K splits a GEMM's last wave:
from 24 / 28 SMs it pulled 2.88-2.95 / 3.34-3.35 TB/s against 2.85-2.88 / 3.23-3.25 whole, level from 48 SMs and on
the whole device (two runs of `--sms 24,28,48 --pipe warps --configs 3x2 --chunks auto,1` at ad85185, on a machine
that pulls 3.6 TB/s from 48 SMs where others pulled 4.1-4.3).

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

try:  # Triton's Gluon: written against 3.6's API (`_gluon`)
    from . import attention_gluon
except ImportError:
    attention_gluon = None

PARTITION_PROGRAMS_PER_SM = 3  # programs an SM that stream fastest in a partition (module docstring)


@triton.jit
def _decode_attention_kernel(
    q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, out_ptr, part_ml_ptr, part_acc_ptr,
    batch, kv_heads, total_rows, max_pages, scale_log2, num_programs,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE: tl.constexpr, SPLIT: tl.constexpr,
    CHUNKS: tl.constexpr, STAGES: tl.constexpr, INTERPRETER: tl.constexpr, PARTS: tl.constexpr = 1,
):
    BLOCK: tl.constexpr = PAGE // PARTS  # tokens an iteration: a page in PARTS parts
    SUB: tl.constexpr = BLOCK // SPLIT  # a warp's tokens of each block
    # the caches as [pages * kv_heads * page_size / SUB, SUB, head_dim]: one page of one head is PARTS * SPLIT blocks of
    # SUB consecutive rows, an iteration's part of it loaded as one [SPLIT, SUB, head_dim] box
    k_desc = tl.make_tensor_descriptor(k_ptr, [total_rows // SUB, SUB, HEAD_DIM], [SUB * HEAD_DIM, HEAD_DIM, 1],
                                       [SPLIT, SUB, HEAD_DIM])
    v_desc = tl.make_tensor_descriptor(v_ptr, [total_rows // SUB, SUB, HEAD_DIM], [SUB * HEAD_DIM, HEAD_DIM, 1],
                                       [SPLIT, SUB, HEAD_DIM])
    offs_g = tl.arange(0, GROUP_PAD)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_t = tl.arange(0, SPLIT)[:, None] * SUB + tl.arange(0, SUB)[None, :]  # [SPLIT, SUB]: token in the block
    for item in tl.range(tl.program_id(0), batch * kv_heads * CHUNKS, num_programs):
        chunk = item % CHUNKS
        b = item // CHUNKS // kv_heads
        h = item // CHUNKS % kv_heads
        rows = h * GROUP + offs_g  # the query heads of this KV head (padded to a dot's 16 rows)
        p_q = q_ptr + (b * kv_heads * GROUP + rows)[:, None] * HEAD_DIM + offs_d[None, :]
        b_q = tl.load(p_q, mask=(offs_g < GROUP)[:, None], other=0.0)
        q3 = tl.broadcast_to(b_q[None, :, :], (SPLIT, GROUP_PAD, HEAD_DIM))
        if INTERPRETER:  # the interpreter's bf16 dot reads raw bits
            q3 = q3.to(tl.float32)
        seq_len = tl.load(lens_ptr + b)
        n_pages = tl.cdiv(seq_len, PAGE)
        # one running softmax per warp (along the batch dim of the dots, which Triton gives one warp each)
        m_i = tl.full((SPLIT, GROUP_PAD), float("-inf"), tl.float32)
        l_i = tl.zeros((SPLIT, GROUP_PAD), tl.float32)
        acc = tl.zeros((SPLIT, GROUP_PAD, HEAD_DIM), tl.float32)
        first = chunk * n_pages // CHUNKS
        last = (chunk + 1) * n_pages // CHUNKS
        page = tl.load(table_ptr + b * max_pages + tl.minimum(first, n_pages - 1))
        for i in tl.range(first * PARTS, last * PARTS, num_stages=STAGES):
            row = ((page * kv_heads + h) * PARTS + i % PARTS) * SPLIT
            # the next block's page entry
            page = tl.load(table_ptr + b * max_pages + tl.minimum((i + 1) // PARTS, n_pages - 1))
            b_k = k_desc.load([row, 0, 0])  # [SPLIT, SUB, HEAD_DIM]
            b_v = v_desc.load([row, 0, 0])
            if INTERPRETER:
                s = tl.dot(q3, tl.permute(b_k.to(tl.float32), 0, 2, 1))
            else:
                s = tl.dot(q3, tl.permute(b_k, 0, 2, 1))  # [SPLIT, GROUP_PAD, SUB]
            s = tl.where((i * BLOCK + offs_t < seq_len)[:, None, :], s * scale_log2, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=2))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a warp whose tokens so far are all past the end
            alpha = tl.exp2(m_i - m_use)
            p = tl.exp2(s - m_use[:, :, None])
            l_i = l_i * alpha + tl.sum(p, axis=2)
            if INTERPRETER:
                pv = tl.dot(p.to(tl.bfloat16).to(tl.float32), b_v.to(tl.float32))
            else:
                pv = tl.dot(p.to(tl.bfloat16), b_v)
            acc = acc * alpha[:, :, None] + pv
            m_i = m_new
        m, l_sum, acc_sum = _merge(m_i, l_i, acc)
        if CHUNKS == 1:
            p_o = out_ptr + (b * kv_heads * GROUP + rows)[:, None] * HEAD_DIM + offs_d[None, :]
            tl.store(p_o, (acc_sum / l_sum[:, None]).to(tl.bfloat16), mask=(offs_g < GROUP)[:, None])
        else:  # this chunk's state, merged with the others' by _chunks_kernel
            tl.store(part_ml_ptr + item * 2 * GROUP_PAD + offs_g, m)
            tl.store(part_ml_ptr + item * 2 * GROUP_PAD + GROUP_PAD + offs_g, l_sum)
            tl.store(part_acc_ptr + (item * GROUP_PAD + offs_g)[:, None] * HEAD_DIM + offs_d[None, :], acc_sum)


@triton.jit
def _merge(m, l_sum, acc):
    """Running softmax states (max, sum, weighted values) stacked along dim 0, merged into one; a state that saw no
    token (max -inf) weighs 0."""
    top = tl.max(m, axis=0)
    w = tl.exp2(m - tl.where(top == float("-inf"), 0.0, top)[None, :])
    return top, tl.sum(l_sum * w, axis=0), tl.sum(acc * w[:, :, None], axis=0)


@triton.jit
def _chunks_kernel(part_ml_ptr, part_acc_ptr, out_ptr, first_pair, chunks, GROUP: tl.constexpr,
                   GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, CHUNKS_PAD: tl.constexpr):
    """out of one (sequence, KV head), pair first_pair + program id, from its `chunks` chunks' states (the program's
    `chunks` consecutive states from the start of the part buffers)."""
    pair = first_pair + tl.program_id(0)  # b * kv_heads + h
    offs_c = tl.program_id(0) * chunks + tl.arange(0, CHUNKS_PAD)
    ok = tl.arange(0, CHUNKS_PAD) < chunks
    offs_g = tl.arange(0, GROUP_PAD)
    offs_d = tl.arange(0, HEAD_DIM)
    m = tl.load(part_ml_ptr + offs_c[:, None] * 2 * GROUP_PAD + offs_g[None, :], mask=ok[:, None],
                other=float("-inf"))  # a padding state weighs 0
    l_sum = tl.load(part_ml_ptr + offs_c[:, None] * 2 * GROUP_PAD + GROUP_PAD + offs_g[None, :], mask=ok[:, None],
                    other=0.0)
    acc = tl.load(part_acc_ptr + (offs_c[:, None, None] * GROUP_PAD + offs_g[None, :, None]) * HEAD_DIM +
                  offs_d[None, None, :], mask=ok[:, None, None], other=0.0)
    _, l_all, acc_all = _merge(m, l_sum, acc)
    p_o = out_ptr + (pair * GROUP + offs_g)[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(p_o, (acc_all / l_all[:, None]).to(tl.bfloat16), mask=(offs_g < GROUP)[:, None])


def _scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    """Triton's global scratch for the descriptors, from PyTorch's caching allocator (set for this launch only)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _gluon():
    """`smgemm.tools.attention_gluon`, or None where its Gluon (Triton 3.6's API) is not what is installed."""
    return attention_gluon if tuple(triton.__version__.split(".")[:2]) == ("3", "6") else None


def _output(q: torch.Tensor) -> torch.Tensor:
    """The attention's output, [batch, q_heads, head_dim] bf16 (one allocation, which the tests fill with NaN)."""
    return torch.empty_like(q)


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                     seq_lens: torch.Tensor, *, num_programs: int | None = None, stages: int | None = None,
                     warps: int = 2, chunks: int | None = None, parts: int = 1, kernel: str = "auto") -> torch.Tensor:
    """softmax(q K^T / sqrt(head_dim)) V for each sequence's one new token, GQA (q_heads a multiple of kv_heads),
    over the paged caches (layout in the module docstring). `num_programs`: the persistent grid (default: the
    kernel's programs an SM times the device's SMs; in a green context of fewer SMs, pass `PARTITION_PROGRAMS_PER_SM`
    times its SM count). `kernel`: "gluon" (`smgemm.tools.attention_gluon`: Triton 3.6 on Hopper, pages of 64 tokens,
    head_dim 128, at most 8 query heads a KV head), "tl" (this module's kernel) or "auto" (the Gluon kernel where it
    reads the operands and the call sets none of the `tl` kernel's own knobs, `warps` and `parts`).
    `stages`: page slots a program (default 3 for `tl`, 2 for Gluon); `warps` split each page's tokens between them,
    `parts` (a power of two) each page into parts of as many tokens an iteration (shorter chains, smaller stages);
    `chunks` (a power of two) splits each sequence's pages, whose states a second kernel merges (default: for the `tl`
    kernel 1 where there are as many (sequence, KV head) items as programs, else enough for one item a program, at
    least 8 pages a chunk; for the Gluon kernel only the last round's items, `tail_chunks`).
    bf16 in and out, fp32 softmax and accumulation."""
    batch, q_heads, head_dim = q.shape
    pages, kv_heads, page_size, _ = k_cache.shape
    if q_heads % kv_heads or k_cache.shape != v_cache.shape or k_cache.shape[-1] != head_dim:
        raise ValueError(f"shapes do not fit: q {tuple(q.shape)}, k_cache {tuple(k_cache.shape)}, "
                         f"v_cache {tuple(v_cache.shape)}")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype != torch.bfloat16 or not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous bf16")
    if kernel not in ("auto", "tl", "gluon"):
        raise ValueError(f"kernel must be 'auto', 'tl' or 'gluon', got {kernel!r}")
    fast = _gluon() if kernel != "tl" else None
    fits = fast is not None and fast.fits(q, k_cache)
    if kernel == "gluon" and not fits:
        raise ValueError("kernel='gluon' needs Triton 3.6, a Hopper GPU, pages of 64 tokens, head_dim 128 and "
                         f"at most 8 query heads a KV head; got triton {triton.__version__}, device {q.device}, "
                         f"k_cache {tuple(k_cache.shape)}, q {tuple(q.shape)}")
    gluon = fits and (kernel == "gluon" or (warps, parts) == (2, 1))
    if not gluon:
        if parts < 1 or parts & (parts - 1):
            raise ValueError(f"parts must be a power of two, got {parts}")
        if page_size % (16 * warps * parts):
            raise ValueError(f"page_size ({page_size}) must be a multiple of 16 tokens a warp ({warps} warps) "
                             f"in each of {parts} parts")
    group = q_heads // kv_heads
    group_pad = fast.MAX_GROUP if gluon else max(16, triton.next_power_of_2(group))
    out = _output(q)
    if num_programs is None:
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 4
        num_programs = (fast.PROGRAMS_PER_SM if gluon else 2) * sms
    pairs = batch * kv_heads
    if chunks is not None:  # every pair in `chunks` chunks
        if chunks < 1 or chunks & (chunks - 1):
            raise ValueError(f"chunks must be a power of two, got {chunks}")
        whole, tail = 0, chunks
    elif gluon:
        whole, tail = tail_chunks(pairs, num_programs, block_table.shape[1])
    else:  # chunks only where there are fewer pairs than programs: each chunk refills the pipeline
        whole, tail = 0, 1
        while pairs * tail < num_programs and block_table.shape[1] >= 16 * tail:
            tail *= 2
    if tail == 1:
        whole = pairs
    split = (pairs - whole) * tail  # chunks whose states the merge kernel reads
    part_ml = part_acc = None
    if split:
        part_ml = torch.empty(split, 2, group_pad, dtype=torch.float32, device=q.device)
        part_acc = torch.empty(split, group_pad, head_dim, dtype=torch.float32, device=q.device)
    if gluon:
        fast.decode_attention(q, k_cache, v_cache, block_table, seq_lens, out, num_programs, stages or fast.STAGES,
                              whole, tail, part_ml, part_acc)
    else:
        chunks = tail  # the tl kernel splits every pair alike (whole is 0 or all of them)
        grid = max(1, min(num_programs, pairs * chunks))
        interpreter = q.device.type == "cpu"
        token = _allocation._allocator.set(_scratch)  # device-built tensor descriptors live in a global scratch
        try:
            _decode_attention_kernel[(grid,)](
                q, k_cache, v_cache, block_table, seq_lens, out, part_ml, part_acc,
                batch, kv_heads, pages * kv_heads * page_size, block_table.shape[1],
                math.log2(math.e) / math.sqrt(head_dim), grid,
                GROUP=group, GROUP_PAD=group_pad, HEAD_DIM=head_dim, PAGE=page_size, SPLIT=warps, CHUNKS=chunks,
                STAGES=stages or 3, INTERPRETER=interpreter, PARTS=parts, num_warps=warps,
            )
        finally:
            _allocation._allocator.reset(token)
    if split:
        _chunks_kernel[(pairs - whole,)](part_ml, part_acc, out, whole, tail, GROUP=group, GROUP_PAD=group_pad,
                                         HEAD_DIM=head_dim, CHUNKS_PAD=triton.next_power_of_2(tail), num_warps=4)
    return out


def tail_chunks(pairs: int, programs: int, max_pages: int) -> tuple[int, int]:
    """(whole, tail) for the Gluon kernel: the pairs of the grid's whole rounds run whole, and the rest, fewer than
    the programs, as `tail` chunks each, as many as one more round holds, so that the last round takes a `tail`-th of a
    pair's time instead of a whole one (the way Stream-K splits a GEMM's last wave); (pairs, 1) where chunks would not
    halve it. At least 8 pages a chunk (each chunk refills the pipeline and is merged by a second kernel)."""
    left = pairs % programs
    tail = programs // left if left else 1
    tail = min(tail, max(1, max_pages // 8))
    return (pairs, 1) if tail < 2 else (pairs - left, tail)


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
