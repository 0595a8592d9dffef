"""Bench helpers that run anywhere: tables and plan descriptions."""

import torch

from smgemm._device import INTERPRETER_SPEC, tf32_enabled
from smgemm.plan import make_mx_plan
from smgemm.tools.bench import describe, table_dtype
from smgemm.tools.timing import table as _table


def test_table_takes_rows_with_different_columns():
    text = _table([{"M": 16, "graph us": 1.5}, {"M": 4096, "plan": "pers"}])
    header, _, first, second = text.splitlines()
    assert [c.strip() for c in header.strip("|").split("|")] == ["M", "graph us", "plan"]
    assert [c.strip() for c in first.strip("|").split("|")] == ["16", "1.5", ""]
    assert [c.strip() for c in second.strip("|").split("|")] == ["4096", "", "pers"]


def test_describe_names_schedule_tile_and_mxfp4_flags():
    plan = make_mx_plan(4096, 4096, 4096, torch.bfloat16, INTERPRETER_SPEC)
    assert describe(plan) == "pers 256x128x64 w8 s4 mx_swap mx_prefetch grid 132"
    plan = make_mx_plan(16, 4096, 14336, torch.bfloat16, INTERPRETER_SPEC)
    assert describe(plan) == "stre 16x64x512 w4 s4 grid 128 sk 64"  # 64 tiles, each K-loop in 2 parts


def test_tf32_table_allows_tf32_only_while_it_runs():
    assert not tf32_enabled()
    with table_dtype("tf32") as dtype:
        assert dtype == torch.float32 and tf32_enabled()
    assert not tf32_enabled()
    with table_dtype("fp32") as dtype:
        assert dtype == torch.float32 and not tf32_enabled()


def test_random_suite_is_a_fixed_draw_per_seed():
    from smgemm.tools.bench import random_shapes

    shapes = random_shapes(0)
    assert shapes == random_shapes(0) and shapes != random_shapes(1) and len(shapes) == 48
    assert all(64 <= d <= 16384 for s in shapes for d in s[:3])
    odd = [s for s in shapes if s[3]]
    assert len(odd) == 12 and all(d % 2 for s in odd for d in s[:3])


def test_cli_values_reach_the_bench_as_lists():
    from smgemm.tools import cli

    args = cli.parser().parse_args(["bench", "--suite", "random,quick", "--seed", "3", "--schedules", "auto,streamk"])
    assert args.suite == ["random", "quick"] and args.seed == 3 and args.schedules == ["auto", "streamk"]


def test_model_table_runs_the_swapped_llama_against_torch():
    """The model-level MXFP4 table (`bench --mxfp4 --mxfp4-model`, examples/llama.py) on the tiny Llama: one decode and
    one prefill row whose logits agree with the torch model holding the same dequantized weights (through the
    interpreter on the CPU: the MXFP4 expansion is exact, so only the accumulation order differs)."""
    import pytest

    pytest.importorskip("transformers")
    from smgemm.tools import cli
    from smgemm.tools.model import model_rows

    assert cli.parser().parse_args(["bench", "--mxfp4", "--mxfp4-model", ""]).mxfp4_model == ""
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["bench", "--mxfp4-model", "huge"])
    rows = model_rows("tiny", [2], 5, mxfp4=True)
    assert [r["tokens"] for r in rows] == ["2 x 1 (decode, batch 2)", "1 x 5 (prefill)"]
    assert all(0 <= r["rel diff of logits"] < 2e-2 for r in rows), rows
