"""Planner with edge tiles clamped (new) against in place (old), same run, alternating; random-suite draws too."""
import sys, torch
sys.path.insert(0, "benchmarks")
import smgemm._launch
from sweep_configs import patched, planned_for
from smgemm._device import device_spec
from smgemm._gemm import gemm
from smgemm._launch import edge_tiles_clamped
from smgemm.tools.bench import _operands, describe, random_shapes
from smgemm.tools.timing import copies_for, time_rotating, table
spec = device_spec(torch.device("cuda"))
off = lambda *a, **k: (False, False)
rows = []
shapes = [tuple(map(int, s.split("x"))) + (False,) for s in sys.argv[1].split(",") if s]
for seed in (int(x) for x in sys.argv[2].split(",") if x):
    shapes += [s for s in random_shapes(seed)]
from smgemm.plan import DTYPES
import smgemm.plan
dtypes = [DTYPES[d] for d in sys.argv[3].split(",")]
wide = lambda: patched(smgemm.plan, _CLAMP_ELEMENT_BYTES=(1, 2))
for dtype in dtypes:
    for m, n, k, unaligned in shapes:
        sets = _operands(m, n, k, dtype, copies_for(m, n, k, dtype), unaligned)
        a, b = sets[0]
        plan = planned_for(a, b, False, spec, None)
        with wide():
            cm, cn = edge_tiles_clamped(plan, (m, n, k), a.element_size(), dense=True, c_matrix=False)
        if not (cm or cn):
            continue
        ref = a.double() @ b.double()
        fp8 = dtype == torch.float8_e4m3fn
        tt = 1e-9 if fp8 else time_rotating(lambda x, y: x @ y, sets)
        res = {}
        for rep in range(2):
            for name in ("old", "new"):
                ctx = patched(smgemm._launch, edge_tiles_clamped=off) if name == "old" else wide()
                with ctx:
                    out = gemm(a, b, out_dtype=torch.bfloat16) if fp8 else gemm(a, b)
                    err = ((out.double() - ref).norm() / ref.norm()).item()
                    t = time_rotating(lambda x, y: gemm(x, y, out_dtype=torch.bfloat16 if fp8 else None), sets)
                res[name] = min(res.get(name, 1e9), t)
                res[name + " err"] = err
        rows.append({"dtype": str(dtype)[6:], "shape": f"{m}x{n}x{k}{'u' if unaligned else ''}", "clamp": ("M" if cm else "") + ("N" if cn else ""),
                     "plan": describe(plan), "torch us": tt * 1e3, "old us": res["old"] * 1e3, "new us": res["new"] * 1e3,
                     "new/old": res["new"] / res["old"], "old vs torch": tt / res["old"], "new vs torch": tt / res["new"],
                     "err": f"{max(res['old err'], res['new err']):.1e}"})
        print(rows[-1], flush=True)
print(table(rows))
import os, json
json.dump(rows, open(os.path.join(os.environ.get("OUT", "/tmp"), "clamp_ab.json"), "w"))
import math
r = [x["new/old"] for x in rows]
print("geomean new/old", math.exp(sum(map(math.log, r)) / len(r)), "n", len(r))
