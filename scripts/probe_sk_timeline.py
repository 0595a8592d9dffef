"""Where a Stream-K launch's programs spend their time, read from the programs themselves (GPU probe).

A copy of gemm_kernel (probe_fixup.cut_kernel) stamps %globaltimer (ns) at the start of each program, the end of
its whole tiles, the end of each Stream-K segment's K-loop, the end of a finisher's wait for its sharers' flags,
the end of each segment (partial published, epilogue or fixup done) and the end of the program. The stamps go to
the buffer the kernel otherwise gives the SM ids (smid_out), 32 int64 a program; results are checked as usual.

Per shape, the median over `--calls` back-to-back launches of: the launch's span; the whole tiles' time per
K-iteration; the split segments' K-loop fitted as fixed + per-iteration cost (least squares over all segments);
publish, epilogue, flag wait and fixup times; when the programs end (median, last) and what an even split at the
whole tiles' per-iteration rate would take (`ideal span`). Also timed as the benchmarks time: torch, `auto`, the
plan with the real kernel and with the stamped one. On the H200 (stop 21) the stamps slowed the 128 x 256 Stream-K
kernel by 18-21% and the persistent one not at all, with the same registers and spills: read the stamped times as
proportions.

    PYTHONPATH=src python scripts/probe_sk_timeline.py --shapes 3072x3072x8192,2560x2560x8192
"""

import argparse
import contextlib
import statistics

import torch
from probe_fixup import cut_kernel
from sweep_configs import fixed_plan, parse_variant, patched

import smgemm.kernels.gemm as kgemm
from smgemm._device import device_spec
from smgemm._gemm import gemm
from smgemm.bench import DTYPES, _copies_for, _operands, _table, _time_rotating, describe
from smgemm.plan import make_plan

SLOTS = 32  # int64 stamps a program: 0 start, 1 whole tiles done, 2 + 4 s .. 5 + 4 s segment s, 31 end
SEGMENTS = (SLOTS - 3) // 4  # segments a program's stamps can hold
_SEGMENT_SLOTS = "_ts + 2 + _seg * 4"

NOW = '''
@triton.jit
def _now():
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _first_owner('''

STAMPS = {  # text of kernels/gemm.py -> the same with stamps
    "\n@triton.jit\ndef _first_owner(": NOW,
    "    if RECORD_SMID:\n        tl.store(smid_ptr + pid, smid())\n":
        f"    _ts = smid_ptr.to(tl.pointer_type(tl.int64)) + pid * {SLOTS}\n    tl.store(_ts, _now())\n",
    "    if STREAMK:\n": "    tl.store(_ts + 1, _now())\n    if STREAMK:\n",
    "        seg_end = end\n": "        seg_end = end\n        _seg = 0\n",
    "            if seg_end < tile_start + k_iters:\n":
        f"            tl.store({_SEGMENT_SLOTS}, _now())\n"
        # iterations * 4 + kind: 1 publishes a partial, 2 a whole tile, 3 finishes a split tile
        f"            tl.store({_SEGMENT_SLOTS} + 1, (seg_end - seg_start).to(tl.int64) * 4 + tl.where("
        "seg_end < tile_start + k_iters, 1, tl.where(seg_start == tile_start, 2, 3)))\n"
        "            if seg_end < tile_start + k_iters:\n",
    "                tl.debug_barrier()  # every flag acquired before any thread reads a partial\n":
        "                tl.debug_barrier()  # every flag acquired before any thread reads a partial\n"
        f"                tl.store({_SEGMENT_SLOTS} + 2, _now())\n",
    "            seg_end = seg_start\n":
        f"            tl.store({_SEGMENT_SLOTS} + 3, _now())\n            seg_end = seg_start\n            _seg += 1\n",
}
END = f"    tl.store(_ts + {SLOTS - 1}, _now())\n"


def timeline_kernel():
    """gemm_kernel with the stamps (the kernel is kernels/gemm.py's last function: END, appended, closes it)."""
    return cut_kernel(STAMPS, append=END)


def _fit(points):
    """Least-squares (fixed, per-iteration) of segment K-loop times over their iterations."""
    if len(points) < 2:
        return float("nan"), float("nan")
    xs, ys = zip(*points)
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return float("nan"), my / mx
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, slope


def analyse(ts: torch.Tensor, plan, k_iters: int) -> dict:
    """Metrics (µs) of one launch from its stamps [programs, SLOTS]."""
    t = ts.double().cpu()
    t0 = t[:, 0].min()
    us = lambda v: float(v) / 1e3
    progs = plan.num_programs
    dp_rates, seg_points, publish, epi, wait, fixup = [], [], [], [], [], []
    ends = []
    for p in range(progs):
        row = t[p]
        n_dp = len(range(p, plan.dp_tiles, progs))
        if n_dp:
            dp_rates.append(us(row[1] - row[0]) / (n_dp * k_iters))
        prev = row[1]
        for s in range(SEGMENTS):
            base = 2 + 4 * s
            if row[base] == 0:
                break
            iters, kind = int(row[base + 1]) // 4, int(row[base + 1]) % 4
            seg_points.append((iters, us(row[base] - prev)))
            post = us(row[base + 3] - row[base])
            if kind == 1:
                publish.append(post)
            elif kind == 2:
                epi.append(post)
            else:
                wait.append(us(row[base + 2] - row[base]))
                fixup.append(us(row[base + 3] - row[base + 2]))
            prev = row[base + 3]
        ends.append(us(row[SLOTS - 1] - t0))
    fixed, per_iter = _fit(seg_points)
    dp_rate = statistics.median(dp_rates) if dp_rates else float("nan")
    total_iters = (plan.dp_tiles + plan.sk_tiles) * k_iters
    mean = lambda xs: statistics.fmean(xs) if xs else float("nan")
    return {
        "span us": max(ends),
        "ideal span us": dp_rate * total_iters / progs,
        "start skew us": us(t[:, 0].max() - t0),
        "whole tiles end us": us(t[:, 1].max() - t0),
        "dp us/iter": dp_rate,
        "sk us/iter": per_iter,
        "sk fixed us": fixed,
        "segments": len(seg_points),
        "publish us": mean(publish),
        "epilogue us": mean(epi),
        "wait us": mean(wait),
        "wait max us": max(wait) if wait else float("nan"),
        "fixup us": mean(fixup),
        "end median us": statistics.median(ends),
    }


def measure(shape: str, dtype, spec, kernel, calls: int, schedule: str, cfg=None) -> dict:
    m, n, k = (int(v) for v in shape.split("x"))
    plan = make_plan(m, n, k, dtype, spec, schedule=schedule, config=cfg)
    sets = _operands(m, n, k, dtype, _copies_for(m, n, k, dtype))
    bufs = [torch.zeros(plan.num_programs * SLOTS * 2, dtype=torch.int32, device="cuda") for _ in range(calls)]
    k_iters = -(-k // plan.config.block_k)
    with patched(kgemm, gemm_kernel=kernel), fixed_plan(plan):
        a, b = sets[0]
        out = gemm(a, b, smid_out=bufs[0])
        ref = a.float() @ b.float()
        err = ((out.float() - ref).norm() / ref.norm()).item()
        for i in range(200):  # warm: bring the clocks to where back-to-back launches keep them, then the stamped ones
            x, y = sets[i % len(sets)]
            gemm(x, y, smid_out=bufs[i % calls])
        torch.cuda.synchronize()
        for buf in bufs:
            buf.zero_()
        for i, buf in enumerate(bufs):
            x, y = sets[i % len(sets)]
            gemm(x, y, smid_out=buf)
        torch.cuda.synchronize()
    runs = [analyse(buf.view(torch.int64).view(plan.num_programs, SLOTS), plan, k_iters) for buf in bufs]
    # Timed as the benchmarks time them, side by side: torch, smgemm's default, this plan with the real kernel and
    # with the stamped one (do the stamps change the time?). Each compiled before its timing starts.
    stamped = lambda x, y: gemm(x, y, smid_out=bufs[0])
    fns = {"torch us": torch.matmul if dtype != DTYPES["fp8"] else None, "auto us": gemm,
           "real us": lambda x, y: gemm(x, y), "stamped us": stamped}
    times = {}
    for name, fn in fns.items():
        if fn is None:
            continue
        with contextlib.ExitStack() as stack:
            if name != "auto us":
                stack.enter_context(fixed_plan(plan))
            if fn is stamped:
                stack.enter_context(patched(kgemm, gemm_kernel=kernel))
            fn(a, b)
            torch.cuda.synchronize()
            times[name] = _time_rotating(fn, sets)
    print(shape, plan, flush=True)
    row = {"shape": shape, "plan": describe(plan), "err": f"{err:.0e}", **{key: v * 1e3 for key, v in times.items()}}
    for key in runs[0]:
        row[key] = statistics.median(r[key] for r in runs)
    print(row, flush=True)
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--shapes", required=True)
    p.add_argument("--schedules", default="streamk,persistent")
    p.add_argument("--tile", default=None, help="a scripts/sweep_configs.py variant (no schedule); default: planner's")
    p.add_argument("--calls", type=int, default=20)
    args = p.parse_args()
    dtype = DTYPES[args.dtype]
    spec = device_spec(torch.device("cuda"))
    cfg = parse_variant(args.tile)[0] if args.tile else None
    kernel = timeline_kernel()
    rows = [measure(shape, dtype, spec, kernel, args.calls, schedule, cfg)
            for shape in args.shapes.split(",") for schedule in args.schedules.split(",")]
    print(_table(rows))


if __name__ == "__main__":
    main()
