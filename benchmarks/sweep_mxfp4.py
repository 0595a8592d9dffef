"""Time MXFP4 kernel variants against the planner's choice and torch (bf16 on the dequantized weight) on the H200:
the measurements behind the MXFP4 rules in smgemm.plan. Variants as in benchmarks/sweep_configs.py, plus "swap" (the
kernel computes (W @ A^T)^T) and "prefetch" (the next K step's weight tile expanded during this step's dot).
Weights rotate through ~256 MB of copies, so that neither side runs from L2.

    PYTHONPATH=src python benchmarks/sweep_mxfp4.py --shapes 16x8192x8192 --variants "16x64x256 w4 s4 swap sk"
    PYTHONPATH=src python benchmarks/sweep_mxfp4.py --both --shapes 4096x4096x4096 --variants "..."
    PYTHONPATH=src python benchmarks/sweep_mxfp4.py --graph --layout kwords --shapes 16x6144x4096 \\
        --variants "16x64x512 w4 s3 dp"
"""

import argparse
import math

import torch
from sweep_configs import plan_for_programs_per_sm, report, sweep_shape

import smgemm
import smgemm._gemm
from smgemm._device import device_spec
from smgemm._gemm import gemm_mxfp4
from smgemm.plan import mx_expands
from smgemm.tools.bench import describe_mx
from smgemm.tools.timing import environment, graph_rotating, rel_err, time_rotating


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", required=True, help="comma list of MxNxK")
    p.add_argument("--variants", required=True, help="semicolon list of variants")
    p.add_argument("--both", action="store_true", help="MXFP4 activations too")
    p.add_argument("--num-sms", type=int, default=None)
    p.add_argument("--layout", default="ocp", help="the weight's byte layout (smgemm.mxfp4.LAYOUTS)")
    p.add_argument("--expand", choices=("auto", "on", "off"), default="auto",
                   help="the planner row's MXFP4 path: as planned, or forced to two passes (on) or fused (off)")
    p.add_argument("--expand-blocks", default="",
                   help="block_r,block_k,warps of the expansion pass (under a budget and on the whole chip)")
    p.add_argument("--graph", action="store_true",
                   help="time CUDA-graph replays (as the bench's graph columns and serving engines' decode), not "
                        "back-to-back eager calls")
    p.add_argument("--programs-per-sm", type=int, default=1,
                   help="experiment: plan persistent / Stream-K grids for a device with this many times its SMs "
                        "(several programs per SM; Stream-K then relies on them being resident together)")
    args = p.parse_args()
    print(environment())
    spec = device_spec(torch.device("cuda"))
    if args.expand_blocks:
        blocks = dict(zip(("block_r", "block_k", "warps"), map(int, args.expand_blocks.split(","))))
        smgemm._gemm._EXPAND.update(blocks)
        smgemm._gemm._EXPAND_CHIP.update(blocks)
    if args.programs_per_sm > 1:
        spec = plan_for_programs_per_sm(args.programs_per_sm)
        print(f"experiment: planning for {spec.num_sms} SMs ({args.programs_per_sm} programs per SM)")
    # milliseconds a call, as sweep_shape takes them
    timer = (lambda fn, sets: graph_rotating(fn, sets) / 1e3) if args.graph else time_rotating
    rows = []
    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        sets = []
        for _ in range(max(1, min(16, math.ceil(256e6 / (n * k * 2))))):
            w = smgemm.quantize_mxfp4(torch.randn(n, k, device="cuda"), layout=args.layout)
            x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
            xq = smgemm.quantize_mxfp4(x.float()) if args.both else x
            sets.append(((xq, w), ((xq.dequantize(torch.bfloat16) if args.both else x), w.dequantize().t())))
        ours, peer = [s for s, _ in sets], [q for _, q in sets]
        ref = torch.matmul(*peer[0])

        def run(kw, ours=ours, ref=ref):
            if not kw and args.expand != "auto":
                kw = {"expand": args.expand == "on"}
            fn = lambda act, weight: gemm_mxfp4(act, weight, num_sms=args.num_sms, **kw)
            return rel_err(fn(*ours[0]), ref), timer(fn, ours)

        expand = {"on": True, "off": False}.get(args.expand, mx_expands(m, n, k, args.both))
        label = describe_mx(m, n, k, spec, expand, args.num_sms, args.layout, args.both) + \
            f" (planner, expand {args.expand})"
        rows += sweep_shape(shape, 2 * m * n * k, label, args.variants, run,
                            timer(torch.matmul, peer))
        del sets, ours, peer
    report(rows)

if __name__ == "__main__":
    main()
