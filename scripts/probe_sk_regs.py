"""Registers, spills and time of the Stream-K kernel and of variants of its finisher (GPU probe).

The timeline probe's stamps slowed the 128 x 256 Stream-K kernel by ~18% (and not the persistent one): is the
kernel on a register cliff? For each variant: the compiled kernel's registers and spilled bytes, and its time beside
torch and the persistent plan, on shapes where `auto` splits the last two waves.

    PYTHONPATH=src python scripts/probe_sk_regs.py --shapes 3072x3072x8192,5120x4352x4096
"""

import argparse

import torch
from probe_fixup import cut_kernel
from probe_sk_timeline import END, STAMPS
from sweep_configs import fixed_plan, patched

import smgemm._gemm
import smgemm.kernels.gemm as kgemm
from smgemm._device import device_spec
from smgemm._gemm import gemm
from smgemm.bench import DTYPES, _copies_for, _operands, _table, _time_rotating, describe
from smgemm.plan import make_plan

_UNROLL = "_FIXUP_UNROLL: tl.constexpr = tl.constexpr(2)"
_PUBLISH = "tl.store(ws_ptr + pid * tile_elems + offs_tile, acc, cache_modifier=\".cg\")"


def variants():
    """name -> (kernel, fixup_columns): the real kernel and its variants."""
    real = kgemm.gemm_kernel
    cols = smgemm._gemm.fixup_columns
    return {
        "real": (real, cols),
        "stamped": (cut_kernel(STAMPS, append=END), cols),
        "fixup 32 cols": (real, lambda cfg: min(cols(cfg), 32)),
        "unroll 1": (cut_kernel({_UNROLL: _UNROLL.replace("(2)", "(1)")}), cols),
        "unroll 1, 128 cols": (cut_kernel({_UNROLL: _UNROLL.replace("(2)", "(1)")}),
                               lambda cfg: min(cfg.block_n, 128)),
        "publish cached": (cut_kernel({_PUBLISH: _PUBLISH.replace(', cache_modifier=".cg"', "")}), cols),
    }


def compiled(kernel) -> dict:
    """The kernel's compiled specializations on this device (key -> compiled kernel)."""
    caches = list(kernel.device_caches.values())  # one GPU: one entry (kernel cache, target, backend, binder)
    return dict(caches[0][0]) if caches else {}


def stats(binary) -> str:
    binary._init_handles()
    return f"{binary.n_regs}/{binary.n_spills}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--shapes", required=True)
    args = p.parse_args()
    dtype = DTYPES[args.dtype]
    spec = device_spec(torch.device("cuda"))
    kinds = variants()
    rows, seen = [], {}
    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        sets = _operands(m, n, k, dtype, _copies_for(m, n, k, dtype))
        a, b = sets[0]
        ref = a.float() @ b.float()
        row = {"shape": shape}
        if dtype != DTYPES["fp8"]:
            torch.matmul(a, b)
            row["torch us"] = _time_rotating(torch.matmul, sets) * 1e3
        for schedule in ("persistent", "streamk"):
            plan = make_plan(m, n, k, dtype, spec, schedule=schedule)
            row[f"{schedule} plan"] = describe(plan)
            for name, (kernel, cols) in kinds.items() if schedule == "streamk" else [("real", kinds["real"])]:
                label = f"{schedule[:4]} {name}"
                with fixed_plan(plan), patched(kgemm, gemm_kernel=kernel), patched(smgemm._gemm, fixup_columns=cols):
                    buf = torch.zeros(plan.num_programs * 64, dtype=torch.int32, device="cuda")
                    fn = (lambda x, y, buf=buf: gemm(x, y, smid_out=buf)) if name == "stamped" else gemm
                    before = compiled(kernel)
                    out = fn(a, b)
                    torch.cuda.synchronize()
                    err = ((out.float() - ref).norm() / ref.norm()).item()
                    new = [v for key, v in compiled(kernel).items() if key not in before]
                    seen[label, describe(plan)] = stats(new[-1]) if new else seen.get((label, describe(plan)), "?")
                    row[f"{label} us"] = _time_rotating(fn, sets) * 1e3
                    row[f"{label} regs/spill err"] = f"{seen[label, describe(plan)]} {err:.0e}"
        print(row, flush=True)
        rows.append(row)
    print(_table([{k: v for k, v in r.items() if "us" in k or k == "shape"} for r in rows]))
    print(_table([{k: v for k, v in r.items() if "us" not in k} for r in rows]))


if __name__ == "__main__":
    main()
