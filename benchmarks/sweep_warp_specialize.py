"""Time Triton's automatic warp specialization on Hopper against the same kernel without it, smgemm's planner and
torch (GPU): the measurements behind docs/performance.md, "Warp specialization".

    PYTHONPATH=src python benchmarks/sweep_warp_specialize.py
    PYTHONPATH=src python benchmarks/sweep_warp_specialize.py --shapes 1x8192x8192x8192,32x2048x2048x128

The kernel is the plain persistent TMA matmul of Triton's tutorials (device-built 2-D tensor descriptors, one tile
loop, one K loop, a whole-tile store), bf16, B an [N, K] weight; a batched shape (BxMxNxK) runs as one 2-D problem
over the stacked matrices, so its M and N must be multiples of the tile. `ws` puts `warp_specialize=True` on the K
loop, `wsout` on the tile loop. Triton 3.6 specializes only kernels of 4 warps (one producer warpgroup beside two
consumer warpgroups: 12 warps run); with 8 warps it compiles the loop unspecialized. Each variant runs in a child
process with a time limit, so that a hang or a crash is a result too. The relative error of the first operand set
against float32 torch is printed beside each time (nan: the output was not written right).
"""

import argparse
import json
import subprocess
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _ws_matmul(a_ptr, b_ptr, c_ptr, M, N, K, BATCH, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
               GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr, WS: tl.constexpr, OUTER: tl.constexpr):
    """C[b] = A[b] @ B[b]^T for A [BATCH * M, K], B [BATCH * N, K], C [BATCH * M, N] (M % BM == N % BN == 0 when
    BATCH > 1), persistent over the tiles of all matrices."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[BATCH * M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[BATCH * N, K], strides=[K, 1], block_shape=[BN, BK])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[BATCH * M, N], strides=[N, 1], block_shape=[BM, BN])
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    per_matrix = num_pid_m * num_pid_n
    in_group = GROUP_M * num_pid_n
    for tile_id in tl.range(tl.program_id(0), per_matrix * BATCH, NUM_SMS, warp_specialize=WS and OUTER):
        matrix = tile_id // per_matrix
        t = tile_id % per_matrix
        first_m = t // in_group * GROUP_M
        rows = min(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (t % in_group) % rows
        pid_n = (t % in_group) // rows
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for ki in tl.range(tl.cdiv(K, BK), warp_specialize=WS and not OUTER):
            a = a_desc.load([matrix * M + pid_m * BM, ki * BK])
            b = b_desc.load([matrix * N + pid_n * BN, ki * BK])
            acc = tl.dot(a, b.T, acc)
        c_desc.store([matrix * M + pid_m * BM, pid_n * BN], acc.to(tl.bfloat16))


SHAPES = "1x8192x8192x8192,1x4096x14336x4096,1x2048x4096x4096,1x1024x6144x4096,32x2048x2048x128,64x256x1408x4096," \
         "1x1940x3928x128"
VARIANTS = {  # name -> (BM, BN, BK, warps, stages, warp_specialize, on the tile loop)
    "128x256x64 w8 s3": (128, 256, 64, 8, 3, False, False),
    "128x256x64 w4 s3 ws": (128, 256, 64, 4, 3, True, False),
    "128x256x64 w4 s3 wsout": (128, 256, 64, 4, 3, True, True),
    "128x128x64 w8 s4": (128, 128, 64, 8, 4, False, False),
    "128x128x64 w4 s4 ws": (128, 128, 64, 4, 4, True, False),
    "128x128x64 w4 s5 wsout": (128, 128, 64, 4, 5, True, True),
    "256x128x64 w4 s3 ws": (256, 128, 64, 4, 3, True, False),
}


def _operands(shape: str, copies: int = 4) -> list:
    b, m, n, k = (int(v) for v in shape.split("x"))
    return [(torch.randn(b, m, k, device="cuda").to(torch.bfloat16),
             torch.randn(b, n, k, device="cuda").to(torch.bfloat16)) for _ in range(copies)]


def _time_variant(name: str, shapes: list[str]) -> dict:
    """{shape: (us, rel err)} of one VARIANTS entry (nan where the shape does not fit the batched tiling)."""
    from smgemm.tools.timing import rel_err, time_rotating

    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    bm, bn, bk, warps, stages, ws, outer = VARIANTS[name]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    res = {}
    for shape in shapes:
        batch, m, n, k = (int(v) for v in shape.split("x"))
        if batch > 1 and (m % bm or n % bn):
            res[shape] = (float("nan"), float("nan"))
            continue
        sets = _operands(shape)

        def fn(a, b, batch=batch, m=m, n=n, k=k):
            c = torch.empty(batch, m, n, device="cuda", dtype=torch.bfloat16)
            tiles = batch * triton.cdiv(m, bm) * triton.cdiv(n, bn)
            _ws_matmul[(min(sms, tiles),)](a, b, c, m, n, k, batch, bm, bn, bk, 8, sms, ws, outer,
                                           num_warps=warps, num_stages=stages)
            return c

        ref = torch.bmm(sets[0][0].float(), sets[0][1].float().transpose(1, 2))
        res[shape] = (time_rotating(fn, sets) * 1e3, rel_err(fn(*sets[0]), ref))
    return res


def _time_peers(shapes: list[str]) -> dict:
    """{shape: (torch us, smgemm us)}: torch.bmm, and smgemm's planner (`smgemm.matmul` on one matrix, `smgemm.bmm`
    on several), on the same operands."""
    import smgemm
    from smgemm.tools.timing import time_rotating

    res = {}
    for shape in shapes:
        sets = [(a, b.transpose(1, 2)) for a, b in _operands(shape)]
        t_torch = time_rotating(torch.bmm, sets)
        if shape.startswith("1x"):
            t_ours = time_rotating(smgemm.matmul, [(a[0], b[0]) for a, b in sets])
        else:
            t_ours = time_rotating(smgemm.bmm, sets)
        res[shape] = (t_torch * 1e3, t_ours * 1e3)
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=SHAPES, help="comma list of BxMxNxK (B = 1: one matrix)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma list of names from VARIANTS")
    p.add_argument("--limit", type=float, default=120, help="seconds each variant's child process may take")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    shapes = args.shapes.split(",")
    if args.child:
        res = _time_peers(shapes) if args.child == "peers" else _time_variant(args.child, shapes)
        print("RESULT " + json.dumps(res))
        return
    from smgemm.tools.timing import environment

    print(environment())
    names = args.variants.split(",")
    results = {}
    for name in ["peers", *names]:
        try:
            child = subprocess.run([sys.executable, __file__, "--shapes", args.shapes, "--child", name],
                                   capture_output=True, text=True, timeout=args.limit)
            line = [x for x in child.stdout.splitlines() if x.startswith("RESULT ")]
            results[name] = json.loads(line[0][len("RESULT "):]) if line else "failed"
            if not line:
                print(f"{name}: failed\n{child.stderr[-600:]}")
        except subprocess.TimeoutExpired:
            results[name] = "timeout"
    peers = results["peers"] if isinstance(results["peers"], dict) else {}
    print(f"{'shape':20} {'torch us':>9} {'smgemm us':>9}  " + "  ".join(f"{v:>26}" for v in names))
    for shape in shapes:
        t_torch, t_ours = peers.get(shape, (float("nan"), float("nan")))
        cells = []
        for name in names:
            r = results[name]
            us, err = r[shape] if isinstance(r, dict) else (None, None)
            cells.append(f"{us:8.1f} ({t_torch / us:.2f}x) {err:.0e}" if us is not None else r)
        print(f"{shape:20} {t_torch:9.1f} {t_ours:9.1f}  " + "  ".join(f"{c:>26}" for c in cells))


if __name__ == "__main__":
    main()
