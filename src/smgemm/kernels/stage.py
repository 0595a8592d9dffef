"""Copy a 2-D operand whose rows break TMA's or vectorized loads' alignment (16 bytes for TMA, a row stride of 16
elements for pointer loads: an odd K, a sliced view) into a buffer whose rows have it, on at most `num_programs`
programs.

Only the `cols` leading columns of each destination row are written; the GEMM reads the copy through a view of
exactly [rows, cols] (a tensor descriptor zero-fills past its edge, the pointer path masks), so the padding is
never read.

`stride_dst` is not specialised: were Triton to know that the destination rows are aligned, it would lay the block
out for wide stores, 8 elements a thread, and the unaligned source would then be read element by element at 8
times the stride, uncoalesced (on the H200 0.9 TB/s instead of 2.5).
"""

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["stride_dst"])
def stage_kernel(src_ptr, dst_ptr, rows, cols, stride_r, stride_c, stride_dst, num_programs,
                 BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    tiles_c = tl.cdiv(cols, BLOCK_C)
    num_tiles = tl.cdiv(rows, BLOCK_R) * tiles_c
    for tile in tl.range(tl.program_id(0), num_tiles, num_programs):
        offs_r = ((tile // tiles_c) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
        offs_c = (tile % tiles_c) * BLOCK_C + tl.arange(0, BLOCK_C)
        mask = (offs_r < rows)[:, None] & (offs_c < cols)[None, :]
        b_x = tl.load(src_ptr + offs_r[:, None] * stride_r + offs_c[None, :] * stride_c, mask=mask)
        tl.store(dst_ptr + offs_r[:, None] * stride_dst + offs_c[None, :], b_x, mask=mask)
