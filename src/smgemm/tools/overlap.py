"""`python -m smgemm bench overlap`: a GEMM on k SMs beside a memory-bound kernel on the rest of the chip.

NanoFlow-style intra-device parallelism: a compute-bound GEMM and a bandwidth-bound kernel each need only part of
the chip, so running them side by side can beat running them one after the other. The bandwidth-bound kernel is
a decode-attention-like GEMV, scores = K @ q over a large bf16 "KV cache" K (`kv_scores`, a Triton kernel that
keeps enough loads in flight to reach device-memory bandwidth from a fraction of the SMs, as decode attention
kernels do; torch.sum, by contrast, needs the whole chip). For each k the table reports wall times of

* sequential: the GEMM on the whole chip, then the GEMV on the whole chip (one stream);
* concurrent: both on the whole chip, on two streams (the hardware interleaves their blocks as it likes);
* partitioned: `SMPartition.split(k)`: the GEMM with num_sms=k in a green context of >= k SMs, the GEMV in
  one of the SMs left over (disjoint; the driver rounds the first up to a multiple of 8 SMs on the H200).

Every run draws fresh operands, checks the GEMM against torch and the GEMV against float64.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import triton
import triton.language as tl

import smgemm

from .timing import PLOT_SKIPPED, environment, event_ms, int_list, pyplot, save_figure, shape, table


@triton.jit
def _kv_scores_kernel(kv_ptr, q_ptr, out_ptr, rows, COLS: tl.constexpr, BLOCK_R: tl.constexpr,
                      BLOCK_C: tl.constexpr, STAGES: tl.constexpr, EVICT: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    acc = tl.zeros((BLOCK_R, BLOCK_C), dtype=tl.float32)
    for c0 in tl.range(0, COLS, BLOCK_C, num_stages=STAGES):
        c = c0 + tl.arange(0, BLOCK_C)
        x = tl.load(kv_ptr + r[:, None].to(tl.int64) * COLS + c[None, :], mask=(r < rows)[:, None], other=0.0,
                    eviction_policy=EVICT)
        acc += x.to(tl.float32) * tl.load(q_ptr + c)[None, :]
    tl.store(out_ptr + r, tl.sum(acc, axis=1), mask=r < rows)


def kv_scores(kv: torch.Tensor, q: torch.Tensor, out: torch.Tensor, *, block_r: int = 8, block_c: int = 1024,
              stages: int = 4, warps: int = 8, evict_first: bool = False) -> None:
    """out[r] = sum_c kv[r, c] * q[c] in fp32: kv [R, C] bf16 contiguous, q [C] fp32, C a multiple of block_c.
    Each program reads block_r rows, block_c columns at a time, `stages` loads in flight. `evict_first` marks the
    streamed lines first to leave L2, so that they displace less of what a kernel beside it keeps there."""
    rows, cols = kv.shape
    _kv_scores_kernel[(triton.cdiv(rows, block_r),)](kv, q, out, rows, COLS=cols, BLOCK_R=block_r, BLOCK_C=block_c,
                                                       STAGES=stages, EVICT="evict_first" if evict_first else "",
                                                       num_warps=warps)


def _side_by_side(first: tuple[torch.cuda.Stream, Callable], second: tuple[torch.cuda.Stream, Callable]) -> None:
    """Launch two pieces of work on two streams, ordered after and before the current stream's work."""
    main = torch.cuda.current_stream()
    for stream, work in (first, second):
        stream.wait_stream(main)
        with torch.cuda.stream(stream):
            work()
    for stream, _ in (first, second):
        main.wait_stream(stream)


def bench_overlap(
    gemm_shape: tuple[int, int, int], mem_bytes: float, budgets: list[int], reps: int = 20,
    gemv: dict[str, int] | None = None, evict_first: bool = False,
) -> list[dict[str, object]]:

    def steady_ms(run: Callable[[], object], reps: int) -> float:  # every measurement at steady clocks
        return event_ms(run, reps, warm_s=0.2)

    m, n, k = gemm_shape
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    cols = 8192
    x = torch.randn(max(1, int(mem_bytes / (2 * cols))), cols, device="cuda").to(torch.bfloat16)
    q = torch.randn(cols, device="cuda")
    r = torch.empty(x.shape[0], device="cuda", dtype=torch.float32)

    def reduce() -> None:
        kv_scores(x, q, r, **(gemv or {}), evict_first=evict_first)

    def gemm(num_sms: int | None = None) -> Callable[[], None]:
        return lambda: smgemm.matmul(a, w.t(), num_sms=num_sms, out=d)

    gemm()()
    reduce()
    ref = torch.matmul(a, w.t())
    gemm_err = ((d.float() - ref.float()).norm() / ref.float().norm()).item()
    head = x[:4096].double() * q.double()  # fp32 sums of 8192 terms: within 8192 * 2^-24 of the sum of magnitudes
    red_err = ((r[:4096].double() - head.sum(dim=1)).abs() / head.abs().sum(dim=1)).max().item()
    if not (gemm_err < 1e-2 and red_err < 1e-3):
        raise RuntimeError(f"wrong results before timing: GEMM rel err {gemm_err:.2e}, GEMV {red_err:.2e}")

    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    t_gemm = steady_ms(gemm(), reps)
    t_mem = steady_ms(reduce, reps)
    t_seq = steady_ms(lambda: (gemm()(), reduce()), reps)
    t_conc = steady_ms(lambda: _side_by_side((s1, gemm()), (s2, reduce)), reps)
    rows = []
    for sms in budgets:
        g_part, m_part = smgemm.SMPartition.split(sms)
        t_gemm_k = steady_ms(gemm(sms), reps)
        t_part = steady_ms(lambda g=g_part, p=m_part, sms=sms: _side_by_side((g.stream, gemm(sms)), (p.stream, reduce)),
                          reps)
        rows.append({
            "GEMM SMs": sms, "other SMs": m_part.num_sms, "isolated": g_part.isolated and m_part.isolated,
            "GEMM alone ms": t_gemm, "GEMM on k SMs ms": t_gemm_k, "GEMV alone ms": t_mem,
            "sequential ms": t_seq, "concurrent ms": t_conc, "partitioned ms": t_part,
            "partitioned / sequential": t_part / t_seq,
        })
    return rows


def plot_overlap(rows: list[dict[str, object]], path: str, title: str) -> str:
    """PNG of wall time against the GEMM's SM count for the three ways of running the pair."""
    plt = pyplot()
    if plt is None:
        return PLOT_SKIPPED.format(path)
    sms = [r["GEMM SMs"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.plot(sms, [r["sequential ms"] for r in rows], ":", color="gray", label="sequential (full chip each)")
    ax.plot(sms, [r["concurrent ms"] for r in rows], "--", label="concurrent, two streams (full chip each)")
    ax.plot(sms, [r["partitioned ms"] for r in rows], "o-", label="partitioned: GEMM on k SMs, GEMV on the rest")
    ax.set(title=title, xlabel="k: SMs given to the GEMM", ylabel="wall time per pair (ms)")
    ax.grid(alpha=0.3)
    ax.legend()
    return save_figure(fig, path)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gemm", default=(8192, 8192, 8192), type=shape, help="MxNxK of the bf16 GEMM (B an [N, K] weight)")
    p.add_argument("--mem-gb", type=float, default=6.0, help="GB the bandwidth-bound GEMV reads")
    p.add_argument("--num-sms", default=[32, 48, 66, 80, 100, 116], type=int_list, help="GEMM SM counts k to sweep")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--gemv", default=[8, 1024, 4, 8], type=int_list,
                   help="the GEMV kernel's block_r,block_c,stages,warps")
    p.add_argument("--evict-first", action="store_true", help="the GEMV's loads leave L2 first (evict_first)")
    p.add_argument("--plot", default="smgemm_overlap.png", help="PNG path ('' skips)")


def run(args: argparse.Namespace) -> int:
    print(environment())
    if not torch.cuda.is_available():
        print("The overlap benchmark needs a CUDA GPU (it times concurrent streams); nothing to do on a CPU.")
        return 0
    if len(args.gemv) != 4:
        raise SystemExit("--gemv takes four ints: block_r,block_c,stages,warps")
    gemv = dict(zip(("block_r", "block_c", "stages", "warps"), args.gemv))
    print(f"GEMV kernel: {gemv}, evict_first={args.evict_first}")
    rows = bench_overlap(args.gemm, args.mem_gb * 1e9, args.num_sms, args.reps, gemv, args.evict_first)
    print(table(rows))
    best = min(rows, key=lambda r: r["partitioned / sequential"])
    print(f"best k = {best['GEMM SMs']}: partitioned / sequential = {best['partitioned / sequential']:.3f}")
    if args.plot:
        print(plot_overlap(rows, args.plot, f"{'x'.join(map(str, args.gemm))} bf16 GEMM + {args.mem_gb:g} GB GEMV"))
    return 0
