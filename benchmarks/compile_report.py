"""Compile gemm_kernel for sm_90 on any machine (no GPU needed) and print ptxas's resource report.

    python benchmarks/compile_report.py                              # bf16 128x256x64, 8 warps, 3 stages
    python benchmarks/compile_report.py --tile 16,32,128 --warps 4 --stages 4 --b-mx --streamk
    python benchmarks/compile_report.py --tma --tma-store --flatten --dtype fp8e4nv --tile 128,256,128 --layout nn

Shared memory, registers and spills per variant, as Triton would build it at a real launch: pointers 16-byte
aligned, A row-major and B a transposed nn.Linear weight unless --layout says otherwise (unit strides
specialised), other strides divisible by 16 (without those attributes Triton's pipeliner stays off and the
numbers mean nothing). --tma / --tma-store / --flatten: the Hopper path. --mx-swap / --mx-prefetch:
the MXFP4 k-loop's variants. Add --ptx or --ttgir to dump the code, --sass for the instruction mix of the innermost
loop that holds the MMAs (the K loop): per-thread instructions per K step, by opcode.

    python benchmarks/compile_report.py --tile 16,64,512 --warps 4 --stages 4 --b-mx --sass   # MXFP4 decode
"""

import argparse
import collections
import inspect
import os
import re
import subprocess
import sys
import tempfile

import triton
import triton.backends.nvidia as nvidia
from triton.backends.compiler import GPUTarget

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
from smgemm._launch import fixup_columns
from smgemm.kernels.gemm import gemm_kernel
from smgemm.plan import TileConfig

_POINTERS = {"d_ptr": "*bf16", "c_ptr": "*fp32", "sa_ptr": "*fp32", "sb_ptr": "*fp32", "mxa_ptr": "*u8",
             "mxb_ptr": "*u8", "ws_ptr": "*fp32", "smid_ptr": "*i32"}
# gemm_kernel's tuple arguments and their fields
_GROUPS = {"shape": ("M", "N", "K"), "a_strides": ("stride_am", "stride_ak"), "b_strides": ("stride_bk", "stride_bn"),
           "d_strides": ("stride_dm", "stride_dn"), "c_strides": ("stride_cm", "stride_cn"),
           "scale_strides": ("stride_sa", "stride_sb"), "mx_strides": ("stride_mxa", "stride_mxb"),
           "batch": ("matrices", "stride_ab", "stride_bb", "stride_cb", "stride_db"),
           "schedule": ("num_programs", "dp_tiles"), "coeffs": ("alpha", "beta")}
_DIV16 = ("stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_dm", "stride_cm", "stride_mxa", "stride_mxb",
          "K", "N", "stride_ab", "stride_bb", "stride_db", "stride_cb")


def compile_variant(dtype="bf16", tile=(128, 256, 64), warps=8, stages=3, *, streamk=False, has_c=False,
                    a_mx=False, b_mx=False, tma=False, flatten=False, tma_store=False, layout="nt",
                    mx_swap=False, mx_prefetch=False, batched=False, k_tail=False, unaligned=False, mx_layout="ocp",
                    use_int64=False, scales=False, input_precision="tf32", out="bf16", c="fp32", c_row=False,
                    whole_store=False, vec=1, mask_m=False, one_row=False, clamp=False, host_descriptors=False):
    """gemm_kernel compiled for sm_90 as a launch with these operands and plan would build it (`scales`: fp8's
    per-row / per-column scales; `out` / `c`: the output's and C's dtypes, `c_row`: C one row broadcast over M (a
    bias); an fp16 `dtype` with `b_mx` is the MX_FP16 route; `vec`: the alignment, in elements, of the K-contiguous
    rows of operands read through pointers, as `_launch.vector_elements` gives it; `mask_m`: A has at most a quarter
    of the tile's rows, read through pointers, as `_launch.static_args` gives MASK_M; `one_row`: an MXFP4 weight's
    activations are one row, ONE_ROW; `clamp`: the last row and column of tiles end at the edge, CLAMP_M and
    CLAMP_N; `host_descriptors`: with `tma`, A and B, and with `tma_store` D's store, are tensor descriptors built on
    the host, `_launch.with_descriptors`)."""
    names = inspect.signature(gemm_kernel.fn).parameters
    # layout: A then B, "n" as stored ([M, K] / [K, N] row-major), "t" a transposed view (column-major)
    unit = {"stride_ak" if layout[0] == "n" or a_mx else "stride_am": 1,
            "stride_bn" if layout[1] == "n" and not b_mx else "stride_bk": 1, "stride_dn": 1, "stride_cn": 1}
    consts = dict(BLOCK_M=tile[0], BLOCK_N=tile[1], BLOCK_K=tile[2], GROUP_M=8, EVEN_K=not k_tail, HAS_C=has_c,
                  C_ROW=has_c and c_row,
                  HAS_SCALE_A=scales, HAS_SCALE_B=scales, INTERPRETER=False, INPUT_PRECISION=input_precision,
                  USE_INT64=use_int64,
                  STREAMK=streamk, FIXUP_N=fixup_columns(TileConfig(*tile, num_warps=warps, mx_swap=mx_swap)),
                  FLAG_LANES=32 * warps,
                  RECORD_SMID=False, A_MX="ocp" if a_mx else "", B_MX=mx_layout if b_mx else "",
                  MX_FP16=b_mx and not a_mx and dtype == "fp16",
                  A_DESC="pointers" if a_mx or not tma else "stored" if layout[0] == "n" else "transposed",
                  B_DESC="pointers" if b_mx or not tma else "stored" if layout[1] == "n" else "transposed",
                  FLATTEN=flatten,
                  D_DESC=(1 if whole_store else 2) if tma_store else 0, MX_SWAP=mx_swap, MX_PREFETCH=mx_prefetch,
                  BATCHED=batched,
                  A_VEC=vec if not (a_mx or tma) and layout[0] == "n" else 1,
                  B_VEC=vec if not (b_mx or tma) and layout[1] == "t" else 1,
                  MASK_M=mask_m and not (a_mx or b_mx or tma), ONE_ROW=one_row and b_mx and not a_mx,
                  CLAMP_M=clamp, CLAMP_N=clamp)
    absent = {"smid_ptr"} | (set() if scales else {"sa_ptr", "sb_ptr"}) | (set() if has_c else {"c_ptr"}) | (
        set() if a_mx else {"mxa_ptr"}) | (set() if b_mx else {"mxb_ptr"}) | (set() if streamk else {"ws_ptr"})
    signature, attrs = {}, {}
    constexprs = {name: value for name, value in consts.items() if name in names}
    for i, name in enumerate(names):
        if name in consts:
            signature[name] = "constexpr"
        elif name in _GROUPS:  # a tuple of ints (floats for coeffs): units specialised, others divisible by 16
            signature[name] = tuple("fp32" if name == "coeffs" else "i32" for _ in _GROUPS[name])
            for j, field in enumerate(_GROUPS[name]):
                if unit.get(field) == 1:
                    constexprs[(i, j)] = 1
                elif field in _DIV16 and not ((k_tail or unaligned) and field == "K") and not (
                        unaligned and field in ("stride_am", "stride_ak", "stride_bk", "stride_bn")):
                    attrs[(i, j)] = [["tt.divisibility", 16]]
        elif name in ("a_ptr", "b_ptr") and host_descriptors and tma and not (a_mx or b_mx):
            # blocks as `_launch.descriptor_boxes` gives them
            stored = layout[0 if name == "a_ptr" else 1] == "n"
            block = {("a_ptr", True): tile[::2], ("a_ptr", False): (tile[2], tile[0]),
                     ("b_ptr", True): tile[:0:-1], ("b_ptr", False): tile[1:]}[name, stored]
            block = (1, *block) if batched else block
            signature[name] = f"tensordesc<{dtype}[{', '.join(map(str, block))}]>"
        elif name == "d_store":  # D's store descriptor: built on the host beside A's and B's (`descriptor_boxes`)
            if host_descriptors and tma and tma_store and not (a_mx or b_mx or streamk) and not (has_c and not c_row):
                block = (tile[0], tile[1] // (1 if whole_store else 2))
                block = (1, *block) if batched else block
                signature[name] = f"tensordesc<{out}[{', '.join(map(str, block))}]>"
            else:
                signature[name] = "constexpr"
                constexprs[name] = None
        elif name == "a_ptr":
            signature[name] = "*u8" if a_mx else f"*{dtype}"
        elif name == "b_ptr":
            signature[name] = "*u8" if b_mx else f"*{dtype}"
        elif name.endswith("_ptr") and name in absent:  # passed as None, as the launch passes absent operands
            signature[name] = "constexpr"
            constexprs[name] = None
        elif name == "d_ptr":
            signature[name] = f"*{out}"
        elif name == "c_ptr":
            signature[name] = f"*{c}"
        elif name.endswith("_ptr"):
            signature[name] = _POINTERS[name]
        else:
            signature[name] = "i64"  # epoch
        if name.endswith("_ptr") and name not in absent and not signature[name].startswith("tensordesc"):
            attrs[(i,)] = [["tt.divisibility", 16]]
    src = triton.compiler.ASTSource(fn=gemm_kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))


def _ptxas(kernel) -> tuple[str, str]:
    """ptxas's -v report and the SASS (cuobjdump) of the kernel, assembled for sm_90a."""
    tools = os.path.join(os.path.dirname(nvidia.__file__), "bin")
    with tempfile.TemporaryDirectory() as tmp:
        path, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        with open(path, "w") as f:
            f.write(kernel.asm["ptx"])
        res = subprocess.run([os.path.join(tools, "ptxas"), "-arch=sm_90a", "-v", path, "-o", cubin],
                             capture_output=True, text=True, check=False)
        sass = subprocess.run([os.path.join(tools, "cuobjdump"), "-sass", cubin], capture_output=True, text=True,
                              check=False).stdout
    return res.stderr, sass


def ptxas_report(kernel) -> str:
    return "; ".join(line.split(":", 1)[-1].strip() for line in _ptxas(kernel)[0].splitlines()
                     if "registers" in line or "spill" in line)


def k_loop_mix(sass: str) -> tuple[int, collections.Counter]:
    """Instructions of the smallest loop (a backward branch) that holds MMAs, and their opcodes."""
    code = [(int(m.group(1), 16), m.group(2)) for m in
            re.finditer(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[0-9T]+\s+)?([A-Z][A-Z0-9_.]*)[^\n]*", sass)]
    best = None
    for addr, op in code:
        if op.startswith("BRA"):
            target = re.search(rf"/\*{addr:04x}\*/[^\n]*BRA\s+0x([0-9a-f]+)", sass)
            lo = int(target.group(1), 16) if target else addr
            body = [o for a, o in code if lo <= a <= addr]
            if lo < addr and any("MMA" in o for o in body) and (best is None or len(body) < len(best)):
                best = body
    best = best or []
    return len(best), collections.Counter(o.split(".")[0] for o in best)


def compile_ring(split: int = 1):
    """`kernels.mx_ring.mx_ring_kernel` (Gluon; Triton 3.6) compiled for sm_90 with each tile's K split `split`
    ways, its arguments as `_ring.RingLaunch` passes them."""
    from triton.experimental import gluon

    from smgemm.kernels import mx_ring

    sig = {"x_desc": f"tensordesc<bf16[1, 256],{mx_ring.X_LAYOUT}>",
           "w_desc": f"tensordesc<i32[{mx_ring.ROWS}, 32],{mx_ring.WORDS_LAYOUT}>",
           "s_desc": f"tensordesc<u8[{mx_ring.ROWS}, 16],{mx_ring.SCALES_LAYOUT}>", "y_ptr": "*bf16",
           "ws_ptr": "*fp32", "flags_ptr": "*i64", "epoch": "i64", "K": "i32", "alpha": "fp32",
           "SPLIT": "constexpr", "STAGES": "constexpr", "num_warps": "constexpr"}
    src = gluon._runtime.GluonASTSource(
        fn=mx_ring.mx_ring_kernel, signature=sig,
        constexprs={"SPLIT": split, "STAGES": mx_ring.STAGES, "num_warps": mx_ring.WARPS},
        attrs={(i,): [["tt.divisibility", 16]] for i in (3, 4, 5, 7)})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": mx_ring.WARPS})


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="bf16", help="bf16, fp16, fp32 or fp8e4nv")
    p.add_argument("--tile", default="128,256,64", help="BLOCK_M,BLOCK_N,BLOCK_K")
    p.add_argument("--warps", type=int, default=8)
    p.add_argument("--stages", type=int, default=3)
    p.add_argument("--streamk", action="store_true")
    p.add_argument("--has-c", action="store_true")
    p.add_argument("--c-row", action="store_true", help="with --has-c: C is a bias, one row broadcast over M")
    p.add_argument("--out", default="", help="the output's dtype (default: fp32 for fp32 inputs, fp16 for fp16, "
                                              "else bf16)")
    p.add_argument("--c", default="", help="C's dtype (default: the output's)")
    p.add_argument("--a-mx", action="store_true")
    p.add_argument("--b-mx", action="store_true")
    p.add_argument("--tma", action="store_true", help="A and (a transposed) B through device-built tensor descriptors")
    p.add_argument("--host-descriptors", action="store_true",
                   help="with --tma: A's and B's (with --tma-store also D's) descriptors built on the host")
    p.add_argument("--flatten", action="store_true")
    p.add_argument("--tma-store", action="store_true", help="store D through a tensor descriptor")
    p.add_argument("--whole-store", action="store_true", help="with --tma-store: one store a tile, not two halves")
    p.add_argument("--layout", default="nt", help="A then B: n as stored, t transposed (nt: an nn.Linear weight)")
    p.add_argument("--mx-swap", action="store_true")
    p.add_argument("--mx-prefetch", action="store_true")
    p.add_argument("--mx-layout", default="ocp", help="the MXFP4 weight's byte layout: ocp or hopper")
    p.add_argument("--ptx", action="store_true", help="print the PTX")
    p.add_argument("--sass", action="store_true", help="the K loop's instruction mix (per thread, per K step)")
    p.add_argument("--ttgir", action="store_true", help="print the TTGIR")
    p.add_argument("--batched", action="store_true", help="the batched kernel (pointer path)")
    p.add_argument("--int64", action="store_true", help="offsets in int64 (operands past 2^31 elements)")
    p.add_argument("--k-tail", action="store_true", help="K not a multiple of BLOCK_K (nor of 16): a masked tail")
    p.add_argument("--unaligned", action="store_true",
                   help="--k-tail with A's and B's row strides not multiples of 16 elements (operands read in place)")
    p.add_argument("--vec", type=int, default=1,
                   help="with --unaligned: the elements (2, 4, 8) to which those rows are aligned (A_VEC / B_VEC)")
    p.add_argument("--mask-m", action="store_true",
                   help="A has at most a quarter of the tile's rows: its pointer loads masked past M (MASK_M)")
    p.add_argument("--one-row", action="store_true", help="with --b-mx: the activations are one row (ONE_ROW)")
    p.add_argument("--ring", type=int, default=0, help="instead: kernels.mx_ring (Gluon, Triton 3.6) with each tile's "
                   "K split this many ways")
    args = p.parse_args()
    if args.ring:
        kernel = compile_ring(args.ring)
        print(f"mx_ring split {args.ring}: shared {kernel.metadata.shared} B; {ptxas_report(kernel)}")
        if args.sass:
            count, ops = k_loop_mix(_ptxas(kernel)[1])
            print(f"K loop: {count} instructions per thread per 512-element step: "
                  + ", ".join(f"{op} {n}" for op, n in ops.most_common(12)))
        return
    tile = tuple(int(x) for x in args.tile.split(","))
    out = args.out or {"fp32": "fp32", "fp16": "fp16"}.get(args.dtype, "bf16")
    kernel = compile_variant(args.dtype, tile, args.warps, args.stages, streamk=args.streamk, has_c=args.has_c,
                             c_row=args.c_row, out=out, c=args.c or out, whole_store=args.whole_store,
                             a_mx=args.a_mx, b_mx=args.b_mx, tma=args.tma, flatten=args.flatten,
                             tma_store=args.tma_store, layout=args.layout,
                             mx_swap=args.mx_swap, mx_prefetch=args.mx_prefetch, batched=args.batched,
                             k_tail=args.k_tail or args.unaligned, unaligned=args.unaligned,
                             mx_layout=args.mx_layout, use_int64=args.int64, vec=args.vec,
                             mask_m=args.mask_m, one_row=args.one_row, host_descriptors=args.host_descriptors)
    if args.ptx:
        print(kernel.asm["ptx"])
    if args.ttgir:
        print(kernel.asm["ttgir"])
    print(f"{args.dtype} {tile} w{args.warps} s{args.stages} streamk={args.streamk} mx=({args.a_mx},{args.b_mx}): "
          f"{args.layout} mx_layout={args.mx_layout} tma={args.tma} flatten={args.flatten} store={args.tma_store} "
          f"k_tail={args.k_tail}: "
          f"shared {kernel.metadata.shared} B; "
          f"warps {kernel.metadata.num_warps}; {ptxas_report(kernel)}")
    if args.sass:
        count, ops = k_loop_mix(_ptxas(kernel)[1])
        print(f"K loop: {count} instructions per thread per K step: "
              + ", ".join(f"{op} {n}" for op, n in ops.most_common(12)))


if __name__ == "__main__":
    main()
