"""Two CUDA graphs in one process, the first captured on cuda:1, the second on cuda:0 (needs two GPUs).

    PYTHONPATH=src python scripts/probe_two_gpu_graphs.py MODE     # MODE: 3-4 letters, e.g. ttg, ssg, ttgl

MODE[0], the cuda:1 call: t (torch `@`) or s (smgemm.matmul); MODE[1], the cuda:0 call: t (torch ops that
allocate) or s (smgemm Stream-K); MODE[2]: g (capture the cuda:1 call in a graph) or e (run it eagerly); MODE[3]:
l (both captures with capture_error_mode="thread_local"), else torch's default ("global").
"""

import sys

import torch

import smgemm


def capture(dev, fn, mode):
    with torch.cuda.device(dev):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode=mode):
            out = fn()
        graph.replay()
        torch.cuda.synchronize()
    return graph, out


def main():
    mode = sys.argv[1]
    err_mode = "thread_local" if mode[3:] == "l" else "global"
    a1 = torch.randn(256, 512, device="cuda:1", dtype=torch.bfloat16)
    b1 = torch.randn(512, 256, device="cuda:1", dtype=torch.bfloat16)
    a0 = torch.randn(256, 8192, device="cuda:0", dtype=torch.bfloat16)
    b0 = torch.randn(8192, 384, device="cuda:0", dtype=torch.bfloat16)
    f1 = (lambda: a1 @ b1) if mode[0] == "t" else (lambda: smgemm.matmul(a1, b1))
    f0 = ((lambda: torch.empty(1000, device="cuda:0").add_(1).sum() + (a0 @ b0).sum()) if mode[1] == "t"
          else (lambda: smgemm.matmul(a0, b0, schedule="streamk")))
    step = "cuda:1"
    try:
        kept = capture(1, f1, err_mode) if mode[2] == "g" else f1()
        torch.cuda.synchronize()
        step = "cuda:0"
        capture(0, f0, err_mode)
        print(mode, "ok", type(kept).__name__)
    except Exception as e:  # a probe: say where and what
        print(mode, "FAIL at", step, str(e).splitlines()[0])


if __name__ == "__main__":
    main()
