"""The GEMM kernel: D = alpha * (A @ B) * scales + beta * C over a tile schedule.

One kernel serves the data-parallel and persistent schedules: program `pid` takes tiles pid, pid + P, ...
where P is the grid size (P == number of tiles for data-parallel, P <= SM budget for persistent).
"""

import triton
import triton.language as tl

from .common import epilogue, k_loop, smid, tile_coords


@triton.jit
def gemm_kernel(
    a_ptr, b_ptr, d_ptr, c_ptr, sa_ptr, sb_ptr, smid_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn,
    stride_dm, stride_dn, stride_cm, stride_cn, stride_sa, stride_sb,
    num_programs, alpha, beta,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr, HAS_C: tl.constexpr, HAS_SCALE_A: tl.constexpr, HAS_SCALE_B: tl.constexpr,
    INTERPRETER: tl.constexpr, INPUT_PRECISION: tl.constexpr, USE_INT64: tl.constexpr,
    RECORD_SMID: tl.constexpr,
):
    pid = tl.program_id(0)
    if RECORD_SMID:
        tl.store(smid_ptr + pid, smid())
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_iters = tl.cdiv(K, BLOCK_K)
    for tile_id in range(pid, num_tiles, num_programs):
        pid_m, pid_n = tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M)
        acc = k_loop(
            a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
            pid_m, pid_n, 0, k_iters,
            BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, INTERPRETER, INPUT_PRECISION, USE_INT64,
        )
        epilogue(
            acc, pid_m, pid_n, M, N, d_ptr, stride_dm, stride_dn, c_ptr, stride_cm, stride_cn,
            sa_ptr, stride_sa, sb_ptr, stride_sb, alpha, beta,
            HAS_C, HAS_SCALE_A, HAS_SCALE_B, BLOCK_M, BLOCK_N, USE_INT64, INTERPRETER,
        )
