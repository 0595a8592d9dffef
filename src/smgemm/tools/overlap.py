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

`--step` runs one decoder layer's work of a mixed serving batch instead (`bench_step`): the GEMMs of a prefill
chunk (QKV, O, gate/up, down of a Llama-3-8B-shaped layer for `--tokens` tokens) beside the decode batch's
attention over a paged KV cache (`tools.attention.decode_attention`; or, with `--partner mxfp4`, the decode
batch's own GEMMs on MXFP4 weights), sequentially, concurrently on two streams, and partitioned for each k. It
reports each side alone on its partition (TFLOP/s, TB/s), the SM clock and power while each mode runs, and the
pair model: the partitioned time cannot beat the slower side alone on its partition, so the best k's modelled
time is min over k of max(GEMMs alone on k SMs, partner alone on the rest), which the measured time is divided by.
Two more columns say where a partitioned step loses to the model: each side's own time while the pair runs (events on
its stream), and the step with a compute-only partner (`_spin_kernel`) that takes as long alone on the same SMs but
touches no memory, so that what remains between the two is contention in device memory and L2.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
from collections.abc import Callable, Iterator

import torch
import triton
import triton.language as tl

import smgemm

from .attention import PARTITION_PROGRAMS_PER_SM, cache_bytes, decode_attention, paged_cache, reference_attention
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


def _side_by_side(first: tuple[torch.cuda.Stream, Callable], second: tuple[torch.cuda.Stream, Callable],
                  events: list[torch.cuda.Event] | None = None) -> None:
    """Launch two pieces of work on two streams, ordered after and before the current stream's work; `events`
    (four), when given, are recorded on each stream before and after its work."""
    main = torch.cuda.current_stream()
    for i, (stream, work) in enumerate((first, second)):
        stream.wait_stream(main)
        with torch.cuda.stream(stream):
            if events is not None:
                events[2 * i].record()
            work()
            if events is not None:
                events[2 * i + 1].record()
    for stream, _ in (first, second):
        main.wait_stream(stream)


def _sides_in_pair(first: tuple[torch.cuda.Stream, Callable], second: tuple[torch.cuda.Stream, Callable],
                   reps: int) -> tuple[float, float]:
    """Milliseconds each of two pieces of work takes while they run side by side (`_side_by_side`), from events on
    their own streams: what each side loses to the other, against its time alone."""
    _side_by_side(first, second)  # warm-up
    events = [[torch.cuda.Event(enable_timing=True) for _ in range(4)] for _ in range(reps)]
    for rep in events:
        _side_by_side(first, second, rep)
    torch.cuda.synchronize()
    return (sum(e[0].elapsed_time(e[1]) for e in events) / reps, sum(e[2].elapsed_time(e[3]) for e in events) / reps)


@triton.jit
def _spin_kernel(out_ptr, iters):
    """Arithmetic only: a partner that occupies its SMs without touching device memory or L2."""
    v = tl.program_id(0).to(tl.float32) + tl.arange(0, 128).to(tl.float32)
    for _ in range(iters):
        v = v * 1.0000001 + 1e-7
    tl.store(out_ptr + tl.program_id(0) * 128 + tl.arange(0, 128), v)


def compute_only(programs: int, ms: float, device: torch.device) -> Callable[[], None]:
    """A `_spin_kernel` launch of `programs` that takes about `ms` alone, on the current stream's SMs (call it
    inside the partition it will run in)."""
    out = torch.empty(programs * 128, device=device)
    probe = 20000
    t = event_ms(lambda: _spin_kernel[(programs,)](out, probe, num_warps=2), 3)
    iters = max(1, round(probe * ms / t))
    return lambda: _spin_kernel[(programs,)](out, iters, num_warps=2)


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


# A Llama-3-8B layer: hidden 4096, 32 query / 8 KV heads of 128, MLP 14336. (N, K) of each projection.
STEP_PROJECTIONS = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}


@contextlib.contextmanager
def gpu_sampler(samples: list[tuple[float, float]]) -> Iterator[None]:
    """Append (SM clock MHz, power W) read by nvidia-smi every 20 ms while the block runs (nothing where nvidia-smi
    is missing)."""
    try:
        proc = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                                 "-lms", "20"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    except OSError:
        yield
        return
    try:
        yield
    finally:
        proc.terminate()
        out, _ = proc.communicate()
        for line in out.splitlines():
            try:
                clock, power = (float(v) for v in line.split(","))
            except ValueError:
                continue
            samples.append((clock, power))


def _clock_power(run: Callable[[], object], reps: int) -> tuple[float, float]:
    """Mean SM clock and power while `run` repeats for ~0.3 s (the first third of the samples dropped)."""
    samples: list[tuple[float, float]] = []
    with gpu_sampler(samples):
        event_ms(run, reps, warm_s=0.3)
    tail = samples[len(samples) // 3:] or [(float("nan"), float("nan"))]
    return sum(c for c, _ in tail) / len(tail), sum(p for _, p in tail) / len(tail)


def bench_step(tokens: int, batch: int, context: int, budgets: list[int], reps: int = 10, partner: str = "attention",
               decode_layers: int = 8,
               attention_kernel: str = "auto") -> tuple[list[dict[str, object]], dict[str, object]]:
    """One serving step's layer: the prefill chunk's GEMMs beside the decode batch's memory-bound work (see the
    module docstring; `attention_kernel`: `decode_attention`'s `kernel`). Returns a row per k and a summary (modes'
    clocks and power, the best k against the model)."""

    def steady_ms(run: Callable[[], object]) -> float:
        return event_ms(run, reps, warm_s=0.2)

    x = torch.randn(tokens, 4096, device="cuda").to(torch.bfloat16)
    h = torch.randn(tokens, 14336, device="cuda").to(torch.bfloat16)
    weights = {name: torch.randn(n, k, device="cuda").to(torch.bfloat16) for name, (n, k) in STEP_PROJECTIONS.items()}
    flops = 2 * tokens * sum(n * k for n, k in STEP_PROJECTIONS.values())

    def gemms(num_sms: int | None = None) -> Callable[[], None]:
        def run() -> None:
            for name, w in weights.items():
                smgemm.matmul(h if name == "down" else x, w.t(), num_sms=num_sms)
        return run

    if partner == "attention":
        q, k_cache, v_cache, table_, lens = paged_cache(batch, 8, 128, context)
        moved = cache_bytes(k_cache, lens)
        out = decode_attention(q, k_cache, v_cache, table_, lens, kernel=attention_kernel)
        few = slice(0, 2)  # the float64 reference of two sequences
        ref = reference_attention(q[few], k_cache, v_cache, table_[few], lens[few])
        bound = 2.0**-8 * (ref.abs() + v_cache.abs().max().double()) + 1e-4  # bf16 out and probabilities
        if not ((out[few].double() - ref).abs() <= bound).all():
            raise RuntimeError("decode attention disagrees with SDPA before timing")

        def side(num_sms: int | None = None) -> Callable[[], None]:  # on the whole device or num_sms of a partition
            programs = None if num_sms is None else PARTITION_PROGRAMS_PER_SM * num_sms
            return lambda: decode_attention(q, k_cache, v_cache, table_, lens, num_programs=programs,
                                            kernel=attention_kernel)
    elif partner == "mxfp4":
        xs = torch.randn(batch, 4096, device="cuda").to(torch.bfloat16)
        hs = torch.randn(batch, 14336, device="cuda").to(torch.bfloat16)
        layers = [{name: smgemm.quantize_mxfp4(torch.randn(n, k, device="cuda")) for name, (n, k) in
                   STEP_PROJECTIONS.items()} for _ in range(decode_layers)]
        moved = sum(w.data.numel() + w.scales.numel() for layer in layers for w in layer.values())

        def side(num_sms: int | None = None) -> Callable[[], None]:
            def run() -> None:
                for layer in layers:
                    for name, w in layer.items():
                        smgemm.linear(hs if name == "down" else xs, w, num_sms=num_sms)
            return run
    else:
        raise ValueError(f"partner must be 'attention' or 'mxfp4', got {partner!r}")

    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    t_gemm, t_side = steady_ms(gemms()), steady_ms(side())
    seq = lambda: (gemms()(), side()())
    conc = lambda: _side_by_side((s1, gemms()), (s2, side()))
    t_seq, t_conc = steady_ms(seq), steady_ms(conc)
    summary: dict[str, object] = {
        "GEMMs alone ms": t_gemm, "GEMM TFLOP/s": flops / t_gemm / 1e9, f"{partner} alone ms": t_side,
        f"{partner} TB/s": moved / t_side / 1e9, "sequential ms": t_seq, "concurrent ms": t_conc,
        "concurrent / sequential": t_conc / t_seq,
        "sequential MHz, W": _clock_power(seq, reps), "concurrent MHz, W": _clock_power(conc, reps),
    }
    rows = []
    for k in budgets:
        g_part, p_part = smgemm.SMPartition.split(k)
        rest = p_part.num_sms
        with g_part:
            t_g = steady_ms(gemms(k))
        with p_part:
            t_p = steady_ms(side(rest))
        part = lambda g=g_part, p=p_part, k=k, rest=rest: _side_by_side((g.stream, gemms(k)),
                                                                        (p.stream, side(rest)))
        t_part = steady_ms(part)
        g_in, p_in = _sides_in_pair((g_part.stream, gemms(k)), (p_part.stream, side(rest)), reps)
        with p_part:  # the same partition and time alone, without memory traffic: the split's own ceiling
            spin = compute_only(PARTITION_PROGRAMS_PER_SM * rest, t_p, x.device)
        t_spin = steady_ms(lambda g=g_part, p=p_part, k=k, spin=spin: _side_by_side((g.stream, gemms(k)),
                                                                                (p.stream, spin)))
        rows.append({
            "GEMM SMs": k, "partner SMs": rest, "isolated": g_part.isolated and p_part.isolated,
            "GEMMs on k ms": t_g, "GEMM TFLOP/s": flops / t_g / 1e9, "partner on rest ms": t_p,
            "partner TB/s": moved / t_p / 1e9, "partitioned ms": t_part, "partitioned / sequential": t_part / t_seq,
            "modelled ms": max(t_g, t_p), "measured / modelled": t_part / max(t_g, t_p),
            "GEMMs in pair ms": g_in, "partner in pair ms": p_in,
            "compute-only partner ms": t_spin, "compute-only / sequential": t_spin / t_seq,
        })
    best = min(rows, key=lambda r: r["partitioned ms"])
    modelled = min(r["modelled ms"] for r in rows)
    g_part, p_part = smgemm.SMPartition.split(best["GEMM SMs"])
    summary.update({
        "best k": best["GEMM SMs"], "best partitioned / sequential": best["partitioned / sequential"],
        "model's best ms": modelled, "best measured / model's best": best["partitioned ms"] / modelled,
        "partitioned MHz, W": _clock_power(lambda: _side_by_side((g_part.stream, gemms(best["GEMM SMs"])),
                                                                 (p_part.stream, side(p_part.num_sms))), reps),
    })
    return rows, summary


def plot_step(rows: list[dict[str, object]], summary: dict[str, object], path: str, title: str) -> str:
    """PNG of the serving step's wall time against k: sequential, concurrent, partitioned and the pair model."""
    plt = pyplot()
    if plt is None:
        return PLOT_SKIPPED.format(path)
    sms = [r["GEMM SMs"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.axhline(summary["sequential ms"], ls=":", color="gray", label="sequential (full chip each)")
    ax.axhline(summary["concurrent ms"], ls="--", label="concurrent, two streams")
    ax.plot(sms, [r["partitioned ms"] for r in rows], "o-", label="partitioned: GEMMs on k SMs, partner on the rest")
    ax.plot(sms, [r["modelled ms"] for r in rows], "x:", label="model: the slower side alone on its partition")
    ax.plot(sms, [r["compute-only partner ms"] for r in rows], "s--",
            label="partitioned beside a compute-only partner of the same time")
    ax.set(title=title, xlabel="k: SMs given to the GEMMs", ylabel="wall time per step (ms)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
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
    p.add_argument("--step", action="store_true",
                   help="a serving step's layer: prefill GEMMs beside decode attention (or --partner mxfp4)")
    p.add_argument("--tokens", type=int, default=2048, help="--step: prefill tokens (the GEMMs' M)")
    p.add_argument("--batch", type=int, default=64, help="--step: decode sequences")
    p.add_argument("--context", type=int, default=16384, help="--step: tokens in each decode sequence's KV cache")
    p.add_argument("--partner", default="attention", choices=("attention", "mxfp4"),
                   help="--step: the memory-bound side: paged decode attention, or MXFP4 decode GEMMs")
    p.add_argument("--decode-layers", type=int, default=8, help="--step --partner mxfp4: layers of decode GEMMs")
    p.add_argument("--attention-kernel", default="auto", choices=("auto", "tl", "gluon"),
                   help="--step: decode_attention's kernel (auto: Gluon on Hopper under Triton 3.6, else tl)")


def run(args: argparse.Namespace) -> int:
    print(environment())
    if not torch.cuda.is_available():
        print("The overlap benchmark needs a CUDA GPU (it times concurrent streams); nothing to do on a CPU.")
        return 0
    if args.step:
        rows, summary = bench_step(args.tokens, args.batch, args.context, args.num_sms, args.reps, args.partner,
                                   args.decode_layers, args.attention_kernel)
        print(table(rows))
        print(table([{"what": key, "value": value} for key, value in summary.items()]))
        if args.plot:
            print(plot_step(rows, summary, args.plot, f"prefill {args.tokens} GEMMs + decode {args.partner}, "
                                                     f"batch {args.batch} x {args.context}"))
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
