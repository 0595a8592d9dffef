"""Expand one or two MXFP4 operands [rows, K] (packed along K) to bf16 / fp16 [rows, K] in one launch, on at most
`num_programs` programs.

The first half of the two-pass MXFP4 GEMM for compute-bound shapes (`plan.mx_expands`): the expanded copies then
go through the dense Hopper path. Tiles [0, tiles of operand 0) expand operand 0, the rest operand 1 (the
activations and the weight of a both-MXFP4 GEMM share one launch: one ramp-up and one tail instead of two). Uses
the same expansion as the fused kernel (`common.mx_weight_tile`).
"""

import triton
import triton.language as tl

from .common import mx_weight_tile, mx_words_to_bf16


@triton.jit
def _expand_tile(tile, data_ptr, scales_ptr, out_ptr, rows, K, stride_data, stride_scales, stride_out,
                 BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, INTERPRETER: tl.constexpr,
                 FP16: tl.constexpr):
    num_r = tl.cdiv(rows, BLOCK_R)
    pid_r, pid_k = tile % num_r, tile // num_r
    offs_r = (pid_r * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    k0 = pid_k * BLOCK_K
    # [BLOCK_R, BLOCK_K]: rows past the end are wrapped for the load and masked at the store
    b_w = mx_weight_tile(data_ptr, scales_ptr, offs_r % rows, stride_data, stride_scales, k0, K,
                         BLOCK_R, BLOCK_K, EVEN_K, INTERPRETER, FP16)
    offs_k = k0 + tl.arange(0, BLOCK_K)
    mask = (offs_r < rows)[:, None] & (offs_k < K)[None, :]
    tl.store(out_ptr + offs_r[:, None] * stride_out + offs_k[None, :], b_w, mask=mask)


@triton.jit
def _expand_words(tile, data_ptr, scales_ptr, out_ptr, rows, K, stride_data, stride_scales, stride_out,
                  BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, INTERPRETER: tl.constexpr):
    """`_expand_tile` to bf16 with 32-bit words: `data_ptr` an int32 view of the packed data ([rows, K / 8], 8 values
    a word), `out_ptr` an int32 view of the output ([rows, K / 2], a bf16 pair a word), strides in words. The tile
    is [BLOCK_R, groups, 4 words] (a group: the 32 values of one scale), so that a thread loads a group's 16 bytes
    at once, broadcasts its scale, and stores the group's 64 bytes of bf16 as they lie in memory."""
    GROUPS: tl.constexpr = BLOCK_K // 32
    num_r = tl.cdiv(rows, BLOCK_R)
    pid_r, pid_k = tile % num_r, tile // num_r
    offs_r = (pid_r * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    offs_g = pid_k * GROUPS + tl.arange(0, GROUPS)
    mask = (offs_r < rows)[:, None] & (offs_g < K // 32)[None, :]
    scales = tl.load(scales_ptr + offs_r[:, None] * stride_scales + offs_g[None, :], mask=mask, other=127)
    p_words = (data_ptr + offs_r[:, None, None] * stride_data + (4 * offs_g)[None, :, None]
               + tl.arange(0, 4)[None, None, :])
    words = tl.load(p_words, mask=mask[:, :, None], other=0)  # [BR, G, 4]
    o0, o1, o2, o3 = mx_words_to_bf16(words, tl.broadcast_to(scales[:, :, None], (BLOCK_R, GROUPS, 4)), INTERPRETER)
    # [BR, G, 4, 2, 2], [.., w, i, j] = output 2i + j of word w (join appends the new axis last): memory order
    out = tl.join(tl.join(o0, o2), tl.join(o1, o3)).reshape(BLOCK_R, 16 * GROUPS)
    offs_o = pid_k * 16 * GROUPS + tl.arange(0, 16 * GROUPS)
    mask = (offs_r < rows)[:, None] & (offs_o < K // 2)[None, :]
    tl.store(out_ptr + offs_r[:, None] * stride_out + offs_o[None, :], out, mask=mask)


@triton.jit
def _expand_one(tile, data_ptr, scales_ptr, out_ptr, rows, K, stride_data, stride_scales, stride_out,
                BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, INTERPRETER: tl.constexpr,
                FP16: tl.constexpr, WORDS: tl.constexpr):
    if WORDS:
        _expand_words(tile, data_ptr, scales_ptr, out_ptr, rows, K, stride_data, stride_scales, stride_out,
                      BLOCK_R, BLOCK_K, INTERPRETER)
    else:
        _expand_tile(tile, data_ptr, scales_ptr, out_ptr, rows, K, stride_data, stride_scales, stride_out,
                     BLOCK_R, BLOCK_K, EVEN_K, INTERPRETER, FP16)


@triton.jit
def mx_expand_kernel(
    data0_ptr, scales0_ptr, out0_ptr, rows0, stride_data0, stride_scales0, stride_out0,
    data1_ptr, scales1_ptr, out1_ptr, rows1, stride_data1, stride_scales1, stride_out1,
    K, num_programs,
    BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, INTERPRETER: tl.constexpr,
    FP16: tl.constexpr, TWO: tl.constexpr, WORDS: tl.constexpr,
):
    k_tiles = tl.cdiv(K, BLOCK_K)
    tiles0 = tl.cdiv(rows0, BLOCK_R) * k_tiles
    num_tiles = tiles0 + tl.cdiv(rows1, BLOCK_R) * k_tiles if TWO else tiles0
    for tile in tl.range(tl.program_id(0), num_tiles, num_programs, num_stages=2):
        if TWO and tile >= tiles0:
            _expand_one(tile - tiles0, data1_ptr, scales1_ptr, out1_ptr, rows1, K, stride_data1, stride_scales1,
                        stride_out1, BLOCK_R, BLOCK_K, EVEN_K, INTERPRETER, FP16, WORDS)
        else:
            _expand_one(tile, data0_ptr, scales0_ptr, out0_ptr, rows0, K, stride_data0, stride_scales0,
                        stride_out0, BLOCK_R, BLOCK_K, EVEN_K, INTERPRETER, FP16, WORDS)
