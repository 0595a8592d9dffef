"""Are TMA loads of partly out-of-bounds tiles slow? Same plan, operands padded to whole tiles or not."""
import sys, torch
sys.path.insert(0, "benchmarks")
from smgemm._gemm import gemm
from smgemm.tools.timing import time_rotating, table
rows = []
def sets_for(m, n, k, mp, np_, copies=2):
    out = []
    for _ in range(copies):
        a = torch.randn(mp, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(np_, k, device="cuda", dtype=torch.bfloat16)
        out.append((a, w))
    return out
for shape in sys.argv[1].split(","):
    m, n, k = map(int, shape.split("x"))
    mp, np_ = -(-m // 256) * 256, -(-n // 256) * 256
    full = sets_for(m, n, k, mp, np_)
    exact = [(a[:m], w[:n].t()) for a, w in full]          # views: descriptors of m / n rows
    padded = [(a, w.t()) for a, w in full]                 # whole tiles: descriptors of mp / np rows
    ref = exact[0][0].double() @ exact[0][1].double()
    t_torch = time_rotating(lambda x, y: x @ y, exact)
    t_exact = time_rotating(lambda x, y: gemm(x, y), exact)
    t_pad = time_rotating(lambda x, y: gemm(x, y), padded)
    t_padm = time_rotating(lambda x, y: gemm(x, y), [(a, w[:n].t()) for a, w in full])
    t_copy = time_rotating(lambda x, y: torch.empty(mp, k, device="cuda", dtype=x.dtype)[:m].copy_(x), exact)
    err = ((gemm(*padded[0])[:m, :n].double() - ref).norm() / ref.norm()).item()
    rows.append({"shape": shape, "torch": t_torch * 1e3, "exact": t_exact * 1e3, "pad M+N": t_pad * 1e3,
                 "pad M": t_padm * 1e3, "copy A": t_copy * 1e3, "torch/exact": t_torch / t_exact,
                 "torch/padM": t_torch / t_padm, "err": f"{err:.1e}"})
    print(rows[-1], flush=True)
print(table(rows))
