"""Repeat calls skip the checks and the planner (smgemm._gemm._SEEN_CALLS), and only when nothing they depend on
has changed."""

import pytest
import torch

import smgemm
import smgemm._gemm as G
from reference import assert_gemm_close, randn


@pytest.fixture
def checks(monkeypatch):
    """Count full (checked) calls."""
    calls = []
    real = G.check_backend
    monkeypatch.setattr(G, "check_backend", lambda device: (calls.append(1), real(device))[1])
    monkeypatch.setattr(G, "_SEEN_CALLS", {})
    return calls


def test_second_call_skips_checks_and_is_right(checks, device):
    for i in range(3):  # fresh data every time, same signature
        a = randn((40, 48), torch.float16, device)
        b = randn((56, 48), torch.float16, device).t()
        bias = randn((56,), torch.float16, device)
        out = G.gemm(a, b, c=bias, alpha=0.5 + i, num_sms=3)
        assert_gemm_close(out, a, b, alpha=0.5 + i, beta=1.0, c=bias)
    assert len(checks) == 1


def test_any_change_in_the_signature_checks_again(checks, device):
    a = randn((40, 48), torch.float16, device)
    b = randn((48, 56), torch.float16, device)
    G.gemm(a, b)
    variants = [
        (a.t().contiguous().t(), b),  # other strides
        (randn((40, 64), torch.float16, device)[:, 8:56], b),  # another row stride
        (a.float(), b.float()),  # other dtype
        (a[:39], b),  # other shape
    ]
    for x, y in variants:
        assert_gemm_close(G.gemm(x, y), x, y)
    assert len(checks) == 1 + len(variants)
    G.gemm(a, b, num_sms=2)
    G.gemm(a, b, schedule="persistent")
    G.gemm(a, b, out_dtype=torch.float32)
    G.gemm(a, b, c=randn((56,), torch.float16, device), beta=0.0)
    G.gemm(a, b, c=randn((56,), torch.float16, device), beta=1.0)
    assert len(checks) == 1 + len(variants) + 5


def test_alignment_is_part_of_the_signature(checks, device):
    # Same shapes, strides and dtypes; only the base address moves off a 16-byte boundary (no TMA for it).
    buf = randn((40, 72), torch.float16, device)
    b = randn((48, 64), torch.float16, device)
    for x in (buf[:, :48], buf[:, 1:49], buf[:, 8:56]):
        assert_gemm_close(G.gemm(x, b, num_sms=2), x, b)
    assert len(checks) == 2


def test_errors_are_raised_every_time(checks, device):
    a = randn((40, 48), torch.float16, device)
    b = randn((48, 56), torch.float16, device)
    G.gemm(a, b, num_sms=1)
    for _ in range(2):
        with pytest.raises(ValueError, match="num_sms must be None or an int"):
            G.gemm(a, b, num_sms=True)  # equal to 1 as a dict key: the type is part of the signature
        with pytest.raises(ValueError, match="must equal"):
            G.gemm(a, b.t())
        with pytest.raises(TypeError, match=r"must be a torch\.Tensor"):
            G.gemm(a, b.tolist())


def test_tf32_setting_is_part_of_the_signature(checks, device, monkeypatch):
    a = randn((40, 48), torch.float32, device)
    b = randn((48, 56), torch.float32, device)
    monkeypatch.setattr(G, "tf32_enabled", lambda: False)
    assert_gemm_close(G.gemm(a, b), a, b)
    monkeypatch.setattr(G, "tf32_enabled", lambda: True)
    assert_gemm_close(G.gemm(a, b), a, b, tf32=True)
    assert len(checks) == 2


def test_given_out_is_checked_every_call(checks, device):
    a = randn((40, 48), torch.float16, device)
    b = randn((48, 56), torch.float16, device)
    out = torch.empty(40, 56, dtype=torch.float16, device=device)
    for _ in range(2):
        smgemm.matmul(a, b, out=out)
    assert len(checks) == 2


@pytest.mark.parametrize("both", [False, True])
def test_mxfp4_repeat_calls(both, checks, device, monkeypatch):
    full = []
    real = G.check_backend
    monkeypatch.setattr(G, "check_backend", lambda d: (full.append(1), real(d))[1])
    for _ in range(3):
        x = randn((24, 64), torch.bfloat16, device)
        w = smgemm.quantize_mxfp4(randn((40, 64), torch.bfloat16, device))
        a = smgemm.quantize_mxfp4(x) if both else x
        out = G.gemm_mxfp4(a, w, num_sms=2)
        dense = a.dequantize(torch.float32) if both else x.float()
        assert_gemm_close(out, dense, w.dequantize(torch.float32).t())
    assert len(full) == 1
    with pytest.raises(TypeError, match="must be an MXFP4Tensor"):
        G.gemm_mxfp4(a, w.dequantize())
