"""Expand one or two MXFP4 operands [rows, K] (packed along K) to bf16 / fp16 [rows, K] in one launch, on at most
`num_programs` programs.

The first half of the two-pass MXFP4 GEMM for compute-bound shapes (`plan.mx_expands`): the expanded copies then
go through the dense Hopper path. Tiles [0, tiles of operand 0) expand operand 0, the rest operand 1 (the
activations and the weight of a both-MXFP4 GEMM share one launch: one ramp-up and one tail instead of two; each in
its own byte layout, LAYOUT0 / LAYOUT1). Uses
the same expansion as the fused kernel (`common.mx_weight_tile`).
"""

import triton
import triton.language as tl

from .common import mx_weight_tile


@triton.jit
def _expand_tile(tile, data_ptr, scales_ptr, out_ptr, rows, K, stride_data, stride_scales, stride_out,
                 BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, INTERPRETER: tl.constexpr,
                 FP16: tl.constexpr, LAYOUT: tl.constexpr):
    num_r = tl.cdiv(rows, BLOCK_R)
    pid_r, pid_k = tile % num_r, tile // num_r
    offs_r = (pid_r * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    k0 = pid_k * BLOCK_K
    # [BLOCK_R, BLOCK_K] in K order (a "kwords" tile in its words' order): rows past the end are wrapped for the load
    # and masked at the store
    b_w = mx_weight_tile(data_ptr, scales_ptr, offs_r % rows, stride_data, stride_scales, k0, K,
                         BLOCK_R, BLOCK_K, EVEN_K, INTERPRETER, FP16, LAYOUT, LAYOUT == "kwords")
    offs_k = k0 + tl.arange(0, BLOCK_K)
    mask = (offs_r < rows)[:, None] & (offs_k < K)[None, :]
    tl.store(out_ptr + offs_r[:, None] * stride_out + offs_k[None, :], b_w, mask=mask)


@triton.jit
def mx_expand_kernel(
    data0_ptr, scales0_ptr, out0_ptr, rows0, stride_data0, stride_scales0, stride_out0,
    data1_ptr, scales1_ptr, out1_ptr, rows1, stride_data1, stride_scales1, stride_out1,
    K, num_programs,
    BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, INTERPRETER: tl.constexpr,
    FP16: tl.constexpr, TWO: tl.constexpr, LAYOUT0: tl.constexpr, LAYOUT1: tl.constexpr,
):
    k_tiles = tl.cdiv(K, BLOCK_K)
    tiles0 = tl.cdiv(rows0, BLOCK_R) * k_tiles
    num_tiles = tiles0 + tl.cdiv(rows1, BLOCK_R) * k_tiles if TWO else tiles0
    for tile in tl.range(tl.program_id(0), num_tiles, num_programs, num_stages=2):
        if TWO and tile >= tiles0:
            _expand_tile(tile - tiles0, data1_ptr, scales1_ptr, out1_ptr, rows1, K, stride_data1, stride_scales1,
                         stride_out1, BLOCK_R, BLOCK_K, EVEN_K, INTERPRETER, FP16, LAYOUT1)
        else:
            _expand_tile(tile, data0_ptr, scales0_ptr, out0_ptr, rows0, K, stride_data0, stride_scales0,
                         stride_out0, BLOCK_R, BLOCK_K, EVEN_K, INTERPRETER, FP16, LAYOUT0)
