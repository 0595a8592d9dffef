import sys, torch
from smgemm._gemm import gemm
from smgemm.tools.timing import time_rotating, table
rows = []
for s in sys.argv[1].split(","):
    m, n, k = map(int, s.split("x"))
    kp = -(-k // 64) * 64
    for mode in ("none", "A", "B", "both"):
        sets = []
        for _ in range(3):
            a = torch.randn(m, kp if mode in ("A", "both") else k, device="cuda", dtype=torch.bfloat16)[:, :k]
            w = torch.randn(n, kp if mode in ("B", "both") else k, device="cuda", dtype=torch.bfloat16)[:, :k]
            sets.append((a, w.t()))
        tt = time_rotating(lambda x, y: x @ y, sets)
        t = time_rotating(lambda x, y: gemm(x, y), sets)
        c = time_rotating(lambda x, y: torch.empty(m, kp, device="cuda", dtype=x.dtype)[:, :k].copy_(x), sets)
        rows.append({"shape": s, "padded": mode, "smgemm us": t * 1e3, "torch us": tt * 1e3, "vs torch": tt / t, "copy A us": c * 1e3})
        print(rows[-1], flush=True)
print(table(rows))
