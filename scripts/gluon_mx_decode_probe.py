"""A probe, not part of the library: an MXFP4 decode GEMM (M <= 16, x [M, K] bf16 times an MXFP4 weight [N, K])
written in Gluon (Triton 3.6's explicit-layout dialect), to measure what explicit layouts buy over the library's
fused kernel (docs/performance.md, stop 15).

The packed bytes are loaded in exactly the registers that mma.sync's B fragments need (each thread 4 contiguous
bytes of a 32-wide chunk of its weight row), the asm block turns each byte into one bf16 pair (its two nibbles)
that is a B register as it stands, and K is permuted inside each 32-wide chunk (the same way for the activations,
which each thread then loads as 16 contiguous bytes a row) so that every load is a vector load. `convert_layout(...,
assert_trivial=True)` proves at compile time that no data moves between the loads and the MMAs.
One program per 64/128-column tile, no software pipelining, K a multiple of BK: enough to count instructions and
time the loop, not a finished kernel.

    python scripts/gluon_mx_decode_probe.py --sass 128 128          # on any machine: the K loop's instruction mix
    PYTHONPATH=src python scripts/gluon_mx_decode_probe.py --run     # on the GPU: check and time against smgemm
"""
import sys

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

MMA = gl.constexpr(gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, 4], instr_shape=[16, 8]))
B_L = gl.constexpr(gl.DotOperandLayout(operand_index=1, parent=MMA.value, k_width=2))
A_L = gl.constexpr(gl.DotOperandLayout(operand_index=0, parent=MMA.value, k_width=2))

# Per 4 bytes ($4: the thread's bytes (b2, b1) = (0, 0), (0, 1), (1, 0), (1, 1) in register order; $5: the bf16x2
# scale): x / h the low / high nibbles of each byte; per byte one PRMT puts [lo, 0, hi, 0] in a register (a selector
# nibble with bit 3 set reads a byte below 0x80 as zero), the multiply by 0x1040 places magnitude (bits 8..6) and sign
# (bit 15) of both halves at once, the mask keeps them: the e2m1 values times 2^-126 as a bf16 pair, then times 2^126
# and the scale. Out: $0, $1 the pairs of bytes (0, 0) and (1, 0); $2, $3 those of (0, 1) and (1, 1).
_PAIR = ("prmt.b32 t, x, h, {sel}; mul.lo.u32 t, t, 0x1040; and.b32 t, t, 0x81C081C0; mul.rn.bf16x2 t, t, c; "
         "mul.rn.bf16x2 ${out}, t, $5;")
ASM = "\n".join(["{", ".reg .b32 x, h, t, c;", "mov.b32 c, 0x7E807E80;", "and.b32 x, $4, 0x0F0F0F0F;",
                  "shr.b32 h, $4, 4;", "and.b32 h, h, 0x0F0F0F0F;",
                  *(_PAIR.format(sel=sel, out=out) for out, sel in enumerate(("0x8480", "0x8682", "0x8581", "0x8783"))),
                  "}"])


@gluon.jit
def mx_decode(x_ptr, w_ptr, s_ptr, o_ptr, M, N, K, stride_xm, stride_wn, stride_sn, stride_om,
              BN: gl.constexpr, BK: gl.constexpr, ASM: gl.constexpr, WP_L: gl.constexpr, AP_L: gl.constexpr,
              S_L: gl.constexpr, S3_L: gl.constexpr):
    BM: gl.constexpr = 16
    C: gl.constexpr = BK // 32
    pid = gl.program_id(0)
    kp = gl.arange(0, BK // 2, layout=gl.SliceLayout(1, WP_L))
    nn = pid * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, WP_L))
    p_w = w_ptr + nn[None, :] * stride_wn + kp[:, None]
    sc = gl.arange(0, C, layout=gl.SliceLayout(1, S_L))
    sn = pid * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, S_L))
    p_s = s_ptr + sn[None, :] * stride_sn + sc[:, None]
    mm = gl.arange(0, BM, layout=gl.SliceLayout(1, AP_L))
    kk = gl.arange(0, BK, layout=gl.SliceLayout(0, AP_L))
    p_x = x_ptr + (mm % M)[:, None] * stride_xm + kk[None, :]
    acc = gl.zeros([BM, BN], gl.float32, layout=MMA)
    for k0 in range(0, K, BK):
        wb = gl.load(p_w + k0 // 2)
        sb = gl.load(p_s + k0 // 32).to(gl.uint16)
        xb = gl.load(p_x + k0)
        scale = gl.where(sb == 0, 0x0040, gl.where(sb == 255, 0x7FC0, sb << 7)).to(gl.uint16)
        scale = scale.to(gl.bfloat16, bitcast=True)  # [C, BN], one per thread and (chunk, column)
        scale = gl.convert_layout(scale, gl.SliceLayout(1, S3_L), assert_trivial=True)
        scale = gl.expand_dims(scale, 1) + gl.full([C, 16, BN], 0, gl.bfloat16, layout=S3_L)
        scale = gl.convert_layout(scale.reshape(BK // 2, BN), WP_L, assert_trivial=True)
        o0, o1 = gl.inline_asm_elementwise(ASM, "=r,=r,=r,=r,r,r,r", [wb, scale], dtype=(gl.bfloat16, gl.bfloat16),
                                           is_pure=True, pack=4)
        x = gl.join(o0, o1)  # [BK/2, BN, 2(O)]
        x = x.reshape(C, 4, 2, 2, BN, 2)  # c, jl, e1, e0, n, O
        x = x.permute(0, 2, 5, 1, 3, 4)  # c, e1, O, jl, e0, n
        b = gl.convert_layout(x.reshape(BK, BN), B_L, assert_trivial=True)
        a = xb.reshape(BM, C, 4, 2, 2, 2)  # m, c, jl, b2, b1, b0
        a = a.permute(0, 1, 3, 4, 2, 5).reshape(BM, BK)  # m, c, b2, b1, jl, b0
        a = gl.convert_layout(a, A_L, assert_trivial=True)
        acc = mma_v2(a, b, acc)
        # (the scale above is per (c, n): broadcast over the 16 bytes of a chunk by p_s)
    om = gl.arange(0, BM, layout=gl.SliceLayout(1, MMA))
    on = pid * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, MMA))
    gl.store(o_ptr + om[:, None] * stride_om + on[None, :], acc.to(gl.bfloat16), mask=(om < M)[:, None])


def layouts(BN, BK):
    C = BK // 32
    nreg = [[0, 32 << i] for i in range((BN // 32).bit_length() - 1)]
    # packed bytes [BK/2, BN]: reg kp+1, kp+2, kp+16.. ; lanes kp+4, kp+8, n+1,2,4; warps n+8, n+16; reg n+32
    wp = gl.DistributedLinearLayout(
        reg_bases=[[1, 0], [2, 0]] + [[16 << i, 0] for i in range(C.bit_length() - 1)] + nreg,
        lane_bases=[[4, 0], [8, 0], [0, 1], [0, 2], [0, 4]], warp_bases=[[0, 8], [0, 16]], block_bases=[],
        shape=[BK // 2, BN])
    # activations, physical order [BM, BK]: reg k+1, k+2, k+4, m+8, k+32..; lanes k+8, k+16, m+1,2,4
    ap = gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [0, 2], [0, 4], [8, 0]] + [[0, 32 << i] for i in range(C.bit_length() - 1)],
        lane_bases=[[0, 8], [0, 16], [1, 0], [2, 0], [4, 0]], warp_bases=[[0, 0], [0, 0]], block_bases=[],
        shape=[16, BK])
    # scales [C, BN]: reg c+1.., n+32; lanes broadcast along k, n+1,2,4; warps n+8, n+16
    sl = gl.DistributedLinearLayout(
        reg_bases=[[1 << i, 0] for i in range(C.bit_length() - 1)] + nreg,
        lane_bases=[[0, 0], [0, 0], [0, 1], [0, 2], [0, 4]], warp_bases=[[0, 8], [0, 16]], block_bases=[],
        shape=[C, BN])
    s3 = gl.DistributedLinearLayout(
        reg_bases=[[0, 1, 0], [0, 2, 0]] + [[1 << i, 0, 0] for i in range(C.bit_length() - 1)]
        + [[0, 0, b[1]] for b in nreg],
        lane_bases=[[0, 4, 0], [0, 8, 0], [0, 0, 1], [0, 0, 2], [0, 0, 4]], warp_bases=[[0, 0, 8], [0, 0, 16]],
        block_bases=[], shape=[C, 16, BN])
    return wp, ap, sl, s3


def compile_sm90(BN=64, BK=256):
    sig = {"x_ptr": "*bf16", "w_ptr": "*u8", "s_ptr": "*u8", "o_ptr": "*bf16", "M": "i32", "N": "i32", "K": "i32",
           "stride_xm": "i32", "stride_wn": "i32", "stride_sn": "i32", "stride_om": "i32",
           "BN": "constexpr", "BK": "constexpr", "ASM": "constexpr", "WP_L": "constexpr", "AP_L": "constexpr",
           "S_L": "constexpr", "S3_L": "constexpr"}
    names = list(sig)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in
             ["x_ptr", "w_ptr", "s_ptr", "o_ptr", "K", "stride_xm", "stride_wn", "stride_om"]}
    consts = {"BN": BN, "BK": BK, "ASM": ASM, **dict(zip(("WP_L", "AP_L", "S_L", "S3_L"), layouts(BN, BK)))}
    src = GluonASTSource(fn=mx_decode, signature=sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))


def mx_decode_linear(x, w, BN=128, BK=128):
    """x [M <= 16, K] bf16 @ w.T for an MXFP4Tensor w [N, K] (N % BN == 0, K % BK == 0), as bf16."""
    m, k = x.shape
    n = w.shape[0]
    assert m <= 16 and n % BN == 0 and k % BK == 0
    out = torch.empty(m, n, dtype=torch.bfloat16, device=x.device)
    wp, ap, sl, s3 = layouts(BN, BK)
    mx_decode[(n // BN,)](x, w.data, w.scales, out, m, n, k, x.stride(0), w.data.stride(0), w.scales.stride(0),
                          out.stride(0), BN=BN, BK=BK, ASM=ASM, WP_L=wp, AP_L=ap, S_L=sl, S3_L=s3, num_warps=4)
    return out


def run():
    import math

    import smgemm
    from smgemm.bench import _table, _time_rotating

    rows = []
    for m, n, k in [(1, 8192, 8192), (16, 8192, 8192), (16, 14336, 4096), (16, 4096, 4096)]:
        sets = []
        for _ in range(max(1, min(16, math.ceil(256e6 / (n * k * 2))))):
            w = smgemm.quantize_mxfp4(torch.randn(n, k, device="cuda"))
            sets.append((torch.randn(m, k, device="cuda").to(torch.bfloat16), w))
        x, w = sets[0]
        ref = x.double() @ w.dequantize(torch.float32).double().t()
        row = {"shape": f"{m}x{n}x{k}"}
        for name, fn in [("gluon 128x128", lambda a, b: mx_decode_linear(a, b, 128, 128)),
                         ("gluon 64x256", lambda a, b: mx_decode_linear(a, b, 64, 256)),
                         ("smgemm.linear", lambda a, b: smgemm.linear(a, b))]:
            err = ((fn(x, w).double() - ref).norm() / ref.norm()).item()
            row[f"{name} us"] = _time_rotating(fn, sets) * 1e3
            row[f"{name} err"] = f"{err:.1e}"
        dense = [(a, b.dequantize().t()) for a, b in sets]
        row["torch bf16 us"] = _time_rotating(torch.matmul, dense) * 1e3
        rows.append(row)
        print(row, flush=True)
    print(_table(rows))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run"]:
        run()
    else:
        sys.path.insert(0, __file__.rsplit("/", 1)[0])
        import compile_report as cr

        kernel = compile_sm90(int(sys.argv[2]), int(sys.argv[3]))
        print(cr.ptxas_report(kernel))
        print(cr.k_loop_mix(cr._ptxas(kernel)[1]))


