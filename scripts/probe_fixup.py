"""Where does a Stream-K launch spend its time: the K-loop or the fixup? (GPU probe, wrong results on purpose.)

Times each variant of scripts/sweep_configs.py twice: with the real kernel, and with a copy of it whose finisher
neither waits for its sharers' flags nor sums their partials (it adds only the first sharer's and its own). The
difference is what the fixup costs; the second time is the K-loop, the partial stores and the epilogues.

    PYTHONPATH=src python scripts/probe_fixup.py --shapes 512x512x32768 --variants "128x128x64 w8 s4 tma sk"
"""

import argparse
import importlib.util
import inspect
import pathlib
import tempfile

import torch
import triton
import triton.language as tl
from sweep_configs import parse_variant, patched

import smgemm.kernels.gemm as kgemm
from smgemm._gemm import gemm
from smgemm.bench import DTYPES, _copies_for, _operands, _table, _time_rotating

_CUTS = {  # text of kernels/gemm.py -> its replacement in the probe copy
    "while tl.max(pending.to(tl.int32), axis=0) > 0:": "while tl.max(pending.to(tl.int32), axis=0) > 1 << 30:",
    "for p in range(first + 1, pid, _FIXUP_UNROLL):": "for p in range(pid, pid, _FIXUP_UNROLL):",
}


def _no_fixup_kernel():
    return cut_kernel(_CUTS)


def cut_kernel(cuts: dict[str, str], append: str = ""):
    """A copy of gemm_kernel with each text `old` of kernels/gemm.py replaced by `new` (asserted present once),
    and `append` added at the end of the module."""
    src = inspect.getsource(kgemm)
    for old, new in {**cuts, "from .common import": "from smgemm.kernels.common import"}.items():
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    src += append
    path = pathlib.Path(tempfile.mkdtemp()) / "gemm_cut.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("gemm_cut", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.gemm_kernel


@triton.jit
def _read_kernel(x_ptr, out_ptr, numel, reps, BLOCK: tl.constexpr):
    pid, nprog = tl.program_id(0), tl.num_programs(0)
    acc = tl.zeros([BLOCK], tl.float32)
    for _ in range(reps):
        for start in range(pid * BLOCK, numel, nprog * BLOCK):
            acc += tl.load(x_ptr + start + tl.arange(0, BLOCK), cache_modifier=".cg").to(tl.float32)
    tl.store(out_ptr + pid * BLOCK + tl.arange(0, BLOCK), acc)


def read_bandwidth() -> list[dict]:
    """Bytes per second that `programs` programs read from a buffer that fits in L2 (24 MB) or does not (2 GB)."""
    rows = []
    for mb, reps in ((24, 40), (2048, 1)):
        x = torch.randn(mb * 2**20 // 2, device="cuda", dtype=torch.bfloat16)
        for programs in (132, 264, 66, 33):
            out = torch.empty(programs * 4096, device="cuda")
            fn = lambda p=programs, x=x, o=out, r=reps: _read_kernel[(p,)](x, o, x.numel(), r, BLOCK=4096, num_warps=8)
            ms = triton.testing.do_bench(fn, warmup=50, rep=200)
            rows.append({"buffer MB": mb, "programs": programs, "TB/s": x.numel() * 2 * reps / ms / 1e9})
            print(rows[-1], flush=True)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--shapes", required=True)
    p.add_argument("--variants", required=True)
    p.add_argument("--l2", action="store_true", help="also measure read bandwidth from L2 and from device memory")
    args = p.parse_args()
    if args.l2:
        print(_table(read_bandwidth()))
    dtype = DTYPES[args.dtype]
    kernels = {"real": kgemm.gemm_kernel, "no fixup": _no_fixup_kernel()}
    rows = []
    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        sets = _operands(m, n, k, dtype, _copies_for(m, n, k, dtype))
        t_torch = _time_rotating(torch.matmul, sets)
        a, b = sets[0]
        ref = a.float() @ b.float()
        for variant in (v.strip() for v in args.variants.split(";") if v.strip()):
            cfg, sched = parse_variant(variant)
            row = {"shape": shape, "variant": variant, "torch us": t_torch * 1e3}
            for name, kernel in kernels.items():
                with patched(kgemm, gemm_kernel=kernel):
                    fn = lambda x, y, c=cfg, s=sched: gemm(x, y, config=c, schedule=s)
                    err = ((fn(a, b).float() - ref).norm() / ref.norm()).item()
                    row[f"{name} us"] = _time_rotating(fn, sets) * 1e3
                row[f"{name} err"] = f"{err:.1e}"
            row["fixup share"] = 1 - row["no fixup us"] / row["real us"]
            rows.append(row)
            print(row, flush=True)
    print(_table(rows))


if __name__ == "__main__":
    main()
