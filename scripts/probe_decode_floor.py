"""Probe (not part of the library): how fast can any MXFP4 decode GEMM be on this GPU?

Issue 5 asks for >= 3x over `torch.matmul` in bf16 on the decode shapes (M in {1, 16, 64}, (N, K) in {(4096,
4096), (8192, 8192), (14336, 4096)}). This probe measures, side by side in one run with the library's timing
(`bench._time_rotating`, weights rotated through ~256 MB of copies):

* torch bf16 and smgemm.linear on the MXFP4 weight;
* the read floor: the best of a few grids of a Triton kernel that only reads the MXFP4 weight's bytes (packed data
  and scales) and xor-reduces them, one int per program. No GEMM that reads the weight once can beat it;
* the same kernel on the bf16 weight (how close torch is to its own floor);
* an empty kernel on the whole chip, in a CUDA graph (the launch-to-launch floor of back-to-back calls);
* torch, smgemm and the read floor again in CUDA graphs (`bench._graph_rotating`), as serving engines run decode.

and prints, next to them, the tensor-core floor 2MNK / 989 TFLOP/s (H200 dense bf16 at its boost clock), which
matters at M = 64. `torch / floor` is the largest speed-up any kernel could show on that row.

    PYTHONPATH=src python scripts/probe_decode_floor.py
"""

import math

import torch
import triton
import triton.language as tl

import smgemm
from smgemm.bench import _graph_rotating, _table, _time_rotating, mx_decode_sets

SHAPES = [(m, n, k) for m in (1, 16, 64) for n, k in ((4096, 4096), (8192, 8192), (14336, 4096))]
PEAK_BF16 = 989e12  # dense bf16 FLOP/s of an H200 SXM (132 SMs, 1.98 GHz)


@triton.jit
def _read_kernel(d_ptr, n_d, s_ptr, n_s, out_ptr, chunk_d, chunk_s, BLOCK: tl.constexpr, STREAM: tl.constexpr):
    """xor of this program's chunk of two int32 arrays (so that nothing can be skipped), one int per program."""
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), dtype=tl.int32)
    start = pid * chunk_d
    for off in range(start, tl.minimum(start + chunk_d, n_d), BLOCK):
        if STREAM:  # read once: L2 need not keep it
            acc ^= tl.load(d_ptr + off + offs, mask=off + offs < n_d, other=0, eviction_policy="evict_first")
        else:
            acc ^= tl.load(d_ptr + off + offs, mask=off + offs < n_d, other=0)
    start = pid * chunk_s
    for off in range(start, tl.minimum(start + chunk_s, n_s), BLOCK):
        acc ^= tl.load(s_ptr + off + offs, mask=off + offs < n_s, other=0)
    tl.store(out_ptr + pid, tl.xor_sum(acc, axis=0))


@triton.jit
def _empty_kernel(out_ptr):
    pass


def _reader(programs: int, warps: int, block: int, stream: bool = False):
    out = torch.empty(programs, dtype=torch.int32, device="cuda")

    def read(data: torch.Tensor, scales: torch.Tensor) -> None:
        d, s = data.view(torch.int32).reshape(-1), scales.view(torch.int32).reshape(-1)
        chunk_d = math.ceil(d.numel() / programs / block) * block
        chunk_s = math.ceil(s.numel() / programs / block) * block
        _read_kernel[(programs,)](d, d.numel(), s, s.numel(), out, chunk_d, chunk_s, BLOCK=block, STREAM=stream,
                           num_warps=warps)

    return read


def main() -> None:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grids = ((sms, 8, 4096), (4 * sms, 4, 2048), (8 * sms, 4, 1024), (16 * sms, 4, 1024), (16 * sms, 4, 2048),
             (8 * sms, 8, 2048), (16 * sms, 4, 512), (32 * sms, 4, 1024))
    readers = {f"{p // sms}/SM w{w} b{b}": _reader(p, w, b) for p, w, b in grids}
    readers.update({f"{p // sms}/SM w{w} b{b} ef": _reader(p, w, b, True) for p, w, b in grids[3:5]})
    empty_out = torch.empty(1, dtype=torch.int32, device="cuda")
    empty_us = _graph_rotating(lambda o, _: _empty_kernel[(sms,)](o), [(empty_out, None)] * 16)
    rows = []
    for m, n, k in SHAPES:
        sets = mx_decode_sets(m, n, k)
        ok = torch.allclose(smgemm.linear(sets[0][0], sets[0][1]).float(),
                            (sets[0][0] @ sets[0][2].t()).float(), rtol=2e-2, atol=1e-1)
        t_torch = _time_rotating(lambda x, wd: torch.matmul(x, wd.t()), [(x, wd) for x, _, wd in sets])
        t_ours = _time_rotating(lambda x, w: smgemm.linear(x, w), [(x, w) for x, w, _ in sets])
        mx_floor = {name: _time_rotating(r, [(w.data, w.scales) for _, w, _ in sets]) for name, r in readers.items()}
        best = min(mx_floor, key=mx_floor.get)
        # the bf16 weight through the same reader (its second array: one int, read by program 0)
        bf16_floor = min(_time_rotating(r, [(wd, wd[:1, :2]) for _, _, wd in sets]) for r in readers.values())
        g_torch = _graph_rotating(lambda x, wd: torch.matmul(x, wd.t()), [(x, wd) for x, _, wd in sets])
        g_ours = _graph_rotating(lambda x, w: smgemm.linear(x, w), [(x, w) for x, w, _ in sets])
        g_floor = _graph_rotating(readers[best], [(w.data, w.scales) for _, w, _ in sets])
        t_mma = 2 * m * n * k / PEAK_BF16 * 1e3
        floor = max(mx_floor[best], t_mma)
        mx_bytes = sets[0][1].data.numel() + sets[0][1].scales.numel()
        rows.append({
            "M": m, "N": n, "K": k, "torch us": t_torch * 1e3, "smgemm us": t_ours * 1e3, "checked": ok,
            "MXFP4 read floor us": mx_floor[best] * 1e3, "reader": best,
            "read TB/s": mx_bytes / mx_floor[best] / 1e9, "bf16 read floor us": bf16_floor * 1e3,
            "MMA floor us": t_mma * 1e3, "torch / floor": t_torch / floor, "smgemm / floor": t_ours / floor,
            "3x target us": t_torch / 3 * 1e3, "graph: torch us": g_torch, "graph: smgemm us": g_ours,
            "graph: read floor us": g_floor, "graph: torch / floor": g_torch / max(g_floor, t_mma * 1e3),
        })
        del sets
    print(f"empty kernel, {sms} programs, in a CUDA graph: {empty_us:.2f} us per launch")
    print(_table(rows))


if __name__ == "__main__":
    main()
