"""`python -m smgemm bench tp`: a tensor-parallel MLP whose all-reduce overlaps the next chunk's GEMMs.

Megatron-style MLP shard on each of `world` ranks: y = all_reduce(silu(x @ W_up_r^T) @ W_down_r^T), with W_up split
by rows (column-parallel) and W_down by columns (row-parallel). The overlapped version cuts the tokens into
`chunks`; chunk i's all-reduce (NCCL, on its own stream) runs while chunk i + 1's GEMMs run on `num_sms` SMs, which
leaves the other SMs to NCCL's kernels. The baseline is the same MLP in one chunk on the whole chip.

On GPUs the ranks use NCCL (one GPU each, NVLink multicast off: NCCL_NVLS_ENABLE=0); without GPUs, gloo on the CPU
with the Triton interpreter, which checks the arithmetic and the chunking but times nothing meaningful.
"""

from __future__ import annotations

import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ..ops import linear
from .timing import environment, event_ms, table


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


def _worker(rank: int, world: int, port: int, shape: tuple[int, int, int], variants: list[tuple[int, int | None]],
            reps: int, queue) -> None:
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        device = torch.device("cuda", rank) if cuda else torch.device("cpu")
        if cuda:
            torch.cuda.set_device(device)
        dtype = torch.bfloat16 if cuda else torch.float16
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
        if rank == 0:
            base = rows[0]["ms"]
            for r in rows:
                r["vs first row"] = base / r["ms"]
            queue.put(rows)
    finally:
        dist.destroy_process_group()


def run_ranks(world: int, shape: tuple[int, int, int], variants: list[tuple[int, int | None]], reps: int = 10) -> list:
    """Spawn `world` ranks, run every (chunks, num_sms) variant, return rank 0's rows (first variant = baseline)."""
    import torch.multiprocessing as mp

    if shape[2] % world:
        raise ValueError(f"ffn ({shape[2]}) must be divisible by the number of ranks ({world})")
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.spawn(_worker, args=(world, _free_port(), shape, variants, reps, queue), nprocs=world, join=True)
    return queue.get()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--world", type=int, default=2, help="ranks (one GPU each)")
    p.add_argument("--shape", default="8192x8192x28672", help="tokens x hidden x ffn (full, before sharding)")
    p.add_argument("--variants", default="1:all,2:all,2:116,4:all,4:116,4:124,8:116",
                   help="chunks:num_sms pairs; the first is the baseline")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--nccl-channels", type=int, default=None,
                   help="cap NCCL's channels (NCCL_MAX_NCHANNELS: one thread block each), e.g. to the SMs the GEMMs "
                        "leave free")


def run(args: argparse.Namespace) -> int:
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
    rows = run_ranks(args.world, tuple(int(v) for v in args.shape.split("x")), variants, args.reps)
    print(table(rows))
    return 0 if all(r["rel err"] < 2e-2 for r in rows) else 1
