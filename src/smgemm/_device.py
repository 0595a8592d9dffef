"""What the planner needs to know about a device, read once per device and cached.

Nothing here runs at import time. A `DeviceSpec` is a frozen value, so a plan computed for `cuda:0` is never
reused for `cuda:1` by accident: the spec is part of every plan key.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from triton.runtime.interpreter import InterpretedFunction

from .kernels.gemm import gemm_kernel


@dataclass(frozen=True)
class DeviceSpec:
    """The properties of one device that tile selection and grid sizing depend on."""

    name: str
    num_sms: int
    smem_per_block: int  # bytes of shared memory one program may use (opt-in maximum)
    capability: tuple[int, int]
    interpreted: bool = False  # kernels run in the Triton interpreter on the CPU
    l2_bytes: int = 50 * 2**20  # L2 cache size (the Stream-K model asks whether operand panels stay in it)


# The Triton interpreter has no SMs; it emulates an H200 so that CPU-planned grids match GPU-planned ones.
INTERPRETER_SPEC = DeviceSpec(
    name="triton-interpreter (emulating H200)",
    num_sms=132,
    smem_per_block=232448,
    capability=(9, 0),
    interpreted=True,
)


@functools.cache
def interpreter_active() -> bool:
    """True when Triton compiles `@triton.jit` functions for its CPU interpreter.

    Triton reads TRITON_INTERPRET when a function is decorated, so we ask a decorated kernel rather than the
    environment (which may have changed since); the answer is fixed for the life of the process.
    """
    return isinstance(gemm_kernel, InterpretedFunction)


@functools.cache
def _cuda_spec(index: int) -> DeviceSpec:
    props = torch.cuda.get_device_properties(index)
    smem = getattr(props, "shared_memory_per_block_optin", 0) or 232448
    return DeviceSpec(
        name=props.name,
        num_sms=props.multi_processor_count,
        smem_per_block=int(smem),
        capability=(props.major, props.minor),
        l2_bytes=int(getattr(props, "L2_cache_size", 0) or 50 * 2**20),
    )


def device_spec(device: torch.device) -> DeviceSpec:
    """The spec of `device`: a CUDA device's own properties, or the interpreter's emulated H200 for the CPU."""
    if device.type == "cuda":
        return _cuda_spec(device.index if device.index is not None else torch.cuda.current_device())
    return INTERPRETER_SPEC


def tf32_enabled() -> bool:
    """Whether fp32 GEMMs may use TF32, following torch's own setting (new API first, then the legacy flag)."""
    matmul = torch.backends.cuda.matmul
    precision = getattr(matmul, "fp32_precision", "none")
    if precision in ("tf32", "ieee"):
        return precision == "tf32"
    try:
        return bool(matmul.allow_tf32)
    except RuntimeError:  # torch refuses to read the legacy flag after the new API was used
        return False
