"""The GEMM kernel: D = alpha * (A @ B) * scales + beta * C over a tile schedule.

One kernel serves every schedule. Program `pid` of P first takes whole tiles pid, pid + P, ... below `dp_tiles`
(P == number of tiles for data-parallel, P <= SM budget for persistent). With STREAMK, the K-iterations of the
remaining tiles are then split evenly over the P programs (see `streamk_tiles`).
"""

import triton
import triton.language as tl

from .common import epilogue, k_loop, smid, tile_coords

_FIXUP_UNROLL: tl.constexpr = tl.constexpr(4)  # partial tiles a Stream-K program sums at once
_MAX_LEVELS: tl.constexpr = tl.constexpr(24)  # levels of the Stream-K reduction tree: up to 2**24 sharers


@triton.jit
def _first_owner(it, base, extra):
    """The program whose Stream-K range holds iteration `it` (programs < extra own base + 1 iterations, others base)."""
    boundary = extra * (base + 1)
    return tl.where(it < boundary, it // (base + 1), extra + (it - boundary) // base)


@triton.jit(do_not_specialize=["epoch"])
def gemm_kernel(
    a_ptr, b_ptr, d_ptr, c_ptr, sa_ptr, sb_ptr, mxa_ptr, mxb_ptr, ws_ptr, smid_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_mxa, stride_mxb,
    stride_dm, stride_dn, stride_cm, stride_cn, stride_sa, stride_sb,
    num_programs, dp_tiles, epoch, alpha, beta,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr, HAS_C: tl.constexpr, HAS_SCALE_A: tl.constexpr, HAS_SCALE_B: tl.constexpr,
    INTERPRETER: tl.constexpr, INPUT_PRECISION: tl.constexpr, USE_INT64: tl.constexpr,
    STREAMK: tl.constexpr, FIXUP_N: tl.constexpr, FLAG_LANES: tl.constexpr, RECORD_SMID: tl.constexpr,
    A_MX: tl.constexpr, B_MX: tl.constexpr, MX_FP16: tl.constexpr, A_DESC: tl.constexpr, B_DESC: tl.constexpr,
    FLATTEN: tl.constexpr, D_DESC: tl.constexpr, MX_SPLIT: tl.constexpr, MX_SWAP: tl.constexpr,
    MX_PREFETCH: tl.constexpr,
):
    pid = tl.program_id(0)
    if RECORD_SMID:
        tl.store(smid_ptr + pid, smid())
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_iters = tl.cdiv(K, BLOCK_K)
    # Tensor descriptors (TMA on Hopper), built here on the device: no host work per launch. From now on a_ptr /
    # b_ptr are what k_loop reads through (a pointer or a descriptor, per A_DESC / B_DESC); d_desc is used only
    # when D_DESC. The host checked TMA's rules (16-byte aligned base and row stride, unit last stride).
    if A_DESC == 1:
        a_ptr = tl.make_tensor_descriptor(a_ptr, [M, K], [stride_am, 1], [BLOCK_M, BLOCK_K])
    elif A_DESC == 2:
        a_ptr = tl.make_tensor_descriptor(a_ptr, [K, M], [stride_ak, 1], [BLOCK_K, BLOCK_M])
    if B_DESC == 1:
        b_ptr = tl.make_tensor_descriptor(b_ptr, [K, N], [stride_bk, 1], [BLOCK_K, BLOCK_N])
    elif B_DESC == 2:
        b_ptr = tl.make_tensor_descriptor(b_ptr, [N, K], [stride_bn, 1], [BLOCK_N, BLOCK_K])
    d_desc = d_ptr
    if D_DESC:
        d_desc = tl.make_tensor_descriptor(d_ptr, [M, N], [stride_dm, 1], [BLOCK_M, BLOCK_N // 2])
    # FLATTEN lets Triton's pipeliner fuse the tile loop with the K loop below it, so that the next tile's operands
    # load while this tile's epilogue runs. (Triton 3.6's warp_specialize=True here hung on the H200.)
    for tile_id in tl.range(pid, dp_tiles, num_programs, flatten=FLATTEN):
        pid_m, pid_n = tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M)
        acc = k_loop(
            a_ptr, b_ptr, mxa_ptr, mxb_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_mxa, stride_mxb,
            pid_m, pid_n, 0, k_iters,
            BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, INTERPRETER, INPUT_PRECISION, USE_INT64, A_MX, B_MX, MX_FP16,
            A_DESC, B_DESC, MX_SPLIT, MX_SWAP, MX_PREFETCH,
        )
        epilogue(
            acc, pid_m, pid_n, M, N, d_ptr, d_desc, stride_dm, stride_dn, c_ptr, stride_cm, stride_cn,
            sa_ptr, stride_sa, sb_ptr, stride_sb, alpha, beta,
            HAS_C, HAS_SCALE_A, HAS_SCALE_B, BLOCK_M, BLOCK_N, USE_INT64, INTERPRETER, D_DESC,
        )
    if STREAMK:
        # Stream-K over the tiles from dp_tiles on, their K-iterations numbered tile-major from 0: program pid owns
        # the contiguous range [start, end), base or base + 1 iterations (the planner makes base >= 2).
        sk_iters = (num_pid_m * num_pid_n - dp_tiles) * k_iters
        base = sk_iters // num_programs
        extra = sk_iters % num_programs
        start = pid * base + tl.minimum(pid, extra)
        end = start + base + (pid < extra).to(tl.int32)
        # Workspace: fp32 tiles, slot p < P holding program p's published partial, slot P + t the finishing program's
        # own partial of split tile t; then one int64 flag per program. A flag holds `epoch` (this launch's random
        # id) while its partial is published, and is reset to 0 by the one program that reads it.
        tile_elems = BLOCK_M * BLOCK_N
        num_slots = num_programs + num_pid_m * num_pid_n - dp_tiles
        p_flags = (ws_ptr + num_slots * tile_elems).to(tl.pointer_type(tl.int64))
        offs_tile = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        # Walk the range from its end: the first segment done is the one a higher program waits for (the end of
        # a range is mid-tile unless it is a tile boundary), so partials are published as early as possible.
        seg_end = end
        while seg_end > start:
            tile = (seg_end - 1) // k_iters
            tile_start = tile * k_iters
            seg_start = tl.maximum(start, tile_start)
            pid_m, pid_n = tile_coords(dp_tiles + tile, num_pid_m, num_pid_n, GROUP_M)
            acc = k_loop(
                a_ptr, b_ptr, mxa_ptr, mxb_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_mxa,
                stride_mxb, pid_m, pid_n, seg_start - tile_start, seg_end - tile_start,
                BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, INTERPRETER, INPUT_PRECISION, USE_INT64, A_MX, B_MX, MX_FP16,
                A_DESC, B_DESC, MX_SPLIT, MX_SWAP, MX_PREFETCH,
            )
            tile_end = tile_start + k_iters
            if seg_start == tile_start and seg_end == tile_end:
                epilogue(
                    acc, pid_m, pid_n, M, N, d_ptr, d_desc, stride_dm, stride_dn, c_ptr, stride_cm, stride_cn,
                    sa_ptr, stride_sa, sb_ptr, stride_sb, alpha, beta,
                    HAS_C, HAS_SCALE_A, HAS_SCALE_B, BLOCK_M, BLOCK_N, USE_INT64, INTERPRETER, D_DESC,
                )
            else:
                # The tile's sharers are programs first..last; they reduce their partials over a binary tree rooted
                # at `last` (rank 0), which holds the tile's last iterations and finishes it. Rank r takes the
                # partials of ranks r + 1, r + 2, r + 4, ... (while r is a multiple of twice the step), i.e. of
                # programs pid - 1, pid - 2, pid - 4, ...: lower programs only, so the kernel cannot deadlock and
                # runs in the in-order interpreter (docs/streamk.md). The order of the sums is fixed by the plan:
                # results are bitwise reproducible. The finisher reads ceil(log2(sharers)) partials, not all.
                first = _first_owner(tile_start, base, extra)
                last = _first_owner(tile_end - 1, base, extra)
                rank = last - pid
                lanes = tl.arange(0, FLAG_LANES)
                step = 1 << tl.minimum(lanes, _MAX_LEVELS)
                takes = (lanes < _MAX_LEVELS) & (rank % (2 * step) == 0) & (rank + step <= last - first)
                n_children = tl.sum(takes.to(tl.int32), axis=0)
                # Own partial: slot pid for a rank > 0 (it publishes there; such a program has no other segment
                # that publishes, see below), slot P + tile for the finisher (slot pid may hold the partial it
                # published for the next tile).
                own = tl.where(rank == 0, num_programs + tile, pid)
                p_own = ws_ptr + own * tile_elems
                tl.store(p_own + offs_tile, acc, cache_modifier=".cg")
                if n_children > 0:
                    # Wait for the children's flags all at once, one per thread (FLAG_LANES >= _MAX_LEVELS lanes):
                    # each acquires and resets its flag, until every one held `epoch`.
                    pending = takes
                    while tl.max(pending.to(tl.int32), axis=0) > 0:
                        seen = tl.atomic_xchg(p_flags + pid - step, epoch * 0, mask=pending, sem="acquire",
                                              scope="gpu")
                        pending = pending & (seen != epoch)
                tl.debug_barrier()  # every flag acquired, and this program's own stores visible to all its threads
                if rank == 0 or n_children > 0:
                    # Own partial plus the children's, in rank order, FIXUP_N columns at a time so that no second
                    # full tile sits in registers beside acc; _FIXUP_UNROLL children per step so that their loads
                    # are in flight together. The finisher applies the one epilogue; others store the sum back.
                    for j in tl.static_range(BLOCK_N // FIXUP_N):
                        offs = j * FIXUP_N + tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, FIXUP_N)[None, :]
                        part = tl.load(p_own + offs, cache_modifier=".cg")
                        for c in range(0, n_children, _FIXUP_UNROLL):
                            for u in tl.static_range(_FIXUP_UNROLL):
                                child = pid - (1 << tl.minimum(c + u, _MAX_LEVELS))
                                part += tl.load(ws_ptr + child * tile_elems + offs, mask=c + u < n_children,
                                                other=0.0, cache_modifier=".cg")
                        if rank == 0:
                            epilogue(
                                part, pid_m, pid_n * (BLOCK_N // FIXUP_N) + j, M, N, d_ptr, d_desc, stride_dm,
                                stride_dn, c_ptr, stride_cm, stride_cn, sa_ptr, stride_sa, sb_ptr, stride_sb, alpha,
                                beta, HAS_C, HAS_SCALE_A, HAS_SCALE_B, BLOCK_M, FIXUP_N, USE_INT64, INTERPRETER, 0,
                            )
                        else:
                            tl.store(p_own + offs, part, cache_modifier=".cg")
                    tl.debug_barrier()  # every thread's sum is written before the flag goes up
                if rank > 0:
                    # Publish for the parent (a higher program). A rank > 0 with children holds neither end of the
                    # tile, so its whole range is this one segment and slot pid is used once; a rank > 0 without
                    # children (the first sharer, or any odd rank) publishes before anything else it does.
                    tl.atomic_xchg(p_flags + pid, epoch, sem="release", scope="gpu")
            seg_end = seg_start
