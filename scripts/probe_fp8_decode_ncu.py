"""One launch of each kernel for Nsight Compute: the fp8 probe (scripts/probe_fp8_decode.py) and smgemm.linear.

    ncu --clock-control none --section WarpStateStats ... python scripts/probe_fp8_decode_ncu.py
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from probe_fp8_decode import Probe

import smgemm

m, n, k = (int(v) for v in os.environ.get("SHAPE", "1x8192x8192").split("x"))
w = smgemm.quantize_mxfp4(torch.randn(n, k, device="cuda"))
x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
probe = Probe(m, k, "cuda")
for _ in range(3):
    probe(x, w, 64, 256, 4, 4, 1)
    smgemm.linear(x, w)
torch.cuda.synchronize()
