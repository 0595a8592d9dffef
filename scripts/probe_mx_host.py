"""Host time of a small `smgemm.linear` call with an MXFP4 weight against dense calls, and a profile of it (GPU).

    PYTHONPATH=src python scripts/probe_mx_host.py
"""

import cProfile
import pstats
import time

import torch

import smgemm
import smgemm._gemm as G
from smgemm.bench import host_us_per_call as per_call


def _one_call_us(fn) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e6


def main():
    a = torch.randn(16, 64, device="cuda", dtype=torch.bfloat16)
    w = smgemm.quantize_mxfp4(torch.randn(64, 64, device="cuda"))
    b = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    linear = lambda: smgemm.linear(a, w)
    print("linear mx", per_call(linear), "matmul", per_call(lambda: smgemm.matmul(a, b)))
    print("gemm_mxfp4", per_call(lambda: G.gemm_mxfp4(a, w)))
    print("one call + sync us", _one_call_us(linear))
    print("matmul one call + sync us", _one_call_us(lambda: smgemm.matmul(a, b)))
    print("keys", len(G._SEEN_CALLS), [k[0] for k in G._SEEN_CALLS])
    profile = cProfile.Profile()
    profile.runcall(lambda: [linear() for _ in range(500)])
    torch.cuda.synchronize()
    pstats.Stats(profile).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
