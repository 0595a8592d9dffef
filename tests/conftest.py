"""Test setup: the Triton interpreter on machines without a GPU, NaN-poisoned allocations, a device fixture."""

import os

import torch

if not torch.cuda.is_available():
    # Must happen before triton is imported: Triton reads it when kernels are decorated.
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

import smgemm._gemm

HAS_GPU = torch.cuda.is_available()
DEVICE = "cuda" if HAS_GPU else "cpu"


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if not HAS_GPU and ("gpu" in item.keywords or "performance" in item.keywords):
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _poison_outputs(monkeypatch):
    """Outputs smgemm allocates start as NaN, so a tile the kernel never writes fails the comparison."""

    def nan_empty(shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(smgemm._gemm, "_empty", nan_empty)


@pytest.fixture
def device():
    return DEVICE
