"""The overlap partner's decode attention in Gluon (Triton 3.6 on Hopper), its loops timed beside the `tl` kernel
(`smgemm.tools.attention.decode_attention(kernel="tl")`) on slices of the GPU (GPU, Triton 3.6; Gluon's API differs in
3.7 and 3.8).

Each program (one warpgroup, 4 warps) walks (sequence, KV head) items and keeps a ring of `stages` K/V page slots,
each filled by two TMA copies that signal one mbarrier, and each page's table entry is loaded one iteration before
its copies. `--pipe` lists the loops to time. The warpgroup loops compute, per page, on the tensor cores with the
GQA group (4 query heads) padded to 8, the narrow side of each product:

    S^T [page, 8]     = K [page, head_dim] @ Q^T [head_dim, 8]        (wgmma m64n8k16)
    O^T [head_dim, 8] += V^T [head_dim, page] @ P^T [page, 8]         (V^T a transposed view of V's slot; P^T stored)

with the softmax in between (the max over the page's tokens crosses the four warps):
- "none": each page's products complete before its softmax goes on; the slot is refilled once every warp is past it
  (`stages - 1` pages in flight while a page is computed);
- "carry": the next page's S is issued before this page's softmax, and this page's P V stays in flight into the next
  iteration (ptxas then serializes every wgmma, warning C7514: the in-flight accumulator crosses the back edge);
- "wait": the next page's S during this page's softmax, both products complete before the back edge;
- "regs": as "none", but K and V^T go to registers (wgmma's A operand) as the page lands, and the slot is refilled
  before they are computed on (all `stages` slots in flight).
"warps" is `smgemm.tools.attention_gluon`'s kernel, the one `decode_attention` runs: each warp its own 16 tokens of a
page on mma.sync with its own running softmax, K and V in registers as in "regs", no barrier between the warps' chains
but the one that frees a slot. `--drop` leaves out a part of the work of the "none" loop (the O product, the S
product, the cross-warp max, or all three: the loads alone; the results are then wrong) to time what each costs.

    PYTHONPATH=src python benchmarks/sweep_attention_gluon.py --sms 16,24,32,48 --pipe warps --configs 3x2,2x3,4x1
    PYTHONPATH=src python benchmarks/sweep_attention_gluon.py --sms 24,48 --pipe none,wait,regs --configs 1x6,2x3,3x2
    PYTHONPATH=src python benchmarks/sweep_attention_gluon.py --sms 24 --configs 1x6,2x3 --drop none,o,s,max,all
"""

import argparse
import contextlib
import math

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_init,
    warpgroup_mma_wait,
)

import smgemm
from smgemm.tools import attention_gluon
from smgemm.tools.attention import cache_bytes, decode_attention, paged_cache, reference_attention
from smgemm.tools.attention_gluon import _issue
from smgemm.tools.timing import environment, event_ms, int_list, table

DROPS = {"none": 0, "o": 1, "s": 2, "max": 3, "all": 4}  # what `--drop` leaves out (module docstring)
PIPES = {"none": 0, "carry": 1, "wait": 2, "regs": 3, "warps": 4}  # the loops of `--pipe` (module docstring)


@gluon.jit
def _softmax_step(s_t, m_i, l_rows, first_token, seq_len, scale_log2, offs_tok, cols: gl.constexpr,
                  GROUP_PAD: gl.constexpr, DROP: gl.constexpr):
    """One page's scores into (P, alpha, the new max, the new per-row sums)."""
    s_t = gl.where((first_token + offs_tok < seq_len)[:, None], s_t * scale_log2, float("-inf"))
    if DROP == 3 or DROP == 4:
        m_new = gl.zeros([GROUP_PAD], gl.float32, layout=cols)
    else:
        m_new = gl.maximum(m_i, gl.max(s_t, axis=0))  # across the warps: a barrier
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(s_t - m_new[None, :])
    return p, alpha, m_new, l_rows * alpha[None, :] + p


@gluon.jit
def _ring_attention_kernel(q_ptr, k_desc, v_desc, table_ptr, lens_ptr, out_ptr,
                           batch, kv_heads, max_pages, scale_log2, num_programs,
                           GROUP: gl.constexpr, GROUP_PAD: gl.constexpr, HEAD_DIM: gl.constexpr, PAGE: gl.constexpr,
                           STAGES: gl.constexpr, PIPE: gl.constexpr, DROP: gl.constexpr, num_warps: gl.constexpr):
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                  instr_shape=[16, GROUP_PAD, 16])
    a_regs: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    cols: gl.constexpr = gl.SliceLayout(0, mma)
    rows: gl.constexpr = gl.SliceLayout(1, mma)
    q_blocked: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    k_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, PAGE, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES, PAGE, HEAD_DIM], v_desc.layout)
    q_smem = gl.allocate_shared_memory(gl.bfloat16, [GROUP_PAD, HEAD_DIM],
                                       gl.NVMMASharedLayout.get_default_for([GROUP_PAD, HEAD_DIM], gl.bfloat16))
    p_smem = gl.allocate_shared_memory(gl.bfloat16, [2, PAGE, GROUP_PAD],
                                       gl.NVMMASharedLayout.get_default_for([PAGE, GROUP_PAD], gl.bfloat16))
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(bars.index(s), count=1)
    offs_qg = gl.arange(0, GROUP_PAD, layout=gl.SliceLayout(1, q_blocked))
    offs_qd = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, q_blocked))
    offs_tok = gl.arange(0, PAGE, layout=rows)
    offs_d = gl.arange(0, HEAD_DIM, layout=rows)
    offs_g = gl.arange(0, GROUP_PAD, layout=cols)
    q_t = q_smem.permute((1, 0))
    zero_s = gl.zeros([PAGE, GROUP_PAD], gl.float32, layout=mma)
    it = 0  # pages this program consumed: slot it % STAGES, mbarrier phase (it // STAGES) & 1
    for item in range(gl.program_id(0), batch * kv_heads, num_programs):
        b = item // kv_heads
        h = item % kv_heads
        seq_len = gl.load(lens_ptr + b)
        n_pages = gl.cdiv(seq_len, PAGE)
        row_base = b * max_pages
        AHEAD: gl.constexpr = STAGES if PIPE == 3 else STAGES - 1  # pages in flight as a page is computed
        for j in gl.static_range(AHEAD):
            page = gl.load(table_ptr + row_base + gl.minimum(j, n_pages - 1))
            _issue(k_desc, v_desc, k_smem, v_smem, bars, page, j < n_pages, (it + j) % STAGES, kv_heads, h, PAGE)
        nxt = gl.load(table_ptr + row_base + gl.minimum(AHEAD, n_pages - 1))  # one iteration ahead of its use
        q_rows = b * kv_heads * GROUP + h * GROUP + offs_qg
        q = gl.load(q_ptr + q_rows[:, None] * HEAD_DIM + offs_qd[None, :], mask=(offs_qg < GROUP)[:, None],
                    other=0.0)
        q_smem.store(q)
        fence_async_shared()
        gl.thread_barrier()
        m_i = gl.full([GROUP_PAD], float("-inf"), gl.float32, layout=cols)
        l_rows = gl.zeros([PAGE, GROUP_PAD], gl.float32, layout=mma)
        if PIPE == 3:
            o_acc = gl.zeros([HEAD_DIM, GROUP_PAD], gl.float32, layout=mma)
            for i in range(n_pages):
                slot = it % STAGES
                mbarrier.wait(bars.index(slot), (it // STAGES) & 1)
                k_reg = k_smem.index(slot).load(a_regs)  # [PAGE, HEAD_DIM]: wgmma's A from registers
                v_reg = v_smem.index(slot).permute((1, 0)).load(a_regs)  # V^T [HEAD_DIM, PAGE]
                gl.thread_barrier()  # every warp holds its share of the page: the slot is free again
                _issue(k_desc, v_desc, k_smem, v_smem, bars, nxt, i + STAGES < n_pages, slot, kv_heads, h, PAGE)
                nxt = gl.load(table_ptr + row_base + gl.minimum(i + STAGES + 1, n_pages - 1))
                s_t = warpgroup_mma(k_reg, q_t, zero_s, use_acc=False)
                p, alpha, m_i, l_rows = _softmax_step(s_t, m_i, l_rows, i * PAGE, seq_len, scale_log2, offs_tok,
                                                      cols, GROUP_PAD, DROP)
                p_buf = p_smem.index(i % 2)
                p_buf.store(p.to(gl.bfloat16))
                fence_async_shared()
                gl.thread_barrier()
                o_acc = warpgroup_mma(v_reg, p_buf, o_acc * alpha[None, :])
                it += 1
        elif PIPE != 0:
            mbarrier.wait(bars.index(it % STAGES), (it // STAGES) & 1)
            s_cur = warpgroup_mma(k_smem.index(it % STAGES), q_t, zero_s, use_acc=False)
            o_tok = warpgroup_mma_init(gl.zeros([HEAD_DIM, GROUP_PAD], gl.float32, layout=mma))
            for i in range(n_pages):
                slot = it % STAGES
                # the next page's S on the tensor cores during this page's softmax (stages >= 3: that page's copies
                # were issued an iteration ago)
                mbarrier.wait(bars.index((it + 1) % STAGES), ((it + 1) // STAGES) & 1, pred=i + 1 < n_pages)
                s_tok = warpgroup_mma(k_smem.index((it + 1) % STAGES), q_t, zero_s, use_acc=False, is_async=True)
                p, alpha, m_i, l_rows = _softmax_step(s_cur, m_i, l_rows, i * PAGE, seq_len, scale_log2, offs_tok,
                                                      cols, GROUP_PAD, DROP)
                o_acc = warpgroup_mma_wait(1, deps=(o_tok,)) * alpha[None, :]  # the previous page's P V
                p_buf = p_smem.index(i % 2)
                p_buf.store(p.to(gl.bfloat16))
                fence_async_shared()
                gl.thread_barrier()  # P stored, and every warp past the previous P V: its slot is free
                _issue(k_desc, v_desc, k_smem, v_smem, bars, nxt, i + STAGES - 1 < n_pages,
                       (it + STAGES - 1) % STAGES, kv_heads, h, PAGE)
                nxt = gl.load(table_ptr + row_base + gl.minimum(i + STAGES, n_pages - 1))
                o_tok = warpgroup_mma(v_smem.index(slot).permute((1, 0)), p_buf, o_acc, is_async=True)
                if PIPE == 2:  # both products complete before the loop's back edge
                    s_cur, o_acc = warpgroup_mma_wait(0, deps=(s_tok, o_tok))
                    o_tok = warpgroup_mma_init(o_acc)
                else:
                    s_cur = warpgroup_mma_wait(1, deps=(s_tok,))
                it += 1
            o_acc = warpgroup_mma_wait(0, deps=(o_tok,))
        else:
            o_acc = gl.zeros([HEAD_DIM, GROUP_PAD], gl.float32, layout=mma)
            for i in range(n_pages):
                slot = it % STAGES
                mbarrier.wait(bars.index(slot), (it // STAGES) & 1)
                if DROP == 2 or DROP == 4:
                    s_t = zero_s
                else:
                    s_t = warpgroup_mma(k_smem.index(slot), q_t, zero_s, use_acc=False)
                p, alpha, m_i, l_rows = _softmax_step(s_t, m_i, l_rows, i * PAGE, seq_len, scale_log2, offs_tok,
                                                      cols, GROUP_PAD, DROP)
                # past the cross-warp max no warp still reads the previous page's slot or P: both may be refilled
                _issue(k_desc, v_desc, k_smem, v_smem, bars, nxt, i + STAGES - 1 < n_pages,
                       (it + STAGES - 1) % STAGES, kv_heads, h, PAGE)
                nxt = gl.load(table_ptr + row_base + gl.minimum(i + STAGES, n_pages - 1))
                if DROP == 1 or DROP == 4:
                    o_acc = o_acc * alpha[None, :]
                else:
                    p_smem.index(0).store(p.to(gl.bfloat16))
                    fence_async_shared()
                    gl.thread_barrier()
                    o_acc = warpgroup_mma(v_smem.index(slot).permute((1, 0)), p_smem.index(0),
                                          o_acc * alpha[None, :])
                it += 1
        o = o_acc / gl.sum(l_rows, axis=0)[None, :]
        out_rows = b * kv_heads * GROUP + h * GROUP + offs_g
        gl.store(out_ptr + out_rows[None, :] * HEAD_DIM + offs_d[:, None], o.to(gl.bfloat16),
                 mask=(offs_g < GROUP)[None, :])
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(s))


def ring_attention(q, k_cache, v_cache, block_table, seq_lens, *, num_programs: int, stages: int = 3,
                   pipe: str = "none", drop: str = "none", chunks: int | None = None) -> torch.Tensor:
    """decode_attention's result through `_ring_attention_kernel` (or for "warps", `tools.attention_gluon` with
    `chunks`) on a persistent grid of `num_programs`."""
    if pipe == "warps":
        return decode_attention(q, k_cache, v_cache, block_table, seq_lens, num_programs=num_programs, stages=stages,
                                chunks=chunks, kernel="gluon")
    batch, q_heads, head_dim = q.shape
    kv_heads, page_size = k_cache.shape[1:3]
    if (pipe in ("carry", "wait") and stages < 3) or (pipe == "none" and stages < 2):
        raise ValueError(f"--pipe {pipe} keeps a page's slot while the next pages load: too few stages ({stages})")
    group = q_heads // kv_heads
    k_desc, v_desc = attention_gluon.page_descriptors(k_cache, v_cache)
    out = torch.empty_like(q)
    grid = max(1, min(num_programs, batch * kv_heads))
    _ring_attention_kernel[(grid,)](
        q, k_desc, v_desc, block_table, seq_lens, out, batch, kv_heads, block_table.shape[1],
        math.log2(math.e) / math.sqrt(head_dim), grid, GROUP=group, GROUP_PAD=max(8, triton.next_power_of_2(group)),
        HEAD_DIM=head_dim, PAGE=page_size, STAGES=stages, PIPE=PIPES[pipe], DROP=DROPS[drop], num_warps=4)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sms", type=int_list, default=[24, 48], help="green contexts of these SM counts (multiples of "
                   "8); the whole chip is always added")
    p.add_argument("--configs", default="3x2,2x3,1x6", help="comma list of PROGRAMSxSTAGES: programs an SM, ring slots")
    p.add_argument("--pipe", default="none,regs,warps", help=f"comma list of {', '.join(PIPES)}")
    p.add_argument("--drop", default="none", help=f"comma list of {', '.join(DROPS)} (with --pipe none)")
    p.add_argument("--chunks", default="auto", help="comma list of chunks a (sequence, KV head) for --pipe warps: "
                   "powers of two, or auto (`decode_attention`'s default)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--context", type=int, default=16384)
    args = p.parse_args()
    configs = [tuple(int(v) for v in c.split("x")) for c in args.configs.split(",")]
    print(environment())
    q, k_cache, v_cache, table_, lens = paged_cache(3, 8, 128, 1000, seed=1)
    lens = torch.tensor([1000, 37, 65], dtype=torch.int32, device="cuda")  # partial last pages, a page and a token
    ref = reference_attention(q, k_cache, v_cache, table_, lens)
    print(f"short sequences, decode_attention (tl): max abs err "
          f"{(decode_attention(q, k_cache, v_cache, table_, lens, kernel='tl').double() - ref).abs().max().item():.3g}")
    for pipe in args.pipe.split(","):
        err = (ring_attention(q, k_cache, v_cache, table_, lens, num_programs=2, pipe=pipe).double() - ref).abs().max()
        print(f"short sequences, --pipe {pipe}: max abs err {err.item():.3g}")
    q, k_cache, v_cache, table_, lens = paged_cache(args.batch, 8, 128, args.context)
    moved = cache_bytes(k_cache, lens)
    pages_read = int((-(-lens // k_cache.shape[2])).sum()) * k_cache.shape[1]  # (sequence, KV head) pages
    device_sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for sms in [*args.sms, device_sms]:
        with smgemm.SMPartition(sms) if sms < device_sms else contextlib.nullcontext():
            runs = [("tl", 3, 3, "none", "none", "auto")]
            runs += [("gluon", per_sm, stages, pipe, drop, chunks) for per_sm, stages in configs
                     for pipe in args.pipe.split(",") for drop in (args.drop.split(",") if pipe == "none" else ["none"])
                     for chunks in (args.chunks.split(",") if pipe == "warps" else ["1"])
                     if stages >= {"none": 2, "carry": 3, "wait": 3}.get(pipe, 1)]
            for kind, per_sm, stages, pipe, drop, chunks in runs:
                if kind == "tl":
                    def run(per_sm=per_sm, stages=stages, sms=sms):
                        return decode_attention(q, k_cache, v_cache, table_, lens, num_programs=per_sm * sms,
                                                stages=stages, kernel="tl")
                else:
                    def run(per_sm=per_sm, stages=stages, pipe=pipe, drop=drop, sms=sms, chunks=chunks):
                        return ring_attention(q, k_cache, v_cache, table_, lens, num_programs=per_sm * sms,
                                              stages=stages, pipe=pipe, drop=drop,
                                              chunks=None if chunks == "auto" else int(chunks))
                ms = event_ms(run, 10, warm_s=0.2)
                rows.append({"SMs": sms, "kernel": kind, "pipe": pipe, "programs an SM": per_sm,
                             "stages": stages, "chunks": chunks, "left out": drop, "ms": ms, "TB/s": moved / ms / 1e9,
                             "us a page a program": ms * 1e3 * per_sm * sms / pages_read})
                print(rows[-1], flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()
