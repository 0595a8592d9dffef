"""The table of GEMM test cases: shapes with edges crossed with layouts and dtypes, with readable ids."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

DTYPES = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
    "fp8": torch.float8_e4m3fn,
}

# (M, N, K): ones, primes and non-multiples of every tile size; K = 12 is below every BLOCK_K.
SHAPES = [(1, 1, 1), (1, 7, 12), (7, 1, 33), (15, 17, 33), (128, 8, 64), (8, 128, 12), (100, 130, 70)]
LAYOUTS = ["nn", "nt", "tn", "tt"]  # t: the operand is a transposed view of a contiguous tensor


@dataclass(frozen=True)
class Case:
    m: int
    n: int
    k: int
    dtype: str
    layout: str = "nn"

    @property
    def id(self) -> str:
        return f"{self.m}x{self.n}x{self.k}-{self.dtype}-{self.layout}"

    def operands(self, device):
        from reference import randn

        dt = DTYPES[self.dtype]
        a = randn((self.m, self.k), dt, device, transposed=self.layout[0] == "t")
        b = randn((self.k, self.n), dt, device, transposed=self.layout[1] == "t")
        return a, b


def all_cases() -> list[Case]:
    cases = [Case(m, n, k, dt, lay) for (m, n, k), dt, lay in itertools.product(SHAPES, DTYPES, LAYOUTS)]
    # Keep the CPU run lean: every layout on two edge shapes, one layout ("nt", the Linear layout) elsewhere.
    return [c for c in cases if c.layout == "nt" or (c.m, c.n, c.k) in ((15, 17, 33), (100, 130, 70))]
