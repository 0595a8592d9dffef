"""Launch `kernels.mx_ring` (Gluon: Triton 3.6 on Hopper) for the MXFP4 products `plan.mx_ring_split` gives it: one
bf16 activation row times a "hopper" weight. One `RingLaunch` serves a checked call and its repeats."""

from __future__ import annotations

import torch
import triton

from ._launch import epoch, host_descriptor_at, run_cached
from .mxfp4 import MXFP4Tensor

try:  # Gluon as Triton 3.6 ships it; other versions' API differs
    from .kernels import mx_ring
except (ImportError, AttributeError, TypeError, ValueError):
    mx_ring = None


_GLUON_API = mx_ring is not None and tuple(triton.__version__.split(".")[:2]) == ("3", "6")


def available(device: torch.device) -> bool:
    """Whether the ring kernel can run on `device`: a CUDA device under Triton 3.6 (the planner asks for Hopper)."""
    return _GLUON_API and device.type == "cuda"


class RingLaunch:
    """The launch of `kernels.mx_ring.mx_ring_kernel` for alpha * x [1, K] @ w.T -> out [1, N], each tile's K split
    `split` ways. Called as a remembered call's repeat is (`_gemm._repeat_call`): (x, w, out, c, scale_a, scale_b,
    (alpha, beta)), c and the scales None; always launches (on out's device) and returns True. The first launch
    compiles through Triton with its own descriptors; later ones go through the cached launcher with host-built
    descriptors, made once per address."""

    __slots__ = ("boxes", "descriptors", "grid", "k", "key", "launcher", "n", "split", "tail", "workspace_numel")

    def __init__(self, n: int, k: int, split: int):
        self.n, self.k, self.split = n, k, split
        self.grid = n // mx_ring.ROWS * split
        # the splits' partials (512 fp32 a program) and their flags (one int64, two fp32 slots, a program)
        self.workspace_numel = self.grid * 514 if split > 1 else 2
        self.key = self.launcher = self.boxes = None
        self.tail = (split, mx_ring.STAGES, mx_ring.WARPS)  # the meta-parameters, in the kernel's order
        self.descriptors = ({}, {}, {})

    def repeat_args(self, x: torch.Tensor, w: MXFP4Tensor, out: torch.Tensor, ws_address: int, flags_address: int,
                    alpha: float) -> tuple:
        """The cached launcher's arguments: host-built descriptors (x's, the words' and the scales', by address,
        their boxes those of the first launch: the signature fixes shapes and strides), then addresses and ints."""
        (box_x, box_w, box_s), (seen_x, seen_w, seen_s) = self.boxes, self.descriptors
        return (host_descriptor_at(seen_x, x.data_ptr(), box_x), host_descriptor_at(seen_w, w.data.data_ptr(), box_w),
                host_descriptor_at(seen_s, w.scales.data_ptr(), box_s), out.data_ptr(), ws_address, flags_address,
                epoch() if self.split > 1 else 1 << 62, self.k, alpha, *self.tail)

    def __call__(self, x: torch.Tensor, w: MXFP4Tensor, out: torch.Tensor, c=None, scale_a=None, scale_b=None,
                 floats: tuple = (1.0, 1.0)) -> bool:
        device = out.device
        if device.index != torch._C._cuda_getDevice():
            with torch.cuda.device(device):
                return self(x, w, out, c, scale_a, scale_b, floats)
        if self.launcher is None:  # compile (and launch) through Triton, its launcher cached under the key
            ws = torch.empty(self.workspace_numel, dtype=torch.float32, device=device)
            flags = ws[self.grid * 512:].view(torch.int64) if self.split > 1 else ws.view(torch.int64)
            words = w.data.view(torch.int32)
            self.boxes = mx_ring.boxes(self.k, words, w.scales)
            self.key = ("mx_ring", device.index, self.n, self.k, self.split, x.dtype, out.dtype,
                        x.data_ptr() % 16 == 0)
            args = (*mx_ring.descriptors(x, words, w.scales), out, ws, flags, epoch(), self.k, floats[0])
            meta = dict(zip(("SPLIT", "STAGES", "num_warps"), self.tail))
            self.launcher = run_cached(mx_ring.mx_ring_kernel, self.grid, args, meta, device.index, self.key)
            return True
        if self.split > 1:  # the partials, then the flags; alive until the launch is queued
            ws = torch.empty(self.workspace_numel, dtype=torch.float32, device=device)
            ws_address = ws.data_ptr()
            flags_address = ws_address + self.grid * 512 * 4
        else:  # the split-free kernel reads neither
            ws_address = flags_address = out.data_ptr()
        self.launcher(self.repeat_args(x, w, out, ws_address, flags_address, floats[0]),
                      torch._C._cuda_getCurrentRawStream(device.index))
        return True
