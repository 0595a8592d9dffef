"""Where the host time of a small cached GEMM call goes (GPU): ours end to end, ours with the launch stubbed,
our launch step alone, the cached compiled-kernel launcher alone, and torch.

    PYTHONPATH=src python benchmarks/host_overhead.py
"""

import argparse

import torch

import smgemm
import smgemm._gemm as G
import smgemm._launch as L
from smgemm.tools.timing import host_us_per_call as per_call
from smgemm.tools.timing import table


def main():
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    a = torch.randn(16, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    rows = [{"call": "smgemm.matmul (repeat call)", "us": per_call(lambda: smgemm.matmul(a, b))}]
    G._SEEN_CALLS.clear()
    rows.append({"call": "smgemm.matmul, every check (no repeat-call entry)",
                 "us": per_call(lambda: (G._SEEN_CALLS.clear(), smgemm.matmul(a, b)))})
    captured = {}
    real_launch = G.launch

    def capture(*args):
        captured["args"] = args[:5]
        captured["launcher"] = real_launch(*args)
        return captured["launcher"]

    G.launch = capture
    G._SEEN_CALLS.clear()
    smgemm.matmul(a, b)  # the full path: it launches through `launch`
    G.launch = real_launch
    real_repeat = L.Repeat.__call__
    L.Repeat.__call__ = lambda *args: True  # a repeat call launches through its prepared `Repeat`
    rows.append({"call": "smgemm.matmul (repeat), launch stubbed", "us": per_call(lambda: smgemm.matmul(a, b))})
    L.Repeat.__call__ = real_repeat
    plan, tensors, ints, floats, meta = captured["args"]
    launcher = captured["launcher"]
    rows.append({"call": "launch (launcher known)",
                 "us": per_call(lambda: real_launch(plan, tensors, ints, floats, meta, launcher))})
    stream = torch.cuda.current_stream().cuda_stream
    full = (*tensors, *ints, L.epoch(), floats, *meta.values())
    addressed = (*L.addresses(tensors), *full[len(tensors):])
    rows.append({"call": "cached launcher alone (direct C launch)",
                 "us": per_call(lambda: launcher(addressed, stream))})
    rows.append({"call": "addresses(tensors)", "us": per_call(lambda: L.addresses(tensors))})
    rows.append({"call": "Triton's runner",
                 "us": per_call(lambda: launcher.runner(*full, stream=stream))})
    # Below Triton's runner: its CudaLauncher (scratch allocation in Python), then the generated C function itself,
    # given the tensors (it calls data_ptr and cuPointerGetAttribute on each) or their addresses as ints.
    kernel = next(c.cell_contents for c in launcher.runner.__closure__
                  if hasattr(c.cell_contents, "packed_metadata"))
    run, grid = kernel.run, plan.num_programs
    scratch = (torch.empty(grid * run.global_scratch_size, dtype=torch.int8, device="cuda")
               if run.global_scratch_size else None)
    head = (grid, 1, 1, stream, kernel.function)
    rows.append({"call": "CudaLauncher (Python)", "us": per_call(
        lambda: run(*head, kernel.packed_metadata, None, None, None, *full))})
    c_head = (*head, run.launch_cooperative_grid, run.launch_pdl, scratch, None, kernel.packed_metadata, None, None,
              None)
    rows.append({"call": "C launch, tensors", "us": per_call(lambda: run.launch(*c_head, *full))})
    ptrs = tuple(x.data_ptr() if isinstance(x, torch.Tensor) else x for x in full)
    rows.append({"call": "C launch, int addresses", "us": per_call(lambda: run.launch(*c_head, *ptrs))})
    present = [t for t in tensors if t is not None]
    rows.append({"call": "data_ptr() x tensors", "us": per_call(lambda: [t.data_ptr() for t in present])})
    rows.append({"call": "torch.matmul", "us": per_call(lambda: torch.matmul(a, b))})
    w = smgemm.quantize_mxfp4(torch.randn(64, 64, device="cuda"))
    rows.append({"call": "smgemm.linear, MXFP4 weight (fused)", "us": per_call(lambda: smgemm.linear(a, w))})
    rows.append({"call": "gemm_mxfp4, two passes (expand=True)",
                 "us": per_call(lambda: G.gemm_mxfp4(a, w, expand=True))})
    rows.append({"call": "torch.empty", "us": per_call(lambda: torch.empty(16, 64, device="cuda"))})
    print(table(rows))


if __name__ == "__main__":
    main()
