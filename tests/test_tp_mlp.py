"""The tensor-parallel MLP of `python -m smgemm bench tp`: two ranks (gloo on the CPU, NCCL on GPUs), chunked
all-reduce overlapped with SM-budgeted GEMMs, checked against the unsharded MLP."""

import pytest
import torch

from smgemm.tools.tp import run_ranks as run


def test_two_ranks_match_the_unsharded_mlp():
    if torch.cuda.is_available() and torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs (or none: gloo on the CPU)")
    rows = run(2, (48, 64, 128), [(1, None), (3, 5)], reps=1)
    assert [(r["chunks"], r["GEMM num_sms"]) for r in rows] == [
        (1, "all"), (3, 5), ("GEMMs only (no all-reduce)", ""), ("all-reduce only", "")]
    # bf16 / fp16 activations between the two GEMMs: ~1e-3 relative; a missing shard or chunk gives ~0.5.
    assert all(r["rel err"] < 1e-2 for r in rows), rows


def test_ffn_must_split_evenly():
    with pytest.raises(ValueError, match="divisible by the number of ranks"):
        run(3, (8, 8, 64), [(1, None)])


def test_sequence_parallel_layer_bench_rows():
    from smgemm.tools.tp import run_layer

    if torch.cuda.is_available() and torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs (or none: gloo on the CPU)")
    rows = run_layer(2, (16, 32, 64), [(1, None), (3, 5)], reps=1, backward=True)
    assert [r["variant"] for r in rows[:3]] == ["no overlap", "1 chunks", "3 chunks"]
    assert rows[3]["variant"].startswith("torch async-TP")
    # every timed variant computes the same layer (fp16 between the GEMMs: ~1e-3 relative)
    assert all(r["rel err"] < 1e-2 for r in rows[:3]), rows


def test_layer_model_is_bounded_by_its_bytes_and_rates():
    from smgemm.tools.tp import layer_model

    shape = (8192, 8192, 28672)
    for backward in (False, True):
        rows = [layer_model(world, shape, 360.0, backward=backward) for world in (2, 4, 8)]
        for r in rows:
            assert r["no overlap ms"] == pytest.approx(r["GEMMs ms"] + r["collectives ms"])
            nccl, copy = r["NCCL beside GEMMs on 116 SMs"], r["copy engines beside GEMMs on 132"]
            assert nccl < copy <= r["bound"]  # SMs lent to NCCL slow the GEMMs; nothing beats the bound
        # more ranks: less GEMM work a rank, more of the activations to move, so more to hide
        assert [r["bound"] for r in rows] == sorted(r["bound"] for r in rows)
    # one of two ranks' forward GEMMs: 2 T H 3F / 2 FLOPs at the whole chip's 697 TFLOP/s; backward twice more
    forward = layer_model(2, shape, 360.0)["GEMMs ms"]
    assert forward == pytest.approx(2 * 8192 * 8192 * 3 * 28672 / 2 / 697e12 * 1e3, rel=1e-9)
    assert layer_model(2, shape, 360.0, backward=True)["GEMMs ms"] == pytest.approx(3 * forward, rel=1e-9)


def test_bench_tp_model_runs_without_gpus(capsys):
    import argparse

    from smgemm.tools import tp

    p = argparse.ArgumentParser()
    tp.add_arguments(p)
    assert tp.run(p.parse_args(["--model"])) == 0
    out = capsys.readouterr().out
    assert "Modelled, not measured" in out and out.count("fwd") >= 6
