import sys, torch
from smgemm._gemm import gemm
from smgemm.tools.timing import time_rotating, table
rows = []
for s in sys.argv[1].split(","):
    m, n, k = map(int, s.split("x"))
    for pad in (0, 8, 16, 64):
        kp = k if pad == 0 else -(-k // pad) * pad
        if pad and kp == k and pad != 64: continue
        sets = []
        for _ in range(3):
            a = torch.randn(m, kp, device="cuda", dtype=torch.bfloat16)[:, :k]
            w = torch.randn(n, kp, device="cuda", dtype=torch.bfloat16)[:, :k]
            sets.append((a, w.t()))
        tt = time_rotating(lambda x, y: x @ y, sets)
        t = time_rotating(lambda x, y: gemm(x, y), sets)
        rows.append({"shape": s, "pitch": kp, "pitch bytes %128": kp * 2 % 128, "smgemm us": t * 1e3, "torch us": tt * 1e3, "vs torch": tt / t})
        print(rows[-1], flush=True)
print(table(rows))
