"""Force plan edits: hybrid Stream-K (one wave of whole tiles + split remainder) and tile variants."""
import dataclasses, sys, torch
sys.path.insert(0, "benchmarks")
from sweep_configs import fixed_plan, parse_variant, planned_for
from smgemm._device import device_spec
from smgemm._gemm import gemm
from smgemm.plan import make_plan
from smgemm.tools.bench import _operands, describe
from smgemm.tools.timing import copies_for, time_rotating, table
spec = device_spec(torch.device("cuda"))
rows = []
def run(shape, label, plan):
    m, n, k = map(int, shape.split("x"))
    sets = _operands(m, n, k, torch.bfloat16, copies_for(m, n, k, torch.bfloat16))
    a, b = sets[0]
    ref = a.double() @ b.double()
    tt = time_rotating(lambda x, y: x @ y, sets)
    ctx = fixed_plan(plan) if plan is not None else __import__("contextlib").nullcontext()
    with ctx:
        out = gemm(a, b)
        err = ((out.double() - ref).norm() / ref.norm()).item()
        t = time_rotating(lambda x, y: gemm(x, y), sets)
    desc = describe(plan) if plan is not None else describe(planned_for(a, b, False, spec, None)) + " (planner)"
    rows.append({"shape": shape, "label": label, "plan": desc, "us": t * 1e3, "torch us": tt * 1e3, "vs torch": tt / t, "err": f"{err:.1e}"})
    print(rows[-1], flush=True)

for shape in sys.argv[1].split(","):
    m, n, k = map(int, shape.split("x"))
    run(shape, "planner", None)
    for v in sys.argv[2].split(";"):
        v = v.strip()
        hybrid = v.endswith(" hybrid")
        cfg, sched = parse_variant(v.replace(" hybrid", ""))
        p = make_plan(m, n, k, torch.bfloat16, spec, config=cfg, schedule=sched)
        if hybrid:
            if p.schedule != "streamk":
                continue
            full = p.num_tiles // spec.num_sms * spec.num_sms
            p = dataclasses.replace(p, dp_tiles=full, num_programs=spec.num_sms)
        try:
            run(shape, v, p)
        except Exception as e:
            print(shape, v, "FAILED", type(e).__name__, str(e)[:100])
print(table(rows))
