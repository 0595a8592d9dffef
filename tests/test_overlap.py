"""The overlap benchmark: its plot on any machine, a short run on a GPU."""

import math

import pytest
import torch

from smgemm.tools.overlap import bench_overlap, plot_overlap
from smgemm.tools.timing import table as _table


def test_overlap_plot(tmp_path):
    rows = [{"GEMM SMs": k, "sequential ms": 2.0, "concurrent ms": 1.8, "partitioned ms": 1.0 + k / 132}
            for k in (32, 66, 100)]
    path = tmp_path / "overlap.png"
    message = plot_overlap(rows, str(path), "test")
    assert message == f"wrote {path}" or "matplotlib is not installed" in message
    assert path.exists() == message.startswith("wrote")


@pytest.mark.gpu
def test_overlap_bench_runs_and_checks_results():
    rows = bench_overlap((1024, 1024, 1024), 2e8, [32, 100], reps=2)
    assert [r["GEMM SMs"] for r in rows] == [32, 100]
    for r in rows:
        assert r["partitioned ms"] > 0 and r["sequential ms"] > 0
    assert all(list(r) == list(rows[0]) for r in rows), "every row needs the same columns for the table"
    assert "partitioned / sequential" in _table(rows)


@pytest.mark.gpu
@pytest.mark.parametrize("partner", ["attention", "mxfp4"])
def test_serving_step_bench_runs_and_checks_results(partner, tmp_path):
    from smgemm.tools.overlap import bench_step, plot_step

    rows, summary = bench_step(256, 8, 2048, [64, 96], reps=2, partner=partner, decode_layers=1)
    assert [r["GEMM SMs"] for r in rows] == [64, 96]
    for r in rows:
        assert r["partitioned ms"] > 0 and r["modelled ms"] == max(r["GEMMs on k ms"], r["partner on rest ms"])
        # (no ratio to the times alone: at these small sizes those are bound by host launches, the pair's are not)
        for key in ("GEMMs in pair ms", "partner in pair ms", "compute-only partner ms"):
            assert math.isfinite(r[key]) and r[key] > 0, (key, r)
    assert summary["best k"] in (64, 96) and summary["model's best ms"] > 0
    message = plot_step(rows, summary, str(tmp_path / "step.png"), "test")
    assert message.startswith("wrote") or "matplotlib is not installed" in message


def test_kv_scores_matches_float64(device):
    # The overlap benchmark's bandwidth-bound kernel (a Triton GEMV), run through the interpreter on a CPU.
    from smgemm.tools.overlap import kv_scores

    x = torch.randn(37, 2048, device=device).to(torch.bfloat16)  # 37 rows: the last block of 8 is partial
    q = torch.randn(2048, device=device)
    out = torch.full((37,), float("nan"), device=device)
    kv_scores(x, q, out)
    terms = x.double() * q.double()
    # fp32 accumulation of 2048 products: within 2048 * 2^-24 of the sum of magnitudes
    assert ((out.double() - terms.sum(dim=1)).abs() <= 2048 * 2**-24 * terms.abs().sum(dim=1)).all()
