"""The ring kernel (`kernels.mx_ring`, Gluon on Hopper under Triton 3.6): the planner's route for one bf16 activation
row times a "hopper" MXFP4 weight, checked against float64 products of the dequantized values (exact, so the bound
is the dense one: tests/reference.py) through first calls, repeats, CUDA graphs and the scales the folded
expansion cannot hold. The route's rule is tested on the CPU in test_plan.py."""

import pytest
import torch

import smgemm
import smgemm._gemm
import smgemm._launch
from reference import assert_gemm_close, randn
from smgemm._device import device_spec
from smgemm._gemm import gemm_mxfp4
from smgemm._ring import RingLaunch, available
from smgemm.plan import mx_ring_split

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or not available(torch.device("cuda"))
                       or torch.cuda.get_device_capability() != (9, 0),
                       reason="needs Triton 3.6 and a Hopper GPU"),
]


def _hopper_weight(n, k, scale=1.0):
    return smgemm.quantize_mxfp4(torch.randn(n, k, device="cuda") * scale, layout="hopper")


def _rings() -> list:
    return [seen[-1] for seen in smgemm._gemm._SEEN_CALLS.values() if isinstance(seen[-1], RingLaunch)]


@pytest.mark.parametrize("n,k,split", [(6144, 1024, 1), (4096, 4096, 2), (4096, 14336, 4), (14336, 4096, 1)],
                         ids=str)
def test_planned_ring_matches_float64_first_call_and_repeats(n, k, split):
    assert mx_ring_split(1, n, k, device_spec(torch.device("cuda")), None, "hopper", torch.bfloat16, False) == split
    smgemm._gemm._SEEN_CALLS.clear()
    w = _hopper_weight(n, k)
    x = randn((1, k), torch.bfloat16, "cuda")
    first = smgemm.linear(x, w)
    assert [ring.split for ring in _rings()] == [split]  # the call took the ring kernel
    assert_gemm_close(first, x, w.dequantize(torch.float32).t())
    for _ in range(3):  # the cached launcher with host-built descriptors
        assert torch.equal(smgemm.linear(x, w), first)
    x2 = randn((1, k), torch.bfloat16, "cuda")  # another activation row at another address
    assert_gemm_close(smgemm.linear(x2, w), x2, w.dequantize(torch.float32).t())
    assert len(_rings()) == 1


def test_ring_alpha_and_given_out():
    n, k = 4096, 4096
    w = _hopper_weight(n, k)
    x = randn((1, k), torch.bfloat16, "cuda")
    out = torch.full((1, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    y = gemm_mxfp4(x, w, alpha=0.5, out=out)
    assert y.data_ptr() == out.data_ptr()
    assert_gemm_close(y, x, w.dequantize(torch.float32).t(), alpha=0.5)
    smgemm._gemm._SEEN_CALLS.clear()
    gemm_mxfp4(x, w, alpha=2.0)
    assert_gemm_close(gemm_mxfp4(x, w, alpha=0.25), x, w.dequantize(torch.float32).t(), alpha=0.25)  # a repeat


def test_scales_beyond_the_fold_rerun_unfolded_and_nan_scales_propagate():
    n, k = 4096, 2048
    w = torch.randn(n, k, device="cuda")
    w[64:128] *= 2.0**60  # one tile's scales ~ 2^62: beyond the folded expansion's 2^1
    w[200:260] *= 2.0**-100  # tiny scales (still in bf16's range after the product)
    w[300:310] *= 2.0**1.5  # scales of 128 (2^1, still foldable) among others: a tile that may rerun, exact either way
    w = smgemm.quantize_mxfp4(w, layout="hopper")
    assert int(w.scales[64:128].min()) > 128 and int(w.scales[:64].max()) <= 128
    assert int(w.scales[256:320].max()) == 128
    x = randn((1, k), torch.bfloat16, "cuda")
    assert_gemm_close(smgemm.linear(x, w), x, w.dequantize(torch.float32).t())
    w.scales[5, 3] = 255  # NaN: row 5's output is NaN, and only it
    y = smgemm.linear(x, w)
    ref_w = w.dequantize(torch.float32)
    nan_rows = torch.isnan(ref_w).any(dim=1)
    assert nan_rows.nonzero().flatten().tolist() == [5]
    assert torch.isnan(y[0]).tolist() == nan_rows.tolist()
    keep = ~nan_rows
    assert_gemm_close(y[:, keep], x, ref_w[keep].t())


def test_ring_in_a_cuda_graph():
    n, k = 4096, 14336
    w = _hopper_weight(n, k)
    x = randn((1, k), torch.bfloat16, "cuda")
    expected = smgemm.linear(x, w)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        smgemm.linear(x, w)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        captured = smgemm.linear(x, w)
    for _ in range(3):  # the splits' flags are reset by their reader: every replay finds them clear
        captured.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, expected)
    x.copy_(randn((1, k), torch.bfloat16, "cuda"))
    graph.replay()
    torch.cuda.synchronize()
    assert_gemm_close(captured, x, w.dequantize(torch.float32).t())


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_other_output_dtypes_take_the_tl_kernels_before_and_after_the_ring(out_dtype):
    # the ring stores bf16: another out_dtype is the tl plans' (its launch is never reused for them), either order
    n, k = 4096, 4096
    w = _hopper_weight(n, k)
    x = randn((1, k), torch.bfloat16, "cuda")
    ref_w = w.dequantize(torch.float32).t()
    for first in (out_dtype, torch.bfloat16):
        smgemm._gemm._SEEN_CALLS.clear()
        smgemm._launch.LAUNCHERS.clear()
        for dtype in (first, torch.bfloat16 if first != torch.bfloat16 else out_dtype):
            out = torch.full((1, n), float("nan"), dtype=dtype, device="cuda")
            y = gemm_mxfp4(x, w, out=out, out_dtype=dtype)
            assert y.dtype == dtype
            assert_gemm_close(y, x, ref_w)
            if dtype != torch.bfloat16:  # not rounded to bf16 on the way (the ring's store would have)
                assert (y.float() != y.float().bfloat16().float()).any()
            z = gemm_mxfp4(x, w, out_dtype=dtype)
            assert z.dtype == dtype and torch.equal(z, y)
        assert [ring.split for ring in _rings()] == [2]  # the bf16 call only


def test_route_left_to_the_tl_kernels_under_a_budget_with_a_bias_or_fp16():
    n, k = 4096, 4096
    w = _hopper_weight(n, k)
    x = randn((1, k), torch.bfloat16, "cuda")
    bias = randn((n,), torch.bfloat16, "cuda")
    smgemm._gemm._SEEN_CALLS.clear()
    ref_w = w.dequantize(torch.float32).t()
    assert_gemm_close(smgemm.linear(x, w, num_sms=66), x, ref_w)
    assert_gemm_close(smgemm.linear(x, w, bias), x, ref_w, c=bias.reshape(1, -1), beta=1.0)
    x16 = randn((1, k), torch.float16, "cuda")
    assert_gemm_close(smgemm.linear(x16, w), x16, w.dequantize(torch.float32).t())
    assert _rings() == []
