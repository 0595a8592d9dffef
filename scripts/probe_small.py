"""Which Hopper-path switch costs time on small GEMMs (GPU): kernel time (CUDA graph) and call time (do_bench).

    PYTHONPATH=src python scripts/probe_small.py
"""

import dataclasses

import torch
from triton.testing import do_bench

from smgemm._device import device_spec
from smgemm._gemm import gemm
from smgemm.bench import _table, graph_us
from smgemm.plan import make_plan

SHAPES = [(16, 4096, 4096), (1024, 1024, 1024), (128, 6144, 4096), (1024, 4096, 4096)]
SWITCHES = {"default": {}, "no tma": {"tma": False}, "no flatten": {"flatten": False}, "no tma store":
            {"tma_store": False}, "none": {"tma": False, "flatten": False, "tma_store": False}}


def main():
    spec = device_spec(torch.device("cuda"))
    rows = []
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        b = torch.randn(n, k, device="cuda").to(torch.bfloat16).t()
        plan = make_plan(m, n, k, torch.bfloat16, spec)
        row = {"shape": f"{m}x{n}x{k}", "plan": f"{plan.schedule[:4]} {plan.config.block_m}x{plan.config.block_n}",
               "torch us": graph_us(lambda a=a, b=b: torch.matmul(a, b))}
        for name, change in SWITCHES.items():
            cfg = dataclasses.replace(plan.config, **change)
            fn = lambda a=a, b=b, cfg=cfg: gemm(a, b, config=cfg)
            row[f"{name} graph us"] = graph_us(fn)
            row[f"{name} call us"] = do_bench(fn, warmup=5, rep=20, return_mode="median") * 1e3
        rows.append(row)
        print(row, flush=True)
    print(_table(rows))


if __name__ == "__main__":
    main()
