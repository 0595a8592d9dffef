"""smgemm: SM-budgeted GEMMs for NVIDIA Hopper, in Triton.

    import smgemm
    y = smgemm.matmul(a, b, num_sms=66)          # never occupies more than 66 SMs
    y = smgemm.addmm(bias, a, b, schedule="persistent")
    y = smgemm.linear(x, weight, bias)
    y = smgemm.bmm(q, k.transpose(1, 2), num_sms=66)   # batched: one launch, the budget across the batch
    with smgemm.sm_budget(100):                   # a block of code, modules included
        y = model(x)
    smgemm.nn.swap_linears(model)                 # nn.Linear -> smgemm.nn.Linear, in place
    y = smgemm.linear(x, smgemm.quantize_mxfp4(w))  # MXFP4 weight, dequantized inside the kernel
    smgemm.use_tuning("tuned.json")              # configs measured by `python -m smgemm tune` (optional)
    with smgemm.overrides(schedule="streamk"):    # force a schedule, a TileConfig or the model's Rates
    y = smgemm.parallel.column_parallel_linear(x_shard, w_shard, chunks=4)  # all-gather overlapped with GEMMs

The functions are differentiable, traceable by torch.compile (custom ops `torch.ops.smgemm.*`) and capturable
in CUDA graphs.
"""

from . import nn, parallel
from ._device import Rates
from .mxfp4 import MXFP4Tensor, quantize_mxfp4
from .ops import addmm, baddbmm, bmm, linear, matmul, sm_budget
from .partition import SMPartition
from .plan import SCHEDULES, Plan, TileConfig, make_plan, overrides
from .tuning import use_tuning

__all__ = ["SCHEDULES", "MXFP4Tensor", "Plan", "Rates", "SMPartition", "TileConfig", "addmm", "baddbmm", "bmm",
           "linear", "make_plan", "matmul", "nn", "overrides", "parallel", "quantize_mxfp4", "sm_budget",
           "use_tuning"]
__version__ = "0.1.0"
