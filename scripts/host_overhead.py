"""Where the host time of a small cached GEMM call goes (GPU): ours end to end, ours without the launch,
our launch step alone, the cached compiled-kernel launcher alone, and torch.

    PYTHONPATH=src python scripts/host_overhead.py
"""

import torch

import smgemm
import smgemm._gemm as G
from smgemm.bench import _table
from smgemm.bench import host_us_per_call as per_call


def main():
    a = torch.randn(16, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    rows = [{"call": "smgemm.matmul", "us": per_call(lambda: smgemm.matmul(a, b))}]
    captured = {}
    real_launch = G._launch

    def capture(*args):
        captured["args"] = args

    G._launch = capture
    rows.append({"call": "smgemm.matmul, launch stubbed", "us": per_call(lambda: smgemm.matmul(a, b))})
    G._launch = real_launch
    args = captured["args"]
    rows.append({"call": "_launch (plan ready, cached launcher)", "us": per_call(lambda: real_launch(*args))})
    tensors, ints, floats, meta = G._kernel_args(*args)
    launcher = next(iter(G._LAUNCHERS.values()))  # filled by the first smgemm.matmul above
    stream = torch.cuda.current_stream().cuda_stream
    full = (*tensors, *ints, *floats, *meta.values())
    rows.append({"call": "_kernel_args", "us": per_call(lambda: G._kernel_args(*args))})
    rows.append({"call": "cached launcher alone", "us": per_call(lambda: launcher(*full, stream=stream))})
    rows.append({"call": "torch.cuda.current_stream().cuda_stream",
                 "us": per_call(lambda: torch.cuda.current_stream().cuda_stream)})
    rows.append({"call": "torch.matmul", "us": per_call(lambda: torch.matmul(a, b))})
    rows.append({"call": "torch.empty", "us": per_call(lambda: torch.empty(16, 64, device="cuda"))})
    print(_table(rows))


if __name__ == "__main__":
    main()
