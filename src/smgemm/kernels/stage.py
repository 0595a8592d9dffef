"""Copy one or two 2-D operands whose rows break TMA's or vectorized loads' alignment (16 bytes for TMA, a row
stride of 16 elements for pointer loads: an odd K, a sliced view) into buffers whose rows have it, in one launch of
at most `num_programs` programs (a GEMM's A and B cost one launch's fixed time, not two).

Only the `cols` leading columns of each destination row are written; the GEMM reads the copy through a view of
exactly [rows, cols] (a tensor descriptor zero-fills past its edge, the pointer path masks), so the padding is
never read.

The destination strides are not specialised: were Triton to know that the destination rows are aligned, it would
lay the block out for wide stores, 8 elements a thread, and the unaligned source would then be read element by
element at 8 times the stride, uncoalesced (on the H200 0.9 TB/s instead of 2.5).
"""

import triton
import triton.language as tl


@triton.jit
def _copy_tile(src_ptr, dst_ptr, rows, cols, stride_r, stride_c, stride_dst, tile,
               BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    tiles_c = tl.cdiv(cols, BLOCK_C)
    offs_r = ((tile // tiles_c) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    offs_c = (tile % tiles_c) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (offs_r < rows)[:, None] & (offs_c < cols)[None, :]
    b_x = tl.load(src_ptr + offs_r[:, None] * stride_r + offs_c[None, :] * stride_c, mask=mask)
    tl.store(dst_ptr + offs_r[:, None] * stride_dst + offs_c[None, :], b_x, mask=mask)


@triton.jit(do_not_specialize=["stride_dst0", "stride_dst1"])
def stage_kernel(src0_ptr, dst0_ptr, rows0, cols0, stride_r0, stride_c0, stride_dst0,
                 src1_ptr, dst1_ptr, rows1, cols1, stride_r1, stride_c1, stride_dst1, num_programs,
                 BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    # the first operand's blocks, then the second's (rows1 == 0: none)
    tiles0 = tl.cdiv(rows0, BLOCK_R) * tl.cdiv(cols0, BLOCK_C)
    num_tiles = tiles0 + tl.cdiv(rows1, BLOCK_R) * tl.cdiv(cols1, BLOCK_C)
    for tile in tl.range(tl.program_id(0), num_tiles, num_programs):
        if tile < tiles0:
            _copy_tile(src0_ptr, dst0_ptr, rows0, cols0, stride_r0, stride_c0, stride_dst0, tile, BLOCK_R, BLOCK_C)
        else:
            _copy_tile(src1_ptr, dst1_ptr, rows1, cols1, stride_r1, stride_c1, stride_dst1, tile - tiles0,
                       BLOCK_R, BLOCK_C)
