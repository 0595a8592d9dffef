"""Time Hopper-path variants (TMA, loop flattening, warp specialization, tile shapes) against cuBLAS (GPU).

    PYTHONPATH=src python benchmarks/sweep_hopper.py [--shapes 8192x8192x8192,4096x14336x4096] [--budgets 132,66]

For each shape and SM budget: every variant's TFLOP/s and its ratio to the peer (torch.matmul on the whole chip,
cuBLASLt limited by the SM carve-out otherwise), operands rotated past L2, B a transposed [N, K] weight unless
--b-row-major. The rows feed the tile model in smgemm.plan (docs/performance.md).
"""

import argparse

import torch

from smgemm._gemm import gemm
from smgemm.plan import DTYPES, TileConfig
from smgemm.tools.bench import _operands, _torch_mm, _with_carveout
from smgemm.tools.timing import copies_for, rel_err, table, time_rotating

# name -> (BM, BN, BK bytes, warps, stages, tma, flatten, tma_store); BK = bytes / element size.
VARIANTS = {
    "ptr 128x256 w8 s3": (128, 256, 128, 8, 3, False, False, False),
    "tma 128x256 w8 s3": (128, 256, 128, 8, 3, True, False, False),
    "tma+flat 128x256 w8 s3": (128, 256, 128, 8, 3, True, True, False),
    "tma+flat+store 128x256 w8 s3": (128, 256, 128, 8, 3, True, True, True),
    "tma+flat+store 128x256 w8 s4": (128, 256, 128, 8, 4, True, True, True),
    "tma 128x128 w8 s4": (128, 128, 128, 8, 4, True, False, False),
    "tma+flat+store 128x128 w8 s4": (128, 128, 128, 8, 4, True, True, True),
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--shapes", default="8192x8192x8192,4096x14336x4096")
    p.add_argument("--budgets", default="132,66")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names from VARIANTS")
    p.add_argument("--b-row-major", action="store_true", help="B stored [K, N] row-major (torch.matmul's usual)")
    args = p.parse_args()
    dtype = DTYPES[args.dtype]
    elem = torch.empty((), dtype=dtype).element_size()
    total = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        sets = _operands(m, n, k, dtype, copies_for(m, n, k, dtype))
        if args.b_row_major:
            sets = [(a, b.contiguous()) for a, b in sets]
        for sms in (int(s) for s in args.budgets.split(",")):
            if sms >= total:
                peer, peer_name = _torch_mm(dtype), "torch"
            else:
                bias = torch.zeros(n, device="cuda", dtype=torch.bfloat16 if elem == 1 else dtype)
                peer = _with_carveout(total - sms, lambda a, b, bias=bias: torch.addmm(bias, a, b))
                peer_name = "cuBLASLt"
            ref = peer(*sets[0])
            t_peer = time_rotating(peer, sets)
            flop = 2 * m * n * k
            for name in args.variants.split(","):
                bm, bn, bk_bytes, warps, stages, tma, flat, store = VARIANTS[name]
                cfg = TileConfig(bm, bn, bk_bytes // elem, num_warps=warps, num_stages=stages, tma=tma, flatten=flat,
                                 tma_store=store)
                row = {"shape": shape, "SMs": sms, "variant": name}
                try:
                    fn = lambda a, b, cfg=cfg, sms=sms: gemm(a, b, config=cfg, schedule="persistent", num_sms=sms)
                    err = rel_err(fn(*sets[0]), ref)
                    t = time_rotating(fn, sets)
                    row.update({"TFLOP/s": flop / t / 1e9, "peer": peer_name, "peer TFLOP/s": flop / t_peer / 1e9,
                                "vs peer": t_peer / t, "err": f"{err:.1e}"})
                except Exception as e:  # a variant that does not compile is a result too
                    row.update({"TFLOP/s": 0.0, "peer": peer_name, "peer TFLOP/s": 0.0, "vs peer": 0.0,
                                "err": f"{type(e).__name__}: {str(e)[:60]}"})
                rows.append(row)
                print(row, flush=True)
        del sets
    print(table(rows))


if __name__ == "__main__":
    main()
