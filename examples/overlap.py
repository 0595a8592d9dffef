"""Run a GEMM on part of the GPU and a memory-bound kernel on the rest, at the same time (needs a CUDA GPU).

    PYTHONPATH=src python examples/overlap.py

`SMPartition.split(k)` gives two streams bound to green contexts on disjoint SMs, >= k and the rest (where the
driver provides green contexts; otherwise plain streams), and makes smgemm GEMMs inside `with part:` use at most
that partition's SMs.
"""

import torch

import smgemm
from smgemm.tools.overlap import kv_scores  # a bandwidth-bound GEMV that reaches ~3.8 TB/s on 52 SMs

gemm_part, other_part = smgemm.SMPartition.split(80)  # the GEMM's share, and every other SM for the GEMV
print(gemm_part, other_part, sep="\n")

a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
w = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
kv = torch.randn(200_000, 8192, device="cuda", dtype=torch.bfloat16)  # ~3.3 GB, like a KV cache
q = torch.randn(8192, device="cuda")
scores = torch.empty(kv.shape[0], device="cuda")

main = torch.cuda.current_stream()
for part in (gemm_part, other_part):
    part.stream.wait_stream(main)  # inputs are ready
with gemm_part:
    y = smgemm.matmul(a, w.t())  # num_sms=80 from the partition
with other_part:
    kv_scores(kv, q, scores)  # the hardware keeps it off the GEMM's SMs
for part in (gemm_part, other_part):
    main.wait_stream(part.stream)  # results are ready for the main stream

ref = a.float() @ w.float().t()
print("GEMM rel err:", ((y.float() - ref).norm() / ref.norm()).item())
head = kv[:4096].double() * q.double()
print("GEMV max rel err:", ((scores[:4096].double() - head.sum(dim=1)).abs() / head.abs().sum(dim=1)).max().item())
