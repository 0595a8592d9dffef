"""Run a GEMM on part of the GPU and a memory-bound kernel on the rest, at the same time (needs a CUDA GPU).

    PYTHONPATH=src python examples/overlap.py

`SMPartition(k)` gives a stream bound to a green context of k SMs (where torch and the driver provide green
contexts; otherwise a plain stream) and makes smgemm GEMMs inside `with part:` use at most k SMs.
"""

import torch

import smgemm

total = torch.cuda.get_device_properties(0).multi_processor_count
gemm_part = smgemm.SMPartition(66)  # the GEMM's share
other_part = smgemm.SMPartition(total - 66)  # everything else: a bandwidth-bound reduction
print(gemm_part, other_part, sep="\n")

a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
w = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
kv = torch.randn(200_000, 8192, device="cuda", dtype=torch.bfloat16)  # ~3.3 GB, like a KV cache

main = torch.cuda.current_stream()
for part in (gemm_part, other_part):
    part.stream.wait_stream(main)  # inputs are ready
with gemm_part:
    y = smgemm.matmul(a, w.t())  # num_sms=66 from the partition
with other_part:
    s = kv.sum(dim=1, dtype=torch.float32)
for part in (gemm_part, other_part):
    main.wait_stream(part.stream)  # results are ready for the main stream

ref = a.float() @ w.float().t()
print("GEMM rel err:", ((y.float() - ref).norm() / ref.norm()).item())
print("reduction max abs err:", (s - kv.float().sum(dim=1)).abs().max().item())
