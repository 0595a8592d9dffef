"""Inputs at the edges of what a GEMM library must get right: offsets past 2^31, negative-bit views, alpha == 0,
MXFP4 at the top of the e8m0 range, broadcast biases, sparse operands. Each is computed right or refused."""

import pytest
import torch

import smgemm
from reference import assert_gemm_close, randn
from smgemm._gemm import gemm_mxfp4
from smgemm.mxfp4 import MXFP4Tensor

SCHEDULES = ("data_parallel", "persistent", "streamk")
_STRIDE = 2**27 + 64  # 16 steps of it pass 2^31 elements


def _huge(dtype, device):
    """A storage of 2^32 + 2^16 elements, allocated lazily on the CPU (only the pages a test touches are real)."""
    return torch.empty(2**32 + 2**16, dtype=dtype, device=device)


def _offset_views(device):
    """(name, a, b) with an operand whose K offsets pass 2^31 elements, in both layouts and at two offsets."""
    big = _huge(torch.float16, device)
    cases = []
    for offset in (0, 2**31):
        b = big.as_strided((17, 32), (_STRIDE, 1), offset)  # b [K, N]: K is the slow dim
        b.copy_(torch.randn(17, 32))
        cases.append((f"b-rows-{offset}", randn((5, 17), torch.float16, device), b))
        a = big.as_strided((5, 17), (1, _STRIDE), offset + 64)  # a [M, K] column-major: K is the slow dim
        a.copy_(torch.randn(5, 17))
        cases.append((f"a-cols-{offset}", a, randn((17, 32), torch.float16, device)))
    return cases


def _check_offsets(device):
    for name, a, b in _offset_views(device):
        for schedule in SCHEDULES:
            out = smgemm.matmul(a, b, schedule=schedule, num_sms=3)
            assert_gemm_close(out, a, b), (name, schedule)
        c = randn((5, 32), torch.float32, device)
        assert_gemm_close(smgemm.addmm(c, a, b, beta=0.5), a, b, c=c, beta=0.5)


def test_offsets_past_2_31_along_k(device):
    if device == "cuda" and torch.cuda.get_device_properties(0).total_memory < 12 * 2**30:
        pytest.skip("needs 9 GB of GPU memory")
    _check_offsets(device)


def test_mxfp4_offsets_past_2_31(device):
    # dense activations read column by column (K the slow dim) beside an MXFP4 weight whose rows are 2^29 bytes apart
    big = _huge(torch.bfloat16, device)
    a = big.as_strided((3, 64), (1, 2**26 + 8), 0)
    a.copy_(torch.randn(3, 64))
    w = smgemm.quantize_mxfp4(torch.randn(6, 64))
    data = torch.empty(2**32 + 64, dtype=torch.uint8, device=device).as_strided((6, 32), (2**29 + 16, 1), 0)
    data.copy_(w.data)
    w_far = MXFP4Tensor(data, w.scales.to(device))
    ref = a.double() @ w.dequantize(torch.float64).to(device).t()
    for schedule in SCHEDULES:
        out = gemm_mxfp4(a, w_far, schedule=schedule, num_sms=2, expand=False)
        torch.testing.assert_close(out.double(), ref, rtol=2**-7, atol=1e-2)


def _neg_cases(device):
    a = randn((24, 40), torch.float16, device)
    b = randn((40, 16), torch.float16, device)
    c = randn((24, 16), torch.float32, device)
    return a, b, c


@pytest.mark.parametrize("which", ["a", "b", "input", "all", "conj-imag"])
def test_negative_views_are_resolved(which, device):
    a, b, c = _neg_cases(device)
    na = torch._neg_view(a) if which in ("a", "all") else a
    nb = torch._neg_view(b) if which in ("b", "all") else b
    nc = torch._neg_view(c) if which in ("input", "all") else c
    if which == "conj-imag":
        z = torch.complex(randn((24, 40), torch.float32, device), randn((24, 40), torch.float32, device))
        na = z.conj().imag  # a real view with the negative bit
        b = b.float()
        nb = b
        c = None
        nc = None
    assert na.is_neg() or nb.is_neg() or (nc is not None and nc.is_neg())
    for _ in range(2):  # the second call must not take a remembered fast path
        out = smgemm.addmm(nc, na, nb, beta=0.5) if nc is not None else smgemm.matmul(na, nb)
        assert_gemm_close(out, na.resolve_neg(), nb.resolve_neg(), c=None if nc is None else nc.resolve_neg(),
                          beta=0.5)
    # fp8 scales with the negative bit
    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    sa = torch.tensor([2.0], device=device)
    out = smgemm.matmul(a8, b8, scale_a=torch._neg_view(sa))
    assert_gemm_close(out, a8, b8, scale_a=-sa)


def test_negative_views_under_autograd(device):
    a = randn((8, 32), torch.float32, device).requires_grad_()
    b = randn((32, 16), torch.float32, device).requires_grad_()
    y = smgemm.matmul(torch._neg_view(a), b)
    ref = -(a.detach().double() @ b.detach().double())
    torch.testing.assert_close(y.double(), ref, rtol=1e-5, atol=1e-5)
    g = randn((8, 16), torch.float32, device)
    y.backward(g)
    torch.testing.assert_close(a.grad.double(), -(g.double() @ b.detach().double().t()), rtol=1e-5, atol=1e-5)


def test_alpha_zero_never_reads_the_product(device):
    a, b, c = randn((8, 32), torch.float16, device), randn((32, 16), torch.float16, device), randn((8, 16),
                                                                                                  torch.float16, device)
    a[0, 0], b[3, 2] = float("inf"), float("nan")
    for schedule in SCHEDULES:
        out = smgemm.addmm(c, a, b, alpha=0, beta=0.5, schedule=schedule)
        assert torch.equal(out, (c.float() * 0.5).half())
        assert torch.equal(smgemm.addmm(c, a, b, alpha=0.0, beta=0), torch.zeros_like(c))
    ref = torch.addmm(c.float().cpu(), a.float().cpu(), b.float().cpu(), alpha=0, beta=0.5)
    torch.testing.assert_close(out.float().cpu(), ref)
    # MXFP4: the same rule
    w = smgemm.quantize_mxfp4(torch.randn(16, 32)).to(device)
    x = randn((8, 32), torch.bfloat16, device)
    x[1, 1] = float("inf")
    cb = c.bfloat16()
    assert torch.equal(gemm_mxfp4(x, w, c=cb, alpha=0, beta=2.0), (cb.float() * 2).bfloat16())


@pytest.mark.parametrize("rounding", ["floor", "up"])
def test_mxfp4_top_of_the_range_stays_finite(rounding, device):
    fmax = torch.finfo(torch.float32).max
    x = torch.tensor([[3e38, fmax, -fmax, 2.0**127, 1.5 * 2.0**127, 1e38, -3e38, 1.0] * 4])
    q = smgemm.quantize_mxfp4(x, rounding=rounding)
    deq = q.dequantize(torch.float32)
    assert torch.isfinite(deq).all()
    big = x.abs() > 1e37  # the 1.0s share blocks with ~1e38 values: they quantize to 0
    assert torch.equal(torch.sign(deq[big]), torch.sign(x[big]))
    assert int(q.scales.max()) <= 254
    # each value is one of the largest finite representable ones: within 2x below the input
    assert (deq[big].abs() >= x[big].abs() / 2.0001).all()
    # a GEMM that picks single weight columns returns them, finite, as F.linear does
    w = smgemm.quantize_mxfp4(x.expand(16, 32).contiguous(), rounding=rounding).to(device)
    eye = torch.eye(32, dtype=torch.bfloat16, device=device)
    out = smgemm.linear(eye, w)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), w.dequantize(torch.bfloat16).float().t(), rtol=0, atol=0)


def test_mxfp4_floor_keeps_the_ocp_rule():
    # Far from the top, rounding "up" picks the smallest scale with amax / scale <= 6 and nothing saturates.
    x = torch.tensor([[7.0] + [0.0] * 31])
    assert smgemm.quantize_mxfp4(x, rounding="up").dequantize(torch.float32)[0, 0] == 8.0
    assert smgemm.quantize_mxfp4(x, rounding="floor").dequantize(torch.float32)[0, 0] == 6.0


@pytest.mark.parametrize("bias_shape", [(5,), (1, 5), (3, 5), (1,), (), (2, 3, 5), (1, 3, 1)])
def test_linear_bias_broadcasts(bias_shape, device):
    # Anything broadcastable to the output, as F.linear on 2-D inputs (F.linear refuses some of these for 3-D x)
    x = randn((2, 3, 8), torch.float32, device).requires_grad_()
    w = randn((5, 8), torch.float32, device).requires_grad_()
    bias = randn(bias_shape, torch.float32, device).requires_grad_()
    out = smgemm.linear(x, w, bias)
    xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, w, bias))
    ref = xd @ wd.t() + bd
    torch.testing.assert_close(out.double(), ref.detach(), rtol=1e-5, atol=1e-5)
    g = randn(tuple(out.shape), torch.float32, device)
    out.backward(g)
    ref.backward(g.double())
    for got, want in ((x.grad, xd.grad), (w.grad, wd.grad), (bias.grad, bd.grad)):
        assert got.shape == want.shape
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_fp32_input_with_fp16_operands_is_added_in_fp32(device):
    # torch.addmm refuses the mix; smgemm reads input in its own dtype and adds it in fp32.
    a, b = randn((8, 32), torch.float16, device), randn((32, 16), torch.float16, device)
    c = randn((8, 16), torch.float32, device) * 1000
    out = smgemm.addmm(c, a, b, beta=1.0)
    assert out.dtype == torch.float16
    assert_gemm_close(out, a, b, c=c, beta=1.0)


def test_a_build_short_of_shared_memory_runs_with_fewer_stages(monkeypatch):
    # Triton refuses a specialisation that needs more shared memory than the device has before anything runs:
    # the launch is built again with one stage fewer, and that launcher serves the key from then on.
    from triton.runtime.errors import OutOfResources

    import smgemm._launch as G

    class Kernel:
        """Compiles only with at most `fits` stages; records the stage counts tried."""

        def __init__(self, fits):
            self.fits, self.tried = fits, []

        def __getitem__(self, grid):
            return self.launch

        def launch(self, *args, num_stages, **opts):
            self.tried.append(num_stages)
            if num_stages > self.fits:
                raise OutOfResources(237592, 232448, "shared memory")
            return {(4, 1, 1): lambda *a, **k: None}  # a compiled kernel's launch grid lookup

    monkeypatch.setattr(G, "LAUNCHERS", {})
    kernel = Kernel(fits=2)
    launcher = G.run_cached(kernel, 4, (), {}, 0, "key", num_warps=4, num_stages=4)
    assert kernel.tried == [4, 3, 2] and G.LAUNCHERS["key"] is launcher
    with pytest.raises(OutOfResources):  # nothing fits: Triton's own error
        G.run_cached(Kernel(fits=0), 4, (), {}, 0, "other", num_warps=4, num_stages=3)
    monkeypatch.setattr(G, "LAUNCHERS_MAX", 3)  # the cache of launchers is bounded
    for key in range(10):
        G.run_cached(Kernel(fits=4), 4, (), {}, 0, key, num_warps=4, num_stages=2)
        assert len(G.LAUNCHERS) <= 3 and key in G.LAUNCHERS


def test_a_cached_launch_passes_addresses(monkeypatch):
    # Triton's C launch function, given a tensor, calls its data_ptr through Python and queries the driver: cached
    # launches give it every tensor as its address instead, and the scratch for device-built descriptors too.
    import smgemm._launch as G

    launched = []

    class Run:
        profile_scratch_size, launch_cooperative_grid, launch_pdl, num_ctas, global_scratch_size = 0, 0, 0, 1, 64

        def launch(self, *args):
            launched.append(args)

    class Compiled:
        run, function, packed_metadata = Run(), "function", "metadata"

        def __getitem__(self, grid):
            return None

    class Kernel:
        def __getitem__(self, grid):
            return lambda *args, **opts: Compiled()

    monkeypatch.setattr(G, "LAUNCHERS", {})
    monkeypatch.setattr(G, "_scratch", lambda size, alignment, stream: torch.empty(size, dtype=torch.int8))
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 7, raising=False)
    a, b = torch.zeros(4), torch.ones(4)
    G.run_cached(Kernel(), 3, (a, 5, b), {"BLOCK": 16}, 0, "key")  # compiles (the kernel's own launch)
    assert not launched
    G.run_cached(Kernel(), 3, (a, 5, b), {"BLOCK": 16}, 0, "key")
    (call,) = launched
    assert call[:5] == (3, 1, 1, 7, "function") and isinstance(call[7], int)  # grid, stream; scratch address
    assert call[-4:] == (a.data_ptr(), 5, b.data_ptr(), 16)
    tensors = (a, b, torch.empty(2), torch.empty(2))
    assert G.addresses(tensors) == tuple(t.data_ptr() for t in tensors)
    assert G.addresses((a, b, tensors[2], tensors[2]))[3] == tensors[2].data_ptr()


@pytest.mark.gpu
def test_gpu_silent_wrong_answer_regressions():
    # The three that were wrong on the H200: K offsets past 2^31, negative views, alpha == 0.
    test_offsets_past_2_31_along_k("cuda")
    for which in ("a", "b", "input", "all", "conj-imag"):
        test_negative_views_are_resolved(which, "cuda")
    test_alpha_zero_never_reads_the_product("cuda")
