"""smgemm: SM-budgeted GEMMs for NVIDIA Hopper, in Triton.

    import smgemm
    y = smgemm.matmul(a, b, num_sms=66)          # never occupies more than 66 SMs
    y = smgemm.addmm(bias, a, b, schedule="persistent")
    y = smgemm.linear(x, weight, bias)
"""

from .ops import addmm, linear, matmul
from .plan import SCHEDULES, Plan, TileConfig, make_plan

__all__ = ["SCHEDULES", "Plan", "TileConfig", "addmm", "linear", "make_plan", "matmul"]
__version__ = "0.1.0"
