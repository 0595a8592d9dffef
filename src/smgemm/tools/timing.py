"""Timing, tables and plots shared by the benchmark commands: every comparison is timed side by side, in one run,
on the same inputs."""

from __future__ import annotations

import argparse
import importlib.metadata
import itertools
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterable

import torch
import triton


def progress(items: list, desc: str) -> Iterable:
    """`items` behind a tqdm progress bar on stderr (tqdm is optional: without it, `items` as they are)."""
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, desc=desc, leave=False, file=sys.stderr)


def table(rows: list[dict[str, object]]) -> str:
    if not rows:
        return "(no rows)"
    keys = list(dict.fromkeys(k for r in rows for k in r))  # every row's columns, first-seen order
    fmt = [[f"{r[k]:.3g}" if isinstance(r.get(k), float) else str(r.get(k, "")) for k in keys] for r in rows]
    widths = [max(len(k), *(len(f[i]) for f in fmt)) for i, k in enumerate(keys)]
    line = "| " + " | ".join(k.ljust(w) for k, w in zip(keys, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(c.rjust(w) for c, w in zip(f, widths)) + " |" for f in fmt]
    return "\n".join([line, sep, *body])


def shape(text: str) -> tuple[int, int, int]:
    """An argparse type: "MxNxK" -> (M, N, K), each an int >= 1."""
    parts = text.lower().split("x")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if len(dims) != 3 or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape MxNxK of three ints >= 1 (e.g. 4096x4096x4096)")
    return dims


def shape_list(text: str) -> list[tuple[int, int, int]]:
    """An argparse type: a comma list of MxNxK shapes."""
    return [shape(s) for s in text.split(",")]


def positive_int(text: str) -> int:
    """An argparse type: an int >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an int >= 1")
    return value


def int_list(text: str) -> list[int]:
    """An argparse type: a comma list of ints >= 1 ('' is the empty list)."""
    return [positive_int(s) for s in text.split(",") if s]


def choices_list(choices) -> Callable[[str], list[str]]:
    """An argparse type: a comma list, each item one of `choices` ('' is the empty list)."""
    allowed = list(choices)

    def parse(text: str) -> list[str]:
        items = [s for s in text.split(",") if s]
        bad = [s for s in items if s not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(f"{', '.join(map(repr, bad))}: choose from {', '.join(allowed)}")
        return items

    return parse


def smgemm_version() -> str:
    """The installed smgemm's version, and its commit when it runs from a git checkout of smgemm itself."""
    try:
        version = importlib.metadata.version("smgemm")
    except importlib.metadata.PackageNotFoundError:
        version = "not installed"
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../src/smgemm
    try:
        top = subprocess.run(["git", "-C", package, "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                             check=False).stdout.strip()
        if top and os.path.samefile(os.path.join(top, "src", "smgemm"), package):
            commit = subprocess.run(["git", "-C", top, "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True, check=False).stdout.strip()
            return f"{version} (commit {commit})"
    except OSError:
        pass
    return version


def environment() -> str:
    """One line: the GPU and the versions a reader needs to reproduce a table."""
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "none (Triton interpreter)"
    return (f"GPU: {gpu} | torch {torch.__version__} | triton {triton.__version__} | "
            f"python {platform.python_version()} | smgemm {smgemm_version()}")


def copies_for(m: int, n: int, k: int, dtype: torch.dtype) -> int:
    """Enough operand sets that rotating through them defeats the 60 MB L2 (about 256 MB in all)."""
    elem = torch.empty((), dtype=dtype).element_size()
    return max(1, min(16, math.ceil(256e6 / ((m * k + k * n) * elem))))


def rotation(fn: Callable[[torch.Tensor, torch.Tensor], object], sets: list) -> Callable[[], None]:
    """A call of `fn` on the next operand set, round and round."""
    cycle = itertools.cycle(sets)
    return lambda: fn(*next(cycle))


def time_rotating(fn: Callable[[torch.Tensor, torch.Tensor], object], sets: list, batches: int = 5) -> float:
    """Median milliseconds of one call, rotating through the operand sets (which together defeat L2): device time
    of back-to-back calls, whatever the host's speed.

    The GPU is kept busy with `fn` for 50 ms first: after a pause (a kernel compiling on the host) its clocks
    drop, and a short warm-up does not bring them back for small problems (measured on the H200: rows that
    followed a compile read 2-3x slow). Batches of about 10 ms follow; a batch of short calls (under 1 ms with
    the host's share) starts behind a GPU sleep long enough for the host to queue all of it, so that host overhead
    (reported on its own by `host_overhead`) never leaves the GPU idle inside the timed span; longer calls keep
    the host ahead by themselves and run back to back at the clocks the power limit allows. (triton's do_bench
    clears L2 with a memset before every call and times each call alone: short kernels then read up to 4x slow.)
    """
    step = rotation(fn, sets)
    step()  # compiles what the first call needs, outside the per-call estimate below
    torch.cuda.synchronize()
    start_s, calls = time.perf_counter(), 0
    while time.perf_counter() - start_s < 0.05:
        step()
        torch.cuda.synchronize()
        calls += 1
    per_call_s = (time.perf_counter() - start_s) / calls  # host + device, an upper bound on either
    n = max(len(sets), min(500, math.ceil(10e-3 / per_call_s)))  # about 10 ms of calls, every set at least once
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(batches):
        if per_call_s < 1e-3:  # the host may be the slower side: let it queue the batch during a GPU sleep
            torch.cuda._sleep(int(1.5 * n * per_call_s * 2e9))  # ~2 GHz
        start.record()
        for _ in range(n):
            step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / n)
    return sorted(times)[len(times) // 2]


def event_ms(run: Callable[[], object], reps: int, barrier: Callable[[], object] | None = None,
             warm_s: float = 0.0) -> float:
    """Milliseconds per call of `run`: one warm-up call (or `warm_s` seconds of calls, which bring the clocks back
    up after a pause), then CUDA events on the current stream around `reps` calls (after `barrier()`, e.g.
    `torch.distributed.barrier`, so that ranks start together)."""
    start_s = time.perf_counter()
    run()
    torch.cuda.synchronize()
    while time.perf_counter() - start_s < warm_s:
        run()
        torch.cuda.synchronize()
    if barrier is not None:
        barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


def capture(fn: Callable[[], object], calls: int = 1) -> torch.cuda.CUDAGraph:
    """A CUDA graph of `calls` calls of `fn`, after one warm-up call on a side stream (compiling outside the
    capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph


def graph_us(fn: Callable[[], object], calls: int = 20, reps: int = 10) -> float:
    """Median device microseconds of one call of `fn`, from replays of a CUDA graph of `calls` calls.

    Launch gaps and host overhead drop out: what is left is the kernel itself (operands may sit in L2).
    """
    graph = capture(fn, calls)
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return sorted(times)[len(times) // 2]


def graph_rotating(fn: Callable[[torch.Tensor, torch.Tensor], object], sets: list) -> float:
    """graph_us of `fn` over a graph of one call per operand set (each call reads its own set, defeating L2)."""
    return graph_us(rotation(fn, sets), calls=len(sets))


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.float(), ref.float()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def pyplot():
    """matplotlib.pyplot with a file-only backend, or None when matplotlib is not installed (it is optional)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save_figure(fig, path: str) -> str:
    """Lay out, write and close `fig`; returns the line the benchmarks print."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"wrote {path}"


PLOT_SKIPPED = "plot skipped ({}): matplotlib is not installed (pip install 'smgemm[bench]')"


def host_us_per_call(fn: Callable[[], object], iters: int = 2000) -> float:
    """Host microseconds per call of `fn` after a warm-up, without synchronizing inside the loop."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / iters * 1e6
