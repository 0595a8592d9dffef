"""A probe, not part of the library: a pipelined, split-K MXFP4 decode GEMM in Gluon (x [M <= 16, K] bf16 times an
MXFP4 weight [N, K]), the step after scripts/gluon_mx_decode_probe.py (docs/performance.md, stop 16).

Beyond the first probe: a ring of cp.async shared-memory stages (each thread copies and reads back its own bytes
in the layouts mma.sync needs), 4 or 8 warps side by side along N, K splits reduced by the last unit to finish a
tile (a compare-and-swap counter in a per-launch workspace; partials summed in split order, so the result is
bitwise deterministic and no program waits), bias / alpha / beta, and an optional one-multiply scale (`fold`)
behind a per-step check that the K step's scales fit it. Right on the H200 (scale extremes and NaN included), but
slower than the library's fused `tl` kernel on the large decode shapes (docs/runs/2026-11-30g-decode2.txt): the
loop is still ~6 instructions per weight value.

    PYTHONPATH=src python scripts/gluon_mx_decode_ring.py            # on the GPU: check, then time the variants
    python scripts/gluon_mx_decode_ring.py --sass 128 128 4 8        # anywhere: K loop mix (BN BK stages warps)
"""

import math
import random
import sys
from dataclasses import dataclass

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2

BM: gl.constexpr = gl.constexpr(16)
# Shared tiles as stored in memory (K fastest), unswizzled: each thread copies and reads back its own bytes.
SMEM_W = gl.constexpr(gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0, 1]))
SMEM_X = gl.constexpr(gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[1, 0]))


def _asm(fold: bool) -> str:
    """e2m1 bytes to bf16 pairs, 4 bytes per block ($4: the thread's bytes (b2, b1) = (0, 0), (0, 1), (1, 0), (1, 1)
    in register order; $5: the bf16x2 scale). x / h: the low / high nibbles of each byte; per byte one PRMT puts
    [lo, 0, hi, 0] in a register (a selector nibble with bit 3 set reads a byte below 0x80 as zero), the multiply by
    0x1040 places magnitude (bits 8..6) and sign (bit 15) of both halves at once, the mask keeps them: the e2m1
    values times 2^-126 as a bf16 pair (E = 0 codes land on bf16 subnormals, exactly). Then times 2^126 and the
    scale (two exact multiplies), or, with `fold`, times a scale that already holds the 2^126 (one multiply; the
    caller guarantees it is representable). Out: $0, $1 the pairs of bytes (0, 0) and (1, 0); $2, $3 of (0, 1), (1, 1).
    """
    pair = "prmt.b32 t, x, h, {sel}; mul.lo.u32 t, t, 0x1040; and.b32 t, t, 0x81C081C0; " + (
        "mul.rn.bf16x2 ${out}, t, $5;" if fold else "mul.rn.bf16x2 t, t, c; mul.rn.bf16x2 ${out}, t, $5;")
    return "\n".join(["{", ".reg .b32 x, h, t, c;", "mov.b32 c, 0x7E807E80;", "and.b32 x, $4, 0x0F0F0F0F;",
                      "shr.b32 h, $4, 4;", "and.b32 h, h, 0x0F0F0F0F;",
                      *(pair.format(sel=sel, out=out) for out, sel in
                        enumerate(("0x8480", "0x8682", "0x8581", "0x8783"))),
                      "}"])


ASM_EXACT = gl.constexpr(_asm(False))
ASM_FOLD = gl.constexpr(_asm(True))


def mma_layout(num_warps: int):
    """mma.sync's accumulator layout: `num_warps` warps side by side along N, 8 columns each per repetition."""
    return gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, num_warps], instr_shape=[16, 8])


def layouts(block_n: int, block_k: int, num_warps: int = 4):
    """The accumulator layout, then the distributed layouts of the packed weight bytes [BK/2, BN], the activations
    [16, BK], the scales [C, BN] and their broadcast [C, 16, BN] (C = BK / 32 chunks), for `num_warps` warps side
    by side along N (block_n >= 8 * num_warps)."""
    c = block_k // 32
    lw = num_warps.bit_length() - 1
    nwarp = [[0, 8 << i] for i in range(lw)]
    nreg = [[0, (8 << lw) << i] for i in range((block_n // (8 << lw)).bit_length() - 1)]
    creg = [[16 << i, 0] for i in range(c.bit_length() - 1)]
    # packed bytes: reg kp+1, kp+2, kp+16..; lanes kp+4, kp+8, n+1, 2, 4; warps n+8, ...; reg n+8 * num_warps ..
    wp = gl.DistributedLinearLayout(reg_bases=[[1, 0], [2, 0], *creg, *nreg],
                                    lane_bases=[[4, 0], [8, 0], [0, 1], [0, 2], [0, 4]],
                                    warp_bases=nwarp, block_bases=[], shape=[block_k // 2, block_n])
    # activations [16, BK]: reg k+1, k+2, k+4, m+8, k+32..; lanes k+8, k+16, m+1, 2, 4; warps broadcast
    ap = gl.DistributedLinearLayout(reg_bases=[[0, 1], [0, 2], [0, 4], [8, 0]] + [[0, 32 << i] for i in
                                                                                   range(c.bit_length() - 1)],
                                    lane_bases=[[0, 8], [0, 16], [1, 0], [2, 0], [4, 0]],
                                    warp_bases=[[0, 0]] * lw, block_bases=[], shape=[16, block_k])
    # scales [C, BN]: reg c+1.., n+8 * num_warps..; lanes broadcast along k, n+1, 2, 4; warps as the bytes
    sl = gl.DistributedLinearLayout(reg_bases=[[1 << i, 0] for i in range(c.bit_length() - 1)] + nreg,
                                    lane_bases=[[0, 0], [0, 0], [0, 1], [0, 2], [0, 4]],
                                    warp_bases=nwarp, block_bases=[], shape=[c, block_n])
    s3 = gl.DistributedLinearLayout(reg_bases=[[0, 1, 0], [0, 2, 0]] + [[1 << i, 0, 0] for i in
                                                                        range(c.bit_length() - 1)]
                                    + [[0, 0, b[1]] for b in nreg],
                                    lane_bases=[[0, 4, 0], [0, 8, 0], [0, 0, 1], [0, 0, 2], [0, 0, 4]],
                                    warp_bases=[[0, 0, b[1]] for b in nwarp], block_bases=[],
                                    shape=[c, 16, block_n])
    return mma_layout(num_warps), wp, ap, sl, s3


@gluon.jit
def _step(acc, wb, sb, xb, BN: gl.constexpr, BK: gl.constexpr, FOLD: gl.constexpr, WP_L: gl.constexpr,
          S3_L: gl.constexpr):
    MMA: gl.constexpr = acc.type.layout
    B_L: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    A_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    """acc += x_step @ w_step.T for one K step: wb the packed bytes, sb the e8m0 scales, xb the activations."""
    C: gl.constexpr = BK // 32
    sb = sb.to(gl.uint16)
    if FOLD:  # 2^126 * 2^(e - 127) = 2^(e - 1): a normal bf16 for every e <= 128
        scale = (sb + 126) << 7
    else:  # 2^(e - 127), e = 0 a subnormal, 255 NaN
        scale = gl.where(sb == 0, 0x0040, gl.where(sb == 255, 0x7FC0, sb << 7)).to(gl.uint16)
    scale = scale.to(gl.bfloat16, bitcast=True)  # [C, BN]: one per thread and (chunk, column)
    scale = gl.convert_layout(scale, gl.SliceLayout(1, S3_L), assert_trivial=True)
    scale = gl.expand_dims(scale, 1) + gl.full([C, 16, BN], 0, gl.bfloat16, layout=S3_L)
    scale = gl.convert_layout(scale.reshape(BK // 2, BN), WP_L, assert_trivial=True)
    if FOLD:
        o0, o1 = gl.inline_asm_elementwise(ASM_FOLD, "=r,=r,=r,=r,r,r,r", [wb, scale],
                                           dtype=(gl.bfloat16, gl.bfloat16), is_pure=True, pack=4)
    else:
        o0, o1 = gl.inline_asm_elementwise(ASM_EXACT, "=r,=r,=r,=r,r,r,r", [wb, scale],
                                           dtype=(gl.bfloat16, gl.bfloat16), is_pure=True, pack=4)
    w = gl.join(o0, o1)  # [BK/2, BN, 2]
    w = w.reshape(C, 4, 2, 2, BN, 2).permute(0, 2, 5, 1, 3, 4)  # (c, jl, e1, e0, n, o) -> (c, e1, o, jl, e0, n)
    b = gl.convert_layout(w.reshape(BK, BN), B_L, assert_trivial=True)
    a = xb.reshape(16, C, 4, 2, 2, 2).permute(0, 1, 3, 4, 2, 5).reshape(16, BK)  # the same K permutation
    a = gl.convert_layout(a, A_L, assert_trivial=True)
    return mma_v2(a, b, acc)


@gluon.jit
def _issue(smem_w, smem_s, smem_x, step, p_w, p_s, p_x, pred, BK: gl.constexpr):
    """cp.async the packed bytes, scales and activations of K step `step` (none where not `pred`) into its stage."""
    NS: gl.constexpr = smem_w.shape[0]
    stage = step % NS
    async_copy.async_copy_global_to_shared(smem_w.index(stage), p_w + step * (BK // 2), mask=pred)
    async_copy.async_copy_global_to_shared(smem_s.index(stage), p_s + step * (BK // 32), mask=pred)
    async_copy.async_copy_global_to_shared(smem_x.index(stage), p_x + step * BK, mask=pred)
    async_copy.commit_group()


@gluon.jit
def _fold_ok(sb):
    """Whether every scale of this step has e <= 128 (its 2^(e - 1) fits a bf16): one value for the program."""
    return gl.max(gl.max(sb, axis=1), axis=0) <= 128


@gluon.jit(do_not_specialize=["tag"])
def mx_decode_kernel(
    x_ptr, w_ptr, s_ptr, o_ptr, c_ptr, ws_ptr,
    M, N, K, stride_xm, stride_wn, stride_sn, stride_om, stride_cm, stride_cn,
    splits, k_steps_per_split, tag, alpha, beta,
    BN: gl.constexpr, BK: gl.constexpr, NS: gl.constexpr, HAS_C: gl.constexpr, FOLD: gl.constexpr,
    MMA: gl.constexpr, WP_L: gl.constexpr, AP_L: gl.constexpr, S_L: gl.constexpr, S3_L: gl.constexpr,
):
    C: gl.constexpr = BK // 32
    pid = gl.program_id(0)
    num_programs = gl.num_programs(0)
    k_steps = K // BK
    units = (N // BN) * splits
    kp = gl.arange(0, BK // 2, layout=gl.SliceLayout(1, WP_L))
    nn = gl.arange(0, BN, layout=gl.SliceLayout(0, WP_L))
    sc = gl.arange(0, C, layout=gl.SliceLayout(1, S_L))
    sn = gl.arange(0, BN, layout=gl.SliceLayout(0, S_L))
    mm = gl.arange(0, BM, layout=gl.SliceLayout(1, AP_L))
    kk = gl.arange(0, BK, layout=gl.SliceLayout(0, AP_L))
    om = gl.arange(0, BM, layout=gl.SliceLayout(1, MMA))
    on = gl.arange(0, BN, layout=gl.SliceLayout(0, MMA))
    p_x0 = x_ptr + (mm % M)[:, None] * stride_xm + kk[None, :]
    smem_w = gl.allocate_shared_memory(gl.uint8, [NS, BK // 2, BN], SMEM_W)
    smem_s = gl.allocate_shared_memory(gl.uint8, [NS, C, BN], SMEM_W)
    smem_x = gl.allocate_shared_memory(gl.bfloat16, [NS, BM, BK], SMEM_X)
    for unit in range(pid, units, num_programs):
        tile = unit // splits
        split = unit % splits
        n0 = tile * BN
        k_lo = split * k_steps_per_split
        k_hi = gl.minimum(k_lo + k_steps_per_split, k_steps)
        p_w = w_ptr + (n0 + nn)[None, :] * stride_wn + kp[:, None] + k_lo * (BK // 2)
        p_s = s_ptr + (n0 + sn)[None, :] * (stride_sn // C) * C + sc[:, None] + k_lo * C  # (C | stride: host)
        p_x = p_x0 + k_lo * BK
        # A ring of NS shared-memory stages filled by cp.async: steps i + 1 .. i + NS - 1 are in flight while
        # step i computes. Each thread reads back exactly the bytes it copied, in the layouts the MMAs need.
        n_steps = k_hi - k_lo
        for pre in gl.static_range(NS - 1):
            _issue(smem_w, smem_s, smem_x, pre, p_w, p_s, p_x, pre < n_steps, BK)
        acc = gl.zeros([BM, BN], gl.float32, layout=MMA)
        for i in range(0, n_steps):
            async_copy.wait_group(NS - 2)
            gl.thread_barrier()  # step i landed for every thread; step i - 1's stage is free for all
            _issue(smem_w, smem_s, smem_x, i + NS - 1, p_w, p_s, p_x, i + NS - 1 < n_steps, BK)
            stage = i % NS
            wb = smem_w.index(stage).load(WP_L)
            sb = smem_s.index(stage).load(S_L)
            xb = smem_x.index(stage).load(AP_L)
            if FOLD:
                if _fold_ok(sb):
                    acc = _step(acc, wb, sb, xb, BN, BK, True, WP_L, S3_L)
                else:
                    acc = _step(acc, wb, sb, xb, BN, BK, False, WP_L, S3_L)
            else:
                acc = _step(acc, wb, sb, xb, BN, BK, False, WP_L, S3_L)
        async_copy.wait_group(0)
        finish = splits == 1
        if splits > 1:
            # Publish this split's partial; the unit that brings the tile's count to `splits` sums them all.
            offs = om[:, None] * BN + on[None, :]
            gl.store(ws_ptr + unit * (BM * BN) + offs, acc, cache_modifier=".cg")
            gl.thread_barrier()  # every thread's partial is written before the count goes up
            p_cnt = (ws_ptr + units * (BM * BN)).to(gl.pointer_type(gl.int64)) + tile
            cur = gl.atomic_add(p_cnt, 0, sem="acquire", scope="gpu")
            new = gl.where(cur - (cur & 255) == tag, cur, tag) + 1
            prev = gl.atomic_cas(p_cnt, cur, new, sem="acq_rel", scope="gpu")
            while prev != cur:
                cur = prev
                new = gl.where(cur - (cur & 255) == tag, cur, tag) + 1
                prev = gl.atomic_cas(p_cnt, cur, new, sem="acq_rel", scope="gpu")
            finish = (new & 255) == splits
            if finish:
                gl.atomic_xchg(p_cnt, 0, sem="relaxed", scope="gpu")  # for the next launch or graph replay
                gl.thread_barrier()
                first = unit - split
                acc = gl.load(ws_ptr + first * (BM * BN) + offs, cache_modifier=".cg")
                for j in range(1, splits):
                    acc += gl.load(ws_ptr + (first + j) * (BM * BN) + offs, cache_modifier=".cg")
        if finish:
            out = acc * alpha
            mask = (om < M)[:, None] & (on < BN)[None, :]
            if HAS_C:
                c = gl.load(c_ptr + om[:, None] * stride_cm + (n0 + on)[None, :] * stride_cn, mask=mask)
                out += beta * c.to(gl.float32)
            gl.store(o_ptr + om[:, None] * stride_om + (n0 + on)[None, :], out.to(o_ptr.dtype.element_ty),
                     mask=mask)


@dataclass(frozen=True)
class DecodePlan:
    block_n: int
    block_k: int
    splits: int
    k_steps_per_split: int
    num_programs: int
    num_stages: int = 4
    num_warps: int = 4


def plan_for(n, k, block_n, warps, programs, block_k=128):
    """Split each block_n-column tile over K so that about `programs` units exist."""
    k_steps = k // block_k
    tiles = n // block_n
    splits = max(1, min(k_steps, round(programs / tiles)))
    steps = -(-k_steps // splits)
    splits = -(-k_steps // steps)
    return DecodePlan(block_n, block_k, splits, steps, min(tiles * splits, programs), 4, warps)


def decode_linear(x, w, plan, bias=None, fold=False):
    """x [M <= 16, K] bf16 @ w.T (+ bias) for an MXFP4Tensor w [N, K] (N % block_n == 0, K % block_k == 0)."""
    m, k = x.shape
    n = w.shape[0]
    out = torch.empty(m, n, dtype=torch.bfloat16, device=x.device)
    tiles = n // plan.block_n
    ws = torch.empty(tiles * plan.splits * 16 * plan.block_n + 2 * tiles, dtype=torch.float32, device=x.device)
    c = bias.expand(m, n) if bias is not None else out
    mma, wp, ap, sl, s3 = layouts(plan.block_n, plan.block_k, plan.num_warps)
    tag = (random.getrandbits(62) | (1 << 62)) & ~255
    mx_decode_kernel[(plan.num_programs,)](
        x, w.data, w.scales, out, c, ws, m, n, k, x.stride(0) if m > 1 else 0, w.data.stride(0),
        w.scales.stride(0), out.stride(0), c.stride(0), c.stride(1), plan.splits, plan.k_steps_per_split, tag,
        1.0, 1.0, BN=plan.block_n, BK=plan.block_k, NS=plan.num_stages, HAS_C=bias is not None, FOLD=fold,
        MMA=mma, WP_L=wp, AP_L=ap, S_L=sl, S3_L=s3, num_warps=plan.num_warps)
    return out


def run():
    import smgemm
    from smgemm.bench import _table, _time_rotating

    rows = []
    for m, n, k in [(16, 4096, 4096), (1, 8192, 8192), (16, 8192, 8192), (16, 14336, 4096), (16, 4096, 14336)]:
        sets = []
        for _ in range(max(2, min(16, math.ceil(256e6 / (n * k // 2))))):
            w = smgemm.quantize_mxfp4(torch.randn(n, k, device="cuda"))
            sets.append((torch.randn(m, k, device="cuda").to(torch.bfloat16), w))
        x, w = sets[0]
        bias = torch.randn(n, device="cuda").to(torch.bfloat16)
        ref = x.double() @ w.dequantize(torch.float32).double().t() + bias.double()
        row = {"shape": f"{m}x{n}x{k}"}
        for warps in (4, 8):
            for bn in (64, 128):
                if n % bn == 0 and bn >= 8 * warps:
                    plan = plan_for(n, k, bn, warps, 132)
                    fn = lambda a, b, plan=plan, bias=bias: decode_linear(a, b, plan, bias)
                    got = fn(x, w).double()
                    err = ((got - ref).norm() / ref.norm()).item()
                    same = torch.equal(got, fn(x, w).double())
                    name = f"w{warps} bn{bn} s{plan.splits}"
                    row[f"{name} us"] = round(_time_rotating(fn, sets) * 1e3, 1)
                    row[f"{name} err"] = f"{err:.1e}" + ("" if same else " NONDET")
        ours = lambda a, b, bias=bias: smgemm.linear(a, b, bias)
        ours(x, w)  # compile before timing (a compile inside the timed warm-up leaves the clocks low)
        torch.cuda.synchronize()
        row["smgemm.linear us"] = round(_time_rotating(ours, sets) * 1e3, 1)
        dense = [(a, b.dequantize().t()) for a, b in sets]
        row["torch bf16 us"] = round(_time_rotating(torch.matmul, dense) * 1e3, 1)
        rows.append(row)
        print(row, flush=True)
    print(_table(rows))


def compile_sm90(block_n, block_k, stages, warps):
    import inspect

    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    names = list(inspect.signature(mx_decode_kernel.fn).parameters)
    ptr = {"x_ptr": "*bf16", "w_ptr": "*u8", "s_ptr": "*u8", "o_ptr": "*bf16", "c_ptr": "*bf16", "ws_ptr": "*fp32"}
    consts = {"BN": block_n, "BK": block_k, "NS": stages, "HAS_C": False, "FOLD": False,
              **dict(zip(("MMA", "WP_L", "AP_L", "S_L", "S3_L"), layouts(block_n, block_k, warps)))}
    sig = {n: "constexpr" if n in consts else ptr.get(n, "fp32" if n in ("alpha", "beta") else
                                                       "i64" if n == "tag" else "i32") for n in names}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in
             ["x_ptr", "w_ptr", "s_ptr", "o_ptr", "ws_ptr", "K", "N", "stride_xm", "stride_wn", "stride_sn",
              "stride_om"]}
    src = GluonASTSource(fn=mx_decode_kernel, signature=sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--sass"]:
        sys.path.insert(0, __file__.rsplit("/", 1)[0])
        import compile_report as cr

        kernel = compile_sm90(*(int(a) for a in sys.argv[2:6]))
        print(cr.ptxas_report(kernel))
        print(cr.k_loop_mix(cr._ptxas(kernel)[1]))
    else:
        run()
