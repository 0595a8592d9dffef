"""Stream-K finisher variants: registers, spills and time (GPU probe).

The finisher sums the lower programs' partials of its tile column block by column block. Variants, each a copy of
gemm_kernel (probe_fixup.cut_kernel) or a different column width, timed side by side with torch and the persistent
plan on the planner's Stream-K plan and on forced tiles (`--tiles`, scripts/sweep_configs.py variants: more
programs per split tile, so more partials per finisher):

* `real`: kernels/gemm.py as it is: _FIXUP_UNROLL (2) partials loaded per step into registers;
* `pipelined N`: the partials' loop as a Triton loop pipelined N deep (cp.async through shared memory, which the
  K-loop's buffers have freed: N - 1 partials in flight without registers). Measured at stop 21: 1-7% slower than
  `real` everywhere, deeper worse (docs/performance.md);
* `stamped`: with probe_sk_timeline's %globaltimer stamps (does stamping change the time?);
* `fixup 32 cols`: 32 columns per block (fewer registers).

    PYTHONPATH=src python scripts/probe_finisher.py --shapes 3072x3072x8192,512x512x32768 --tiles "128x128x64 w8 s4 tma"
"""

import argparse

import torch
from probe_fixup import cut_kernel
from probe_sk_timeline import END, STAMPS
from sweep_configs import fixed_plan, parse_variant, patched

import smgemm._gemm
import smgemm.kernels.gemm as kgemm
from smgemm._device import device_spec
from smgemm._gemm import gemm
from smgemm.bench import DTYPES, _copies_for, _operands, _table, _time_rotating, describe
from smgemm.plan import make_plan

_UNROLLED = """\
                    for p in range(first + 1, pid, _FIXUP_UNROLL):
                        for u in tl.static_range(_FIXUP_UNROLL):
                            part += tl.load(ws_ptr + (p + u) * tile_elems + offs, mask=p + u < pid, other=0.0,
                                            cache_modifier=".cg")
"""
_PIPELINED = """\
                    for p in tl.range(first + 1, pid, num_stages={}):
                        part += tl.load(ws_ptr + p * tile_elems + offs, cache_modifier=".cg")
"""


def variants(stages: list[int]):
    """name -> (kernel, fixup_columns)."""
    real, cols = kgemm.gemm_kernel, smgemm._gemm.fixup_columns
    out = {"real": (real, cols)}
    out |= {f"pipelined {s}": (cut_kernel({_UNROLLED: _PIPELINED.format(s)}), cols) for s in stages}
    out |= {
        "stamped": (cut_kernel(STAMPS, append=END), cols),
        "fixup 32 cols": (real, lambda cfg: min(cols(cfg), 32)),
    }
    return out


def compiled(kernel) -> dict:
    """The kernel's compiled specializations (key -> compiled kernel)."""
    caches = list(kernel.device_caches.values())  # one GPU: one entry (kernel cache, target, backend, binder)
    return dict(caches[0][0]) if caches else {}


def stats(binary) -> str:
    binary._init_handles()
    return f"{binary.n_regs}/{binary.n_spills}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--shapes", required=True)
    p.add_argument("--tiles", default="", help="forced Stream-K tiles, ';'-separated sweep_configs variants")
    p.add_argument("--stages", default="3,4,6", help="depths of the `pipelined` variants")
    p.add_argument("--only", default="", help="comma-separated variant names to run (default: all)")
    args = p.parse_args()
    dtype = DTYPES[args.dtype]
    spec = device_spec(torch.device("cuda"))
    kinds = variants([int(s) for s in args.stages.split(",") if s])
    if args.only:
        kinds = {name: v for name, v in kinds.items() if name in args.only.split(",")}
    rows, seen = [], {}
    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        sets = _operands(m, n, k, dtype, _copies_for(m, n, k, dtype))
        a, b = sets[0]
        ref = a.float() @ b.float()
        base = {"shape": shape}
        if dtype != DTYPES["fp8"]:
            torch.matmul(a, b)
            base["torch us"] = _time_rotating(torch.matmul, sets) * 1e3
        pers = make_plan(m, n, k, dtype, spec, schedule="persistent")
        with fixed_plan(pers):
            gemm(a, b)
            torch.cuda.synchronize()
            base["persistent us"] = _time_rotating(gemm, sets) * 1e3
        plans = [make_plan(m, n, k, dtype, spec, schedule="streamk")]
        plans += [make_plan(m, n, k, dtype, spec, schedule="streamk", config=parse_variant(v)[0])
                  for v in args.tiles.split(";") if v.strip()]
        for plan in plans:
            row = {**base, "plan": describe(plan)}
            for name, (kernel, cols) in kinds.items():
                with fixed_plan(plan), patched(kgemm, gemm_kernel=kernel), patched(smgemm._gemm, fixup_columns=cols):
                    buf = torch.zeros(plan.num_programs * 64, dtype=torch.int32, device="cuda")
                    fn = (lambda x, y, buf=buf: gemm(x, y, smid_out=buf)) if name == "stamped" else gemm
                    before = compiled(kernel)
                    out = fn(a, b)
                    torch.cuda.synchronize()
                    err = ((out.float() - ref).norm() / ref.norm()).item()
                    new = [v for key, v in compiled(kernel).items() if key not in before]
                    key = name, describe(plan)
                    seen[key] = stats(new[-1]) if new else seen.get(key, "?")
                    row[f"{name} us"] = _time_rotating(fn, sets) * 1e3
                    row[f"{name} regs/spill err"] = f"{seen[key]} {err:.0e}"
            print(row, flush=True)
            rows.append(row)
    print(_table([{k: v for k, v in r.items() if "us" in k or k in ("shape", "plan")} for r in rows]))
    print(_table([{k: v for k, v in r.items() if "us" not in k} for r in rows]))


if __name__ == "__main__":
    main()
