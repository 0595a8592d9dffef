"""Launches that read A and B through tensor descriptors built on the host (`plan.overrides(host_descriptors=True)`,
`_launch.host_descriptors`) compute what the device-built ones do."""

import pytest
import torch

import smgemm
import smgemm._launch as L
from reference import assert_gemm_close
from smgemm.plan import TileConfig

TILES = [
    (TileConfig(128, 128, 32, num_warps=8, num_stages=3, tma=True, tma_store=True, flatten=True), "persistent"),
    (TileConfig(64, 64, 32, num_warps=4, num_stages=2, tma=True), "streamk"),
]


@pytest.fixture
def descriptor_kinds(monkeypatch):
    """(mode, what the kernel was given) for A and B of every launch: "pointers" modes get tensors, descriptor modes
    host-built descriptors."""
    seen = []
    real = L.host_descriptors

    def spy(tensors, ints, meta):
        out = real(tensors, ints, meta)
        seen.extend((mode, type(t).__name__) for mode, t in zip((meta["A_DESC"], meta["B_DESC"]), out[:2]))
        return out

    monkeypatch.setattr(L, "host_descriptors", spy)
    return seen


@pytest.mark.parametrize(("dtype", "layout"), [(torch.float16, "nt"), (torch.float16, "tn"), (torch.float16, "nn"),
                                               (torch.float8_e4m3fn, "nt")])  # (fp8's TMA reads need K-major rows)
@pytest.mark.parametrize(("cfg", "schedule"), TILES)
@pytest.mark.parametrize(("m", "n", "k"), [(200, 136, 96), (130, 70, 256)])
def test_host_built_descriptors_read_what_device_built_ones_read(descriptor_kinds, device, dtype, layout, cfg,
                                                                   schedule, m, n, k):
    a = torch.randn(m, k, device=device).to(dtype)
    w = torch.randn(n, k, device=device).to(dtype)
    if layout[0] == "t":
        a = a.t().contiguous().t()  # column-major A: a descriptor over A^T
    b = w.t() if layout[1] == "t" else w.t().contiguous()
    with smgemm.overrides(config=cfg, schedule=schedule, host_descriptors=True):
        outs = [smgemm.matmul(a, b) for _ in range(2)]  # the second call repeats the first's signature
    for out in outs:
        assert_gemm_close(out, a, b)
    assert len(descriptor_kinds) == 4 and any(mode != "pointers" for mode, _ in descriptor_kinds)
    assert all((mode == "pointers") == (kind == "Tensor") for mode, kind in descriptor_kinds), descriptor_kinds


def test_host_descriptors_only_where_asked(descriptor_kinds, device):
    a = torch.randn(200, 96, device=device).half()
    w = torch.randn(136, 96, device=device).half()
    cfg = TILES[0][0]
    with smgemm.overrides(config=cfg):
        assert_gemm_close(smgemm.matmul(a, w.t()), a, w.t())
    assert descriptor_kinds == []
    with pytest.raises(TypeError, match="host_descriptors must be a bool"):
        with smgemm.overrides(host_descriptors=1):
            pass
