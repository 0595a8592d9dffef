"""Compile for sm_90, on any machine (no GPU needed), every gemm_kernel variant the planner picks over a grid of
problems, and report those that Triton's compiler rejects, and those that need more shared memory than a Hopper
program may use with the planned pipeline (a launch then runs them with fewer stages: slower). The interpreter runs
the kernel as Python, so CPU tests cannot see either; without this a variant that never compiled would first fail
on a GPU user's call of that shape.

    python benchmarks/compile_plans.py              # the whole grid (~1900 variants, ~25 min on 2 cores)
    python benchmarks/compile_plans.py --list       # the variants only, with a problem that picks each
    python benchmarks/compile_plans.py --sample 8   # 8 of them, spread over the grid (tests/test_compiles.py)
    python benchmarks/compile_plans.py --match kwords  # those a problem described with this text picks

The grid: dense bf16 / fp16 / fp8 / fp32 (TF32 and full precision) problems, rows aligned to 16, 4 or 1 elements
(read in place with 4-element K-runs, or element by element), B as an nn.Linear
weight (with a bias or a C matrix in the output's dtype; also with an fp32 output) or row-major, A row- or
column-major, 2-D and batched (with and without C; bf16 also with an fp32 output), on the whole H200 and on 16 and
66 SMs, every schedule; MXFP4 weights in every byte layout with bf16, fp16 and MXFP4 activations. Each variant is
compiled with 32- and with 64-bit offsets.
"""

import argparse
import concurrent.futures
import dataclasses
import itertools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))
import torch

from smgemm._device import INTERPRETER_SPEC
from smgemm._launch import edge_tiles_clamped
from smgemm.mxfp4 import LAYOUTS
from smgemm.plan import decide, element_bytes, host_descriptors_pay, mx_expands

H200 = dataclasses.replace(INTERPRETER_SPEC, interpreted=False)
SHARED_LIMIT = H200.smem_per_block
_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.float8_e4m3fn: "fp8e4nv"}
_M = (1, 16, 17, 48, 64, 65, 128, 200, 384, 1024, 4096)
_NK = ((64, 96), (130, 384), (1024, 4096), (4096, 4096), (14336, 4096), (4096, 14336), (4096, 257), (4096, 80),
       (130, 32))
_BUDGETS = (None, 16, 66)
_SCHEDULES = ("auto", "persistent", "streamk", "data_parallel")


@dataclasses.dataclass(frozen=True)
class Variant:
    """compile_report.compile_variant's arguments (use_int64 aside)."""
    dtype: str
    tile: tuple[int, int, int]
    warps: int
    stages: int
    kw: tuple[tuple[str, object], ...]

    def describe(self) -> str:
        flags = " ".join(f"{k}={v}" for k, v in self.kw if v not in (False, "ocp", "tf32", "nt", "bf16"))
        return f"{self.dtype} {'x'.join(map(str, self.tile))} w{self.warps} s{self.stages} {flags}"


def _dense(m, n, k, dtype, budget, schedule, align, layout, has_c, batch, out=None) -> Variant:
    tf32 = dtype == torch.float32 and budget != 16  # fp32 both ways: TF32, and full precision on 16 SMs
    aligned = align == 16
    plan = decide(m, n, k, dtype, H200, schedule=schedule, num_sms=budget, tf32=tf32, batch=batch,
                  operands=None if batch > 1 else ((m * k, align, align), (k * n, align, align)),
                  c_matrix=has_c == "matrix")
    cfg = plan.config
    staged = plan.stage_a or plan.stage_b
    in_place = not aligned and not staged
    out = out or {"fp32": "fp32", "fp16": "fp16"}.get(_NAMES[dtype], "bf16")
    kw = dict(streamk=plan.sk_tiles > 0, has_c=bool(has_c), c_row=has_c == "row", tma=cfg.tma and not in_place,
              flatten=cfg.flatten,
              tma_store=cfg.tma_store and (aligned or n % 8 == 0), layout=layout, batched=batch > 1,
              whole_store=cfg.whole_store and out != "fp32" and has_c != "matrix",  # as _launch.static_args
              k_tail=not plan.even_k, unaligned=in_place, scales=dtype == torch.float8_e4m3fn,
              input_precision=plan.input_precision, out=out, c=out)
    if in_place and align > 1:
        kw["vec"] = align  # the K-runs' alignment the kernel is told (_launch.vector_elements)
    if 4 * m <= cfg.block_m and not kw["tma"] and batch == 1:
        kw["mask_m"] = True  # A's rows past M masked (_launch.static_args MASK_M)
    if kw["tma"] and host_descriptors_pay(plan, batch > 1):
        kw["host_descriptors"] = True  # A, B (and D) descriptors built on the host (_launch.reads_host_descriptors)
    clamp_m, clamp_n = edge_tiles_clamped(plan, (m, n, k), element_bytes(dtype), dense=True,
                                          c_matrix=has_c == "matrix")
    if clamp_m or clamp_n:
        kw["clamp"] = True  # the last tiles end at the edge (_launch.edge_tiles_clamped)
    return Variant(_NAMES[dtype], (cfg.block_m, cfg.block_n, cfg.block_k), cfg.num_warps, cfg.num_stages,
                   tuple(sorted(kw.items())))


def _mxfp4(m, n, k, act, layout, budget, schedule, has_c) -> Variant | None:
    a_mx = act == "mxfp4"
    if mx_expands(m, n, k, a_mx) or (layout != "ocp" and k % 128):
        return None  # expanded first: the dense bf16 path above
    dtype = torch.float16 if act == "fp16" else torch.bfloat16
    plan = decide(m, n, k, dtype, H200, schedule=schedule, num_sms=budget, mxfp4=True, mx_layout=layout, mx_a=a_mx)
    cfg = plan.config
    kw = dict(streamk=plan.sk_tiles > 0, has_c=bool(has_c), c_row=has_c == "row", a_mx=a_mx, b_mx=True,
              tma=cfg.tma, flatten=cfg.flatten,
              tma_store=cfg.tma_store, mx_swap=cfg.mx_swap, mx_prefetch=cfg.mx_prefetch, k_tail=not plan.even_k,
              mx_layout=layout, out=_NAMES[dtype], c=_NAMES[dtype], one_row=m == 1 and not a_mx)
    return Variant(_NAMES[dtype], (cfg.block_m, cfg.block_n, cfg.block_k), cfg.num_warps, cfg.num_stages,
                   tuple(sorted(kw.items())))


def variants() -> dict[Variant, str]:
    """Every variant of the grid, with the first problem that picks it."""
    found: dict[Variant, str] = {}
    for m, (n, k), budget, schedule in itertools.product(_M, _NK, _BUDGETS, _SCHEDULES):
        where = f"{m}x{n}x{k} num_sms={budget} {schedule}"
        layouts = (("nt", "row", None), ("nt", "matrix", None), ("nn", False, None), ("tn", False, None),
                   ("nt", False, "fp32"))
        for dtype, align, (layout, has_c, out) in itertools.product(_NAMES, (16, 4, 1), layouts):
            if align < 16 and (dtype == torch.float8_e4m3fn or layout != "nt"):
                continue  # fp8 operands must be aligned; one unaligned layout is enough
            if out is not None and dtype != torch.bfloat16:
                continue  # a wider output than the inputs: bf16 in, fp32 out
            found.setdefault(_dense(m, n, k, dtype, budget, schedule, align, layout, has_c, 1, out),
                             f"{where} {_NAMES[dtype]} rows aligned to {align} {layout} c={has_c}"
                             f" out={out or 'as inputs'}")
        if m <= 1024 and n <= 4096:
            for dtype, has_c in itertools.product((torch.bfloat16, torch.float16), (False, "matrix")):
                found.setdefault(_dense(m, n, k, dtype, budget, schedule, 16, "nn", has_c, 8),
                                 f"8 x {where} {_NAMES[dtype]} batched c={has_c}")
            found.setdefault(_dense(m, n, k, torch.bfloat16, budget, schedule, 16, "nn", False, 8, "fp32"),
                             f"8 x {where} bf16 batched c=False out=fp32")
        for act, layout in itertools.product(("bf16", "fp16", "mxfp4"), LAYOUTS):
            has_c = act != "mxfp4" and "row"
            v = _mxfp4(m, n, k, act, layout, budget, schedule, has_c)
            if v is not None:
                found.setdefault(v, f"{where} MXFP4 {layout} weight, {act} activations, c={has_c}")
    return found


def compile_one(args: tuple[Variant, bool]) -> tuple[Variant, bool, str, int]:
    """(the failure or '', the stages that fit) of one variant with 32- or 64-bit offsets, in a worker process. As
    `_launch.run_cached` does at a launch, a build that needs more shared memory than a program may use is retried
    with one stage fewer, down to one."""
    from compile_report import compile_variant

    variant, use_int64 = args
    for stages in range(variant.stages, 0, -1):
        try:
            kernel = compile_variant(variant.dtype, variant.tile, variant.warps, stages, use_int64=use_int64,
                                     **dict(variant.kw))
        except Exception as e:  # every failure is a finding
            return variant, use_int64, f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:200]}", 0
        if kernel.metadata.shared <= SHARED_LIMIT:
            return variant, use_int64, "", stages
    return variant, use_int64, f"shared memory {kernel.metadata.shared} > {SHARED_LIMIT} B with one stage", 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--list", action="store_true", help="print the variants, compile nothing")
    p.add_argument("--sample", type=int, default=0, help="compile only this many variants, spread over the grid")
    p.add_argument("--match", default="", help="only the variants picked by a problem whose description has this text")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = p.parse_args(argv)
    found = {v: where for v, where in variants().items() if args.match in where}
    todo = list(found)
    if args.sample:
        todo = todo[::max(1, len(todo) // args.sample)][:args.sample]
    if args.list:
        for v in todo:
            print(f"{v.describe():90s} <- {found[v]}")
        print(f"{len(todo)} variants")
        return 0
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if env != dict(os.environ):
        print("TRITON_INTERPRET is set: run without it (the interpreter cannot compile)", file=sys.stderr)
        return 2
    failures = fewer = 0
    jobs = [(v, wide) for v in todo for wide in (False, True)]
    with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:
        for done, (variant, wide, error, stages) in enumerate(pool.map(compile_one, jobs), 1):
            if error:
                failures += 1
                print(f"FAIL {variant.describe()} int64={wide} <- {found[variant]}\n     {error}", flush=True)
            elif stages < variant.stages:
                fewer += 1
                print(f"FEWER STAGES {variant.describe()} int64={wide}: fits with {stages} <- {found[variant]}",
                      flush=True)
            elif done % 50 == 0:
                print(f"{done}/{len(jobs)} compiled", flush=True)
    print(f"{len(jobs) - failures} of {len(jobs)} compiled ({len(todo)} variants, 32- and 64-bit offsets); "
          f"{fewer} of them only with fewer stages than planned")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
