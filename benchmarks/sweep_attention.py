"""How fast the overlap benchmark's paged decode attention (`smgemm.tools.attention.decode_attention`) streams its
KV cache on slices of the GPU (green contexts of the given SM counts) and on the whole chip, per programs an SM,
pipeline stages, warps, chunks and parts of a page an iteration (GPU). The partner that overlaps best is the one
that reaches device-memory bandwidth on the fewest SMs; `PARTITION_PROGRAMS_PER_SM` comes from this sweep.
`--loads-only` adds the ceiling of its access pattern: a kernel making the same descriptor loads of the same pages
(a per-page max instead of the attention), one warp a program.

    PYTHONPATH=src python benchmarks/sweep_attention.py --sms 20,28,44
    PYTHONPATH=src python benchmarks/sweep_attention.py --sms 24,48 --loads-only
"""

import argparse
import contextlib

import torch
import triton
import triton.language as tl
from triton.runtime import _allocation

import smgemm
from smgemm.tools.attention import cache_bytes, decode_attention, paged_cache, reference_attention
from smgemm.tools.timing import environment, event_ms, int_list, table

# (programs an SM, stages, warps, chunks a sequence (None: decode_attention's default), parts a page). Each warp
# keeps its own running softmax over its tokens of each page, so a page's chain has no cross-warp exchange; shared
# memory holds 3 programs of 3 stages (64 KB each) or 2 of 4, and 6 of 3 stages on half pages (parts 2).
CONFIGS = [(2, 3, 2, None, 1), (3, 3, 2, None, 1), (3, 3, 2, 1, 1), (2, 4, 2, None, 1), (3, 3, 4, None, 1),
           (3, 3, 4, 1, 1), (2, 4, 4, None, 1), (3, 3, 1, None, 1), (4, 2, 2, None, 1), (5, 2, 1, None, 1),
           (6, 3, 1, None, 2), (4, 4, 2, None, 2), (8, 4, 1, None, 4)]
# (programs an SM, stages) of the loads-only kernel
LOAD_CONFIGS = [(2, 3), (3, 3), (2, 4), (1, 7)]


@triton.jit
def _loads_only_kernel(k_ptr, v_ptr, table_ptr, lens_ptr, out_ptr, batch, kv_heads, total_rows, max_pages,
                       num_programs, HEAD_DIM: tl.constexpr, PAGE: tl.constexpr, STAGES: tl.constexpr):
    """decode_attention's loop (one warp, a page a [1, PAGE, HEAD_DIM] box of K and one of V, the next page's table
    entry one iteration ahead) with a per-page max over the tokens in place of the attention."""
    k_desc = tl.make_tensor_descriptor(k_ptr, [total_rows // PAGE, PAGE, HEAD_DIM], [PAGE * HEAD_DIM, HEAD_DIM, 1],
                                       [1, PAGE, HEAD_DIM])
    v_desc = tl.make_tensor_descriptor(v_ptr, [total_rows // PAGE, PAGE, HEAD_DIM], [PAGE * HEAD_DIM, HEAD_DIM, 1],
                                       [1, PAGE, HEAD_DIM])
    for item in tl.range(tl.program_id(0), batch * kv_heads, num_programs):
        b = item // kv_heads
        h = item % kv_heads
        n_pages = tl.cdiv(tl.load(lens_ptr + b), PAGE)
        acc = tl.zeros((1, HEAD_DIM), tl.float32)
        page = tl.load(table_ptr + b * max_pages)
        for i in tl.range(0, n_pages, num_stages=STAGES):
            row = page * kv_heads + h
            page = tl.load(table_ptr + b * max_pages + tl.minimum(i + 1, n_pages - 1))
            acc += tl.max(k_desc.load([row, 0, 0]), axis=1).to(tl.float32)
            acc += tl.max(v_desc.load([row, 0, 0]), axis=1).to(tl.float32)
        tl.store(out_ptr + item * HEAD_DIM + tl.arange(0, HEAD_DIM), tl.sum(acc, axis=0))


def loads_only(k_cache, v_cache, block_table, seq_lens, num_programs: int, stages: int) -> torch.Tensor:
    """`_loads_only_kernel` over decode_attention's caches on a persistent grid of `num_programs`: [batch * kv_heads,
    head_dim] float32 sums of the per-page maxima."""
    pages, kv_heads, page_size, head_dim = k_cache.shape
    out = torch.empty(block_table.shape[0] * kv_heads, head_dim, device=k_cache.device)
    token = _allocation._allocator.set(  # the device-built descriptors' scratch, for this launch only
        lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device=k_cache.device))
    try:
        _loads_only_kernel[(num_programs,)](k_cache, v_cache, block_table, seq_lens, out, block_table.shape[0],
                                           kv_heads, pages * kv_heads * page_size, block_table.shape[1], num_programs,
                                           HEAD_DIM=head_dim, PAGE=page_size, STAGES=stages, num_warps=1)
    finally:
        _allocation._allocator.reset(token)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sms", type=int_list, default=[20, 28, 44],
                   help="partition sizes: multiples of 8 SMs (a green context of that size) or what a split leaves "
                        "of the device's 132 (20, 28, 36, 44, 52, ...); the whole chip is always added")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--context", type=int, default=16384)
    p.add_argument("--loads-only", action="store_true", help="also time the loads-only kernel (the ceiling)")
    args = p.parse_args()
    print(environment())
    q, k_cache, v_cache, table_, lens = paged_cache(args.batch, 8, 128, args.context)
    moved = cache_bytes(k_cache, lens)
    ref = reference_attention(q[:2], k_cache, v_cache, table_[:2], lens[:2])
    device_sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for sms in [*args.sms, device_sms]:
        part = None if sms >= device_sms else smgemm.SMPartition(sms) if sms % 8 == 0 else \
            smgemm.SMPartition.split(device_sms - sms)[1]
        if part is not None and part.num_sms != sms:
            print(f"skipped {sms} SMs: the driver gives a partition of {part.num_sms}")
            continue
        with part if part is not None else contextlib.nullcontext():
            for per_sm, stages, warps, chunks, parts in CONFIGS:
                def run(per_sm=per_sm, stages=stages, warps=warps, chunks=chunks, parts=parts, sms=sms):
                    return decode_attention(q, k_cache, v_cache, table_, lens, num_programs=per_sm * sms,
                                            stages=stages, warps=warps, chunks=chunks, parts=parts, kernel="tl")
                err = (run()[:2].double() - ref).abs().max().item()
                ms = event_ms(run, 10, warm_s=0.2)
                rows.append({"SMs": sms, "kernel": "attention", "programs an SM": per_sm, "stages": stages,
                             "warps": warps, "chunks": chunks or "auto", "parts": parts, "ms": ms,
                             "TB/s": moved / ms / 1e9, "GB/s an SM": moved / ms / 1e6 / sms, "max abs err": err})
                print(rows[-1], flush=True)
            for per_sm, stages in LOAD_CONFIGS if args.loads_only else []:
                def run(per_sm=per_sm, stages=stages, sms=sms):
                    return loads_only(k_cache, v_cache, table_, lens, per_sm * sms, stages)
                ms = event_ms(run, 10, warm_s=0.2)
                rows.append({"SMs": sms, "kernel": "loads only", "programs an SM": per_sm, "stages": stages,
                             "warps": 1, "chunks": 1, "parts": 1, "ms": ms, "TB/s": moved / ms / 1e9,
                             "GB/s an SM": moved / ms / 1e6 / sms, "max abs err": ""})
                print(rows[-1], flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()
