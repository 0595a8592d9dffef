"""smgemm.parallel: the chunked all-gather / reduce-scatter GEMMs and the sequence-parallel layers built on them, on
gloo ranks (CPU, Triton interpreter), forward and backward against the unsharded layer in float64."""

import datetime
import os
import socket
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from smgemm.parallel import all_gather_matmul, column_parallel_linear, matmul_reduce_scatter, row_parallel_linear

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="gloo ranks on the CPU (the GPU run is the bench)")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init(rank: int, world: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))


def _exit_passed() -> None:
    """End a worker whose checks all passed without the interpreter's teardown: there gloo's threads have been seen to
    abort a rank ("terminate called without an active exception", SIGABRT) after everything passed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _close(got: torch.Tensor, want: torch.Tensor, scale: torch.Tensor, what: str) -> None:
    """fp16 products and fp16 intermediates (a few roundings of 2^-11 each) against float64: within 2^-7 of the
    magnitude `scale` (the same product on absolute values), elementwise."""
    err = (got.double() - want).abs()
    assert not got.isnan().any() and (err <= 2.0**-7 * scale + 1e-6).all(), (what, (err / (scale + 1e-6)).max())


def _layer_worker(rank: int, world: int, port: int, chunks: int) -> None:
    _init(rank, world, port)
    try:
        gen = torch.Generator().manual_seed(0)  # the same full tensors on every rank
        tokens, hidden, ffn = 6 * world, 32, 16 * world
        x = torch.randn(tokens, hidden, generator=gen, dtype=torch.float64)
        w_up = torch.randn(ffn, hidden, generator=gen, dtype=torch.float64) / hidden**0.5
        w_down = torch.randn(hidden, ffn, generator=gen, dtype=torch.float64) / ffn**0.5
        dz = torch.randn(tokens, hidden, generator=gen, dtype=torch.float64)
        # the unsharded layer in float64, and magnitudes for the error bounds
        ref = [t.clone().requires_grad_() for t in (x, w_up, w_down)]
        z = ref[0] @ ref[1].t() @ ref[2].t()
        z.backward(dz)
        scale_z = x.abs() @ w_up.abs().t() @ w_down.abs().t()
        rows, feats = slice(rank * 6, rank * 6 + 6), slice(rank * 16, rank * 16 + 16)
        # this rank's shards, in fp16
        xs, up, down = (t.to(torch.float16).requires_grad_() for t in (x[rows], w_up[feats], w_down[:, feats]))
        y = column_parallel_linear(xs, up, chunks=chunks, num_sms=3)
        assert y.shape == (tokens, 16)
        zs = row_parallel_linear(y, down, chunks=chunks, num_sms=3)
        _close(zs, z.detach()[rows], scale_z[rows], "forward")
        zs.backward(dz[rows].to(torch.float16))
        d_scale = dz.abs() @ w_down.abs()  # |dy|, the gradient of y = x @ w_up.T
        _close(xs.grad, ref[0].grad[rows], (d_scale @ w_up.abs())[rows], "dx")
        _close(up.grad, ref[1].grad[feats], (d_scale.t() @ x.abs())[feats], "dw_up")
        _close(down.grad, ref[2].grad[:, feats], (dz.abs().t() @ (x.abs() @ w_up.abs().t()))[:, feats], "dw_down")
        # the plain functions, with more chunks than rows: every row still counted once
        a = torch.randn(4, 8, generator=gen).to(torch.float16)
        b = torch.randn(8, 5, generator=gen).to(torch.float16)
        gathered = torch.empty(4 * world, 8, dtype=torch.float16)
        full = all_gather_matmul(a, b, chunks=9, gathered=gathered)
        everyone = [torch.empty_like(a) for _ in range(world)]
        dist.all_gather(everyone, a)
        want = torch.cat(everyone)
        assert torch.equal(gathered, want)
        _close(full, want.double() @ b.double(), want.double().abs() @ b.double().abs(), "all_gather_matmul")
        part = matmul_reduce_scatter(want, b, chunks=3)  # every rank the same a: the sum is world * a @ b
        mine = want[rank * 4:(rank + 1) * 4].double()
        _close(part, world * (mine @ b.double()), world * (mine.abs() @ b.double().abs()), "matmul_reduce_scatter")
        dist.barrier()  # no rank tears the group down while another's collectives are still in flight
    finally:
        dist.destroy_process_group()
    _exit_passed()


@pytest.mark.parametrize("world, chunks", [(2, 1), (2, 4), (3, 2)])
def test_sequence_parallel_layers_match_the_unsharded_layer(world, chunks):
    mp.spawn(_layer_worker, args=(world, _port(), chunks), nprocs=world, join=True)


def _failing_worker(rank: int, world: int, port: int, outcomes: str) -> None:
    _init(rank, world, port)
    try:
        if rank == 1:
            raise ValueError("rank 1 fails before the collective")
        column_parallel_linear(torch.randn(4, 8).half(), torch.randn(4, 8).half())  # waits for rank 1's gather
    except Exception as e:  # each rank records how it ended, then fails as it would
        with open(os.path.join(outcomes, f"rank{rank}"), "w") as f:
            f.write(f"{type(e).__name__}: {e}")
        raise
    finally:
        dist.destroy_process_group()


def test_a_failing_rank_fails_every_rank(tmp_path):
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    # Each rank is left to end by itself (spawn's join would terminate the others at the first failure): both must
    # exit within the timeout, with an error, rank 1 with its own and rank 0 from the collective it waited in.
    context = mp.spawn(_failing_worker, args=(2, _port(), str(tmp_path)), nprocs=2, join=False)
    for process in context.processes:
        process.join(timeout=120)
    exitcodes = [p.exitcode for p in context.processes]
    for process in context.processes:
        if process.is_alive():  # hung: the assert below fails; leave no process behind
            process.kill()
    assert exitcodes == [1, 1]
    assert (tmp_path / "rank1").read_text() == "ValueError: rank 1 fails before the collective"
    assert (tmp_path / "rank0").read_text().startswith(("RuntimeError", "DistBackendError"))


def test_chunks_cover_the_rows_once():
    from smgemm.parallel import _bounds

    for rows in range(0, 20):
        for chunks in range(1, 8):
            bounds = _bounds(rows, chunks)
            assert [r for start, stop in bounds for r in range(start, stop)] == list(range(rows))
            assert all(stop > start for start, stop in bounds) or rows == 0
            assert len(bounds) == max(1, min(chunks, rows))


def _dtensor_worker(rank: int, world: int, port: int) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    import smgemm

    _init(rank, world, port)
    try:
        mesh = init_device_mesh("cpu", (world,))
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(6, 32, generator=gen, dtype=torch.float64)
        w1 = torch.randn(16, 32, generator=gen, dtype=torch.float64) / 32**0.5
        w2 = torch.randn(8, 16, generator=gen, dtype=torch.float64) / 4
        bias = torch.randn(16, generator=gen, dtype=torch.float64)
        ref = [t.clone().requires_grad_() for t in (x, w1, w2, bias)]
        z = (ref[0] @ ref[1].t() + ref[3]) @ ref[2].t()
        z.sum().backward()
        # Megatron's pair as DTensors: w1 sharded by output features (column-parallel), w2 by input features
        # (row-parallel), x replicated; the second product is a partial sum over the ranks
        half = [distribute_tensor(t.to(torch.float16), mesh, [p]).requires_grad_()
                for t, p in ((x, Replicate()), (w1, Shard(0)), (w2, Shard(1)), (bias, Shard(0)))]
        y = smgemm.linear(half[0], half[1], half[3])
        assert y.placements == (Shard(1),), y.placements
        out = smgemm.matmul(y, half[2].t())
        scale = (x.abs() @ w1.abs().t() + bias.abs()) @ w2.abs().t()
        _close(out.full_tensor(), z.detach(), scale, "dtensor forward")
        out.sum().backward()
        dz = torch.ones_like(z)
        dy = dz @ w2.abs()  # the magnitudes behind each gradient
        scales = (dy @ w1.abs(), dy.t() @ x.abs(), dz.t() @ (x.abs() @ w1.abs().t() + bias.abs()), dy.sum(0))
        for got, want, scale, what in zip(half, ref, scales, ("dx", "dw1", "dw2", "dbias")):
            _close(got.grad.full_tensor(), want.grad, scale, what)
        # a batched product sharded along its batch
        a, b = torch.randn(4, 3, 8, generator=gen), torch.randn(4, 8, 5, generator=gen)
        got = smgemm.bmm(*(distribute_tensor(t.half(), mesh, [Shard(0)]) for t in (a, b)))
        assert got.placements == (Shard(0),)
        _close(got.full_tensor(), a.double() @ b.double(), a.double().abs() @ b.double().abs(), "dtensor bmm")
        dist.barrier()  # no rank tears the group down while another's collectives are still in flight
    finally:
        dist.destroy_process_group()
    _exit_passed()


def test_dtensor_operands_shard_like_aten_mm():
    mp.spawn(_dtensor_worker, args=(2, _port()), nprocs=2, join=True)
