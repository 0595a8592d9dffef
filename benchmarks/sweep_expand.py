"""Time the MXFP4 expansion pass (`smgemm._gemm.expand_mxfp4`, the first half of the two-pass MXFP4 GEMM) with
several block shapes on the GPU, in GB/s of bytes moved (packed data and scales read, bf16 written), against a
device copy of the same output size.

    PYTHONPATH=src python benchmarks/sweep_expand.py --variants "64,256,4;128,256,8"
"""

import argparse

import torch

import smgemm
from smgemm._gemm import expand_mxfp4
from smgemm.tools.timing import environment, table, time_rotating


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="4096x4096,14336x4096,8192x8192", help="comma list of NxK weights")
    p.add_argument("--variants", default="64,256,4;64,256,8;128,256,8;128,128,4;32,512,4;64,512,8;128,512,8",
                   help="semicolon list of block_r,block_k,warps[,programs per SM (0: one per tile)]")
    p.add_argument("--num-sms", type=int, default=None)
    args = p.parse_args()
    print(environment())
    rows = []
    for shape in args.shapes.split(","):
        n, k = (int(v) for v in shape.split("x"))
        ws = [smgemm.quantize_mxfp4(torch.randn(n, k, device="cuda")) for _ in range(4)]
        moved = n * k * (0.5 + 1 / 32 + 2)
        ref = ws[0].dequantize(torch.bfloat16)
        dense = [(torch.empty_like(ref), ref.clone()) for _ in range(4)]
        t = time_rotating(lambda dst, src: dst.copy_(src), dense)
        rows.append({"weight": shape, "variant": "device copy (same output)", "us": t * 1e3,
                     "GB/s": 2 * n * k * 2 / t / 1e6, "exact": ""})
        for variant in args.variants.split(";"):
            block_r, block_k, warps, *rest = (int(v) for v in variant.split(","))
            extra = dict(zip(("per_sm",), rest))

            def run(w, _=None, block_r=block_r, block_k=block_k, warps=warps, extra=extra):
                return expand_mxfp4(w, torch.bfloat16, args.num_sms, block_r=block_r, block_k=block_k, warps=warps,
                                    **extra)

            exact = torch.equal(run(ws[0]).view(torch.int16), ref.view(torch.int16))
            t = time_rotating(run, [(w, None) for w in ws])
            grid = "".join(f" {key} {value}" for key, value in extra.items())
            rows.append({"weight": shape, "variant": f"{block_r}x{block_k} w{warps}{grid}", "us": t * 1e3,
                         "GB/s": moved / t / 1e6, "exact": exact})
            print(rows[-1], flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()
