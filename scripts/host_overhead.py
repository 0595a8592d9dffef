"""Where the host time of a small cached GEMM call goes (GPU): ours end to end, ours with the launch stubbed,
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
    rows = [{"call": "smgemm.matmul (repeat call)", "us": per_call(lambda: smgemm.matmul(a, b))}]
    G._SEEN_CALLS.clear()
    rows.append({"call": "smgemm.matmul, every check (no repeat-call entry)",
                 "us": per_call(lambda: (G._SEEN_CALLS.clear(), smgemm.matmul(a, b)))})
    captured = {}
    real_launch = G._launch

    def capture(*args):
        captured["args"] = args
        return real_launch(*args)

    G._launch = capture
    smgemm.matmul(a, b)
    smgemm.matmul(a, b)  # a repeat call: it passes the launcher along
    G._launch = lambda *args: None
    rows.append({"call": "smgemm.matmul (repeat), launch stubbed", "us": per_call(lambda: smgemm.matmul(a, b))})
    G._launch = real_launch
    plan, tensors, ints, floats, meta, launcher = captured["args"]
    rows.append({"call": "_launch (launcher known)",
                 "us": per_call(lambda: real_launch(plan, tensors, ints, floats, meta, launcher))})
    stream = torch.cuda.current_stream().cuda_stream
    full = (*tensors, *ints, G._epoch(), *floats, *meta.values())
    rows.append({"call": "cached launcher alone", "us": per_call(lambda: launcher(*full, stream=stream))})
    rows.append({"call": "torch.matmul", "us": per_call(lambda: torch.matmul(a, b))})
    w = smgemm.quantize_mxfp4(torch.randn(64, 64, device="cuda"))
    rows.append({"call": "smgemm.linear, MXFP4 weight (fused)", "us": per_call(lambda: smgemm.linear(a, w))})
    rows.append({"call": "gemm_mxfp4, two passes (expand=True)",
                 "us": per_call(lambda: G.gemm_mxfp4(a, w, expand=True))})
    rows.append({"call": "torch.empty", "us": per_call(lambda: torch.empty(16, 64, device="cuda"))})
    print(_table(rows))


if __name__ == "__main__":
    main()
