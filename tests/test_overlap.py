"""The overlap benchmark (issue 7): its plot on any machine, a short run on a GPU."""

import pytest

from smgemm.overlap_bench import bench_overlap, plot_overlap


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
