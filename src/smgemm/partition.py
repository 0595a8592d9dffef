"""`SMPartition`: a slice of a GPU's SMs for GEMMs, so other work can run beside them on the rest of the chip.

    gemm_part = smgemm.SMPartition(100)            # a green context of >= 100 SMs where torch provides them
    with gemm_part:                                 # its stream, and num_sms=100 for smgemm GEMMs inside
        y = model(x)                                # every smgemm GEMM here launches <= 100 programs
    torch.cuda.current_stream().wait_stream(gemm_part.stream)

With `torch.cuda.green_contexts` (torch >= 2.10, a driver with green contexts) the partition's stream is bound
to a green context: the hardware keeps everything launched on it to that context's SMs (the driver rounds the
count up, to a multiple of 8 on the H200). Without them, or with `isolate=False`, it is an ordinary stream plus
the `num_sms` budget: smgemm's GEMMs still occupy at most `num_sms` SMs, other kernels on the stream are not
confined. Synchronise with other streams as with any CUDA stream (events, `wait_stream`).

Two `SMPartition(k)` objects are NOT disjoint: each green context torch creates holds the device's first SMs.
To run two pieces of work side by side, split the device once:

    gemm_part, rest = smgemm.SMPartition.split(100)   # disjoint: >= 100 SMs, and every SM left over

`split` asks the driver (cuDevSmResourceSplitByCount) for a group and its remainder and binds one green context
to each, so the hardware keeps the two streams' kernels on different SMs.
"""

from __future__ import annotations

import contextlib
import ctypes

import torch

from ._device import device_spec
from .ops import sm_budget


class SMPartition:
    """`num_sms` SMs of `device` (default: the current CUDA device): a stream, and the budget for GEMMs on it."""

    def __init__(self, num_sms: int, device: torch.device | str | int | None = None, *, isolate: bool = True):
        if isinstance(num_sms, bool) or not isinstance(num_sms, int) or num_sms < 1:
            raise ValueError(f"num_sms must be an int >= 1, got {num_sms!r}")
        device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"device must be a CUDA device, got {device}")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.num_sms = min(num_sms, device_spec(device).num_sms)
        self.sm_count: int | None = None  # SMs of the green context, where the driver said (`split`)
        self.isolated = False
        self.fallback_reason: str | None = None if isolate else "isolate=False"
        self._green = None
        if isolate:
            try:
                from torch.cuda.green_contexts import GreenContext

                torch.empty(0, device=device)  # the device's primary context must exist before a green one

                self._green = GreenContext.create(num_sms=self.num_sms, device_id=device.index)
                self.stream = self._green.Stream()
                self.isolated = True
            except (ImportError, AttributeError, RuntimeError, TypeError) as exc:  # no green contexts here
                self.fallback_reason = f"{type(exc).__name__}: {exc}"
        if not self.isolated:
            self.stream = torch.cuda.Stream(device)
        self._stacks: list[contextlib.ExitStack] = []

    @classmethod
    def split(cls, num_sms: int, device: torch.device | str | int | None = None) -> tuple[SMPartition, SMPartition]:
        """Two disjoint partitions of `device`: one of at least `num_sms` SMs (its GEMM budget is `num_sms`) and
        one of every SM left over. Where the driver cannot split (no green contexts), both are ordinary streams
        with budgets `num_sms` and `total - num_sms`, and `isolated` is False.
        """
        first = cls(num_sms, device, isolate=False)
        total = device_spec(first.device).num_sms
        if first.num_sms >= total:
            raise ValueError(f"num_sms must leave SMs for the second partition: {num_sms} of {total}")
        second = cls(total - first.num_sms, first.device, isolate=False)
        try:
            (s1, n1), (s2, n2) = _driver_split(first.device, first.num_sms)
        except (OSError, AttributeError, RuntimeError) as exc:
            first.fallback_reason = second.fallback_reason = f"{type(exc).__name__}: {exc}"
            return first, second
        for part, stream, count in ((first, s1, n1), (second, s2, n2)):
            part.stream = torch.cuda.ExternalStream(stream, device=part.device)
            part.isolated, part.fallback_reason, part.sm_count = True, None, count
        second.num_sms = n2
        return first, second

    def __enter__(self) -> SMPartition:
        stack = contextlib.ExitStack()
        stack.enter_context(torch.cuda.stream(self.stream))
        stack.enter_context(sm_budget(self.num_sms))
        self._stacks.append(stack)
        return self

    def __exit__(self, *exc) -> None:
        self._stacks.pop().close()

    def __repr__(self) -> str:
        if self.isolated:
            how = "green context" + (f" of {self.sm_count} SMs" if self.sm_count else "")
        else:
            how = f"stream + num_sms ({self.fallback_reason})"
        return f"SMPartition(num_sms={self.num_sms}, device={self.device}, {how})"


_CU_DEV_RESOURCE_TYPE_SM = 1
_CU_GREEN_CTX_DEFAULT_STREAM = 1
_CU_STREAM_NON_BLOCKING = 1
_RESOURCE_BYTES = 144  # sizeof(CUdevResource) in CUDA 12.4+ and 13.x; smCount is the uint32 at byte 96
_SM_COUNT_OFFSET = 96
_GREEN_CONTEXTS: list = []  # the driver's green contexts live as long as the process (streams refer to them)


def _driver_split(device: torch.device, num_sms: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(stream handle, SM count) of two green contexts on disjoint SMs: >= num_sms SMs, and the rest."""
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(name: str, *args) -> None:
        result = getattr(cuda, name)(*args)
        if result != 0:
            raise RuntimeError(f"{name} returned CUresult {result}")

    torch.empty(0, device=device)  # the primary context exists and the driver is initialised
    dev = ctypes.c_int()
    check("cuDeviceGet", ctypes.byref(dev), device.index)
    resource = ctypes.create_string_buffer(_RESOURCE_BYTES)
    check("cuDeviceGetDevResource", dev, resource, _CU_DEV_RESOURCE_TYPE_SM)
    group, rest = ctypes.create_string_buffer(_RESOURCE_BYTES), ctypes.create_string_buffer(_RESOURCE_BYTES)
    groups = ctypes.c_uint(1)
    check("cuDevSmResourceSplitByCount", group, ctypes.byref(groups), resource, rest, 0, num_sms)
    if groups.value != 1:
        raise RuntimeError(f"the driver made {groups.value} groups of >= {num_sms} SMs, not 1")
    made = []
    for res in (group, rest):
        count = int.from_bytes(res.raw[_SM_COUNT_OFFSET:_SM_COUNT_OFFSET + 4], "little")
        if count == 0:
            raise RuntimeError("the driver left no SMs for the second partition")
        desc, ctx, stream = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        check("cuDevResourceGenerateDesc", ctypes.byref(desc), res, 1)
        check("cuGreenCtxCreate", ctypes.byref(ctx), desc, dev, _CU_GREEN_CTX_DEFAULT_STREAM)
        _GREEN_CONTEXTS.append(ctx)
        check("cuGreenCtxStreamCreate", ctypes.byref(stream), ctx, _CU_STREAM_NON_BLOCKING, 0)
        made.append((stream.value, count))
    return made[0], made[1]
