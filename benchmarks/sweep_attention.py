"""How fast the overlap benchmark's paged decode attention (`smgemm.tools.attention.decode_attention`) streams its
KV cache on slices of the GPU (green contexts of the given SM counts) and on the whole chip, per programs an SM,
pipeline stages and warps (GPU). The partner that overlaps best is the one that reaches device-memory bandwidth on
the fewest SMs; `PARTITION_PROGRAMS_PER_SM` comes from this sweep.

    PYTHONPATH=src python benchmarks/sweep_attention.py --sms 20,28,44
"""

import argparse
import contextlib

import torch

import smgemm
from smgemm.tools.attention import cache_bytes, decode_attention, paged_cache, reference_attention
from smgemm.tools.timing import environment, event_ms, int_list, table

# (programs an SM, stages, warps, chunks a sequence; None: decode_attention's default). Each warp keeps its own running
# softmax over its tokens of each page, so a page's chain has no cross-warp exchange; shared memory holds 3 programs
# of 3 stages (64 KB each) or 2 of 4.
CONFIGS = [(2, 3, 2, None), (3, 3, 2, None), (3, 3, 2, 1), (2, 4, 2, None), (3, 3, 4, None), (3, 3, 4, 1),
           (2, 4, 4, None), (3, 3, 1, None), (4, 2, 2, None), (5, 2, 1, None)]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sms", type=int_list, default=[20, 28, 44],
                   help="partition sizes (green contexts come in multiples of 8 SMs from the device's 132: 20, 28, "
                        "36, 44, 52, ...); the whole chip is always added")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--context", type=int, default=16384)
    args = p.parse_args()
    print(environment())
    q, k_cache, v_cache, table_, lens = paged_cache(args.batch, 8, 128, args.context)
    moved = cache_bytes(k_cache, lens)
    ref = reference_attention(q[:2], k_cache, v_cache, table_[:2], lens[:2])
    device_sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for sms in [*args.sms, device_sms]:
        part = smgemm.SMPartition.split(device_sms - sms)[1] if sms < device_sms else None
        if part is not None and part.num_sms != sms:
            print(f"skipped {sms} SMs: the driver gives a partition of {part.num_sms}")
            continue
        with part if part is not None else contextlib.nullcontext():
            for per_sm, stages, warps, chunks in CONFIGS:
                def run(per_sm=per_sm, stages=stages, warps=warps, chunks=chunks, sms=sms):
                    return decode_attention(q, k_cache, v_cache, table_, lens, num_programs=per_sm * sms,
                                            stages=stages, warps=warps, chunks=chunks)
                err = (run()[:2].double() - ref).abs().max().item()
                ms = event_ms(run, 10, warm_s=0.2)
                rows.append({"SMs": sms, "programs an SM": per_sm, "stages": stages, "warps": warps,
                             "chunks": chunks or "auto", "ms": ms,
                             "TB/s": moved / ms / 1e9, "GB/s an SM": moved / ms / 1e6 / sms, "max abs err": err})
                print(rows[-1], flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()
