"""`python -m smgemm bench tp`: a tensor-parallel MLP whose all-reduce overlaps the next chunk's GEMMs.

Megatron-style MLP shard on each of `world` ranks: y = all_reduce(silu(x @ W_up_r^T) @ W_down_r^T), with W_up split
by rows (column-parallel) and W_down by columns (row-parallel). The overlapped version cuts the tokens into
`chunks`; chunk i's all-reduce (NCCL, on its own stream) runs while chunk i + 1's GEMMs run on `num_sms` SMs, which
leaves the other SMs to NCCL's kernels. The baseline is the same MLP in one chunk on the whole chip.

`--layer` times a sequence-parallel MLP layer instead (Llama-3-70B: hidden 8192, MLP 28672, sharded over the ranks),
built from `smgemm.parallel`: all-gather -> gate/up GEMM (column-parallel), SiLU-and-multiply, down GEMM ->
reduce-scatter (row-parallel), forward and, with `--backward`, backward. Rows: the same layer with the collectives
issued whole before / after the GEMMs ("no overlap"), then each chunks:num_sms variant (overlapped), and torch's
own async-TP (`torch.ops.symm_mem.fused_all_gather_matmul`) where the installed torch and the machine provide it.

On GPUs the ranks use NCCL (one GPU each, NVLink multicast off: NCCL_NVLS_ENABLE=0); without GPUs, gloo on the CPU
with the Triton interpreter, which checks the arithmetic and the chunking but times nothing meaningful.

`--model` runs nothing: it prints the `--layer` shape's modelled time on 2, 4 and 8 H200s and what overlapping its
collectives can gain (`layer_model`), from the measured GEMM rates and a collective bandwidth.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import os
import socket

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .. import parallel
from ..ops import linear, matmul
from ..parallel import _ALL_GATHER, _REDUCE_SCATTER
from .timing import PLOT_SKIPPED, environment, event_ms, pyplot, save_figure, table


def tp_mlp(x: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, *, chunks: int = 1,
           num_sms: int | None = None, group=None, communicate: bool = True) -> torch.Tensor:
    """This rank's shard of the MLP, summed over the group: all_reduce(silu(x @ w_up.T) @ w_down.T).

    x [T, H] (replicated), w_up [F/world, H], w_down [H, F/world]. With chunks > 1 each chunk's all-reduce is
    issued asynchronously as soon as its GEMMs are done, so it overlaps the next chunk's GEMMs. communicate=False
    skips the all-reduce (the benchmark's compute-only row).
    """
    outs, pending = [], []
    for xc in x.chunk(chunks):
        h = F.silu(linear(xc, w_up, num_sms=num_sms))
        y = linear(h, w_down, num_sms=num_sms)
        if communicate:
            pending.append(dist.all_reduce(y, group=group, async_op=True))
        outs.append(y)
    for work in pending:
        work.wait()
    return torch.cat(outs)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _time_ms(fn, reps: int, cuda: bool) -> float:
    if cuda:

        return event_ms(fn, reps, dist.barrier)
    import time

    fn()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) * 1e3 / reps


def _join(rank: int, world: int, port: int) -> tuple[bool, torch.device, torch.dtype]:
    """Join the group of `world` ranks: NCCL with one GPU a rank (NVLink multicast off), else gloo on the CPU; every
    collective waits at most 5 minutes, so a rank that fails makes the others fail, never hang. Returns whether
    on GPUs, the rank's device and the dtype its tensors take."""
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=300))
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    return cuda, device, torch.bfloat16 if cuda else torch.float16


def _report(rank: int, rows: list[dict[str, object]], column: str, queue) -> None:
    """Rank 0 hands its rows to the parent, each with its speed-up over the first row in `column`, once every rank
    is done (no rank then tears the group down while another's collectives are in flight)."""
    dist.barrier()
    if rank == 0:
        for r in rows:
            r[column] = rows[0]["ms"] / r["ms"]
        queue.put(rows)


def _spawn(worker, world: int, *args) -> list:
    """Run `worker(rank, world, port, *args, queue)` on `world` spawned ranks; rank 0's rows."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.spawn(worker, args=(world, _free_port(), *args, queue), nprocs=world, join=True)
    return queue.get()


def _worker(rank: int, world: int, port: int, shape: tuple[int, int, int], variants: list[tuple[int, int | None]],
            reps: int, queue) -> None:
    cuda, device, dtype = _join(rank, world, port)
    try:
        tokens, hidden, ffn = shape
        gen = torch.Generator().manual_seed(1234)  # the same full weights and input on every rank
        x = (torch.randn(tokens, hidden, generator=gen) / 4).to(device, dtype)
        w_up = (torch.randn(ffn, hidden, generator=gen) / hidden**0.5).to(device, dtype)
        w_down = (torch.randn(hidden, ffn, generator=gen) / ffn**0.5).to(device, dtype)
        shard = ffn // world
        up_r = w_up[rank * shard:(rank + 1) * shard].contiguous()
        down_r = w_down[:, rank * shard:(rank + 1) * shard].contiguous()
        ref = F.silu(x.float() @ w_up.float().t()).to(dtype).float() @ w_down.float().t()
        rows = []
        for chunks, num_sms in variants:
            y = tp_mlp(x, up_r, down_r, chunks=chunks, num_sms=num_sms)
            err = ((y.float() - ref).norm() / ref.norm()).item()
            ms = _time_ms(lambda c=chunks, n=num_sms: tp_mlp(x, up_r, down_r, chunks=c, num_sms=n), reps, cuda)
            rows.append({"chunks": chunks, "GEMM num_sms": "all" if num_sms is None else num_sms, "ms": ms,
                         "rel err": err})
        # What overlap can at best hide: the GEMMs alone and the all-reduce alone, in the first variant's form.
        chunks, num_sms = variants[0]
        y = torch.empty(tokens, hidden, device=device, dtype=dtype)
        bounds = {
            "GEMMs only (no all-reduce)": _time_ms(
                lambda: tp_mlp(x, up_r, down_r, chunks=chunks, num_sms=num_sms, communicate=False), reps, cuda),
            "all-reduce only": _time_ms(lambda: dist.all_reduce(y), reps, cuda),
        }
        for name, ms in bounds.items():
            rows.append({"chunks": name, "GEMM num_sms": "", "ms": ms, "rel err": 0.0})
        _report(rank, rows, "vs first row", queue)
    finally:
        dist.destroy_process_group()


def run_ranks(world: int, shape: tuple[int, int, int], variants: list[tuple[int, int | None]], reps: int = 10) -> list:
    """Spawn `world` ranks, run every (chunks, num_sms) variant, return rank 0's rows (first variant = baseline)."""
    if shape[2] % world:
        raise ValueError(f"ffn ({shape[2]}) must be divisible by the number of ranks ({world})")
    return _spawn(_worker, world, shape, variants, reps)


def _all_gather(x: torch.Tensor, group) -> torch.Tensor:
    out = x.new_empty(dist.get_world_size(group) * x.shape[0], *x.shape[1:])
    _ALL_GATHER(out, x.contiguous(), group=group)
    return out


def _reduce_scatter(x: torch.Tensor, group) -> torch.Tensor:
    out = x.new_empty(x.shape[0] // dist.get_world_size(group), *x.shape[1:])
    _REDUCE_SCATTER(out, x.contiguous(), group=group)
    return out


class _Gather(torch.autograd.Function):
    """all_gather along dim 0 (or, `scatter`, reduce_scatter), whole; its gradient is the other one."""

    @staticmethod
    def forward(ctx, x, group, scatter=False):
        ctx.group, ctx.scatter = group, scatter
        return _reduce_scatter(x, group) if scatter else _all_gather(x, group)

    @staticmethod
    def backward(ctx, grad):
        return (_all_gather(grad, ctx.group) if ctx.scatter else _reduce_scatter(grad, ctx.group)), None, None


def _sp_mlp(x_shard, w_gate_up, w_down, chunks: int | None, num_sms: int | None, group=None) -> torch.Tensor:
    """The sequence-parallel MLP: chunks=None issues each collective whole (no overlap), else smgemm.parallel."""
    if chunks is None:  # each collective whole, before / after the GEMMs
        x = _Gather.apply(x_shard, group)
        gate, up = matmul(x, w_gate_up.t(), num_sms=num_sms).chunk(2, dim=1)
        y = matmul(F.silu(gate) * up, w_down.t(), num_sms=num_sms)
        return _Gather.apply(y, group, True)
    gate, up = parallel.column_parallel_linear(x_shard, w_gate_up, chunks=chunks, num_sms=num_sms,
                                               group=group).chunk(2, dim=1)
    return parallel.row_parallel_linear(F.silu(gate) * up, w_down, chunks=chunks, num_sms=num_sms, group=group)


def _torch_async_tp(x_shard, w_gate_up, w_down, group_name: str):
    """The layer's forward through torch's fused all-gather matmul and matmul reduce-scatter (symmetric memory)."""
    ops = torch.ops.symm_mem
    _, (gate_up,) = ops.fused_all_gather_matmul(x_shard, [w_gate_up.t()], 0, group_name)
    gate, up = gate_up.chunk(2, dim=1)
    return ops.fused_matmul_reduce_scatter(F.silu(gate) * up, w_down.t(), "sum", 0, group_name)


def _layer_worker(rank: int, world: int, port: int, shape: tuple[int, int, int], variants: list, reps: int,
                  backward: bool, queue) -> None:
    cuda, device, dtype = _join(rank, world, port)
    try:
        tokens, hidden, ffn = shape
        gen = torch.Generator().manual_seed(1234)  # the same full weights and input on every rank
        x = (torch.randn(tokens, hidden, generator=gen) / 4).to(device, dtype)
        w_gate_up = (torch.randn(2 * ffn, hidden, generator=gen) / hidden**0.5).to(device, dtype)
        w_down = (torch.randn(hidden, ffn, generator=gen) / ffn**0.5).to(device, dtype)
        rows, shard = tokens // world, ffn // world
        x_r = x[rank * rows:(rank + 1) * rows].contiguous()
        gu_r = torch.cat([w_gate_up[rank * shard:(rank + 1) * shard],
                          w_gate_up[ffn + rank * shard:ffn + (rank + 1) * shard]]).contiguous()
        down_r = w_down[:, rank * shard:(rank + 1) * shard].contiguous()
        gate, up = (x.float() @ w_gate_up.float().t()).chunk(2, dim=1)
        ref = ((F.silu(gate) * up).to(dtype).float() @ w_down.float().t())[rank * rows:(rank + 1) * rows]
        params = [t.requires_grad_(backward) for t in (x_r, gu_r, down_r)]
        dz = torch.randn(rows, hidden, device=device, dtype=dtype) if backward else None

        def step(chunks, num_sms):
            def run():
                z = _sp_mlp(*params, chunks, num_sms)
                if backward:
                    torch.autograd.backward(z, dz)
                return z
            return run

        rows_out = []
        for chunks, num_sms in [(None, None), *variants]:
            with torch.set_grad_enabled(backward):
                z = step(chunks, num_sms)()
            err = ((z.detach().float() - ref).norm() / ref.norm()).item()
            ms = _time_ms(step(chunks, num_sms), reps, cuda)
            rows_out.append({"variant": "no overlap" if chunks is None else f"{chunks} chunks",
                             "GEMM num_sms": "all" if num_sms is None else num_sms, "ms": ms, "rel err": err})
        try:  # torch's async-TP: forward only, NCCL with symmetric memory
            from torch.distributed._symmetric_memory import enable_symm_mem_for_group

            if not cuda or backward:
                raise RuntimeError("forward on GPUs only")
            group_name = dist.group.WORLD.group_name
            enable_symm_mem_for_group(group_name)
            z = _torch_async_tp(x_r, gu_r, down_r, group_name)
            err = ((z.float() - ref).norm() / ref.norm()).item()
            ms = _time_ms(lambda: _torch_async_tp(x_r, gu_r, down_r, group_name), reps, cuda)
            rows_out.append({"variant": "torch async-TP", "GEMM num_sms": "all", "ms": ms, "rel err": err})
        except (ImportError, AttributeError, RuntimeError) as exc:
            rows_out.append({"variant": f"torch async-TP: n/a ({type(exc).__name__})", "GEMM num_sms": "",
                             "ms": float("nan"), "rel err": 0.0})
        _report(rank, rows_out, "speed-up vs no overlap", queue)
    finally:
        dist.destroy_process_group()


def run_layer(world: int, shape: tuple[int, int, int], variants: list, reps: int = 10,
              backward: bool = False) -> list:
    """Spawn `world` ranks and time the sequence-parallel MLP layer (`_sp_mlp`) per variant; rank 0's rows."""
    tokens, _, ffn = shape
    if tokens % world or ffn % world:
        raise ValueError(f"tokens ({tokens}) and ffn ({ffn}) must be divisible by the number of ranks ({world})")
    return _spawn(_layer_worker, world, shape, variants, reps, backward)


# bf16 GEMM TFLOP/s of smgemm on n SMs of an H200 (8192^3, docs/performance.md's SM-budget table): what the
# layer model charges a rank's GEMMs on the SMs a collective leaves them.
H200_TFLOPS_BY_SMS = ((16, 113.0), (32, 228.0), (66, 450.0), (100, 588.0), (132, 697.0))


def _tflops(sms: int) -> float:
    """H200_TFLOPS_BY_SMS interpolated linearly at `sms`."""
    points = H200_TFLOPS_BY_SMS
    sms = min(max(sms, points[0][0]), points[-1][0])
    for (n0, r0), (n1, r1) in itertools.pairwise(points):
        if sms <= n1:
            return r0 + (r1 - r0) * (sms - n0) / (n1 - n0)
    return points[-1][1]


def layer_model(world: int, shape: tuple[int, int, int], link_gbs: float, chunks: int = 4, nccl_sms: int = 16,
                backward: bool = False) -> dict[str, float]:
    """Modelled time of one rank's sequence-parallel MLP layer (`--layer`) on `world` H200s, in ms, and the
    speed-ups of overlapping its collectives.

    A rank's GEMMs (gate/up: 2 T H 2F / world FLOPs, down: 2 T F H / world; backward twice each) run at the H200's
    measured rate (`H200_TFLOPS_BY_SMS`): on the whole chip without overlap, on all but `nccl_sms` SMs while a
    collective runs beside them. The all-gather before gate/up and the reduce-scatter after down (and their mirrors
    in backward) each move (world - 1) / world of the T x H bf16 activations at `link_gbs` GB/s of bus bandwidth.
    Without overlap the layer takes GEMMs + collectives. Overlapped in `chunks` chunks, each collective hides behind
    its GEMM but for one chunk's share of the shorter of the two: max(G, C) + min(G, C) / chunks per pair, with G on
    the SMs NCCL leaves (`nccl_sms` fewer), or on the whole chip where the collective runs on copy engines (symmetric
    memory, no SMs). `bound` is the best any overlap can do, (G + C) / max(G, C) with G on the whole chip.
    """
    tokens, hidden, ffn = shape
    passes = 3 if backward else 1  # backward: activation and weight gradients, twice the forward's GEMMs
    flops = [2 * tokens * hidden * 2 * ffn / world * passes, 2 * tokens * ffn * hidden / world * passes]
    comm = (world - 1) / world * tokens * hidden * 2 / (link_gbs * 1e9) * 1e3 * (2 if backward else 1)

    def gemm_ms(sms: int) -> list[float]:
        return [f / (_tflops(sms) * 1e12) * 1e3 for f in flops]

    def overlapped(sms: int) -> float:
        return sum(max(g, comm) + min(g, comm) / chunks for g in gemm_ms(sms))

    whole = gemm_ms(132)
    sequential = sum(whole) + 2 * comm
    return {"world": world, "GEMMs ms": sum(whole), "collectives ms": 2 * comm, "no overlap ms": sequential,
            f"NCCL beside GEMMs on {132 - nccl_sms} SMs": sequential / overlapped(132 - nccl_sms),
            "copy engines beside GEMMs on 132": sequential / overlapped(132),
            "bound": sequential / sum(max(g, comm) for g in whole)}


def plot_layer(rows: list[dict[str, object]], path: str, title: str) -> str:
    """PNG: each variant's time per layer step, against the no-overlap row."""
    plt = pyplot()
    if plt is None:
        return PLOT_SKIPPED.format(path)
    timed = [r for r in rows if r["ms"] == r["ms"]]  # NaN: not run
    fig, ax = plt.subplots(figsize=(7, 4))
    labels = [f"{r['variant']}\n{r['GEMM num_sms']}" for r in timed]
    ax.bar(range(len(timed)), [r["ms"] for r in timed])
    ax.set_xticks(range(len(timed)), labels, fontsize=7)
    ax.set(title=title, ylabel="ms per layer step")
    ax.grid(axis="y", alpha=0.3)
    return save_figure(fig, path)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--world", type=int, default=2, help="ranks (one GPU each)")
    p.add_argument("--shape", default="8192x8192x28672", help="tokens x hidden x ffn (full, before sharding)")
    p.add_argument("--variants", default="1:all,2:all,2:116,4:all,4:116,4:124,8:116",
                   help="chunks:num_sms pairs; the first is the baseline")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--layer", action="store_true",
                   help="the sequence-parallel MLP layer from smgemm.parallel (default shape Llama-3-70B's)")
    p.add_argument("--backward", action="store_true", help="--layer: forward and backward")
    p.add_argument("--plot", default="smgemm_tp.png", help="--layer: PNG path ('' skips)")
    p.add_argument("--model", action="store_true",
                   help="no GPUs: the --layer shape's modelled time on 2, 4 and 8 H200s (`layer_model`)")
    p.add_argument("--link-gbs", type=float, default=360.0,
                   help="--model: collective bus bandwidth, GB/s (NVLink 4 carries 450 each way; ring collectives "
                        "without NVLink SHARP reach about 80%% of it)")
    p.add_argument("--nccl-channels", type=int, default=None,
                   help="cap NCCL's channels (NCCL_MAX_NCHANNELS: one thread block each), e.g. to the SMs the GEMMs "
                        "leave free")


def run(args: argparse.Namespace) -> int:
    if args.model:
        shape = tuple(int(v) for v in args.shape.split("x"))
        rows = [{"pass": "fwd+bwd" if backward else "fwd", **layer_model(world, shape, args.link_gbs,
                                                                          backward=backward)}
                for backward in (False, True) for world in (2, 4, 8)]
        print(f"Modelled, not measured: the {args.shape} (tokens x hidden x ffn) sequence-parallel MLP layer on "
              f"H200s, collectives at {args.link_gbs:g} GB/s, 4 chunks; speed-ups of overlap against none.")
        print(table(rows))
        return 0
    if args.nccl_channels is not None:
        os.environ["NCCL_MAX_NCHANNELS"] = str(args.nccl_channels)  # read by the spawned ranks' NCCL
        print(f"NCCL_MAX_NCHANNELS={args.nccl_channels}")
    print(environment())
    if torch.cuda.is_available() and torch.cuda.device_count() < args.world:
        print(f"needs {args.world} GPUs, found {torch.cuda.device_count()}")
        return 1
    if not torch.cuda.is_available():
        print("No CUDA GPU: gloo ranks on the CPU with the Triton interpreter and a small shape (correctness only).")
        args.shape, args.reps = "64x64x128", 1
    variants = [(int(c), None if n == "all" else int(n)) for c, n in (v.split(":") for v in args.variants.split(","))]
    if args.layer:
        shape = (8192, 8192, 28672) if args.shape == "8192x8192x28672" else tuple(int(v) for v in args.shape.split("x"))
        rows = run_layer(args.world, shape, variants, args.reps, args.backward)
        print(table(rows))
        if args.plot and torch.cuda.is_available():
            print(plot_layer(rows, args.plot, f"TP={args.world} MLP layer {'x'.join(map(str, shape))}"
                             f"{' fwd+bwd' if args.backward else ' fwd'}"))
        return 0 if all(r["rel err"] < 2e-2 for r in rows) else 1
    rows = run_ranks(args.world, tuple(int(v) for v in args.shape.split("x")), variants, args.reps)
    print(table(rows))
    return 0 if all(r["rel err"] < 2e-2 for r in rows) else 1
