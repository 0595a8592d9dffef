import dataclasses, sys, torch
from smgemm._device import INTERPRETER_SPEC
from smgemm.plan import decide, DTYPES
from smgemm.tools.bench import describe
spec = dataclasses.replace(INTERPRETER_SPEC, interpreted=False)
for s in sys.argv[1:]:
    m, n, k = map(int, s.split("x"))
    p = decide(m, n, k, torch.bfloat16, spec)
    print(s, describe(p))
