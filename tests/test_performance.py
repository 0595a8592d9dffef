"""Short versions of the benchmark tables (GPU only, marked `performance`): run with `pytest -m performance -s`.

They print tables and check only what a benchmark can promise without flaking: every variant ran and agreed
with torch. The figures themselves, with the full commands, are in docs/performance.md.
"""

import pytest

from smgemm.tools.bench import bench_full_chip
from smgemm.tools.timing import table as _table

pytestmark = pytest.mark.performance


def test_streamk_against_other_schedules_and_torch():
    import torch

    shapes = [(512, 512, 32768), (1024, 1024, 16384), (3072, 3072, 8192)]
    schedules = ["auto", "streamk", "data_parallel", "persistent"]
    rows = bench_full_chip(shapes, torch.bfloat16, schedules)
    print("\n" + _table(rows))
    fp8_rows = bench_full_chip([(256, 1024, 16384)], torch.float8_e4m3fn, schedules)  # the deeper few-tile plan
    print(_table(fp8_rows))
    assert all(r["rel err"] < 1e-2 for r in rows + fp8_rows)


def test_mxfp4_decode_and_large():
    from smgemm.tools.bench import bench_mxfp4

    rows = bench_mxfp4([(16, 8192, 8192), (4096, 4096, 4096)]) + bench_mxfp4([(4096, 4096, 4096)], both=True)
    print("\n" + _table(rows))
    assert all(r["rel err"] < 1e-2 for r in rows)


def test_hopper_path_full_chip_and_sm_budgets():
    """The bench's comparisons, short: full chip vs torch.matmul (bf16, fp8 vs _scaled_mm), budgets vs cuBLASLt."""
    import torch

    from smgemm.tools.bench import bench_budgets

    shapes = [(8192, 8192, 8192), (4096, 14336, 4096), (1024, 8192, 8192)]
    rows = bench_full_chip(shapes, torch.bfloat16, ["auto"])
    rows += bench_full_chip(shapes[:1], torch.float8_e4m3fn, ["auto"])
    print("\n" + _table(rows))
    budget_rows = bench_budgets([(8192, 8192, 8192)], torch.bfloat16, [16, 66])
    print(_table(budget_rows))
    assert all(r["rel err"] < 1e-2 for r in rows + budget_rows)


def test_epilogue_bias_and_c_matrix():
    """linear with a bias and addmm with a C matrix against torch's, bf16 and TF32 (a 4-byte C matrix is read in
    column halves)."""
    import torch

    from smgemm.tools.bench import bench_epilogue, table_dtype

    rows = bench_epilogue([(4096, 4096, 4096), (1024, 6144, 4096)], torch.bfloat16)
    with table_dtype("tf32") as dtype:
        rows += bench_epilogue([(4096, 4096, 4096)], dtype)
    print("\n" + _table(rows))
    assert all(r["rel err"] < 1e-2 for r in rows)
