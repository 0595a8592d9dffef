"""Tensor-parallel GEMMs whose communication overlaps their compute (torch.distributed; NCCL on GPUs, gloo on CPUs).

Sequence-parallel Megatron layers move activations with an all-gather before a column-parallel linear and a
reduce-scatter after a row-parallel one. Here each collective is cut into `chunks` along the rows and issued
asynchronously (on the process group's own stream), so that the GEMMs of one chunk run while the next chunk is in
flight; the GEMMs take `num_sms` so that the collective's kernels keep the SMs they need.

    y = smgemm.parallel.column_parallel_linear(x_shard, w_up_shard, chunks=4, num_sms=120)   # [T, F / world]
    z = smgemm.parallel.row_parallel_linear(silu(y), w_down_shard, chunks=4, num_sms=120)    # [T / world, H]

* `all_gather_matmul(x_shard, b)`: all_gather(x_shard) @ b. This rank's own rows are multiplied first, while the
  first chunk is gathered; then the other ranks' rows of each chunk, as the chunk arrives.
* `matmul_reduce_scatter(a, b)`: reduce_scatter(a @ b), this rank's rows of the sum over ranks. Chunk c's
  reduce-scatter runs while chunk c + 1's GEMMs do; only the last one is exposed.
* `column_parallel_linear` / `row_parallel_linear`: the two as differentiable layers; each one's backward is the
  other's overlapped pattern (dX of a column-parallel linear is a reduce-scatter of dY @ W, dX of a row-parallel
  one an all-gather of dY times W).

Every collective waits at most the process group's timeout (`init_process_group(timeout=...)`), so a rank that
fails makes the others fail instead of hang.
"""

from __future__ import annotations

import itertools

import torch
import torch.distributed as dist

from .ops import matmul

# torch >= 2.12 names them *_single (the *_tensor names warn there); the same arguments
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _world(group) -> int:
    return dist.get_world_size(group)


def _bounds(rows: int, chunks: int) -> list[tuple[int, int]]:
    """(start, stop) of `chunks` near-equal, non-empty row ranges of `rows` rows (fewer when rows < chunks)."""
    chunks = max(1, min(chunks, rows))
    cuts = [rows * i // chunks for i in range(chunks + 1)]
    return list(itertools.pairwise(cuts))


def all_gather_matmul(x_shard: torch.Tensor, b: torch.Tensor, *, group=None, chunks: int = 2,
                      num_sms: int | None = None, gathered: torch.Tensor | None = None) -> torch.Tensor:
    """all_gather(x_shard, dim 0) @ b: x_shard [rows, K] is this rank's block of the rows (rank-major), b [K, N]
    (e.g. a weight shard's transpose). Returns [world * rows, N]. `gathered`, if given ([world * rows, K]),
    receives all_gather(x_shard) (a backward pass needs it)."""
    world, rank = _world(group), dist.get_rank(group)
    rows, k = x_shard.shape
    n = b.shape[1]
    x_shard = x_shard.contiguous()
    bounds = _bounds(rows, chunks)
    bufs, works = [], []
    for start, stop in bounds:  # every gather queued at once: they run back to back on the group's stream
        buf = x_shard.new_empty(world * (stop - start), k)
        works.append(_ALL_GATHER(buf, x_shard[start:stop], group=group, async_op=True))
        bufs.append(buf)
    out = torch.empty(world, rows, n, dtype=x_shard.dtype, device=x_shard.device)
    if rows:
        matmul(x_shard, b, out=out[rank], num_sms=num_sms)  # own rows: nothing to wait for
    for (start, stop), buf, work in zip(bounds, bufs, works):
        work.wait()  # the current stream waits for this chunk; the host does not
        part = buf.view(world, stop - start, k)
        for j in range(world):
            if j != rank:
                matmul(part[j], b, out=out[j, start:stop], num_sms=num_sms)
        if gathered is not None:
            gathered.view(world, rows, k)[:, start:stop].copy_(part)
    return out.view(world * rows, n)


def matmul_reduce_scatter(a: torch.Tensor, b: torch.Tensor, *, group=None, chunks: int = 2,
                          num_sms: int | None = None) -> torch.Tensor:
    """reduce_scatter(a @ b, dim 0): a [world * rows, K] (this rank's share of the reduction dim), b [K, N].
    Returns this rank's [rows, N] block of the sum over ranks."""
    world = _world(group)
    total, k = a.shape
    if total % world:
        raise ValueError(f"a's rows ({total}) must be divisible by the group's size ({world})")
    rows, n = total // world, b.shape[1]
    blocks = a.reshape(world, rows, k)  # a view where a's layout allows
    out = torch.empty(rows, n, dtype=a.dtype, device=a.device)
    works = []
    for start, stop in _bounds(rows, chunks):
        part = torch.empty(world, stop - start, n, dtype=a.dtype, device=a.device)
        for j in range(world):
            matmul(blocks[j, start:stop], b, out=part[j], num_sms=num_sms)
        works.append(_REDUCE_SCATTER(out[start:stop], part.view(-1, n), group=group, async_op=True))
    for work in works:
        work.wait()
    return out


class _ColumnParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_shard, weight, group, chunks, num_sms):
        world = _world(group)
        gathered = x_shard.new_empty(world * x_shard.shape[0], x_shard.shape[1])
        y = all_gather_matmul(x_shard, weight.t(), group=group, chunks=chunks, num_sms=num_sms, gathered=gathered)
        ctx.save_for_backward(gathered, weight)
        ctx.group, ctx.chunks, ctx.num_sms = group, chunks, num_sms
        return y

    @staticmethod
    def backward(ctx, dy):
        gathered, weight = ctx.saved_tensors
        dy = dy.to(weight.dtype)
        dx = matmul_reduce_scatter(dy, weight, group=ctx.group, chunks=ctx.chunks, num_sms=ctx.num_sms)
        dw = matmul(dy.t(), gathered, num_sms=ctx.num_sms)
        return dx, dw, None, None, None


class _RowParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, group, chunks, num_sms):
        y = matmul_reduce_scatter(x, weight.t(), group=group, chunks=chunks, num_sms=num_sms)
        ctx.save_for_backward(x, weight)
        ctx.group, ctx.chunks, ctx.num_sms = group, chunks, num_sms
        return y

    @staticmethod
    def backward(ctx, dy_shard):
        x, weight = ctx.saved_tensors
        dy_shard = dy_shard.to(weight.dtype)
        world = _world(ctx.group)
        dy = dy_shard.new_empty(world * dy_shard.shape[0], dy_shard.shape[1])
        dx = all_gather_matmul(dy_shard, weight, group=ctx.group, chunks=ctx.chunks, num_sms=ctx.num_sms,
                               gathered=dy)
        dw = matmul(dy.t(), x, num_sms=ctx.num_sms)
        return dx, dw, None, None, None


def column_parallel_linear(x_shard: torch.Tensor, weight: torch.Tensor, *, group=None, chunks: int = 2,
                           num_sms: int | None = None) -> torch.Tensor:
    """Sequence-parallel column-parallel linear: all_gather(x_shard) @ weight.T, with x_shard [T / world, K] this
    rank's rows and weight [N / world, K] this rank's output features. Returns [T, N / world]. Differentiable:
    dx_shard = reduce_scatter(dy @ weight), dweight = dy.T @ all_gather(x_shard), both overlapped the same way."""
    return _ColumnParallel.apply(x_shard, weight, group, chunks, num_sms)


def row_parallel_linear(x: torch.Tensor, weight: torch.Tensor, *, group=None, chunks: int = 2,
                        num_sms: int | None = None) -> torch.Tensor:
    """Sequence-parallel row-parallel linear: reduce_scatter(x @ weight.T), with x [T, K / world] and weight
    [N, K / world] this rank's input features. Returns this rank's rows [T / world, N] of the sum over ranks.
    Differentiable: dx = all_gather(dy_shard) @ weight, dweight = all_gather(dy_shard).T @ x."""
    return _RowParallel.apply(x, weight, group, chunks, num_sms)
