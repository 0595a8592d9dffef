"""Do a launch's programs share SMs, and does that explain slow runs? (GPU)

For each case the GEMM runs 200 times, each after a 256 MB memset (what do_bench does between reps to clear L2)
or back to back; every launch records the SM of each program (`smid_out`) and its own time (CUDA events). The
table gives, per case and mode, how many launches had two or more programs on one SM and the median times of
launches with and without such sharing.

    PYTHONPATH=src python scripts/probe_placement.py
"""

import statistics

import torch

import smgemm
from smgemm._device import device_spec
from smgemm._gemm import gemm, gemm_mxfp4
from smgemm.bench import _table, describe
from smgemm.plan import make_mx_plan, make_plan

CASES = [("bf16", 16, 4096, 4096), ("bf16", 1024, 1024, 1024), ("mxfp4", 1, 4096, 4096), ("mxfp4", 16, 4096, 4096),
         ("mxfp4", 16, 8192, 8192)]


def main():
    spec = device_spec(torch.device("cuda"))
    cache = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    rows = []
    for kind, m, n, k in CASES:
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        if kind == "mxfp4":
            w = smgemm.quantize_mxfp4(torch.randn(n, k, device="cuda"))
            plan = make_mx_plan(m, n, k, torch.bfloat16, spec)
            run = lambda smids, a=a, w=w: gemm_mxfp4(a, w, smid_out=smids)
        else:
            b = torch.randn(n, k, device="cuda").to(torch.bfloat16).t()
            plan = make_plan(m, n, k, torch.bfloat16, spec)
            run = lambda smids, a=a, b=b: gemm(a, b, smid_out=smids)
        for mode in ("after memset", "back to back"):
            reps = 200
            smids = torch.full((reps, plan.num_programs), -1, dtype=torch.int32, device="cuda")
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
            for _ in range(20):  # warm-up, clocks up
                run(smids[0])
            torch.cuda._sleep(100_000_000)  # ~50 ms of GPU time: the host queues every launch before the GPU runs one
            for i in range(reps):
                if mode == "after memset":
                    cache.zero_()
                events[i][0].record()
                run(smids[i])
                events[i][1].record()
            torch.cuda.synchronize()
            times = [s.elapsed_time(e) * 1e3 for s, e in events]
            shared, alone = [], []
            for i in range(reps):
                per_sm = torch.bincount(smids[i].long().cpu())
                (shared if int(per_sm.max()) > 1 else alone).append(times[i])
            rows.append({"case": f"{kind} {m}x{n}x{k}", "plan": describe(plan), "mode": mode,
                         "launches sharing an SM": f"{len(shared)}/{reps}",
                         "median us (shared)": statistics.median(shared) if shared else 0.0,
                         "median us (one per SM)": statistics.median(alone) if alone else 0.0,
                         "max us": max(times)})
            print(rows[-1], flush=True)
    print(_table(rows))


if __name__ == "__main__":
    main()
