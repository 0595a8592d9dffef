"""The direct launch path (`_launch.Launcher`, GPU-only) checked on the CPU: gemm_kernel compiled for sm_90 and
Triton's generated C launcher, built against a stand-in libcuda whose kernel launch fails, must accept the arguments
exactly as `_launch` passes them (pointers as addresses or None, integers in gemm_kernel's tuples, the coefficients
as one tuple, the meta-parameters), so that an argument-layout error shows on the CPU, not on the first GPU.

The check runs in a child process (this file as a script): the suite's process runs kernels in the Triton
interpreter, which cannot compile them."""

import os
import shutil
import subprocess
import sys

import pytest
import torch

# The driver API calls Triton's launchers (3.6: generated per kernel; 3.7+: the shared one in its driver.c) make:
# a context that is there (3.8 also asks for its device and the device count), an error string, and a kernel launch
# that fails; every other call returns 0.
_FAKE_CUDA = r"""
typedef int CUresult;
static const char *msg = "stand-in libcuda: no device";
CUresult cuCtxGetCurrent(void **c) { *c = (void *)1; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **c, int d) { *c = (void *)1; return 0; }
CUresult cuDeviceGet(int *d, int o) { *d = 0; return 0; }
CUresult cuCtxGetDevice(int *d) { *d = 0; return 0; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuGetErrorString(CUresult e, const char **s) { *s = msg; return 0; }
CUresult cuLaunchKernelEx(const void *config, void *f, void **params, void **extra) { return 999; }
"""
_FAKE_OTHERS = ("cuCtxGetLimit", "cuCtxSetCurrent", "cuCtxSetLimit", "cuDeviceGetAttribute", "cuDriverGetVersion",
                "cuFuncGetAttribute", "cuFuncSetAttribute", "cuFuncSetCacheConfig", "cuGetProcAddress", "cuInit",
                "cuModuleGetFunction", "cuModuleLoadData", "cuModuleUnload", "cuOccupancyMaxActiveClusters",
                "cuPointerGetAttribute", "cuPointerGetAttributes", "cuTensorMapEncodeIm2col",
                "cuTensorMapEncodeTiled")
_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def _check(streamk: bool, has_c: bool, host: bool) -> None:
    """In the child: compile, build the launcher, launch as `_launch` does (`host`: A and B read through TMA
    descriptors built on the host, encoded once per `HostDescriptor` and passed to Triton's C launch function)."""
    torch.cuda.is_available = lambda: True  # Triton 3.7+ builds its shared launcher for the active (CUDA) driver
    import importlib.util
    import types

    import triton
    from triton.backends.nvidia.driver import CudaLauncher

    from smgemm import _launch
    from smgemm._device import INTERPRETER_SPEC
    from smgemm._launch import HostDescriptor, Launcher, Operands, Repeat, addresses, epoch, static_args, tensor_args
    from smgemm.plan import TileConfig, make_plan

    spec = importlib.util.spec_from_file_location("compile_report", os.path.join(_ROOT, "benchmarks",
                                                                                 "compile_report.py"))
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    kernel = report.compile_variant("bf16", (128, 128, 64), 8, 3, streamk=streamk, has_c=has_c, tma=host,
                                    tma_store=host, host_descriptors=host)

    # The driver's utilities (which encode tensor descriptors) exist before any launcher, as in a real process:
    # Triton 3.6's launchers take the descriptor type from them as they load.
    assert triton.runtime.driver.active.utils is not None
    class Compiled:  # what Launcher reads of a CompiledKernel
        run, function, packed_metadata = CudaLauncher(kernel.src, kernel.metadata), 0, kernel.packed_metadata

        def __getitem__(self, grid):
            return lambda *args, **kwargs: None

    launcher = Launcher(Compiled(), 132)
    assert launcher.c_launch is not None  # the direct path, in the convention of the installed Triton
    assert launcher.shared == (tuple(int(v) for v in triton.__version__.split(".")[:2]) >= (3, 7))
    # with descriptors, the launch function under Triton's encoding wrapper, the descriptors' positions: A's and B's
    assert (launcher.descriptors is not None) == host
    if host:  # D's store descriptor too (`tensor_args` position 10), except beside a C matrix
        assert [position for position, _ in launcher.descriptors] == ([0, 1] if has_c else [0, 1, 10])
    _launch._scratch = lambda size, align, stream: torch.empty(size, dtype=torch.int8)
    m, n, k = (128, 256, 4096) if streamk else (256, 384, 512)
    a, w = torch.randn(m, k).to(torch.bfloat16), torch.randn(n, k).to(torch.bfloat16)
    out, c = torch.empty(m, n, dtype=torch.bfloat16), torch.randn(m, n) if has_c else None
    plan = make_plan(m, n, k, torch.bfloat16, INTERPRETER_SPEC, schedule="streamk" if streamk else "persistent",
                     num_sms=32 if streamk else None,
                     config=TileConfig(128, 128, 64, num_warps=8, num_stages=3, tma=host, tma_store=host))
    assert (plan.sk_tiles > 0) == streamk
    ops = Operands(a, w.t(), out, c)
    ints, meta = static_args(plan, ops, 0, 0, False)
    tensors = tensor_args(plan, ops)
    assert (tensors[3] is None) == (not has_c) and (tensors[8] is None) == (not streamk)
    assert (meta["A_DESC"], meta["B_DESC"]) == (("stored", "transposed") if host else ("pointers", "pointers"))
    torch._C._cuda_getCurrentRawStream = lambda index: 0
    torch._C._cuda_getDevice = lambda: 0
    repeat = Repeat(plan, ints, meta, launcher, 0, False, False)
    launches = (  # the cached launch, as `_launch.launch` makes it on a GPU, and a repeat call's, twice
        lambda: _launch._launch_on(types.SimpleNamespace(type="cuda", index=0), plan, tensors, ints, (1.0, 0.5), meta,
                                   launcher),
        lambda: repeat(a, w.t(), out, c, None, None, (1.0, 0.5)),
        lambda: repeat(a, w.t(), out, c, None, None, (1.0, 0.5)))
    for i, call in enumerate(launches):
        try:
            call()
        except RuntimeError as e:  # every argument parsed, then the stand-in's launch failed
            assert "stand-in libcuda" in str(e), e
        else:
            raise AssertionError(f"the stand-in launch cannot succeed (launch {i})")
        assert launcher.c_launch is not None  # still the direct path
    if host:  # the repeat call encoded each operand's descriptor once
        made = [d for seen in repeat.descriptors for d in seen.values()]
        assert all(isinstance(d, HostDescriptor) and d.encoded is not None for d in made)
        assert [d.address for d in made] == [a.data_ptr(), w.data_ptr()] + ([] if has_c else [out.data_ptr()])
    # The C function does check: the integers flattened out of their tuples are refused (TypeError, nothing
    # launched), and the launcher goes to Triton's runner from then on.
    runner_calls = []
    launcher.runner = lambda *args, **kwargs: runner_calls.append(args)
    flat = (*addresses(tensors), *[x for group in ints for x in group], epoch(), 1.0, 0.5, *meta.values())
    if host:  # (the flattened integers also shift the descriptors' positions: descriptors wherever they are)
        stand_ins = [HostDescriptor(t.data_ptr(), [1, 1], [1, 1], [1, 1]) for t in (a, w, out)]
        flat = (*stand_ins[:2], *flat[2:10], None if has_c else stand_ins[2], *flat[11:])
    launcher(flat, 0)
    assert launcher.c_launch is None and runner_calls == [flat]
    print("launch arguments accepted")


@pytest.mark.parametrize("streamk, has_c, host", [(False, False, False), (True, True, False), (False, False, True),
                                                   (True, True, True)])
def test_launcher_accepts_the_arguments_as_launch_passes_them(tmp_path, streamk, has_c, host):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None or torch.cuda.is_available():
        pytest.skip("needs a C compiler, and no GPU (whose real libcuda the child would load)")
    lib = tmp_path / "libcuda.so.1"
    (tmp_path / "fake.c").write_text(_FAKE_CUDA + "".join(f"CUresult {name}() {{ return 0; }}\n"
                                                         for name in _FAKE_OTHERS))
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "fake.c")], check=True)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_LIBCUDA_PATH=str(tmp_path), LD_LIBRARY_PATH=str(tmp_path),
               PYTHONPATH=os.pathsep.join([os.path.join(_ROOT, "src"), env.get("PYTHONPATH", "")]))
    child = subprocess.run([sys.executable, __file__, str(int(streamk)), str(int(has_c)), str(int(host))], env=env,
                           capture_output=True, text=True, timeout=600)
    assert child.returncode == 0 and "launch arguments accepted" in child.stdout, child.stdout + child.stderr


if __name__ == "__main__":
    _check(*(bool(int(x)) for x in sys.argv[1:4]))
