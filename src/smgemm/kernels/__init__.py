"""Triton kernels. `@triton.jit` code lives here and nowhere else."""
