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
