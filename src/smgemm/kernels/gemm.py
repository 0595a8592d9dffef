"""The GEMM kernel: D = alpha * (A @ B) * scales + beta * C over a tile schedule, for one product or (BATCHED) a
batch of them, whose tiles share one schedule.

One kernel serves every schedule. Program `pid` of P first takes whole tiles pid, pid + P, ... below `dp_tiles`
(P == number of tiles for data-parallel, P <= SM budget for persistent). With STREAMK, the K-iterations of the
remaining tiles are then split evenly over the P programs, or, when P is a multiple of those tiles, into P / tiles
near-equal parts of each tile (docs/streamk.md).
"""

import triton
import triton.language as tl

from .common import epilogue, k_loop, smid, tile_coords

# Partial tiles a Stream-K finisher loads at once. With the finisher's own partial kept in registers, 1 and 4 ran
# equally fast on the H200 (bf16 3072^2 x 8192), and 2 keeps the 128 x 256 tile's kernel within 255 registers.
_FIXUP_UNROLL: tl.constexpr = tl.constexpr(2)


@triton.jit
def _first_owner(it, base, extra):
    """The program whose Stream-K range holds iteration `it` (programs < extra own base + 1 iterations, others base)."""
    boundary = extra * (base + 1)
    return tl.where(it < boundary, it // (base + 1), extra + (it - boundary) // base)


@triton.jit
def _column_block(x, j: tl.constexpr, ROWS: tl.constexpr, BLOCKS: tl.constexpr, WIDTH: tl.constexpr):
    """Columns [j * WIDTH, (j + 1) * WIDTH) of the fp32 register tile x [ROWS, BLOCKS * WIDTH], bit for bit: the
    column blocks' bits, all but block j masked to 0, summed as integers (each thread holds all blocks of its
    rows and columns, so no data moves between threads)."""
    bits = x.to(tl.int32, bitcast=True).reshape(ROWS, BLOCKS, WIDTH)
    pick = (tl.arange(0, BLOCKS) == j)[None, :, None]
    return tl.sum(tl.where(pick, bits, 0), axis=1).to(tl.float32, bitcast=True)


@triton.jit
def _origin(pid, size, BLOCK: tl.constexpr, CLAMP: tl.constexpr):
    """The first row (column) of tile `pid` along a dimension of `size` elements: pid * BLOCK, or with CLAMP (size
    above BLOCK and not a multiple of it) for the last tile size - BLOCK rounded up to 16 elements, so that it ends
    at the edge (or fewer than 16 past it) and overlaps the tile before it (`_launch.edge_tiles_clamped` says where).
    A descriptor's block must start 16-byte aligned along its contiguous dimension, which M or N may be."""
    if CLAMP:
        return tl.minimum(pid * BLOCK, tl.cdiv(size - BLOCK, 16) * 16)
    return pid * BLOCK


@triton.jit
def _tile(tile_id, tiles_per_batch, num_pid_m, num_pid_n, a_ptr, b_ptr, d_ptr, batch, shape, BLOCK_M: tl.constexpr,
          BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr, BATCHED: tl.constexpr, A_DESC: tl.constexpr,
          B_DESC: tl.constexpr, CLAMP_M: tl.constexpr, CLAMP_N: tl.constexpr):
    """Tile `tile_id`'s first row and column (`_origin`), its matrix in the batch, and the operands it reads and
    writes: with BATCHED, tile ids run batch-major over `tiles_per_batch` tiles a matrix, and the pointers move to the
    tile's matrix (descriptors are 3-D: k_loop indexes them with the matrix). C, which may be absent (None: Triton 3.6
    returns no None from a function), moves in the kernel."""
    matrix = 0
    if BATCHED:
        _, stride_ab, stride_bb, _, stride_db = batch
        matrix = tile_id // tiles_per_batch
        pid_m, pid_n = tile_coords(tile_id % tiles_per_batch, num_pid_m, num_pid_n, GROUP_M)
        if A_DESC == "pointers":
            a_ptr += matrix * stride_ab
        if B_DESC == "pointers":
            b_ptr += matrix * stride_bb
        d_ptr += matrix * stride_db
    else:
        pid_m, pid_n = tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M)
    M, N, _ = shape
    row = _origin(pid_m, M, BLOCK_M, CLAMP_M)
    col = _origin(pid_n, N, BLOCK_N, CLAMP_N)
    return row, col, matrix, a_ptr, b_ptr, d_ptr


@triton.jit
def _descriptor(ptr, rows, cols, stride_r, stride_c, matrices, stride_batch, BLOCK_R: tl.constexpr,
                BLOCK_C: tl.constexpr, MODE: tl.constexpr, BATCHED: tl.constexpr):
    """What k_loop reads an operand [rows, cols] through: a tensor descriptor over it as stored (MODE "stored",
    row-major) or over its transpose ("transposed", a column-major operand), 3-D over the batch with blocks of one
    matrix when BATCHED; for "pointers" the pointer itself. A descriptor built on the host (`_launch.with_descriptors`)
    is read as it is."""
    if isinstance(ptr, tl.tensor_descriptor):
        return ptr
    elif MODE == "stored":
        if BATCHED:
            return tl.make_tensor_descriptor(ptr, [matrices, rows, cols], [stride_batch, stride_r, 1],
                                             [1, BLOCK_R, BLOCK_C])
        else:
            return tl.make_tensor_descriptor(ptr, [rows, cols], [stride_r, 1], [BLOCK_R, BLOCK_C])
    elif MODE == "transposed":
        if BATCHED:
            return tl.make_tensor_descriptor(ptr, [matrices, cols, rows], [stride_batch, stride_c, 1],
                                             [1, BLOCK_C, BLOCK_R])
        else:
            return tl.make_tensor_descriptor(ptr, [cols, rows], [stride_c, 1], [BLOCK_C, BLOCK_R])
    else:
        return ptr


@triton.jit
def _wide(pair):
    """A pair of strides as int64."""
    return tl.cast(pair[0], tl.int64), tl.cast(pair[1], tl.int64)


@triton.jit(do_not_specialize=["epoch"])
def gemm_kernel(
    a_ptr, b_ptr, d_ptr, c_ptr, sa_ptr, sb_ptr, mxa_ptr, mxb_ptr, ws_ptr, smid_ptr,
    d_store,  # D's TMA store descriptor built on the host (`_launch.with_descriptors`), or None: built here (D_DESC)
    shape,  # (M, N, K)
    a_strides, b_strides, d_strides, c_strides,  # (row, column) strides of A [M, K], B [K, N], D and C [M, N]
    scale_strides,  # (stride_sa, stride_sb): of A's per-row and B's per-column scales
    mx_strides,  # (stride_mxa, stride_mxb): the rows of an MXFP4 A's / B's e8m0 scales
    batch,  # (matrices, stride_ab, stride_bb, stride_cb, stride_db) of a batched product
    schedule,  # (num_programs, dp_tiles)
    epoch,  # this launch's Stream-K id
    coeffs,  # (alpha, beta)
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr, HAS_C: tl.constexpr, C_ROW: tl.constexpr, HAS_SCALE_A: tl.constexpr,
    HAS_SCALE_B: tl.constexpr,
    INTERPRETER: tl.constexpr, INPUT_PRECISION: tl.constexpr, USE_INT64: tl.constexpr,
    STREAMK: tl.constexpr, FIXUP_N: tl.constexpr, FLAG_LANES: tl.constexpr, RECORD_SMID: tl.constexpr,
    A_MX: tl.constexpr, B_MX: tl.constexpr, MX_FP16: tl.constexpr, A_DESC: tl.constexpr, B_DESC: tl.constexpr,
    FLATTEN: tl.constexpr, D_DESC: tl.constexpr, MX_SWAP: tl.constexpr,
    MX_PREFETCH: tl.constexpr, BATCHED: tl.constexpr, A_VEC: tl.constexpr, B_VEC: tl.constexpr,
    MASK_M: tl.constexpr, ONE_ROW: tl.constexpr, CLAMP_M: tl.constexpr, CLAMP_N: tl.constexpr,
):
    pid = tl.program_id(0)
    M, N, K = shape
    num_programs, dp_tiles = schedule
    if USE_INT64:
        # Some operand's element offsets may pass 2^31 (the host's `_checks.needs_int64`): every stride in int64, so
        # that each offset product (rows, columns and K steps alike) and each pointer increment is formed in 64 bits.
        a_strides, b_strides = _wide(a_strides), _wide(b_strides)
        d_strides, c_strides = _wide(d_strides), _wide(c_strides)
        scale_strides, mx_strides = _wide(scale_strides), _wide(mx_strides)
        if BATCHED:
            batch = (batch[0], tl.cast(batch[1], tl.int64), tl.cast(batch[2], tl.int64), tl.cast(batch[3], tl.int64),
                     tl.cast(batch[4], tl.int64))  # (Triton's compiler takes no starred tuples)
    stride_am, stride_ak = a_strides  # for the descriptors
    stride_bk, stride_bn = b_strides
    matrices, stride_ab, stride_bb, stride_db = batch[0], batch[1], batch[2], batch[4]
    if RECORD_SMID:
        tl.store(smid_ptr + pid, smid())
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_iters = tl.cdiv(K, BLOCK_K)
    tiles_per_batch = num_pid_m * num_pid_n
    if BATCHED:
        num_tiles = tiles_per_batch * matrices
    else:
        num_tiles = tiles_per_batch
    # Tensor descriptors (TMA on Hopper), built here on the device: no host work per launch. From now on a_ptr /
    # b_ptr are what k_loop reads through (a pointer or a descriptor, per A_DESC / B_DESC); d_desc is used only
    # when D_DESC. The host checked TMA's rules (16-byte aligned base and row stride, unit last stride).
    a_ptr = _descriptor(a_ptr, M, K, stride_am, stride_ak, matrices, stride_ab, BLOCK_M, BLOCK_K, A_DESC, BATCHED)
    b_ptr = _descriptor(b_ptr, K, N, stride_bk, stride_bn, matrices, stride_bb, BLOCK_K, BLOCK_N, B_DESC, BATCHED)
    d_desc = d_ptr
    if D_DESC:  # a tile is stored whole (1) or in two column halves (2); quarters with a 4-byte C (`epilogue`)
        C_WIDE: tl.constexpr = HAS_C and not C_ROW and c_ptr.dtype.element_ty.primitive_bitwidth > 16
        d_desc = _descriptor(d_ptr if d_store is None else d_store, M, N, d_strides[0], d_strides[1], matrices,
                             stride_db, BLOCK_M, BLOCK_N // (4 if C_WIDE else D_DESC), "stored", BATCHED)
    # FLATTEN lets Triton's pipeliner fuse the tile loop with the K loop below it, so that the next tile's operands
    # load while this tile's epilogue runs. (Triton 3.6's warp_specialize=True here hung on the H200.)
    for tile_id in tl.range(pid, dp_tiles, num_programs, flatten=FLATTEN):
        row, col, matrix, a_t, b_t, d_t = _tile(tile_id, tiles_per_batch, num_pid_m, num_pid_n, a_ptr, b_ptr, d_ptr,
                                                batch, shape, BLOCK_M, BLOCK_N, GROUP_M, BATCHED, A_DESC, B_DESC,
                                                CLAMP_M, CLAMP_N)
        c_t = c_ptr
        if HAS_C and BATCHED:
            c_t = c_ptr + matrix * batch[3]
        acc = k_loop(
            a_t, b_t, mxa_ptr, mxb_ptr, shape, a_strides, b_strides, mx_strides, row, col, matrix, 0, k_iters,
            BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, INTERPRETER, INPUT_PRECISION, USE_INT64, A_MX, B_MX, MX_FP16,
            A_DESC, B_DESC, MX_SWAP, MX_PREFETCH, BATCHED, STREAMK, A_VEC, B_VEC, MASK_M, ONE_ROW,
        )
        epilogue(
            acc, row, col, shape, d_t, d_desc, d_strides, c_t, c_strides, sa_ptr, sb_ptr, scale_strides, coeffs,
            HAS_C, C_ROW, HAS_SCALE_A, HAS_SCALE_B, BLOCK_M, BLOCK_N, USE_INT64, INTERPRETER, D_DESC, matrix, BATCHED,
        )
    if STREAMK:
        # Stream-K over the tiles from dp_tiles on, their K-iterations numbered tile-major from 0: program pid owns
        # the contiguous range [start, end), base or base + 1 iterations (the planner makes base >= 2). When the
        # grid is a multiple of the split tiles (`parts` programs a tile, plan._aligned_programs), each range is
        # instead one of `parts` near-equal parts of one tile's K-loop, so programs holding the same part of
        # different tiles walk the same K range in step even where parts does not divide k_iters.
        sk_tiles = num_tiles - dp_tiles
        sk_iters = sk_tiles * k_iters
        base = sk_iters // num_programs
        extra = sk_iters % num_programs
        parts = tl.maximum(num_programs // sk_tiles, 1)
        aligned = num_programs == parts * sk_tiles
        part_tile = pid // parts
        part_no = pid % parts
        even_start = pid * base + tl.minimum(pid, extra)
        start = tl.where(aligned, part_tile * k_iters + part_no * k_iters // parts, even_start)
        end = tl.where(aligned, part_tile * k_iters + (part_no + 1) * k_iters // parts,
                       even_start + base + (pid < extra).to(tl.int32))
        # Workspace: fp32 tiles, slot p holding program p's published partial; then one int64 flag per program. A
        # flag holds `epoch` (this launch's random id) while its partial is published, and is reset to 0 by the one
        # program that reads it.
        tile_elems = BLOCK_M * BLOCK_N
        p_flags = (ws_ptr + num_programs * tile_elems).to(tl.pointer_type(tl.int64))
        offs_tile = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        # Walk the range from its end: the first segment done is the one a higher program waits for (the end of
        # a range is mid-tile unless it is a tile boundary), so partials are published as early as possible.
        seg_end = end
        while seg_end > start:
            tile = (seg_end - 1) // k_iters
            tile_start = tile * k_iters
            seg_start = tl.maximum(start, tile_start)
            row, col, matrix, a_t, b_t, d_t = _tile(dp_tiles + tile, tiles_per_batch, num_pid_m, num_pid_n, a_ptr,
                                                    b_ptr, d_ptr, batch, shape, BLOCK_M, BLOCK_N, GROUP_M, BATCHED,
                                                    A_DESC, B_DESC, CLAMP_M, CLAMP_N)
            c_t = c_ptr
            if HAS_C and BATCHED:
                c_t = c_ptr + matrix * batch[3]
            acc = k_loop(
                a_t, b_t, mxa_ptr, mxb_ptr, shape, a_strides, b_strides, mx_strides, row, col, matrix,
                seg_start - tile_start, seg_end - tile_start,
                BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, INTERPRETER, INPUT_PRECISION, USE_INT64, A_MX, B_MX, MX_FP16,
                A_DESC, B_DESC, MX_SWAP, MX_PREFETCH, BATCHED, STREAMK, A_VEC, B_VEC, MASK_M, ONE_ROW,
            )
            if seg_end < tile_start + k_iters:
                # The tile's last iterations belong to pid + 1: publish this partial sum for it. At most one per
                # program (only the range's last segment can end mid-tile), so slot `pid` is never reused.
                tl.store(ws_ptr + pid * tile_elems + offs_tile, acc, cache_modifier=".cg")
                tl.debug_barrier()  # every thread's partial is written before the flag goes up
                tl.atomic_xchg(p_flags + pid, epoch, sem="release", scope="gpu")
            elif seg_start == tile_start:
                epilogue(
                    acc, row, col, shape, d_t, d_desc, d_strides, c_t, c_strides, sa_ptr, sb_ptr, scale_strides,
                    coeffs, HAS_C, C_ROW, HAS_SCALE_A, HAS_SCALE_B, BLOCK_M, BLOCK_N, USE_INT64, INTERPRETER, D_DESC,
                    matrix, BATCHED,
                )
            else:
                # This program finishes a tile that lower programs started: the tile is summed in program order
                # (deterministic), its own partial (still in registers) last, and finished by the one epilogue,
                # FIXUP_N columns at a time so that no second full tile sits in registers beside acc. Waiting only
                # on lower programs keeps the kernel deadlock-free (docs/streamk.md) and runnable by the in-order
                # interpreter.
                first = tl.where(aligned, tile * parts, _first_owner(tile_start, base, extra))
                # Wait for the lower sharers' flags all at once, one per thread (FLAG_LANES = the program's threads,
                # so no flag is handled twice): each acquires and resets its flag, until every one held `epoch`.
                for lane0 in range(first, pid, FLAG_LANES):
                    lanes = lane0 + tl.arange(0, FLAG_LANES)
                    pending = lanes < pid
                    while tl.max(pending.to(tl.int32), axis=0) > 0:
                        seen = tl.atomic_xchg(p_flags + lanes, epoch * 0, mask=pending, sem="acquire", scope="gpu")
                        pending = pending & (seen != epoch)
                tl.debug_barrier()  # every flag acquired before any thread reads a partial
                for j in tl.static_range(BLOCK_N // FIXUP_N):
                    offs = j * FIXUP_N + tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, FIXUP_N)[None, :]
                    part = tl.load(ws_ptr + first * tile_elems + offs, cache_modifier=".cg")
                    # In program order, _FIXUP_UNROLL partials per step so that their loads are in flight together.
                    for p in range(first + 1, pid, _FIXUP_UNROLL):
                        for u in tl.static_range(_FIXUP_UNROLL):
                            part += tl.load(ws_ptr + (p + u) * tile_elems + offs, mask=p + u < pid, other=0.0,
                                            cache_modifier=".cg")
                    part += _column_block(acc, j, BLOCK_M, BLOCK_N // FIXUP_N, FIXUP_N)
                    epilogue(
                        part, row, col + j * FIXUP_N, shape, d_t, d_desc, d_strides, c_t, c_strides,
                        sa_ptr, sb_ptr, scale_strides, coeffs, HAS_C, C_ROW, HAS_SCALE_A, HAS_SCALE_B, BLOCK_M, FIXUP_N,
                        USE_INT64, INTERPRETER, False,
                    )
            seg_end = seg_start
