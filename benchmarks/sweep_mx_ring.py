"""The ring kernel (`kernels.mx_ring`: Gluon, Triton 3.6, Hopper) against the `tl` plans it replaces and torch, side
by side in one process (GPU): CUDA-graph replays of `smgemm.linear` at M = 1 on "hopper" weights (rotated through
~256 MB of copies), planned as usual and inside `smgemm.plan.overrides(ring=False)`, beside torch.matmul in bf16 on
the dequantized weights; then the 8B-shaped 4-layer model's batch-1 decode (`smgemm.tools.model`, forward passes as
CUDA-graph replays) the same three ways, `--model-reps` times.

    PYTHONPATH=src python benchmarks/sweep_mx_ring.py
    PYTHONPATH=src python benchmarks/sweep_mx_ring.py --shapes 4096x4096,14336x4096 --model-reps 0
"""

import argparse

import torch

import smgemm
import smgemm._gemm
from smgemm.tools.model import forward_ms, llama_models
from smgemm.tools.timing import environment, graph_rotating, table

LLAMA = "4096x4096,1024x4096,14336x4096,4096x14336,6144x4096,128256x4096,8192x8192,28672x8192,8192x28672,128256x8192"


def _linear(act, weight):
    return smgemm.linear(act, weight)


def _forget():
    """Later calls are planned afresh (a remembered call keeps the plan it was made under)."""
    smgemm._gemm._SEEN_CALLS.clear()


def gemm_rows(shapes: list[tuple[int, int]]) -> list[dict]:
    rows = []
    for n, k in shapes:
        sets = []
        for _ in range(max(1, min(16, -(-256_000_000 // (n * k * 2))))):
            w = smgemm.quantize_mxfp4(torch.randn(n, k, device="cuda"), layout="hopper")
            sets.append((torch.randn(1, k, device="cuda").to(torch.bfloat16), w, w.dequantize(torch.bfloat16)))
        x, w, wd = sets[0]
        ref = x.double() @ wd.double().t()
        ours = [s[:2] for s in sets]
        _forget()
        err = ((smgemm.linear(x, w).double() - ref).abs().max() / ref.abs().max()).item()
        ring = graph_rotating(_linear, ours)
        with smgemm.plan.overrides(ring=False):
            _forget()
            tl = graph_rotating(_linear, ours)
        _forget()
        peer = graph_rotating(torch.matmul, [(s[0], s[2].t()) for s in sets])
        rows.append({"M x N x K": f"1 x {n} x {k}", "planned us": ring, "without the ring us": tl, "torch us": peer,
                     "planned vs without": tl / ring, "vs torch": peer / ring, "max rel err": f"{err:.1e}"})
        print(rows[-1], flush=True)
        del sets, ours
    return rows


@torch.no_grad()
def model_rows(reps: int) -> list[dict]:
    model, ours, _ = llama_models("mid", mxfp4=True, device="cuda")
    ids = torch.randint(0, model.config.vocab_size, (1, 1), device="cuda")
    rows = []
    def ours_forward():
        return ours(ids)

    for rep in range(reps):
        t_torch = forward_ms(lambda: model(ids))
        _forget()
        t_ring = forward_ms(ours_forward)
        with smgemm.plan.overrides(ring=False):
            _forget()
            t_tl = forward_ms(ours_forward)
        _forget()
        rows.append({"run": rep, "torch ms": t_torch, "planned ms": t_ring, "without the ring ms": t_tl,
                     "planned speed-up": t_torch / t_ring, "without: speed-up": t_torch / t_tl})
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=LLAMA, help="comma list of NxK (the weight's shape; M = 1)")
    p.add_argument("--model-reps", type=int, default=3, help="model decode repetitions (0: none)")
    args = p.parse_args()
    print(environment())
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",") if s]
    print(table(gemm_rows(shapes)))
    if args.model_reps:
        print(table(model_rows(args.model_reps)))


if __name__ == "__main__":
    main()
