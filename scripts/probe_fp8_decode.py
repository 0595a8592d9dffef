"""Probe (not part of the library): MXFP4 decode on the fp8 tensor cores instead of bf16 ones.

Stop 15-16 found the bf16 route issue-bound at ~6 instructions per weight value (docs/performance.md): the e2m1 ->
bf16 step with its two multiplies, the scale preparation, the operand moves. This probe tests the one route left:

* weight: each packed word (8 e2m1 codes) becomes 8 fp8 e5m2 bytes through two PRMT table lookups (the table of a
  32-value group holds the 8 magnitudes times 2^(B + s_g - s_max), s_max the largest scale of the row in the K step)
  plus two PRMTs for the signs: ~1.4 instructions per value, and no multiply; exact while a step's group scales lie
  within 26 octaves of each other (smaller groups flush to zero: a relative error below 2^-24 of the row's terms).
* activations: a pre-pass scales each row's K step by a power of two (amax to [2^14, 2^15)) and splits it into three
  e5m2 terms (3 significant bits each: exact for elements within 2^23 of the step's amax), stacked along the MMA's N
  (or, `three`, multiplied one after another into one accumulator).
* one fp8 wgmma per K step on [weight rows, BK] x [BK, 4 x M], then acc += part * 2^(s_max - 127 - B) * 2^-p in
  fp32 (which also keeps the fp8 MMA's reduced-precision accumulation to one K step).

Findings and numbers: docs/performance.md, stop 18 (not adopted: 0.67-1.35x of the fused kernel end to end).

    PYTHONPATH=src python scripts/probe_fp8_decode.py            # GPU: check against float64, time against torch
    PYTHONPATH=src python scripts/probe_fp8_decode.py --compile  # CPU: compile for sm_90, print the K loop's SASS mix
"""

import argparse
import sys

import torch
import triton
import triton.language as tl


def _tables(b_off):
    d = 15 + b_off  # exponent field of 1.0 * 2^B in e5m2
    lo = ((d - 1) << 10) + (d << 18) + (d << 26) + (2 << 24)
    hi = ((d + 1) << 2) + ((d + 1) << 10) + (2 << 8) + ((d + 2) << 18) + ((d + 2) << 26) + (2 << 24)
    return lo - (1 << 32) if lo >= 1 << 31 else lo, hi - (1 << 32) if hi >= 1 << 31 else hi


B_OFF = 13  # weight table exponent offset: 6 * 2^13 < 57344 (e5m2 max); 0.5 * 2^(13 - 26) is e5m2's smallest normal

_ASM = """{
.reg .b32 m, mh, o0, o1, e, o, s;
and.b32 m, $2, 0x77777777;
shr.b32 mh, m, 16;
prmt.b32 o0, $3, $7, m;
prmt.b32 o1, $3, $7, mh;
prmt.b32 e, o0, o1, 0x6420;
prmt.b32 o, o0, o1, 0x7531;
shl.b32 s, $2, 4;
lop3.b32 $0, s, 0x80808080, e, 0xEA;
lop3.b32 $1, $2, 0x80808080, o, 0xEA;
}"""


@triton.jit
def _byte_of(c, BK: tl.constexpr):
    """The packed byte (within a K step of BK values) that column c of the loaded weight tile holds: with
    c = 16 i + 4 t + j, byte t * BK / 8 + 4 i + j. wgmma's 8-bit register operand gives lane t (mod 4) the columns
    4t..4t+3 of every 16, so each lane's bytes are one contiguous run: a whole scale group per row for BK = 128."""
    return ((c // 4) % 4) * (BK // 8) + 4 * (c // 16) + c % 4


@triton.jit
def split_kernel(x_ptr, xs_ptr, pinv_ptr, K, stride_xm, MP: tl.constexpr, BKS: tl.constexpr):
    """Program (m, kb): x[m, K step kb] (bf16) times 2^p (its amax to [2^14, 2^15)) as three e5m2 terms, rows
    t * MP + m of xs [., K], K permuted within the step as the weight expansion orders it (the even k first, then the
    odd k); 2^-p to pinv[kb, m]."""
    m = tl.program_id(0)
    kb = tl.program_id(1)
    k0 = kb * BKS
    offs = tl.arange(0, BKS)
    c = tl.where(offs < BKS // 2, offs, offs - BKS // 2)
    perm = 2 * _byte_of(c, BKS) + (offs >= BKS // 2).to(tl.int32)
    x = tl.load(x_ptr + m * stride_xm + k0 + perm).to(tl.float32)
    a = tl.max(tl.abs(x))
    e = ((a.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    p = tl.where(a > 0, 14 - e, 0)
    tl.store(pinv_ptr + kb * MP + m, ((127 - p) << 23).to(tl.float32, bitcast=True))
    x = x * ((p + 127) << 23).to(tl.float32, bitcast=True)
    t1 = x.to(tl.float8e5)
    r = x - t1.to(tl.float32)
    t2 = r.to(tl.float8e5)
    r = r - t2.to(tl.float32)
    t3 = r.to(tl.float8e5)
    tl.store(xs_ptr + m * K + k0 + offs, t1)
    tl.store(xs_ptr + (MP + m) * K + k0 + offs, t2)
    tl.store(xs_ptr + (2 * MP + m) * K + k0 + offs, t3)


@triton.jit
def fp8_decode_kernel(w_ptr, ws_ptr, xs_ptr, pinv_ptr, out_ptr, N, K, M, stride_wn, stride_wsn, stride_om,
                      BN: tl.constexpr, BK: tl.constexpr, NT: tl.constexpr, MP: tl.constexpr, SPLIT: tl.constexpr,
                      BOFF: tl.constexpr, ASM: tl.constexpr, BASE_LO: tl.constexpr, BASE_HI: tl.constexpr,
                      THREE: tl.constexpr):
    pid = tl.program_id(0)
    pid_n = pid // SPLIT
    pid_k = pid % SPLIT
    offs_n = pid_n * BN + tl.arange(0, BN)
    k_per = K // SPLIT
    k_lo = pid_k * k_per
    offs_kp = tl.arange(0, BK // 2)
    offs_g = tl.arange(0, BK // 32)
    offs_k = tl.arange(0, BK)
    offs_t = tl.arange(0, NT)
    acc = tl.zeros((BN, NT), tl.float32)
    for k0 in range(k_lo, k_lo + k_per, BK):
        wq = tl.load(w_ptr + offs_n[:, None] * stride_wn + (k0 // 2 + _byte_of(offs_kp, BK))[None, :])
        sc = tl.load(ws_ptr + offs_n[:, None] * stride_wsn + (k0 // 32 + offs_g)[None, :]).to(tl.int32)
        sref = tl.max(sc, axis=1)
        rel = sc - sref[:, None]
        # tables of the 8 magnitudes times 2^(B + rel) in e5m2 (exponent fields of 0.5: D - 1, 1: D, 2: D + 1, ...)
        lo = (BASE_LO + rel * 0x04040400).to(tl.uint32)
        hi = (BASE_HI + rel * 0x04040404).to(tl.uint32)
        ok = rel >= -(13 + BOFF)
        lo = tl.where(ok, lo, 0)
        hi = tl.where(ok, hi, 0)
        # column c of the tile holds group t * BK / 128 + i // 4 (c = 16 i + 4 t + j)
        G4: tl.constexpr = BK // 128
        lo_b = tl.broadcast_to(tl.permute(tl.reshape(lo, (BN, 4, G4)), (0, 2, 1))[:, :, None, :, None],
                               (BN, G4, 4, 4, 4)).reshape(BN, BK // 2)
        hi_b = tl.broadcast_to(tl.permute(tl.reshape(hi, (BN, 4, G4)), (0, 2, 1))[:, :, None, :, None],
                               (BN, G4, 4, 4, 4)).reshape(BN, BK // 2)
        o0, o1 = tl.inline_asm_elementwise(ASM, "=r,=r,r,r,r,r,r,r,r,r,r", [wq, lo_b, hi_b],
                                           dtype=(tl.uint8, tl.uint8), is_pure=True, pack=4)
        w8 = tl.join(o0, o1).permute(0, 2, 1).reshape(BN, BK).to(tl.float8e5, bitcast=True)
        if THREE:  # the three terms one after another into one accumulator: [BN, MP]
            base = xs_ptr + offs_t[None, :] * K + (k0 + offs_k)[:, None]
            part = tl.dot(w8, tl.load(base))
            part = tl.dot(w8, tl.load(base + MP * K), part)
            part = tl.dot(w8, tl.load(base + 2 * MP * K), part)
        else:  # the terms side by side along N: [BN, 4 * MP]
            part = tl.dot(w8, tl.load(xs_ptr + offs_t[None, :] * K + (k0 + offs_k)[:, None]))
        f = tl.where(sref == 255, float("nan"), ((sref - BOFF) << 23).to(tl.float32, bitcast=True))
        ps = tl.load(pinv_ptr + (k0 // BK) * MP + offs_t % MP)  # 2^-p of the activation rows in this step
        acc += part * (f[:, None] * ps[None, :])
    if THREE:
        y = acc
    else:
        y = tl.sum(tl.reshape(acc, (BN, NT // MP, MP)), axis=1)
    offs_m = tl.arange(0, MP)
    ptrs = out_ptr + offs_m[None, :] * stride_om + offs_n[:, None]
    mask = offs_m[None, :] < M
    if SPLIT == 1:
        tl.store(ptrs, y.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        tl.atomic_add(ptrs, y, mask=mask, sem="relaxed")


def _mp(m):
    mp = 1 << (m - 1).bit_length()
    return max(mp, 4)


class Probe:
    """Buffers for one (M, K): the split activations (zero padding rows written once) and the row scales."""

    def __init__(self, m, k, device, three=False):
        self.m, self.three = m, three
        self.mp = max(16, _mp(m)) if three else _mp(m)
        self.nt = self.mp if three else 4 * self.mp
        self.xs = torch.zeros(4 * self.mp, k, dtype=torch.float8_e5m2, device=device)
        self.pinv = torch.ones(k // 128, self.mp, dtype=torch.float32, device=device)

    def __call__(self, x, w, bn, bk, warps, stages, split, out=None, parts="both"):
        m, k = x.shape
        n = w.data.shape[0]
        if parts != "main":
            split_kernel[(m, k // bk)](x, self.xs, self.pinv, k, x.stride(0), MP=self.mp, BKS=bk)
        if parts == "split":
            return None
        if out is None:
            out = (torch.empty if split == 1 else torch.zeros)(
                m, n, dtype=torch.bfloat16 if split == 1 else torch.float32, device=x.device)
        grid = (n // bn * split,)
        fp8_decode_kernel[grid](w.data, w.scales, self.xs, self.pinv, out, n, k, m, w.data.stride(0),
                                w.scales.stride(0), out.stride(0), BN=bn, BK=bk, NT=self.nt, MP=self.mp, SPLIT=split,
                                BOFF=B_OFF, ASM=_ASM, BASE_LO=_tables(B_OFF)[0], BASE_HI=_tables(B_OFF)[1],
                                THREE=self.three, num_warps=warps, num_stages=stages)
        return out


def compile_report(bn=64, bk=256, mp=16, warps=4, stages=3, three=False):
    """Compile for sm_90 on the CPU and print the K loop's instruction mix (scripts/compile_report.py's parser)."""
    from triton.backends.compiler import GPUTarget

    sys.path.insert(0, "scripts")
    from compile_report import _ptxas, k_loop_mix

    sig = {"w_ptr": "*u8", "ws_ptr": "*u8", "xs_ptr": "*fp8e5", "pinv_ptr": "*fp32", "out_ptr": "*bf16",
           "N": "i32", "K": "i32", "M": "i32", "stride_wn": "i32", "stride_wsn": "i32", "stride_om": "i32"}
    consts = dict(BN=bn, BK=bk, NT=mp if three else 4 * mp, MP=mp, SPLIT=1, BOFF=B_OFF, ASM=_ASM,
                  BASE_LO=_tables(B_OFF)[0], BASE_HI=_tables(B_OFF)[1], THREE=three)
    sig.update({c: "constexpr" for c in consts})
    order = list(sig)
    attrs = {(order.index(n),): [["tt.divisibility", 16]] for n in order
             if n.endswith("_ptr") or n in ("K", "N", "stride_wn", "stride_wsn", "stride_om")}
    src = triton.compiler.ASTSource(fn=fp8_decode_kernel, signature=sig, constexprs=consts, attrs=attrs)
    kern = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))
    report, sass = _ptxas(kern)
    count, mix = k_loop_mix(sass)
    values = bn * bk / (32 * warps)
    last = report.strip().splitlines()[-1] if report else ""
    print(f"BN={bn} BK={bk} MP={mp} w{warps} s{stages} three={three}: {last}")
    print(f"  K loop: {count} instructions per thread per step, {count / values:.2f} per weight value; "
          f"{dict(mix.most_common(14))}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--compile", action="store_true")
    args = p.parse_args()
    if args.compile:
        for bn, bk, mp, w, s, three in ((64, 256, 16, 4, 3, False), (64, 256, 4, 4, 3, False),
                                        (64, 256, 16, 4, 4, True), (128, 256, 16, 4, 4, True)):
            compile_report(bn, bk, mp, w, s, three)
        return

    import smgemm
    from smgemm.bench import _table, _time_rotating, mx_decode_sets

    torch.manual_seed(0)
    variants = [(64, 256, 4, 4, 1, False), (64, 256, 4, 4, 1, True), (64, 256, 4, 4, 2, False),
                (64, 256, 4, 4, 2, True), (64, 128, 4, 6, 1, False)]
    rows = []
    for m, n, k in [(1, 4096, 4096), (16, 4096, 4096), (1, 8192, 8192), (16, 8192, 8192), (1, 14336, 4096),
                    (16, 14336, 4096)]:
        sets = mx_decode_sets(m, n, k)
        x, w, wd = sets[0]
        ref = x.double() @ wd.double().t()
        probes = {three: Probe(m, k, "cuda", three) for three in (False, True)}
        row = {"shape": f"{m}x{n}x{k}"}
        y_lib = smgemm.linear(x, w)  # compiled before it is timed
        row["torch us"] = _time_rotating(lambda x, w, wd: torch.matmul(x, wd.t()), sets) * 1e3
        row["smgemm us"] = _time_rotating(lambda x, w, wd: smgemm.linear(x, w), sets) * 1e3
        row["lib err"] = f"{((y_lib.double() - ref).norm() / ref.norm()).item():.1e}"
        best = None
        for bn, bk, warps, stages, split, three in variants:
            name = f"{bn}x{bk} w{warps} s{stages} k{split}" + (" three" if three else "")
            probe = probes[three]
            try:
                y = probe(x, w, bn, bk, warps, stages, split)
                err = ((y.double() - ref).norm() / ref.norm()).item()
                t = _time_rotating(lambda x, w, wd, v=(bn, bk, warps, stages, split), p=probe: p(x, w, *v), sets) * 1e3
            except Exception as e:
                print(name, m, n, k, "failed:", str(e).splitlines()[0][:200])
                continue
            print(f"{m}x{n}x{k} {name}: {t:.1f} us, rel err {err:.1e}")
            if best is None or t < best[0]:
                best = (t, name, err, (bn, bk, warps, stages, split, three))
        if best:
            probe = probes[best[3][5]]
            for part in ("split", "main"):
                row[f"fp8 {part} us"] = round(_time_rotating(
                    lambda x, w, wd, part=part, p=probe, v=best[3][:5]: p(x, w, *v, parts=part), sets) * 1e3, 1)
            row["fp8 best us"], row["fp8 variant"], row["fp8 err"] = round(best[0], 1), best[1], f"{best[2]:.1e}"
            row["fp8 vs torch"] = round(row["torch us"] / best[0], 2)
            row["smgemm vs torch"] = round(row["torch us"] / row["smgemm us"], 2)
        rows.append(row)
    print(_table(rows))


if __name__ == "__main__":
    main()
