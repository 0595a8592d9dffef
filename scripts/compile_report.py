"""Compile gemm_kernel for sm_90 on any machine (no GPU needed) and print ptxas's resource report.

    python scripts/compile_report.py                              # bf16 128x256x64, 8 warps, 3 stages
    python scripts/compile_report.py --tile 16,32,128 --warps 4 --stages 4 --b-mx --streamk

Shared memory, registers and spills per variant, as Triton would build it at a real launch: pointers 16-byte
aligned, A row-major and B a transposed nn.Linear weight (unit strides specialised), other strides divisible by
16 (without those attributes Triton's pipeliner stays off and the numbers mean nothing). Add --ptx to dump the PTX.
"""

import argparse
import inspect
import os
import subprocess
import sys
import tempfile

import triton
import triton.backends.nvidia as nvidia
from triton.backends.compiler import GPUTarget

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
from smgemm.kernels.gemm import gemm_kernel

_POINTERS = {"d_ptr": "*bf16", "c_ptr": "*fp32", "sa_ptr": "*fp32", "sb_ptr": "*fp32", "mxa_ptr": "*u8",
             "mxb_ptr": "*u8", "ws_ptr": "*fp32", "smid_ptr": "*i32"}
_UNIT_STRIDES = {"stride_ak": 1, "stride_bk": 1, "stride_dn": 1}
_DIV16 = ("stride_am", "stride_bn", "stride_dm", "stride_mxa", "stride_mxb", "K", "N")


def compile_variant(dtype="bf16", tile=(128, 256, 64), warps=8, stages=3, *, streamk=False, has_c=False,
                    a_mx=False, b_mx=False):
    names = inspect.signature(gemm_kernel.fn).parameters
    consts = dict(BLOCK_M=tile[0], BLOCK_N=tile[1], BLOCK_K=tile[2], GROUP_M=8, EVEN_K=True, HAS_C=has_c,
                  HAS_SCALE_A=False, HAS_SCALE_B=False, INTERPRETER=False, INPUT_PRECISION="tf32", USE_INT64=False,
                  STREAMK=streamk, FIXUP_N=min(64, tile[1]), RECORD_SMID=False, A_MX=a_mx, B_MX=b_mx, MX_FP16=False,
                  **_UNIT_STRIDES)
    signature = {}
    for name in names:
        if name in consts:
            signature[name] = "constexpr"
        elif name == "a_ptr":
            signature[name] = "*u8" if a_mx else f"*{dtype}"
        elif name == "b_ptr":
            signature[name] = "*u8" if b_mx else f"*{dtype}"
        elif name.endswith("_ptr"):
            signature[name] = _POINTERS[name]
        elif name in ("alpha", "beta"):
            signature[name] = "fp32"
        elif name == "epoch":
            signature[name] = "i64"
        else:
            signature[name] = "i32"
    order = list(names)
    attrs = {(order.index(n),): [["tt.divisibility", 16]] for n in order if n.endswith("_ptr") or n in _DIV16}
    src = triton.compiler.ASTSource(fn=gemm_kernel, signature=signature, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=warps, num_stages=stages))


def ptxas_report(kernel) -> str:
    ptxas = os.path.join(os.path.dirname(nvidia.__file__), "bin", "ptxas")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ptx")
        with open(path, "w") as f:
            f.write(kernel.asm["ptx"])
        res = subprocess.run([ptxas, "-arch=sm_90a", "-v", path, "-o", os.path.join(tmp, "k.cubin")],
                             capture_output=True, text=True, check=False)
    return "; ".join(line.split(":", 1)[-1].strip() for line in res.stderr.splitlines()
                     if "registers" in line or "spill" in line)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="bf16", help="bf16, fp16, fp32 or fp8e4nv")
    p.add_argument("--tile", default="128,256,64", help="BLOCK_M,BLOCK_N,BLOCK_K")
    p.add_argument("--warps", type=int, default=8)
    p.add_argument("--stages", type=int, default=3)
    p.add_argument("--streamk", action="store_true")
    p.add_argument("--has-c", action="store_true")
    p.add_argument("--a-mx", action="store_true")
    p.add_argument("--b-mx", action="store_true")
    p.add_argument("--ptx", action="store_true", help="print the PTX")
    args = p.parse_args()
    tile = tuple(int(x) for x in args.tile.split(","))
    kernel = compile_variant(args.dtype, tile, args.warps, args.stages, streamk=args.streamk, has_c=args.has_c,
                             a_mx=args.a_mx, b_mx=args.b_mx)
    if args.ptx:
        print(kernel.asm["ptx"])
    print(f"{args.dtype} {tile} w{args.warps} s{args.stages} streamk={args.streamk} mx=({args.a_mx},{args.b_mx}): "
          f"shared {kernel.metadata.shared} B; {ptxas_report(kernel)}")


if __name__ == "__main__":
    main()
