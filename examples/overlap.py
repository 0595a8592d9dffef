"""Run a prefill chunk's GEMMs on part of the GPU and decode attention on the rest, at the same time (needs a CUDA
GPU).

    PYTHONPATH=src python examples/overlap.py [GEMM_SMS [KERNEL]]

`SMPartition.split(k)` gives two streams bound to green contexts on disjoint SMs, >= k and the rest (where the
driver provides green contexts; otherwise plain streams), and makes smgemm GEMMs inside `with part:` use at most
that partition's SMs. The partner is a paged GQA decode attention that streams its KV cache through tensor
descriptors (smgemm.tools.attention; KERNEL: its `kernel`, "auto", "tl" or "gluon"), so it pulls most of the
device's bandwidth from the few SMs it gets. The script prints the time of the pair run one after the other and side
by side, and the gain.
"""

import sys

import torch

import smgemm
from smgemm.tools.attention import PARTITION_PROGRAMS_PER_SM, decode_attention, paged_cache
from smgemm.tools.timing import event_ms

gemm_sms = int(sys.argv[1]) if len(sys.argv) > 1 else 104
kernel = sys.argv[2] if len(sys.argv) > 2 else "auto"
gemm_part, attn_part = smgemm.SMPartition.split(gemm_sms)  # the GEMMs' share, and every other SM for attention
print(gemm_part, attn_part, sep="\n")

x = torch.randn(2048, 4096, device="cuda", dtype=torch.bfloat16)  # a prefill chunk's activations
h = torch.randn(2048, 14336, device="cuda", dtype=torch.bfloat16)  # and its MLP's hidden activations
# a Llama-3-8B layer's projections: qkv, o, gate/up (as [N, K] weights), and down
weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for n, k in
           ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))]
q, k_cache, v_cache, table, lens = paged_cache(64, 8, 128, 16384)  # 64 decode sequences of 16k tokens


def gemms():
    for w in weights:
        smgemm.matmul(h if w.shape[1] == 14336 else x, w.t())


def sequential():
    gemms()
    decode_attention(q, k_cache, v_cache, table, lens, kernel=kernel)


def side_by_side():
    main = torch.cuda.current_stream()
    for part in (gemm_part, attn_part):
        part.stream.wait_stream(main)  # inputs are ready
    with gemm_part:
        gemms()  # num_sms=gemm_sms from the partition
    with attn_part:
        decode_attention(q, k_cache, v_cache, table, lens, num_programs=PARTITION_PROGRAMS_PER_SM * attn_part.num_sms,
                         kernel=kernel)
    for part in (gemm_part, attn_part):
        main.wait_stream(part.stream)  # results are ready for the main stream


t_seq = event_ms(sequential, 10, warm_s=0.3)
t_part = event_ms(side_by_side, 10, warm_s=0.3)
print(f"attention kernel {kernel}: one after the other: {t_seq:.3f} ms; side by side on {gemm_sms} + "
      f"{attn_part.num_sms} SMs: {t_part:.3f} ms ({t_part / t_seq:.2f}x)")
