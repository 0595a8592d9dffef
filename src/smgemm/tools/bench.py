"""`python -m smgemm bench`: smgemm against torch on the same inputs, side by side in one run.

On a GPU it prints TFLOP/s tables (full chip vs `torch.matmul`; SM-budgeted vs cuBLASLt limited to the same SM
count through torch's SM carve-out) and the host overhead of a cached call. Without a GPU it runs small
problems through the Triton interpreter, checks them against float64 and says that it did so.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import random
import time
from collections.abc import Callable, Iterator

import torch

import smgemm

from .._device import INTERPRETER_SPEC, device_spec, tf32_enabled
from .._launch import operands_alignment
from .._ring import available as ring_available
from ..mxfp4 import LAYOUTS
from ..plan import DTYPES, decide, make_mx_plan, make_plan, mx_expands, mx_ring_split
from .model import model_rows
from .timing import (
    PLOT_SKIPPED,
    choices_list,
    copies_for,
    environment,
    graph_rotating,
    host_us_per_call,
    int_list,
    progress,
    pyplot,
    rel_err,
    save_figure,
    table,
    time_rotating,
)

# Llama-3 8B / 70B projection (N, K): qkv, o, gate+up, down.
LLAMA_NK = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (10240, 8192), (8192, 8192),
            (57344, 8192), (8192, 28672)]
SUITES = {
    "quick": [(4096, 4096, 4096), (8192, 8192, 8192), (16, 4096, 4096), (128, 14336, 4096)],
    "square": [(s, s, s) for s in (1024, 2048, 4096, 8192)],
    "llm": [(m, n, k) for m in (16, 128, 512, 1024, 2048, 4096, 8192) for n, k in LLAMA_NK],
    # Batched decode between the llm suite's M = 16 and 128: the planner's one-row and long-K-step rules.
    "mid": [(m, n, k) for m in (32, 64) for n, k in LLAMA_NK],
    # Few tiles or a ragged last wave on 132 SMs (128 x 256 tiles): where Stream-K should pay.
    "streamk": [(256, 1024, 16384), (512, 512, 32768), (1024, 1024, 16384), (128, 4096, 8192), (256, 8192, 8192),
                (16, 4096, 14336), (64, 8192, 8192), (3072, 3072, 8192), (2560, 2560, 8192), (5120, 4352, 4096),
                (3072, 3072, 4096), (4096, 4352, 4096)],
}
SUITES["random"] = []  # drawn per run: `random_shapes(--seed)`


def random_shapes(seed: int, count: int = 48) -> list[tuple[int, int, int, bool]]:
    """`count` problems (M, N, K, unaligned) with M, N, K log-uniform in [64, 16384]; a quarter of them odd: odd
    dims, operands read from wider buffers so that their row strides are not multiples of 16 bytes (no TMA)."""
    rng = random.Random(seed)
    shapes = []
    for i in range(count):
        m, n, k = (round(math.exp(rng.uniform(math.log(64), math.log(16384)))) for _ in range(3))
        odd = i % 4 == 3
        if odd:
            m, n, k = (x | 1 for x in (m, n, k))
        shapes.append((m, n, k, odd))
    return shapes


BUDGET_SHAPES = [(8192, 8192, 8192), (4096, 14336, 4096)]


def _operands(m: int, n: int, k: int, dtype: torch.dtype, copies: int, unaligned: bool = False,
              device: str = "cuda") -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`copies` independent (a, b) pairs; b is a transposed [N, K] weight, as in nn.Linear. `unaligned`: rows of an
    odd number of elements (views into a buffer one column wider where K is even): no 16-byte alignment, no TMA.
    `device` "meta": the layouts alone, no memory behind them (what the planner weighs)."""
    pad = 1 - k % 2 if unaligned else 0
    sets = []
    for _ in range(copies):
        a = torch.randn(m, k + pad, device=device).to(dtype)[:, :k]
        b = torch.randn(n, k + pad, device=device).to(dtype)[:, :k].t()
        sets.append((a, b))
    return sets


def _torch_mm(dtype: torch.dtype) -> Callable:
    if dtype == torch.float8_e4m3fn:
        one = torch.ones((), device="cuda")
        # smgemm's fp8 uses the tensor cores' own accumulation, so compare with cuBLAS's fast accumulation.
        return lambda a, b: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16, use_fast_accum=True)
    return torch.matmul


def _smgemm_mm(**kw) -> Callable:
    return lambda a, b: smgemm.matmul(a, b, **kw)


def describe(plan) -> str:
    """A plan in a table cell: schedule, tile, warps, stages, grid, split tiles."""
    cfg = plan.config
    split = f" sk {plan.sk_tiles}" if plan.sk_tiles else ""
    flags = "".join(f" {name}" for name in ("mx_swap", "mx_prefetch", "whole_store") if getattr(cfg, name))
    flags += "".join(f" stage {x}" for x, staged in (("a", plan.stage_a), ("b", plan.stage_b)) if staged)
    return (f"{plan.schedule[:4]} {cfg.block_m}x{cfg.block_n}x{cfg.block_k} w{cfg.num_warps} s{cfg.num_stages}"
            f"{flags} grid {plan.num_programs}{split}")


def describe_mx(m: int, n: int, k: int, spec, expand: bool, num_sms: int | None = None, layout: str = "ocp",
                a_mx: bool = False) -> str:
    """An MXFP4 GEMM's plan in a table cell (bf16 activations unless `a_mx`): the fused kernel's, the ring kernel's
    (`kernels.mx_ring`), or "expand + " the dense GEMM's (two passes)."""
    if expand:
        return "expand + " + describe(make_plan(m, n, k, torch.bfloat16, spec, num_sms=num_sms))
    split = 0 if a_mx else mx_ring_split(m, n, k, spec, num_sms, layout, torch.bfloat16, False)
    if split and ring_available(torch.device("cuda")):
        return f"mx_ring 64x512 split {split} grid {n // 64 * split}"
    return describe(make_mx_plan(m, n, k, torch.bfloat16, spec, num_sms=num_sms, layout=layout, a_mx=a_mx))


def bench_full_chip(
    shapes: list[tuple[int, ...]], dtype: torch.dtype, schedules: list[str]
) -> list[dict[str, object]]:
    """Each (M, N, K[, unaligned]) problem: smgemm (each schedule) and torch on the same operands, full chip."""
    spec = device_spec(torch.device("cuda"))
    tf32 = dtype == torch.float32 and tf32_enabled()  # the plans gemm makes (set by `table_dtype` for "tf32")
    rows = []
    for m, n, k, *flags in progress(shapes, "full chip"):
        unaligned = bool(flags and flags[0])
        sets = _operands(m, n, k, dtype, copies_for(m, n, k, dtype), unaligned)
        peer = _torch_mm(dtype)
        ref = peer(*sets[0])
        t_peer = time_rotating(peer, sets)
        flop = 2 * m * n * k
        # the alignment of the operands' rows, in elements (16: what every kernel reads at full speed)
        operands = operands_alignment(*sets[0])
        row: dict[str, object] = {"M": m, "N": n, "K": k, "align": min(align for _, align, _ in operands)}
        err = 0.0
        timed = {}  # plan -> seconds: a schedule that resolves to a plan already timed is that same kernel
        for schedule in schedules:
            plan = smgemm.make_plan(m, n, k, dtype, spec, schedule=schedule, tf32=tf32)
            if plan not in timed:
                ours = _smgemm_mm(schedule=schedule)
                err = max(err, rel_err(ours(*sets[0]), ref))
                timed[plan] = time_rotating(ours, sets)
            row[f"{schedule} TFLOP/s"] = flop / timed[plan] / 1e9
        row["torch TFLOP/s"] = flop / t_peer / 1e9
        row["ratio"] = row[f"{schedules[0]} TFLOP/s"] / row["torch TFLOP/s"]
        if len(schedules) > 1:  # the first schedule against the best of the others
            row[f"{schedules[0]}/best other"] = row[f"{schedules[0]} TFLOP/s"] / max(
                row[f"{s} TFLOP/s"] for s in schedules[1:])
        if "streamk" in schedules and "data_parallel" in schedules:
            row["streamk/dp"] = row["streamk TFLOP/s"] / row["data_parallel TFLOP/s"]
        row["plan"] = describe(decide(m, n, k, dtype, spec, schedule=schedules[0], tf32=tf32, operands=operands))
        row["rel err"] = err
        rows.append(row)
        del sets
    return rows


def _with_carveout(sms_off: int, fn: Callable) -> Callable:
    def run(a, b):
        torch._C._set_sm_carveout_experimental(sms_off)
        try:
            return fn(a, b)
        finally:
            torch._C._set_sm_carveout_experimental(None)

    return run


def bench_budgets(shapes: list[tuple[int, int, int]], dtype: torch.dtype, budgets: list[int]) -> list[dict]:
    """smgemm(num_sms=n) vs cuBLASLt (torch.addmm with a bias, which honours the carve-out) on n SMs."""
    total = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for m, n, k in shapes:
        sets = _operands(m, n, k, dtype, copies_for(m, n, k, dtype))
        bias = torch.zeros(n, device="cuda", dtype=dtype)
        for sms in progress(budgets, f"budgets {m}x{n}x{k}"):
            ours = _smgemm_mm(num_sms=sms)
            peer = _with_carveout(total - sms, lambda a, b, bias=bias: torch.addmm(bias, a, b))
            err = rel_err(ours(*sets[0]), peer(*sets[0]))
            t_ours, t_peer = time_rotating(ours, sets), time_rotating(peer, sets)
            flop = 2 * m * n * k
            rows.append({
                "M": m, "N": n, "K": k, "num_sms": sms,
                "smgemm TFLOP/s": flop / t_ours / 1e9, "cuBLASLt carve-out TFLOP/s": flop / t_peer / 1e9,
                "ratio": t_peer / t_ours, "rel err": err,
            })
        del sets
    return rows


def plot_budgets(rows: list[dict[str, object]], path: str, label: str = "bf16") -> str:
    """Write a PNG of TFLOP/s against num_sms per shape (smgemm, cuBLASLt carve-out, ideal linear scaling from
    smgemm's rate per SM at the smallest budget); returns a line saying what was written."""
    plt = pyplot()
    if plt is None:
        return PLOT_SKIPPED.format(path)
    shapes = sorted({(r["M"], r["N"], r["K"]) for r in rows}, key=lambda s: s[0] * s[1] * s[2], reverse=True)
    fig, axes = plt.subplots(1, len(shapes), figsize=(5.5 * len(shapes), 4.2), squeeze=False)
    for ax, shape in zip(axes[0], shapes):
        mine = sorted((r for r in rows if (r["M"], r["N"], r["K"]) == shape), key=lambda r: r["num_sms"])
        sms = [r["num_sms"] for r in mine]
        ours = [r["smgemm TFLOP/s"] for r in mine]
        ax.plot(sms, ours, "o-", label="smgemm (num_sms=n)")
        ax.plot(sms, [r["cuBLASLt carve-out TFLOP/s"] for r in mine], "s--", label="cuBLASLt, SM carve-out")
        ax.plot(sms, [ours[0] / sms[0] * n for n in sms], ":", color="gray", label="ideal linear scaling")
        ax.set(title="x".join(map(str, shape)) + f" {label}", xlabel="SMs", ylabel="TFLOP/s")
        ax.grid(alpha=0.3)
        ax.legend()
    return save_figure(fig, path)


MXFP4_DECODE = [(m, n, k) for m in (1, 16, 32, 64) for n, k in ((4096, 4096), (8192, 8192), (14336, 4096))]
MXFP4_LARGE = [(4096, 4096, 4096), (4096, 14336, 4096), (8192, 8192, 8192)]
# Llama-3 8B and 70B projection weights [N, K] (q/o, k/v, gate/up, down, lm_head) at decode and small-prefill M
LLAMA_WEIGHTS = [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (128256, 4096),
                 (8192, 8192), (1024, 8192), (28672, 8192), (8192, 28672), (128256, 8192)]
MXFP4_LLAMA = [(m, n, k) for m in (1, 4, 16, 32, 64, 128) for n, k in LLAMA_WEIGHTS]


def mx_decode_sets(m: int, n: int, k: int) -> list[tuple]:
    """(x bf16 [m, k], an MXFP4 weight [n, k], its bf16 dequantization) sets: enough that rotating through them
    moves ~256 MB of bf16 weights, so that neither smgemm nor its peer runs from L2."""
    sets = []
    for _ in range(max(1, min(16, math.ceil(256e6 / (n * k * 2))))):
        w = smgemm.quantize_mxfp4(torch.randn(n, k, device="cuda"))
        sets.append((torch.randn(m, k, device="cuda").to(torch.bfloat16), w, w.dequantize(torch.bfloat16)))
    return sets


@contextlib.contextmanager
def table_dtype(name: str) -> Iterator[torch.dtype]:
    """The dtype of a bench table named `name` (a DTYPES key, or "tf32": fp32 with TF32 allowed for smgemm and
    torch alike while the table runs; "fp32" is IEEE fp32 on both sides unless torch's flags say otherwise)."""
    if name != "tf32":
        yield DTYPES[name]
        return
    matmul = torch.backends.cuda.matmul
    flag = "fp32_precision" if hasattr(matmul, "fp32_precision") else "allow_tf32"  # torch >= 2.9, or older
    saved = getattr(matmul, flag)
    setattr(matmul, flag, "tf32" if flag == "fp32_precision" else True)
    try:
        yield torch.float32
    finally:
        setattr(matmul, flag, saved)


def copy_bandwidth(nbytes: int = 1 << 30) -> float:
    """Device-memory bytes per microsecond of a large device-to-device copy (read plus write), measured now."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * nbytes / (time_rotating(lambda s, d: d.copy_(s), [(src, dst)]) * 1e3)


def bench_mxfp4(shapes: list[tuple[int, int, int]], both: bool = False,
                layouts: tuple[str, ...] = LAYOUTS) -> list[dict[str, object]]:
    """smgemm.linear with an MXFP4 weight (and MXFP4 activations if `both`) vs torch.matmul in bf16 on the
    dequantized values, side by side on the same inputs (weights rotated through ~256 MB of copies), the weight in
    each of `layouts` (`mxfp4.LAYOUTS`) its K allows. Rows with M <= 128 also give CUDA-graph times and the read
    floor: the packed weight's bytes at the copy bandwidth measured in the same run, and its fraction of smgemm's
    graph time."""
    spec = device_spec(torch.device("cuda"))
    bandwidth = copy_bandwidth()
    rows = []
    for m, n, k in progress(shapes, "mxfp4"):
        sets = []
        for x, w, w_ref in mx_decode_sets(m, n, k):
            xq = smgemm.quantize_mxfp4(x.float()) if both else x
            x_ref = xq.dequantize(torch.bfloat16) if both else x
            sets.append(((xq, w), (x_ref, w_ref.t())))
        peer = [p for _, p in sets]
        t_peer = time_rotating(torch.matmul, peer)
        g_peer = graph_rotating(torch.matmul, peer) if m <= 128 else None
        for layout in (t for t in layouts if t == "ocp" or k % 128 == 0):
            ours = [(a, w.to_layout(layout)) for (a, w), _ in sets]
            err = rel_err(smgemm.linear(*ours[0]), torch.matmul(*peer[0]))
            t_ours = time_rotating(lambda a, w: smgemm.linear(a, w), ours)
            plan_text = describe_mx(m, n, k, spec, mx_expands(m, n, k, both), layout=layout, a_mx=both)
            row = {"M": m, "N": n, "K": k, "operands": "both MXFP4" if both else "MXFP4 weight", "layout": layout,
                   "smgemm us": t_ours * 1e3, "torch bf16 us": t_peer * 1e3, "speed-up": t_peer / t_ours}
            if g_peer is not None:  # decode: kernel time from CUDA graphs (as serving engines run decode)
                g_ours = graph_rotating(lambda a, w: smgemm.linear(a, w), ours)
                floor = (n * k // 2 + n * k // 32) / bandwidth
                row.update({"graph: smgemm us": g_ours, "graph: torch us": g_peer, "graph speed-up": g_peer / g_ours,
                            "read floor us": floor, "of floor": floor / g_ours})
            row.update({"smgemm TFLOP/s": 2 * m * n * k / t_ours / 1e9, "plan": plan_text, "rel err": err})
            rows.append(row)
            del ours
        del sets, peer
    return rows


# (batch, M, N, K): attention-like (scores, then scores @ V), MoE-like (an expert's tokens through its projection;
# N = 1408 leaves half a 256-wide tile) and a square batch
BATCHED = [(32, 2048, 2048, 128), (32, 2048, 128, 2048), (8, 4096, 128, 4096), (64, 256, 1408, 4096),
           (64, 256, 4096, 1408), (64, 512, 1408, 2048), (8, 2048, 1408, 1408), (16, 1024, 1024, 1024)]


def bench_batched(shapes: list[tuple[int, int, int, int]], dtype: torch.dtype, budgets: list[int | None]) -> list:
    """smgemm.bmm vs torch.bmm, side by side: on the whole chip, or both inside one `SMPartition` of a budget's SMs
    (a green context, which confines torch.bmm to those SMs too; cuBLASLt's carve-out does not apply to bmm). Where
    the driver gives no green contexts, torch.bmm runs on the whole chip (the "peer SMs" column says so)."""
    rows = []
    parts = {sms: smgemm.SMPartition(sms) for sms in budgets if sms}
    for batch, m, n, k in progress(shapes, "batched"):
        copies = max(1, min(8, math.ceil(256e6 / (batch * (m * k + k * n) * 2))))
        sets = [(torch.randn(batch, m, k, device="cuda").to(dtype), torch.randn(batch, k, n, device="cuda").to(dtype))
                for _ in range(copies)]
        for sms in budgets:
            part = parts.get(sms)
            ours = (lambda a, b, sms=sms: smgemm.bmm(a, b, num_sms=sms))
            with part if part is not None else contextlib.nullcontext():
                err = rel_err(ours(*sets[0]), torch.bmm(*sets[0]))
                t_ours, t_peer = time_rotating(ours, sets), time_rotating(torch.bmm, sets)
            torch.cuda.synchronize()
            peer_sms = "all" if part is None or not part.isolated else part.sm_count or sms
            flop = 2 * batch * m * n * k
            rows.append({"B": batch, "M": m, "N": n, "K": k, "num_sms": sms or "all", "peer SMs": peer_sms,
                         "smgemm TFLOP/s": flop / t_ours / 1e9, "torch TFLOP/s": flop / t_peer / 1e9,
                         "ratio": t_peer / t_ours, "rel err": err})
        del sets
    return rows


# Problems of the epilogue table: square, Llama-3 8B MLP and QKV, and M = 128 decode-batch rows.
EPILOGUE_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 14336, 4096), (1024, 6144, 4096), (128, 8192, 8192)]


def bench_epilogue(shapes: list[tuple[int, int, int]], dtype: torch.dtype) -> list[dict]:
    """Full chip, side by side: smgemm.linear(x, w, bias) vs torch's (C a bias along N), and smgemm.addmm(C, x, w.t())
    vs torch.addmm (C a full [M, N] matrix in the inputs' dtype)."""
    rows = []
    kinds = {"bias": (lambda x, wc: smgemm.linear(x, *wc), lambda x, wc: torch.nn.functional.linear(x, *wc)),
             "matrix": (lambda x, wc: smgemm.addmm(wc[1], x, wc[0].t()),
                        lambda x, wc: torch.addmm(wc[1], x, wc[0].t()))}
    for m, n, k in progress(shapes, "epilogue"):
        copies = max(2, min(8, math.ceil(256e6 / ((m * k + n * k + m * n) * dtype.itemsize))))
        for kind, (ours, peer) in kinds.items():
            sets = [(torch.randn(m, k, device="cuda").to(dtype),
                     (torch.randn(n, k, device="cuda").to(dtype),
                      torch.randn(*((n,) if kind == "bias" else (m, n)), device="cuda").to(dtype)))
                    for _ in range(copies)]
            err = rel_err(ours(*sets[0]), peer(*sets[0]))
            t_ours, t_peer = time_rotating(ours, sets), time_rotating(peer, sets)
            flop = 2 * m * n * k
            rows.append({"M": m, "N": n, "K": k, "C": kind, "smgemm TFLOP/s": flop / t_ours / 1e9,
                         "torch TFLOP/s": flop / t_peer / 1e9, "ratio": t_peer / t_ours, "rel err": err})
            del sets
    return rows


def host_overhead(iters: int = 2000) -> list[dict[str, object]]:
    """Host microseconds per call of a tiny cached GEMM (launch-bound, no sync inside the loop)."""
    a = torch.randn(16, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(64, device="cuda", dtype=torch.bfloat16)
    w = b.t().contiguous()
    calls = {
        "smgemm.matmul": lambda: smgemm.matmul(a, b),
        "smgemm.matmul num_sms=8": lambda: smgemm.matmul(a, b, num_sms=8),
        "smgemm.addmm (bias)": lambda: smgemm.addmm(bias, a, b),
        "torch.matmul": lambda: torch.matmul(a, b),
        "torch.addmm (bias)": lambda: torch.addmm(bias, a, b),
        "smgemm.linear (bias)": lambda: smgemm.linear(a, w, bias),
        "torch.nn.functional.linear (bias)": lambda: torch.nn.functional.linear(a, w, bias),
    }
    return [{"call": name, "host us/call": host_us_per_call(fn, iters)} for name, fn in calls.items()]


def interpreter_check() -> list[dict[str, object]]:
    """No GPU: run small GEMMs of every dtype and schedule in the interpreter and compare with float64."""
    rows = []
    for name, dtype in DTYPES.items():
        for schedule, num_sms in (("data_parallel", None), ("persistent", 3), ("streamk", 5)):
            m, n, k = 96, 80, 48 if schedule != "streamk" else 1024  # fp8 splits from K = 1024 (BLOCK_K 256)
            a = torch.randn(m, k).to(dtype)
            b = torch.randn(n, k).to(dtype).t()
            t0 = time.perf_counter()
            out = smgemm.matmul(a, b, schedule=schedule, num_sms=num_sms)
            dt = time.perf_counter() - t0
            ref = a.double() @ b.double()
            err = ((out.double() - ref).norm() / ref.norm()).item()
            ok = err < (2e-3 if out.dtype == torch.float16 else 8e-3) and not out.isnan().any()
            plan = smgemm.make_plan(m, n, k, dtype, INTERPRETER_SPEC, schedule=schedule, num_sms=num_sms)
            rows.append({"dtype": name, "shape": f"{m}x{n}x{k}", "schedule": schedule, "num_sms": num_sms,
                         "ran": f"{plan.schedule}, {plan.num_tiles} tiles, {plan.sk_tiles} split",
                         "rel err vs float64": err, "ok": ok, "seconds (interpreter)": dt})
    return rows


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtype", default=["bf16"], type=choices_list([*DTYPES, "tf32"]),
                   help="comma list of " + ",".join(DTYPES) + ", tf32 (fp32 with TF32 allowed on both sides)")
    p.add_argument("--suite", default=["quick"], type=choices_list(SUITES), help="comma list of " + ",".join(SUITES))
    p.add_argument("--seed", type=int, default=0, help="the draw of --suite random (48 problems; a quarter unaligned)")
    p.add_argument("--num-sms", default=[16, 32, 66, 100, 132], type=int_list,
                   help="budgets for the SM-constrained table ('' skips)")
    p.add_argument("--plot", default="smgemm_sm_scaling.png",
                   help="PNG of the SM-budget table: TFLOP/s against num_sms ('' skips)")
    p.add_argument("--schedules", default=["auto"], type=choices_list(smgemm.SCHEDULES),
                   help="comma list; the first one's ratio to torch is printed")
    p.add_argument("--no-overhead", action="store_true", help="skip the host-overhead table")
    p.add_argument("--mxfp4", action="store_true",
                   help="also the MXFP4 tables (decode and large shapes, and a model: --mxfp4-model)")
    p.add_argument("--mxfp4-shapes", default="default", choices=("default", "llama"),
                   help="the MXFP4 table's problems: decode and large shapes, or the Llama-3 8B and 70B projections "
                        "at M = 1-128")
    p.add_argument("--mxfp4-layouts", default=list(LAYOUTS), type=choices_list(LAYOUTS),
                   help="comma list of the weight's byte layouts to time (the model table: each but 'ocp')")
    p.add_argument("--mxfp4-model", default="mid", choices=("mid", "tiny", ""),
                   help="the model-level MXFP4 table's Llama (mid: Llama-3-8B-shaped, 4 layers; decode batches 1, "
                        "16, 64 and a 2048-token prefill; needs transformers); '' skips")
    p.add_argument("--epilogue", action="store_true",
                   help="also linear with a bias and addmm with a C matrix vs torch, per --dtype")
    p.add_argument("--batched", action="store_true",
                   help="also smgemm.bmm vs torch.bmm (attention- and MoE-like shapes; full chip, and both on the SMs "
                        "of --batched-num-sms)")
    p.add_argument("--batched-num-sms", default=[64], type=int_list,
                   help="budgets for the batched table, each in a green context of that many SMs ('' : full chip only)")


def run(args: argparse.Namespace) -> int:
    print(environment())
    if not torch.cuda.is_available():
        print("No CUDA GPU: ran small GEMMs through the Triton interpreter (correctness only; times are not "
              "GPU performance).")
        rows = interpreter_check()
        print(table(rows))
        return 0 if all(r["ok"] for r in rows) else 1

    shapes = [s for name in args.suite for s in (random_shapes(args.seed) if name == "random" else SUITES[name])]
    budgets = args.num_sms
    for name in args.dtype:  # --dtype '': no dense tables
        with table_dtype(name) as dtype:
            peer = "torch._scaled_mm(use_fast_accum=True)" if name == "fp8" else "torch.matmul"
            if shapes:  # --suite '': no full-chip table
                print(f"\n## {name}: full chip, smgemm.matmul vs {peer}")
                rows = bench_full_chip(shapes, dtype, args.schedules)
                print(table(rows))
                ratios = [r["ratio"] for r in rows]
                print(f"geometric mean {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}, lowest "
                      f"{min(ratios):.3f} ({len(ratios)} problems)")
            if budgets and name != "fp8":
                print(f"\n## {name}: SM budget, smgemm.matmul(num_sms=n) vs cuBLASLt with an SM carve-out")
                budget_rows = bench_budgets(BUDGET_SHAPES, dtype, budgets)
                print(table(budget_rows))
                if args.plot:
                    print(plot_budgets(budget_rows, args.plot.replace(".png", f"_{name}.png"), name))
    if args.mxfp4:
        print("\n## MXFP4: smgemm.linear(x, quantize_mxfp4(w)) vs torch.matmul in bf16 on the dequantized weight")
        layouts = tuple(args.mxfp4_layouts)
        if args.mxfp4_shapes == "llama":
            print(table(bench_mxfp4(MXFP4_LLAMA, layouts=layouts)))
        else:
            print(table(bench_mxfp4(MXFP4_DECODE + MXFP4_LARGE, layouts=layouts)
                        + bench_mxfp4(MXFP4_LARGE, both=True, layouts=layouts)))
        if args.mxfp4_model:
            print(f"\n## MXFP4: a Llama ({args.mxfp4_model}) swapped to MXFP4Linear vs the same model in bf16 torch "
                  "(CUDA-graph replays)")
            try:  # each word layout of --mxfp4-layouts; the default's choice where none is given
                word_layouts = [t for t in layouts if t != "ocp"] or [None]
                print(table([{"layout": t, **row} for t in word_layouts
                             for row in model_rows(args.mxfp4_model, [1, 16, 64], 2048, mxfp4=True, layout=t)]))
            except ImportError as exc:
                print(f"skipped: {exc} (pip install transformers)")
    if args.epilogue:
        for name in args.dtype:
            if name != "fp8":
                with table_dtype(name) as dtype:
                    print(f"\n## {name}: full chip, with C: smgemm.linear (bias) / smgemm.addmm (matrix) vs torch's")
                    print(table(bench_epilogue(EPILOGUE_SHAPES, dtype)))
    if args.batched:
        for name in args.dtype or ["bf16"]:
            if name in ("bf16", "fp16"):
                print(f"\n## {name}: batched, smgemm.bmm vs torch.bmm (both in a green context under a budget)")
                print(table(bench_batched(BATCHED, DTYPES[name], [None, *args.batched_num_sms])))
    if not args.no_overhead:
        print("\n## host overhead of a cached call (16x64x64 bf16, no sync)")
        print(table(host_overhead()))
    return 0
