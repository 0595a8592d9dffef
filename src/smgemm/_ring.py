"""Launch `kernels.mx_ring` (Gluon: Triton 3.6 on Hopper) for the MXFP4 products `plan.mx_ring_split` gives it: one
bf16 activation row times a "hopper" weight. One `RingLaunch` serves a checked call and its repeats."""

from __future__ import annotations

import torch
import triton

from ._launch import HostDescriptor, epoch, run_cached
from .mxfp4 import MXFP4Tensor

try:  # Gluon as Triton 3.6 ships it; other versions' API differs
    from .kernels import mx_ring
except (ImportError, AttributeError, TypeError, ValueError):
    mx_ring = None


def available(device: torch.device) -> bool:
    """Whether the ring kernel can run on `device`: a CUDA device under Triton 3.6 (the planner asks for Hopper)."""
    return mx_ring is not None and device.type == "cuda" and tuple(triton.__version__.split(".")[:2]) == ("3", "6")


_DESCRIPTORS_PER_OPERAND = 8


class RingLaunch:
    """The launch of `kernels.mx_ring.mx_ring_kernel` for alpha * x [1, K] @ w.T -> out [1, N], each tile's K split
    `split` ways. Called as a remembered call's repeat is (`_gemm._repeat_call`): (x, w, out, c, scale_a, scale_b,
    (alpha, beta)), c and the scales None; always launches (on out's device) and returns True. The first launch
    compiles through Triton with its own descriptors; later ones go through the cached launcher with host-built
    descriptors, made once per address."""

    __slots__ = ("descriptors", "grid", "k", "key", "launcher", "n", "split", "workspace_numel")

    def __init__(self, n: int, k: int, split: int):
        self.n, self.k, self.split = n, k, split
        self.grid = n // mx_ring.ROWS * split
        # the splits' partials (512 fp32 a program) and their flags (one int64, two fp32 slots, a program)
        self.workspace_numel = self.grid * 514 if split > 1 else 2
        self.key = None
        self.launcher = None
        self.descriptors = ({}, {}, {})

    def _descriptor(self, which: int, t: torch.Tensor, shape: list, strides: list, box: list) -> HostDescriptor:
        seen = self.descriptors[which]
        address = t.data_ptr()
        descriptor = seen.get(address)
        if descriptor is None:
            if len(seen) >= _DESCRIPTORS_PER_OPERAND:
                seen.clear()
            descriptor = seen[address] = HostDescriptor(address, shape, strides, box)
        return descriptor

    def __call__(self, x: torch.Tensor, w: MXFP4Tensor, out: torch.Tensor, c=None, scale_a=None, scale_b=None,
                 floats: tuple = (1.0, 1.0)) -> bool:
        device = out.device
        if device.index != torch._C._cuda_getDevice():
            with torch.cuda.device(device):
                return self(x, w, out, c, scale_a, scale_b, floats)
        ws = torch.empty(self.workspace_numel, dtype=torch.float32, device=device)  # alive until queued
        flags = ws[self.grid * 512:].view(torch.int64) if self.split > 1 else ws.view(torch.int64)
        n, k = self.n, self.k
        words = w.data.view(torch.int32)
        meta = {"SPLIT": self.split, "STAGES": mx_ring.STAGES, "num_warps": mx_ring.WARPS}
        stream = torch._C._cuda_getCurrentRawStream(device.index)
        if self.launcher is None:  # compile (and launch) through Triton, its launcher cached under the key
            self.key = ("mx_ring", device.index, n, k, self.split, x.data_ptr() % 16 == 0)
            args = (*mx_ring.descriptors(x, words, w.scales), out, ws, flags, epoch(), k, floats[0])
            self.launcher = run_cached(mx_ring.mx_ring_kernel, self.grid, args, meta, device.index, self.key)
            return True
        box_x, box_w, box_s = mx_ring.boxes(k, words, w.scales)
        args = (self._descriptor(0, x, *box_x), self._descriptor(1, words, *box_w),
                self._descriptor(2, w.scales, *box_s), out.data_ptr(), ws.data_ptr(), flags.data_ptr(), epoch(), k,
                floats[0], *meta.values())
        self.launcher(args, stream)
        return True
