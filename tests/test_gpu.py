"""GPU-only checks: the SM budget observed with %smid, large shapes, 64-bit offsets, streams, other devices."""

import pytest
import torch

import smgemm
from reference import assert_gemm_close, randn
from smgemm._device import device_spec
from smgemm._gemm import gemm
from smgemm.plan import make_plan

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("num_sms", [1, 3, 8, 32, 66, 100])
@pytest.mark.parametrize("schedule", ["auto", "data_parallel", "persistent", "streamk"])
def test_sm_budget_is_observed(num_sms, schedule):
    m = n = 4096
    k = 1024
    a = randn((m, k), torch.bfloat16, "cuda")
    b = randn((k, n), torch.bfloat16, "cuda")
    plan = make_plan(m, n, k, torch.bfloat16, device_spec(a.device), schedule=schedule, num_sms=num_sms)
    assert plan.num_tiles > num_sms  # a budget that actually binds
    smids = torch.full((plan.num_programs,), -1, dtype=torch.int32, device="cuda")
    out = gemm(a, b, schedule=schedule, num_sms=num_sms, smid_out=smids)
    torch.cuda.synchronize()
    seen = set(smids.tolist())
    assert -1 not in seen, "every program records its SM"
    assert len(seen) <= num_sms, f"{len(seen)} distinct SMs used with num_sms={num_sms}"
    assert plan.num_programs <= num_sms
    assert_gemm_close(out, a, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn])
@pytest.mark.parametrize("shape", [(16, 4096, 4096), (1000, 2000, 3000), (4096, 4096, 4096), (257, 8191, 520)],
                         ids=str)
@pytest.mark.parametrize("num_sms", [None, 40])
def test_large_shapes_default_plans(dtype, shape, num_sms):
    m, n, k = shape
    a = randn((m, k), dtype, "cuda")
    b = randn((n, k), dtype, "cuda", transposed=False).t()
    out = smgemm.matmul(a, b, num_sms=num_sms)
    assert_gemm_close(out, a, b)


@pytest.mark.parametrize("tf32", [False, True])
def test_fp32_follows_torch_tf32_setting(tf32, monkeypatch):
    monkeypatch.setattr(torch.backends.cuda.matmul, "fp32_precision", "tf32" if tf32 else "ieee")
    a, b = randn((512, 1024), torch.float32, "cuda"), randn((1024, 768), torch.float32, "cuda")
    assert_gemm_close(smgemm.matmul(a, b), a, b, tf32=tf32)


def test_epilogue_on_gpu():
    a, b = randn((300, 200), torch.float16, "cuda"), randn((200, 500), torch.float16, "cuda", transposed=True)
    c = randn((300, 500), torch.float16, "cuda")
    c0 = c.clone()
    smgemm.addmm(c, a, b, alpha=0.75, beta=-2.0, out=c, num_sms=7)
    assert_gemm_close(c, a, b, alpha=0.75, beta=-2.0, c=c0)
    bias = randn((500,), torch.float32, "cuda")
    assert_gemm_close(smgemm.addmm(bias, a, b), a, b, beta=1.0, c=bias)


def test_cached_launcher_respects_alignment_and_strides():
    # The second call of a key takes the cached launcher; a misaligned or differently strided call must not.
    base = randn((4 * 300 * 200 + 8,), torch.float16, "cuda")
    b = randn((200, 96), torch.float16, "cuda")
    for offset in (0, 0, 1, 1, 8):  # 1 element = 2 bytes: the pointer is no longer 16-byte aligned
        a = base[offset:offset + 300 * 200].view(300, 200)
        assert_gemm_close(smgemm.matmul(a, b), a, b)
    for a in (base[: 300 * 400].view(300, 400)[:, :200], base[: 200 * 300].view(200, 300).t()):
        for _ in range(2):
            assert_gemm_close(smgemm.matmul(a, b), a, b)


@pytest.mark.parametrize("shape", [(16, 64, 64), (1024, 1024, 1024)], ids=str)  # pointer path; TMA (scratch)
def test_cached_launches_still_call_triton_launch_hooks(shape):
    # Repeat calls launch through Triton's C launch function directly, unless a launch hook (a profiler) is set.
    from triton import knobs

    m, n, k = shape
    a, b = randn((m, k), torch.bfloat16, "cuda"), randn((n, k), torch.bfloat16, "cuda").t()
    for _ in range(2):
        assert_gemm_close(smgemm.matmul(a, b), a, b)
    seen = []
    hook = seen.append
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        assert_gemm_close(smgemm.matmul(a, b), a, b)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert len(seen) == 1
    assert_gemm_close(smgemm.matmul(a, b), a, b)
    assert len(seen) == 1


def test_offsets_beyond_int32():
    # A view whose last element sits 2^31+ elements past its first: 32-bit offsets would wrap.
    big = torch.empty((8, 2**28 + 1), dtype=torch.bfloat16, device="cuda")
    a = big[:, :96]
    a.copy_(torch.randn(8, 96, device="cuda"))
    b = randn((96, 64), torch.bfloat16, "cuda")
    assert_gemm_close(smgemm.matmul(a, b), a, b)
    del big


def test_two_streams_at_once():
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    ops = [(randn((1024, 512), torch.float16, "cuda"), randn((512, 2048), torch.float16, "cuda"))
           for _ in range(2)]
    torch.cuda.synchronize()
    outs = []
    for s, (a, b) in zip((s1, s2), ops):
        with torch.cuda.stream(s):
            outs.append(smgemm.matmul(a, b, num_sms=50))
    torch.cuda.synchronize()
    for out, (a, b) in zip(outs, ops):
        assert_gemm_close(out, a, b)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs a second GPU")
@pytest.mark.parametrize("path", ["pointer", "hopper", "streamk", "mx_fused", "mx_two_pass", "mx_ring", "fp8"])
def test_every_launch_path_on_the_second_gpu_while_cuda0_is_current(path):
    """Each kind of launch (pointer tiles, the Hopper path's device-built descriptors in Triton's scratch, a Stream-K
    workspace, the fused and two-pass MXFP4 kernels, the ring kernel where it runs, fp8 with scales) on cuda:1 while
    cuda:0 is current: first call, repeat calls (the cached direct launch) and a CUDA graph captured on cuda:1; the
    same call on cuda:0 in between must not share a cached launch with it."""
    shapes = {"pointer": (100, 200, 300), "hopper": (1024, 2048, 512), "streamk": (256, 384, 8192),
              "mx_fused": (16, 4096, 512), "mx_two_pass": (1024, 512, 512), "mx_ring": (1, 4096, 4096),
              "fp8": (512, 1024, 1024)}
    m, n, k = shapes[path]

    def operands(device):
        if path.startswith("mx"):
            x = randn((m, k), torch.bfloat16, device)
            w = smgemm.quantize_mxfp4(torch.randn(n, k, device=device), layout="hopper" if path == "mx_ring" else "ocp")
            return (x, w), lambda: smgemm.linear(x, w), (x, w.dequantize(torch.float32).t())
        dtype = torch.float8_e4m3fn if path == "fp8" else torch.bfloat16
        a = randn((m, k), torch.float32, device).to(dtype)
        b = randn((n, k), torch.float32, device).to(dtype).t()
        if path == "fp8":
            sa = torch.rand(m, 1, device=device) + 0.5
            sb = torch.rand(1, n, device=device) + 0.5
            return (a, b), lambda: smgemm.matmul(a, b, scale_a=sa, scale_b=sb), (a, b, sa, sb)
        return (a, b), lambda: smgemm.matmul(a, b), (a, b)

    def check(out, ref):
        if path == "fp8":
            a, b, sa, sb = ref
            assert_gemm_close(out, a, b, scale_a=sa, scale_b=sb)
        else:
            assert_gemm_close(out, *ref)

    _, call1, ref1 = operands("cuda:1")
    _, call0, ref0 = operands("cuda:0")
    with torch.cuda.device(0):
        first = call1()
        assert first.device == torch.device("cuda:1")
        check(first, ref1)
        check(call0(), ref0)  # same signature but cuda:0: its own plan and launcher
        for _ in range(3):
            assert torch.equal(call1(), first)
    # torch.cuda.graph without `stream=` captures on one process-wide stream, created on the device current at its
    # first use: created under cuda:1 it breaks every later capture on cuda:0 (pure torch too, torch 2.11). So the
    # capture gets a stream of cuda:1 explicitly.
    side = torch.cuda.Stream(device=1)
    side.wait_stream(torch.cuda.current_stream(1))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side):  # warm-up on the capture stream
        call1()
    with torch.cuda.graph(graph, stream=side):
        captured = call1()
    with torch.cuda.device(1):
        captured.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
    assert torch.equal(captured, first)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs a second GPU")
def test_second_gpu():
    with torch.cuda.device(0):
        a = randn((333, 256), torch.bfloat16, "cuda:1")
        b = randn((256, 444), torch.bfloat16, "cuda:1")
        out = smgemm.matmul(a, b, num_sms=20)
    assert out.device == torch.device("cuda:1")
    assert_gemm_close(out, a, b)


@pytest.mark.parametrize("m", [1, 16, 64, 128])
@pytest.mark.parametrize("layout", ["ocp", "hopper", "kwords"])
@pytest.mark.parametrize("num_sms", [3, 32, 66])
@pytest.mark.parametrize("schedule", ["auto", "persistent", "streamk"])
def test_mxfp4_sm_budget_is_observed(m, layout, num_sms, schedule):
    """The MXFP4 kernels (decode, swapped, word-layout expansion) keep to the budget as every GEMM does."""
    from smgemm._gemm import gemm_mxfp4
    from smgemm.plan import make_mx_plan

    n, k = 32768, 512
    x = randn((m, k), torch.bfloat16, "cuda")
    w = smgemm.quantize_mxfp4(torch.randn(n, k, device="cuda"), layout=layout)
    plan = make_mx_plan(m, n, k, torch.bfloat16, device_spec(x.device), schedule=schedule, num_sms=num_sms,
                        layout=layout)
    assert plan.num_tiles > num_sms and plan.num_programs <= num_sms
    smids = torch.full((plan.num_programs,), -1, dtype=torch.int32, device="cuda")
    out = gemm_mxfp4(x, w, schedule=schedule, num_sms=num_sms, smid_out=smids)
    torch.cuda.synchronize()
    seen = set(smids.tolist())
    assert -1 not in seen and len(seen) <= num_sms, (len(seen), num_sms)
    assert_gemm_close(out, x, w.dequantize(torch.float32).t())
