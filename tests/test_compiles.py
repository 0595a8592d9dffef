"""gemm_kernel compiles for sm_90 on the CPU in the variants the interpreter cannot vouch for: the interpreter runs
the kernel as Python, so it accepts constructs (a starred tuple, say) that Triton's compiler rejects on a GPU. Each
variant here is one the planner emits for some input; 64-bit offsets matter most, since small test shapes never
need them. The compiles run in a child process (this file as a script): the suite's process runs kernels in the
Triton interpreter, which cannot compile them."""

import os
import subprocess
import sys

import pytest
import torch

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

# (tile, warps, stages, compile_variant's keywords): int64 offsets on every path that forms them differently, and
# tiles the small interpreter cases plan only when forced
VARIANTS = [
    ((64, 64, 64), 4, 3, dict(batched=True, use_int64=True)),
    ((128, 128, 64), 8, 3, dict(batched=True, use_int64=True, tma=True, flatten=True, tma_store=True, layout="nn")),
    ((256, 128, 64), 8, 4, dict(batched=True, use_int64=True, tma=True, flatten=True, tma_store=True, layout="nn")),
    ((128, 128, 64), 8, 3, dict(use_int64=True, tma=True, flatten=True, tma_store=True, streamk=True, has_c=True)),
    ((128, 256, 64), 8, 3, dict(tma=True, flatten=True, tma_store=True, whole_store=True, has_c=True, c="bf16",
                                c_row=True)),  # one store a tile, with a bias
    ((128, 256, 32), 8, 2, dict(dtype="fp32", out="fp32", c="fp32", has_c=True, tma=True, flatten=True,
                                tma_store=True)),  # a 4-byte C matrix, read in column halves
    # A's, B's and D's descriptors built on the host (kernel parameters), batched (3-D), fp8, and beside the kernel's
    # own D descriptor (a Stream-K plan, a C matrix)
    ((128, 128, 64), 8, 3, dict(batched=True, use_int64=True, tma=True, flatten=True, tma_store=True, layout="nn",
                                host_descriptors=True)),
    ((128, 256, 128), 8, 3, dict(dtype="fp8e4nv", scales=True, tma=True, flatten=True, tma_store=True,
                                 whole_store=True, host_descriptors=True)),
    ((128, 128, 64), 8, 4, dict(tma=True, flatten=True, tma_store=True, streamk=True, layout="tn",
                                host_descriptors=True)),
    ((128, 128, 64), 8, 3, dict(tma=True, flatten=True, tma_store=True, has_c=True, host_descriptors=True)),
    ((16, 64, 256), 4, 3, dict(use_int64=True, b_mx=True, mx_swap=True, mx_layout="hopper")),
    # decode of a "hopper" weight up to M = 8: 8-row activation tiles on mma.sync, the activations in word order
    ((8, 64, 256), 4, 4, dict(b_mx=True, mx_swap=True, mx_layout="hopper", streamk=True)),
    ((8, 64, 256), 4, 4, dict(use_int64=True, k_tail=True, b_mx=True, mx_swap=True, mx_layout="hopper")),
    # decode at batch 1: the one activation row loaded once a step and broadcast (ONE_ROW)
    ((8, 64, 256), 4, 4, dict(b_mx=True, mx_swap=True, mx_layout="hopper", streamk=True, one_row=True)),
    ((16, 64, 512), 4, 3, dict(b_mx=True, mx_layout="kwords", k_tail=True, one_row=True)),
    # dense decode tiles: A's rows past M masked (MASK_M)
    ((16, 32, 256), 4, 4, dict(mask_m=True)),
    ((16, 64, 256), 4, 4, dict(mask_m=True, k_tail=True, streamk=True, dtype="fp8e4nv", scales=True)),
    ((64, 64, 64), 4, 3, dict(use_int64=True, k_tail=True, unaligned=True)),
    # rows read in place with the K-runs' alignment known (A_VEC / B_VEC): 4-byte and 8-byte loads
    ((64, 64, 64), 4, 3, dict(use_int64=True, k_tail=True, unaligned=True, vec=2)),
    ((64, 64, 128), 4, 4, dict(k_tail=True, unaligned=True, vec=4, streamk=True)),
    # "hopper" MXFP4 weights: the tiles of the largest weights at M <= 32; beyond them the swapped 128-row tiles, the
    # dense model's tile (plan.hopper_steps) and the 256 x 128 one
    ((16, 128, 128), 4, 4, dict(b_mx=True, mx_layout="hopper", mx_swap=True, streamk=True)),
    ((32, 128, 256), 4, 3, dict(b_mx=True, mx_layout="hopper", mx_swap=True, streamk=True)),
    ((128, 64, 256), 4, 3, dict(b_mx=True, mx_layout="hopper", mx_swap=True, streamk=True)),
    ((128, 128, 128), 8, 3, dict(b_mx=True, mx_layout="hopper", mx_swap=True, streamk=True)),
    ((128, 128, 128), 8, 3, dict(b_mx=True, mx_layout="hopper", tma=True, flatten=True, tma_store=True)),
    ((256, 128, 128), 8, 3, dict(b_mx=True, mx_layout="hopper", mx_swap=True, mx_prefetch=True)),
    # "kwords" MXFP4 weights: the 8-row swapped and 16-row unswapped tiles read the activations in K order; the others
    # put them in the wgmma's fragment order
    ((8, 64, 256), 4, 4, dict(b_mx=True, mx_swap=True, mx_layout="kwords", streamk=True)),
    ((16, 64, 512), 4, 3, dict(b_mx=True, mx_layout="kwords", k_tail=True)),
    ((16, 64, 512), 4, 3, dict(b_mx=True, mx_swap=True, mx_layout="kwords")),
    ((64, 64, 256), 4, 3, dict(b_mx=True, mx_layout="kwords", mx_swap=True, streamk=True)),
    ((256, 128, 128), 8, 3, dict(b_mx=True, mx_layout="kwords", mx_swap=True, mx_prefetch=True)),
]


def _compile_all() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("compile_report", os.path.join(_ROOT, "benchmarks",
                                                                                 "compile_report.py"))
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    for tile, warps, stages, kw in VARIANTS:
        kw = dict(kw)
        kernel = report.compile_variant(kw.pop("dtype", "bf16"), tile, warps, stages, **kw)
        assert kernel.metadata.shared <= 232448, (tile, kw, kernel.metadata.shared)  # the H200's per-program limit
        print("compiled", tile, kw, kernel.metadata.shared, flush=True)


def test_gpu_only_variants_compile_for_sm90():
    if torch.cuda.is_available():
        pytest.skip("on a GPU the suite's own launches compile these")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(_ROOT, "src"), env.get("PYTHONPATH", "")])
    child = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=900)
    assert child.returncode == 0 and child.stdout.count("compiled") == len(VARIANTS), child.stdout + child.stderr


def test_a_sample_of_the_planners_variants_compiles_for_sm90():
    """benchmarks/compile_plans.py over a spread sample of what the planner picks (the whole grid is a tool run)."""
    if torch.cuda.is_available():
        pytest.skip("on a GPU the suite's own launches compile these")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    child = subprocess.run([sys.executable, os.path.join(_ROOT, "benchmarks", "compile_plans.py"), "--sample", "10"],
                           env=env, capture_output=True, text=True, timeout=900)
    assert child.returncode == 0 and "20 of 20 compiled" in child.stdout, child.stdout + child.stderr


@pytest.mark.parametrize("split", [1, 2, 4])
def test_ring_kernel_compiles_for_sm90(split):
    """`kernels.mx_ring` (Gluon) at each K split the planner picks, where Triton is the 3.6 it is written for (the only
    one `_ring.available` routes to it): within a Hopper program's shared memory, without spills."""
    import triton

    if torch.cuda.is_available():
        pytest.skip("on a GPU tests/test_mx_ring.py runs it")
    if tuple(triton.__version__.split(".")[:2]) != ("3", "6"):
        pytest.skip("written against Triton 3.6's Gluon")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(_ROOT, "src"), env.get("PYTHONPATH", "")])
    child = subprocess.run([sys.executable, os.path.join(_ROOT, "benchmarks", "compile_report.py"), "--ring",
                            str(split)], env=env, capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stdout + child.stderr
    shared = int(child.stdout.split("shared ")[1].split(" B")[0])
    assert shared <= 232448 and "0 bytes spill stores" in child.stdout, child.stdout


if __name__ == "__main__":
    _compile_all()
