"""Expand an MXFP4 operand [rows, K] (packed along K) to bf16 / fp16 [rows, K], on at most `num_programs` SMs.

The first half of the two-pass MXFP4 GEMM for compute-bound shapes (`plan.mx_expands`): the expanded copy then
goes through the dense Hopper path. Uses the same expansion as the fused kernel (`common.mx_weight_tile`).
"""

import triton
import triton.language as tl

from .common import mx_weight_tile


@triton.jit
def mx_expand_kernel(
    data_ptr, scales_ptr, out_ptr, rows, K, stride_data, stride_scales, stride_out, num_programs,
    BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, INTERPRETER: tl.constexpr,
    FP16: tl.constexpr,
):
    num_r = tl.cdiv(rows, BLOCK_R)
    num_tiles = num_r * tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), num_tiles, num_programs, num_stages=2):
        pid_r, pid_k = tile % num_r, tile // num_r
        offs_r = (pid_r * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
        k0 = pid_k * BLOCK_K
        # [BLOCK_R, BLOCK_K]: rows past the end are wrapped for the load and masked at the store
        b_w = mx_weight_tile(data_ptr, scales_ptr, offs_r % rows, stride_data, stride_scales, k0, K,
                             BLOCK_R, BLOCK_K, EVEN_K, INTERPRETER, FP16)
        offs_k = k0 + tl.arange(0, BLOCK_K)
        mask = (offs_r < rows)[:, None] & (offs_k < K)[None, :]
        tl.store(out_ptr + offs_r[:, None] * stride_out + offs_k[None, :], b_w, mask=mask)
