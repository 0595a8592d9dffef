"""One launch of torch.matmul and one of smgemm.matmul per shape, between cudaProfilerStart/Stop, for Nsight
Compute (GPU). Compilation and warm-up happen outside the profiled range.

    ncu --profile-from-start off --clock-control none --section SpeedOfLight --section LaunchStats \\
        python scripts/profile_shapes.py --shapes 512x512x32768,128x6144x4096
"""

import argparse

import torch
from sweep_configs import parse_variant, plan_for_programs_per_sm

import smgemm
import smgemm._gemm
from smgemm.bench import DTYPES


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--shapes", required=True, help="comma list of MxNxK")
    p.add_argument("--schedule", default=None)
    p.add_argument("--mxfp4", action="store_true",
                   help="smgemm.linear on an MXFP4 weight (N, K) against torch.matmul on its bf16 dequantization")
    p.add_argument("--both", action="store_true", help="with --mxfp4: MXFP4 activations too")
    p.add_argument("--config", default=None,
                   help='the variant smgemm runs, as in sweep_configs.py ("16x64x512 w4 s4 sk")')
    p.add_argument("--programs-per-sm", type=int, default=1,
                   help="experiment: plan for this many times the SMs (several programs per SM)")
    args = p.parse_args()
    kw = {"schedule": args.schedule} if args.schedule else {}
    if args.config:
        kw["config"], kw["schedule"] = parse_variant(args.config)
    if args.programs_per_sm > 1:
        plan_for_programs_per_sm(args.programs_per_sm)
    dtype = DTYPES[args.dtype]
    calls = []
    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        a = torch.randn(m, k, device="cuda").to(dtype)
        b = torch.randn(n, k, device="cuda").to(dtype).t()
        if args.mxfp4:
            w = smgemm.quantize_mxfp4(torch.randn(n, k, device="cuda"))
            a, b = a.to(torch.bfloat16), w.dequantize().t()
            if args.both:
                a = smgemm.quantize_mxfp4(a.float())
            dense_a = a.dequantize() if args.both else a
            calls.append((shape, "torch", lambda a=dense_a, b=b: torch.matmul(a, b)))
            calls.append((shape, "smgemm", lambda a=a, w=w: smgemm._gemm.gemm_mxfp4(a, w, **kw)))
            continue
        calls.append((shape, "torch", lambda a=a, b=b: torch.matmul(a, b)))
        calls.append((shape, "smgemm", lambda a=a, b=b: smgemm._gemm.gemm(a, b, **kw)))
    for _, _, fn in calls:  # compile, plan, warm up
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for shape, who, fn in calls:
        torch.cuda.nvtx.range_push(f"{who} {shape}")
        fn()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    for i, (shape, who, _) in enumerate(calls):
        print(f"launch {i}: {who} {shape}")


if __name__ == "__main__":
    main()
