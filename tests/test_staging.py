"""Operands whose rows are not aligned as the kernel reads them fastest (odd K or N, sliced views, unaligned bases,
strides that are not a multiple of 16 elements): copied into aligned buffers first where the planner predicts it
pays (`plan.stage_pays`), read in place otherwise; right either way."""

import dataclasses

import pytest
import torch

import smgemm
from reference import assert_gemm_close, randn
from smgemm._device import INTERPRETER_SPEC, tf32_enabled
from smgemm._launch import Operands, operand_alignment, row_alignment, stage, staged, static_args, tma_mode
from smgemm.plan import INPLACE_CONFIGS, decide, inplace_time, make_plan, modelled_time

SCHEDULES = ("data_parallel", "persistent", "streamk")


def _operands(device):
    """(name, a, b) pairs, each with at least one operand whose rows (or columns) break 16-byte alignment."""
    f16 = torch.float16
    w = randn((40, 37), f16, device)
    sliced = randn((24, 50), f16, device)[:, 3:40]  # base 6 bytes past an aligned start, row stride 100 bytes
    return [
        ("odd-k-weight", randn((24, 37), f16, device), w.t()),  # nn.Linear: b = W.T, W [N, K] with K odd
        ("odd-n", randn((24, 32), f16, device), randn((32, 41), f16, device)),
        ("a-col-major-odd-m", randn((23, 32), f16, device, transposed=True), randn((32, 40), f16, device)),
        ("sliced", sliced, randn((37, 40), f16, device)),
        ("fp32-odd-k", randn((24, 19), torch.float32, device), randn((40, 19), torch.float32, device).t()),
        ("k-16-bytes-not-16-elements", randn((24, 40), f16, device), randn((48, 40), f16, device).t()),
    ]


@pytest.mark.parametrize("stage_them", [True, False])
def test_unaligned_operands_staged_or_not(device, stage_them):
    with smgemm.plan.overrides(stage=stage_them):
        for name, a, b in _operands(device):
            for schedule in SCHEDULES:
                out = smgemm.matmul(a, b, schedule=schedule, num_sms=3)
                assert_gemm_close(out, a, b), (name, schedule)
            c = randn((a.shape[0], b.shape[1]), torch.float32, device)
            out = smgemm.addmm(c, a, b, beta=0.5, alpha=2.0)
            assert_gemm_close(out, a, b, c=c, alpha=2.0, beta=0.5), name


def test_repeat_calls_stage_again(device):
    # a repeated signature takes the cached path: it must copy the new call's data, not reuse the last copy
    with smgemm.plan.overrides(stage=True):
        for _ in range(3):
            a, w = randn((24, 37), torch.float16, device), randn((40, 37), torch.float16, device)
            assert_gemm_close(smgemm.matmul(a, w.t()), a, w.t())


def test_stage_copies_exactly_into_aligned_rows(device):
    for _, a, b in _operands(device):
        for t in (a, b):
            if row_alignment(t) == 16:
                continue
            (copy,) = stage([t], budget=2)
            assert copy.shape == t.shape and torch.equal(copy, t)
            column_major = t.stride(0) == 1 and t.stride(1) != 1
            assert row_alignment(copy) == 16
            assert tma_mode(copy) == (2 if column_major else 1)  # in the orientation it had


def test_staged_operands_take_the_descriptor_path(device):
    a, w = randn((256, 37), torch.float16, device), randn((512, 37), torch.float16, device)
    b, out = w.t(), torch.empty(256, 512, dtype=torch.float16, device=device)
    cfg = smgemm.TileConfig(128, 128, 64, num_warps=8, tma=True, tma_store=True, flatten=True)
    with smgemm.plan.overrides(stage=True):
        plan = decide(256, 512, 37, torch.float16, INTERPRETER_SPEC, config=cfg,
                      operands=(operand_alignment(a, 1), operand_alignment(b, 0)))
    assert plan.stage_a and plan.stage_b
    _, meta = static_args(plan, staged(plan, Operands(a, b, out)), 0, 0, False)
    assert (meta["A_DESC"], meta["B_DESC"]) == ("stored", "transposed")
    _, meta = static_args(plan, Operands(a, b, out), 0, 0, False)
    assert (meta["A_DESC"], meta["B_DESC"]) == ("pointers", "pointers")


@pytest.mark.parametrize("m, n, k, expect", [
    (4096, 4096, 4097, True),   # compute-bound: the copy costs a few percent of the GEMM
    (2048, 14336, 4095, True),
    (1024, 1024, 1023, True),
    (881, 224, 2498, True),     # long K: 79 steps of element loads (measured in place 63 us, staged 28)
    (16, 4096, 4097, False),    # decode: bound by streaming the weight once; a copy would stream it three times
    (64, 64, 63, False),        # a few microseconds of work: the copy's launch alone costs more
    (1668, 361, 203, False),    # short K, one wave of 32-deep tiles: measured in place 7.7 us, staged 15
    (225, 8214, 115, False),
])
def test_planner_stages_where_it_pays(m, n, k, expect):
    operands = ((m * k, 1, 1), (n * k, 1, 1))  # odd K: rows aligned to one element
    plan = decide(m, n, k, torch.bfloat16, INTERPRETER_SPEC, operands=operands)
    assert (plan.stage_a or plan.stage_b) == expect
    aligned = decide(m, n, k, torch.bfloat16, INTERPRETER_SPEC, operands=((m * k, 16, 16), (n * k, 16, 16)))
    if expect or aligned.config.block_m <= 16:  # staging, or a decode tile, changes nothing else of the plan
        assert dataclasses.replace(plan, stage_a=False, stage_b=False) == aligned
    else:  # read in place by a tile whose element loads fit its registers
        assert plan.config in INPLACE_CONFIGS and plan.schedule == "persistent"
    if not expect and m > 64:
        return  # (a small budget runs many waves of element loads: staging may pay there)
    for num_sms in (8, 66):  # a budget copies as slowly as its SMs: the rule still holds where the GEMM dominates
        budgeted = decide(m, n, k, torch.bfloat16, INTERPRETER_SPEC, num_sms=num_sms, operands=operands)
        assert budgeted.sm_budget == num_sms and (budgeted.stage_a or budgeted.stage_b) == expect


@pytest.mark.parametrize("m, n, k, runs", [
    (415, 76, 770, 2), (370, 113, 767, 1), (149, 79, 433, 2), (75, 843, 375, 1), (76, 191, 615, 1),
])
def test_small_unaligned_problems_split_k_in_place(m, n, k, runs):
    """A few microseconds of work whose rows are aligned to 1 or 2 elements: on the whole device, the 32-deep tiles
    read them in place over a Stream-K grid (their element loads spread over every SM), which measured 1.3-1.5x
    faster on the H200 than the copy and the GEMM (`Rates.inplace_sk_fixup_base`); under an SM budget (not
    measured) they stay persistent or staged."""
    operands = ((m * k, runs, runs), (n * k, runs, runs))
    plan = decide(m, n, k, torch.bfloat16, INTERPRETER_SPEC, operands=operands)
    assert plan.config in INPLACE_CONFIGS and plan.schedule == "streamk" and not (plan.stage_a or plan.stage_b)
    assert plan.num_programs > 64
    budgeted = decide(m, n, k, torch.bfloat16, INTERPRETER_SPEC, num_sms=66, operands=operands)
    assert budgeted.schedule == "persistent" or budgeted.stage_a or budgeted.stage_b
    # a schedule the caller names is kept
    assert decide(m, n, k, torch.bfloat16, INTERPRETER_SPEC, schedule="persistent",
                  operands=operands).schedule == "persistent"


@pytest.mark.parametrize("m, n, k, expect, tile", [
    # 6 tiles split ~22 ways (`Rates.inplace_sk_fixup_per_sharer`): in place 9.34-9.42 us, staged 11.2-11.3
    (72, 90, 2718, "streamk", 0),
    (83, 83, 2687, "streamk", 0),  # in place 9.06-9.33 us, staged 12.7-12.9
    (881, 224, 2498, "staged", None),  # in place Stream-K 26 us, staged 18
    (153, 177, 2961, "staged", None),  # 12 steps a program in place (plan._INPLACE_SK_MAX_STEPS): 14.0 us, staged 11.0
    (90, 228, 4455, "staged", None),  # 13 steps: 16.4 us, staged 14.3
    (69, 437, 2559, "streamk", 1),  # 9 steps a program, odd rows loaded a step ahead: in place 12.6 us, staged 12.9
    (1432, 237, 73, "persistent", 1),  # 3 steps a tile: in place persistent 64 x 64 x 32 4.3 us, Stream-K 7.2
])
def test_inplace_streamk_only_where_it_measured_faster(m, n, k, expect, tile):
    operands = ((m * k, 1, 1), (n * k, 1, 1))
    plan = decide(m, n, k, torch.bfloat16, INTERPRETER_SPEC, operands=operands)
    if expect == "staged":
        assert plan.stage_a and plan.stage_b
    else:
        assert plan.schedule == expect and plan.config == INPLACE_CONFIGS[tile] and not (plan.stage_a or plan.stage_b)


@pytest.mark.parametrize("m, n, k, runs", [
    (80, 1982, 14978, 2), (81, 3163, 14926, 2), (117, 4060, 5322, 2), (126, 1204, 4674, 2), (662, 254, 8868, 4),
    (107, 5413, 5550, 2), (3074, 69, 4786, 2), (5208, 101, 1914, 2),
])
def test_inplace_streamk_over_long_k_where_rows_come_in_runs(m, n, k, runs):
    """Operands whose K-runs are 4 bytes or more (asynchronous copies) are read in place by a Stream-K grid of
    `INPLACE_RUNS_SK_CONFIG` over any number of K steps a program: on the H200 0.55-0.81x the time of copying them
    first (or of a persistent in-place plan). Odd rows (single elements) keep the step limit; under an SM budget
    (persistent only) the plans stay as they were."""
    from smgemm.plan import _INPLACE_SK_MAX_STEPS, INPLACE_RUNS_SK_CONFIG, steps_per_program

    for dtype in (torch.bfloat16, torch.float16):
        plan = decide(m, n, k, dtype, INTERPRETER_SPEC, operands=((m * k, runs, runs), (n * k, runs, runs)))
        assert plan.schedule == "streamk" and plan.config == INPLACE_RUNS_SK_CONFIG, (m, n, k, plan)
        assert not (plan.stage_a or plan.stage_b)
        odd = decide(m, n, k | 1, dtype, INTERPRETER_SPEC, operands=((m * k, 1, 1), (n * k, 1, 1)))
        assert odd.stage_a or steps_per_program(odd) <= _INPLACE_SK_MAX_STEPS, (m, n, k, odd)
        budgeted = decide(m, n, k, dtype, INTERPRETER_SPEC, num_sms=66,
                          operands=((m * k, runs, runs), (n * k, runs, runs)))
        assert budgeted.config != INPLACE_RUNS_SK_CONFIG or budgeted.schedule != "streamk"
    assert steps_per_program(decide(80, 1982, 14978, torch.bfloat16, INTERPRETER_SPEC,
                                    operands=((80 * 14978, 2, 2), (1982 * 14978, 2, 2)))) > 100


@pytest.mark.parametrize("m, n, k, moves", [
    (90, 10228, 1076, True), (3184, 266, 6164, True), (81, 14844, 13476, True), (543, 81, 15500, True),
    (2602, 64, 988, True), (4385, 65, 756, True), (171, 1636, 7580, True),
    (1822, 2056, 92, False), (269, 1090, 604, False), (388, 137, 1084, False), (263, 2830, 3004, False),
    (112, 89, 5316, False),
])
def test_eight_byte_runs_split_in_place_where_modelled_faster(m, n, k, moves):
    """Rows 4 elements apart (8-byte K-runs of bf16 / fp16), which pointer tiles read where they lie: on the whole
    device the planner takes a Stream-K grid of `INPLACE_RUNS_SK_CONFIG` where `inplace_time` models it faster than
    the pointer tile, as it measured on the H200 for the first seven (0.63-0.96x the time; `plan._eight_byte_runs`);
    the others keep the pointer tile (the Stream-K grid measured 1.0-2.2x slower there), and so does every plan under
    an SM budget, of fp32, or of a caller's schedule."""
    from smgemm.plan import INPLACE_RUNS_SK_CONFIG

    operands = ((m * k, 4, 4), (n * k, 4, 4))
    for dtype in (torch.bfloat16, torch.float16):
        plan = decide(m, n, k, dtype, INTERPRETER_SPEC, operands=operands)
        assert (plan.schedule == "streamk" and plan.config == INPLACE_RUNS_SK_CONFIG) == moves, (m, n, k, plan)
        assert not (plan.stage_a or plan.stage_b) or not moves
        for kwargs in ({"num_sms": 66}, {"schedule": "persistent"}):
            assert decide(m, n, k, dtype, INTERPRETER_SPEC, operands=operands, **kwargs).config != \
                INPLACE_RUNS_SK_CONFIG
    assert decide(m, n, k, torch.float32, INTERPRETER_SPEC, operands=((m * k, 2, 2), (n * k, 2, 2))).config != \
        INPLACE_RUNS_SK_CONFIG


@pytest.mark.parametrize("stride", [1202, 1204])
def test_inplace_runs_streamk_over_many_steps_is_right(device, stride):
    """`INPLACE_RUNS_SK_CONFIG` split by Stream-K over a small budget, so that each program runs many K steps and
    starts and ends mid-tile, reading rows of 2- and 4-element runs in place, with partial edge tiles and a C matrix;
    every element checked against float64 on a poisoned output."""
    from smgemm.plan import INPLACE_RUNS_SK_CONFIG

    m, n, k = 130, 70, 1200
    a = randn((m, stride), torch.float16, device)[:, :k]
    b = randn((n, stride), torch.float16, device)[:, :k].t()
    c = randn((m, n), torch.float32, device)
    with smgemm.plan.overrides(stage=False, config=INPLACE_RUNS_SK_CONFIG, schedule="streamk"):
        plan = decide(m, n, k, a.dtype, INTERPRETER_SPEC, num_sms=6,
                      operands=(operand_alignment(a, 1), operand_alignment(b, 0)))
        assert plan.sk_tiles and not (plan.stage_a or plan.stage_b) and plan.num_programs == 6
        out = torch.full((m, n), float("nan"), dtype=a.dtype, device=device)
        assert_gemm_close(smgemm.matmul(a, b, num_sms=6, out=out), a, b)
        assert_gemm_close(smgemm.addmm(c, a, b, beta=0.5, num_sms=6), a, b, c=c, beta=0.5)


def test_inplace_streamk_is_right(device):
    # the interpreter plans as an H200: a small odd problem is read in place by a Stream-K grid of 32-deep tiles
    m, n, k = 70, 40, 501
    a, w = randn((m, k), torch.float16, device), randn((n, k), torch.float16, device)
    plan = decide(m, n, k, torch.float16, INTERPRETER_SPEC,
                  operands=(operand_alignment(a, 1), operand_alignment(w.t(), 0)))
    assert plan.schedule == "streamk" and plan.config in INPLACE_CONFIGS and not (plan.stage_a or plan.stage_b)
    for _ in range(2):  # the repeat-call path too
        assert_gemm_close(smgemm.matmul(a, w.t()), a, w.t())
    c = randn((m, n), torch.float32, device)
    assert_gemm_close(smgemm.addmm(c, a, w.t(), beta=0.5), a, w.t(), c=c, beta=0.5)


@pytest.mark.parametrize("m, n, k, in_place", [
    (72, 264, 5820, True),     # 4 K steps a program (Stream-K over 130 programs)
    (388, 137, 1084, True),    # 9 steps
    (543, 81, 15500, True),    # 35 steps, but copying 17 MB costs about what the GEMM does (split: `_eight_byte_runs`)
    (362, 496, 1740, False),   # 14 steps, 48 programs: twice the loads cost more than the copy (measured)
    (608, 239, 1724, False),
])
def test_pointer_tiles_read_eight_byte_runs_in_place(m, n, k, in_place):
    """Rows aligned to 4 bf16 elements (8 bytes) but not 16: the planner's pointer tiles read them where they lie in
    short K loops, or where a copy would cost about as much as the GEMM (plan._SHORT_RUN_BYTES, measured); aligned
    to 2, they are copied first, as odd ones."""
    from smgemm.plan import INPLACE_RUNS_SK_CONFIG

    four = ((m * k, 4, 4), (n * k, 4, 4))
    plan = decide(m, n, k, torch.bfloat16, INTERPRETER_SPEC, operands=four)
    assert (plan.stage_a or plan.stage_b) != in_place
    assert not plan.config.tma or not in_place  # staged copies may go through TMA (plan.hopper_path), 8-byte rows never
    pointer = dataclasses.replace(plan.config, tma=False, tma_store=False, flatten=False, whole_store=False)
    assert dataclasses.replace(plan, config=pointer, stage_a=False, stage_b=False) == make_plan(
        m, n, k, torch.bfloat16, INTERPRETER_SPEC) or (
        plan.config == INPLACE_RUNS_SK_CONFIG and (m, n, k) == (543, 81, 15500))
    sixteen_bytes = ((m * k, 8, 8), (n * k, 8, 8))  # runs as wide as aligned rows' loads: read in place
    assert decide(m, n, k, torch.bfloat16, INTERPRETER_SPEC, operands=sixteen_bytes) == decide(
        m, n, k, torch.bfloat16, INTERPRETER_SPEC)  # the aligned operands' plan
    # 4-byte runs, or 8-byte rows that are M-contiguous (a column-major A: no K-runs for the pointer loads), are
    # copied first or read by the 32-deep tiles made for element loads, never by the plan's tile as if aligned
    two = decide(m, n, k, torch.bfloat16, INTERPRETER_SPEC, operands=((m * k, 2, 2), (n * k, 2, 2)))
    assert (two.stage_a and two.stage_b) or two.config in INPLACE_CONFIGS
    a_col = decide(m, n, k, torch.bfloat16, INTERPRETER_SPEC, operands=((m * k, 4, 1), (n * k, 4, 4)))
    assert a_col.stage_a or a_col.config in INPLACE_CONFIGS


def test_inplace_tile_is_modelled_slower_than_the_aligned_one():
    for cfg in INPLACE_CONFIGS:
        for unaligned in ((True, False), (False, True), (True, True)):
            slow = inplace_time(cfg, 2048, 2048, 2047, torch.bfloat16, 132, INTERPRETER_SPEC, unaligned)
            fast = modelled_time(cfg, 2048, 2048, 2047, torch.bfloat16, 132, "persistent")
            assert slow > fast
        both = inplace_time(cfg, 2048, 2048, 2047, torch.bfloat16, 132, INTERPRETER_SPEC, (True, True))
        assert both > inplace_time(cfg, 2048, 2048, 2047, torch.bfloat16, 132, INTERPRETER_SPEC, (True, False))


def test_stage_copies_two_operands_in_one_launch(device):
    a = randn((24, 50), torch.float16, device)[:, 3:40]
    w = randn((40, 37), torch.float16, device)
    copy_a, copy_b = stage([a, w.t()], budget=2)
    assert torch.equal(copy_a, a) and torch.equal(copy_b, w.t())
    assert row_alignment(copy_a) == row_alignment(copy_b) == 16 and copy_b.stride(0) == 1


def test_staging_follows_the_alignment_the_tile_needs():
    big = ((4096 * 4096, 16, 16), (4096 * 4096, 16, 16))
    plan = decide(4096, 4096, 4096, torch.bfloat16, INTERPRETER_SPEC, operands=big)
    assert plan.config.tma and not (plan.stage_a or plan.stage_b)
    # rows 16 bytes apart but not 16 elements: TMA reads them as they are, and so do pointer tiles told the K-runs'
    # alignment; a pointer tile that cannot use it (rows M-contiguous, or runs of 4 bytes) copies them
    eight = ((4096 * 4104, 8, 8), (4096 * 4104, 8, 8))
    plan = decide(4096, 4096, 4104, torch.bfloat16, INTERPRETER_SPEC, operands=eight)
    assert plan.config.tma and not (plan.stage_a or plan.stage_b)
    pointer_tile = smgemm.TileConfig(128, 64, 64, num_warps=4, num_stages=4)
    plan = decide(4096, 4096, 4104, torch.bfloat16, INTERPRETER_SPEC, config=pointer_tile, operands=eight)
    assert not (plan.stage_a or plan.stage_b)
    no_runs = ((4096 * 4104, 8, 1), (4096 * 4104, 8, 2))
    plan = decide(4096, 4096, 4104, torch.bfloat16, INTERPRETER_SPEC, config=pointer_tile, operands=no_runs)
    assert plan.stage_a and plan.stage_b
    with smgemm.plan.overrides(stage=True):  # forcing copies only what is unaligned
        plan = decide(4096, 4096, 4104, torch.bfloat16, INTERPRETER_SPEC, config=pointer_tile,
                      operands=((4096 * 4104, 16, 16), (4096 * 4104, 2, 2)))
    assert not plan.stage_a and plan.stage_b


def test_overrides_stage_must_be_bool():
    with pytest.raises(TypeError, match="stage must be a bool"):
        with smgemm.plan.overrides(stage=1):
            pass


def _vector_cases(device):
    """(name, a, b, A_VEC, B_VEC): operands read in place through pointers, their K-contiguous rows aligned to 2-16
    elements, and the alignment the kernel may assume (1 where a base is not 16-byte aligned, or K is not the unit
    stride's axis)."""
    f16 = torch.float16
    return [
        ("k-40", randn((24, 40), f16, device), randn((48, 40), f16, device).t(), 8, 8),
        ("stride-44", randn((24, 44), f16, device)[:, :41], randn((48, 44), f16, device)[:, :41].t(), 4, 4),
        ("stride-42", randn((24, 42), f16, device)[:, :37], randn((48, 42), f16, device)[:, :37].t(), 2, 2),
        ("base-4-bytes-in", randn((24, 50), f16, device)[:, 2:40], randn((48, 44), f16, device)[:, 2:40].t(), 1, 1),
        ("a-col-major-b-row-major", randn((24, 42), f16, device, transposed=True)[:, :37],
         randn((37, 42), f16, device), 1, 1),
        ("fp32-stride-6", randn((24, 6), torch.float32, device)[:, :5],
         randn((48, 6), torch.float32, device)[:, :5].t(), 2, 2),
    ]


def test_pointer_loads_assume_only_the_rows_true_alignment(device):
    """Rows aligned to 2, 4 or 8 elements load that many at a time (the kernel's A_VEC / B_VEC hints); the hints
    never claim more than the rows have (a wrong one would load across rows on a GPU), and results stay right."""
    cfg = smgemm.TileConfig(64, 64, 32, num_warps=4, num_stages=3)
    for name, a, b, vec_a, vec_b in _vector_cases(device):
        m, k, n = a.shape[0], a.shape[1], b.shape[1]
        out = torch.full((m, n), float("nan"), dtype=a.dtype, device=device)
        with smgemm.plan.overrides(stage=False, config=cfg):
            plan = decide(m, n, k, a.dtype, INTERPRETER_SPEC,
                          operands=(operand_alignment(a, 1), operand_alignment(b, 0)))
            assert not (plan.stage_a or plan.stage_b)
            _, meta = static_args(plan, Operands(a, b, out), 0, 0, False)
            assert (meta["A_DESC"], meta["B_DESC"], meta["A_VEC"], meta["B_VEC"]) == (
                "pointers", "pointers", vec_a, vec_b), name
            for schedule in SCHEDULES:
                got = smgemm.matmul(a, b, schedule=schedule, out=out)
                assert_gemm_close(got, a, b, tf32=a.dtype == torch.float32 and tf32_enabled()), (name, schedule)


def test_inplace_tiles_keep_the_k_runs_hints(device):
    """The 32-deep in-place tiles, persistent or split by Stream-K, load K-runs of 4 bytes or more with the runs' hints
    (asynchronous copies that their stages keep in flight) and odd rows one element at a time. Results stay right."""
    from smgemm.plan import INPLACE_CONFIGS

    f16 = torch.float16
    cfg = INPLACE_CONFIGS[0]
    for stride, dtype, schedule, expected in ((302, f16, "streamk", 2), (302, f16, "persistent", 2),
                                              (300, f16, "streamk", 4), (301, f16, "streamk", 1),
                                              (301, torch.float32, "streamk", 1), (302, torch.float32, "streamk", 2)):
        a = randn((24, stride), dtype, device)[:, :300]
        b = randn((40, stride), dtype, device)[:, :300].t()
        out = torch.full((24, 40), float("nan"), dtype=dtype, device=device)
        with smgemm.plan.overrides(stage=False, config=cfg, schedule=schedule):
            plan = decide(24, 40, 300, dtype, INTERPRETER_SPEC,
                          operands=(operand_alignment(a, 1), operand_alignment(b, 0)))
            assert bool(plan.sk_tiles) == (schedule == "streamk") and plan.config == cfg, (stride, schedule)
            _, meta = static_args(plan, Operands(a, b, out), 0, 0, False)
            assert (meta["A_VEC"], meta["B_VEC"]) == (expected, expected), (stride, dtype, schedule)
            got = smgemm.matmul(a, b, out=out)
        assert_gemm_close(got, a, b, tf32=dtype == torch.float32 and tf32_enabled()), (stride, dtype, schedule)


def test_inplace_model_loads_runs_faster_than_elements():
    """`inplace_time` charges K-runs of 4 bytes or more less than single elements on long K loops (their copies are
    pipelined), persistent and Stream-K alike, and a persistent program reading them its fixed part."""
    from smgemm.plan import INPLACE_CONFIGS

    spec, bf16 = INTERPRETER_SPEC, torch.bfloat16
    for cfg in INPLACE_CONFIGS:
        elements = inplace_time(cfg, 8425, 104, 1842, bf16, 132, spec, (True, True))
        runs = inplace_time(cfg, 8425, 104, 1842, bf16, 132, spec, (True, True), runs=(True, True))
        assert runs < elements, cfg
        aligned = inplace_time(cfg, 8425, 104, 1842, bf16, 132, spec, (False, False), runs=(True, True))
        assert aligned == inplace_time(cfg, 8425, 104, 1842, bf16, 132, spec, (False, False)), cfg
    sk = [inplace_time(INPLACE_CONFIGS[0], 72, 90, 2718, bf16, 132, spec, (True, True), 1, "streamk", runs)
          for runs in ((False, False), (True, True))]
    assert sk[1] < sk[0]


def test_batched_pointer_loads_assume_the_batch_strides_alignment(device):
    """A batched operand's matrices start a batch stride apart: an odd batch stride leaves only the first one aligned,
    so its rows get no hint, whatever their own stride."""
    f16 = torch.float16
    flat = randn((3 * (24 * 42 + 1),), f16, device)
    a = flat.as_strided((3, 24, 37), (24 * 42 + 1, 42, 1))  # rows 42 apart (2 elements), matrices 1009 apart
    b = randn((3, 48, 42), f16, device)[:, :, :37].transpose(1, 2)  # columns aligned to 2, matrices 2016 apart
    out = torch.empty(3, 24, 48, dtype=f16, device=device)
    cfg = smgemm.TileConfig(64, 64, 32, num_warps=4, num_stages=3)
    plan = make_plan(24, 48, 37, f16, INTERPRETER_SPEC, config=cfg, schedule="persistent", batch=3)
    _, meta = static_args(plan, Operands(a, b, out), 0, 0, False)
    assert (meta["A_VEC"], meta["B_VEC"]) == (1, 2)
    with smgemm.plan.overrides(stage=False, config=cfg):
        got = smgemm.bmm(a, b)
    for i in range(3):
        assert_gemm_close(got[i], a[i], b[i])


def test_vector_elements_never_overclaims():
    """`_launch.vector_elements` against the addresses of random 2-D views of one buffer (random offsets, unit and
    wide strides, both orientations, 1-, 2- and 4-byte elements): every K-run it reports aligned to v elements starts
    a multiple of v elements past a 16-byte aligned base (what the kernel's hint claims; Triton adds the base's
    alignment), so at an address aligned to min(16 bytes, v elements); and views of 8-element strides from an aligned
    start get at least 8."""
    import random

    from smgemm._launch import vector_elements

    rng = random.Random()
    for _ in range(2000):
        dtype = rng.choice([torch.float8_e4m3fn, torch.bfloat16, torch.float32])
        buf = torch.empty(4096, dtype=dtype)
        rows, cols = rng.randint(1, 9), rng.randint(1, 40)
        k_dim = rng.choice([0, 1])  # 1: an A [M, K] (K along rows), 0: a B [K, N]
        outer = rng.choice([cols, cols + rng.randint(1, 17), 8 * rng.randint(1, 8), rng.randint(1, 64)])
        offset = rng.choice([0, rng.randint(0, 64)])
        t = buf.as_strided((rows, cols), (outer, 1), offset)  # K-runs along dim 1
        if k_dim == 0:
            t = t.t()
        vec = vector_elements(t, k_dim)
        assert vec in (1, 2, 4, 8, 16)
        base = t.data_ptr()
        elem = t.element_size()
        if vec > 1:
            assert base % 16 == 0 and t.stride(k_dim) == 1
            for r in range(t.shape[1 - k_dim]):
                assert r * t.stride(1 - k_dim) % vec == 0, (t.shape, t.stride(), offset)
                assert (base + r * t.stride(1 - k_dim) * elem) % min(16, vec * elem) == 0
        if offset * elem % 16 == 0 and outer % 8 == 0:
            assert vec >= 8
        # a view whose K axis is not the unit stride gets no hint
        assert vector_elements(t, 1 - k_dim) == 1 or t.stride(1 - k_dim) == 1


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float8_e4m3fn])
def test_inplace_tiles_read_odd_rows_a_step_ahead(device, dtype):
    """Odd rows (one element a load) read in place by the 32-deep tiles, whose loop loads each step's blocks a step
    ahead (`kernels.common.k_loop_dense`): persistent and Stream-K (programs that start mid-tile), K tails, K shorter
    than a step, and a few rows (A masked to them). Every element is checked against float64 on poisoned outputs."""
    if dtype == torch.float8_e4m3fn and device == "cuda" and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 needs sm_89+")
    out_dtype = torch.bfloat16 if dtype == torch.float8_e4m3fn else dtype
    for m, n, k in ((37, 70, 101), (5, 33, 65), (64, 64, 97), (40, 50, 31), (24, 40, 225)):
        a = randn((m, k), torch.float16, device).to(dtype)
        b = randn((n, k), torch.float16, device).to(dtype).t()
        for cfg in INPLACE_CONFIGS[:3]:
            for schedule in ("persistent", "streamk"):
                out = torch.full((m, n), float("nan"), dtype=out_dtype, device=device)
                with smgemm.plan.overrides(stage=False, config=cfg, schedule=schedule):
                    plan = decide(m, n, k, dtype, INTERPRETER_SPEC,
                                  operands=(operand_alignment(a, 1), operand_alignment(b, 0)))
                    _, meta = static_args(plan, Operands(a, b, out), 0, 0, False)
                    assert (meta["A_VEC"], meta["B_VEC"]) == (1, 1) and plan.config == cfg
                    got = smgemm.matmul(a, b, out=out)
                assert_gemm_close(got, a, b), (m, n, k, cfg, schedule)
