"""Run a GEMM on part of the GPU and a memory-bound kernel on the rest, at the same time (needs a CUDA GPU).

    PYTHONPATH=src python examples/overlap.py

`SMPartition.split(k)` gives two streams bound to green contexts on disjoint SMs, >= k and the rest (where the
driver provides green contexts; otherwise plain streams), and makes smgemm GEMMs inside `with part:` use at most
that partition's SMs.
"""

import torch

import smgemm

gemm_part, other_part = smgemm.SMPartition.split(100)  # the GEMM's share, and every other SM for the reduction
print(gemm_part, other_part, sep="\n")

a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
w = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
kv = torch.randn(200_000, 8192, device="cuda", dtype=torch.bfloat16)  # ~3.3 GB, like a KV cache

main = torch.cuda.current_stream()
for part in (gemm_part, other_part):
    part.stream.wait_stream(main)  # inputs are ready
with gemm_part:
    y = smgemm.matmul(a, w.t())  # num_sms=100 from the partition
with other_part:
    s = kv.sum(dim=1, dtype=torch.float32)
for part in (gemm_part, other_part):
    main.wait_stream(part.stream)  # results are ready for the main stream

ref = a.float() @ w.float().t()
print("GEMM rel err:", ((y.float() - ref).norm() / ref.norm()).item())
print("reduction max abs err:", (s - kv.float().sum(dim=1)).abs().max().item())
