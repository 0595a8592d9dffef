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
"""

from __future__ import annotations

import contextlib

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

    def __enter__(self) -> SMPartition:
        stack = contextlib.ExitStack()
        stack.enter_context(torch.cuda.stream(self.stream))
        stack.enter_context(sm_budget(self.num_sms))
        self._stacks.append(stack)
        return self

    def __exit__(self, *exc) -> None:
        self._stacks.pop().close()

    def __repr__(self) -> str:
        how = "green context" if self.isolated else f"stream + num_sms ({self.fallback_reason})"
        return f"SMPartition(num_sms={self.num_sms}, device={self.device}, {how})"
