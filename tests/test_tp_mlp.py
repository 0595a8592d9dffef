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
