"""PyTorch integration: custom ops, torch.compile, autograd, sm_budget, smgemm.nn (CPU through the interpreter)."""

import pytest
import torch

import smgemm
import smgemm._library
from reference import assert_gemm_close, randn

GEMM = torch.ops.smgemm.gemm.default
GEMM_OUT = torch.ops.smgemm.gemm_out.default


@pytest.fixture
def calls(monkeypatch):
    """The (schedule, num_sms, operand strides) of every kernel call that goes through the custom ops."""
    seen = []
    real = smgemm._library.gemm

    def spy(a, b, **kw):
        seen.append((kw["schedule"], kw["num_sms"], a.stride(), b.stride()))
        return real(a, b, **kw)

    monkeypatch.setattr(smgemm._library, "gemm", spy)
    return seen


# ---------------------------------------------------------------- custom ops


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck_gemm(dtype, device):
    a = randn((12, 20), dtype, device).requires_grad_()
    b = randn((16, 20), dtype, device).t().requires_grad_()  # a column-major view
    bias = randn((16,), dtype, device).requires_grad_()
    torch.library.opcheck(GEMM, (a, b, bias, 0.5, 2.0, None, None, None, "auto", None))
    torch.library.opcheck(GEMM, (a, b, None, 1.0, 0.0, torch.float32, None, None, "streamk", 3))


def test_opcheck_gemm_out(device):
    a, b = randn((12, 20), torch.float16, device), randn((20, 16), torch.float16, device)
    out = torch.empty((12, 16), dtype=torch.float16, device=device)
    torch.library.opcheck(GEMM_OUT, (a, b, None, 1.0, 0.0, None, None, "persistent", 2, out))


def test_opcheck_bmm_mxfp4_and_the_twins_without_autograd(device):
    """The batched and MXFP4 ops with their autograd, and each op's twin without autograd (what compiled graphs call):
    schema, fake kernel against the real one, and AOTAutograd with dynamic shapes."""
    a3 = randn((2, 8, 16), torch.float16, device).requires_grad_()
    b3 = randn((2, 16, 12), torch.float16, device)
    w = smgemm.quantize_mxfp4(torch.randn(12, 64)).to(device)
    x = randn((8, 64), torch.float16, device).requires_grad_()
    a, b = randn((8, 16), torch.float32, device), randn((16, 12), torch.float32, device)
    twins = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")  # no autograd to register
    torch.library.opcheck(torch.ops.smgemm.bmm.default, (a3, b3, None, 1.0, 0.0, None, "auto", None))
    torch.library.opcheck(torch.ops.smgemm.gemm_mxfp4.default,
                          (x, None, w.data, w.scales, None, 1.0, 0.0, None, "auto", None, "ocp", w.layout))
    torch.library.opcheck(torch.ops.smgemm.gemm_nograd.default, (a, b, None, 0.5, 2.0, None, None, None, "auto", 3),
                          test_utils=twins)
    torch.library.opcheck(torch.ops.smgemm.bmm_nograd.default, (a3.detach(), b3, None, 1.0, 0.0, None, "auto", None),
                          test_utils=twins)
    torch.library.opcheck(torch.ops.smgemm.gemm_mxfp4_nograd.default,
                          (x.detach(), None, w.data, w.scales, None, 1.0, 0.0, None, "auto", None, "ocp", w.layout),
                          test_utils=twins)


def _counting(backend="aot_eager"):
    from torch._dynamo.testing import CompileCounterWithBackend

    return CompileCounterWithBackend(backend)


def test_compile_fullgraph_no_recompile_and_dynamic_m(device, calls):
    torch._dynamo.reset()
    w = randn((24, 40), torch.float16, device)
    bias = randn((24,), torch.float16, device)

    def f(x):
        return torch.relu(smgemm.linear(x, w, bias)) * 2.0

    counter = _counting()
    cf = torch.compile(f, backend=counter, fullgraph=True)
    for m in (8, 8, 8):
        x = randn((m, 40), torch.float16, device)
        torch.testing.assert_close(cf(x), f(x), rtol=0, atol=0)
    assert counter.frame_count == 1, "repeated calls of one shape must not recompile"
    x = randn((20, 40), torch.float16, device)
    torch._dynamo.mark_dynamic(x, 0)
    torch.testing.assert_close(cf(x), f(x), rtol=0, atol=0)
    frames = counter.frame_count
    for m in (5, 33):
        x = randn((m, 40), torch.float16, device)
        torch.testing.assert_close(cf(x), f(x), rtol=0, atol=0)
    assert counter.frame_count == frames, "a dynamic M must not recompile"
    assert all(schedule == "auto" for schedule, *_ in calls)


def test_compile_with_inductor(device):
    torch._dynamo.reset()
    a, b = randn((16, 32), torch.float32, device), randn((32, 24), torch.float32, device)
    c = randn((16, 24), torch.float32, device)

    def f(a, b, c):
        return smgemm.addmm(c, a, b, alpha=0.5, beta=2.0, num_sms=3).sin()

    torch.testing.assert_close(torch.compile(f, fullgraph=True)(a, b, c), f(a, b, c))


def test_compile_out_variant(device):
    torch._dynamo.reset()
    a, b = randn((16, 32), torch.float32, device), randn((32, 24), torch.float32, device)

    def f(a, b, out):
        smgemm.matmul(a, b, out=out)
        return out + 1

    out = torch.full((16, 24), float("nan"), device=device)
    res = torch.compile(f, backend=_counting(), fullgraph=True)(a, b, out)
    assert_gemm_close(out, a, b)
    torch.testing.assert_close(res, out + 1)


def test_errors_surface_while_tracing(device):
    torch._dynamo.reset()
    a, b = randn((8, 16), torch.float32, device), randn((12, 8), torch.float32, device)
    with pytest.raises(Exception, match=r"a.shape\[1\] \(K=16\) must equal b.shape\[0\]"):
        torch.compile(smgemm.matmul, backend="aot_eager", fullgraph=True)(a, b)


# ---------------------------------------------------------------- sm_budget and modules


def test_sm_budget_block_nests_and_explicit_args_win(device, calls):
    a, b = randn((8, 16), torch.float32, device).requires_grad_(), randn((16, 8), torch.float32, device)
    with smgemm.sm_budget(7, schedule="persistent"):
        smgemm.matmul(a, b)
        with smgemm.sm_budget(3):
            smgemm.matmul(a, b)
            smgemm.matmul(a, b, num_sms=5, schedule="streamk")
        smgemm.matmul(a, b)
    smgemm.matmul(a, b)
    assert [(s, n) for s, n, *_ in calls] == [("persistent", 7), ("persistent", 3), ("streamk", 5),
                                                ("persistent", 7), ("auto", None)]
    with pytest.raises(ValueError, match="num_sms must be None or an int >= 1"):
        smgemm.sm_budget(0).__enter__()


def test_sm_budget_under_compile_recompiles_on_change(device, calls):
    torch._dynamo.reset()
    a, b = randn((8, 16), torch.float32, device), randn((16, 8), torch.float32, device)
    counter = _counting()
    cf = torch.compile(lambda a, b: smgemm.matmul(a, b) + 1, backend=counter, fullgraph=True)
    with smgemm.sm_budget(4):
        cf(a, b)
    with smgemm.sm_budget(6):
        cf(a, b)
    cf(a, b)

    def inner(a, b):
        with smgemm.sm_budget(2):
            x = smgemm.matmul(a, b)
        return smgemm.matmul(x, b.t())

    torch.compile(inner, backend="aot_eager", fullgraph=True)(a, b)
    assert [n for _, n, *_ in calls] == [4, 6, None, 2, None]


def test_nn_linear_from_linear_shares_parameters(device):
    ref = torch.nn.Linear(40, 24, device=device)
    lin = smgemm.nn.Linear.from_linear(ref, num_sms=3)
    assert lin.weight is ref.weight and lin.bias is ref.bias
    assert lin.state_dict().keys() == ref.state_dict().keys()
    assert "num_sms=3" in repr(lin)
    x = randn((2, 5, 40), torch.float32, device)
    y = lin(x)
    assert y.shape == (2, 5, 24)
    assert_gemm_close(y.reshape(10, 24), x.reshape(10, 40), ref.weight.detach().t(), beta=1.0, c=ref.bias.detach())
    fresh = smgemm.nn.Linear(40, 24, bias=False, device=device, dtype=torch.float16, schedule="streamk")
    assert fresh.bias is None and fresh.weight.dtype == torch.float16
    with pytest.raises(TypeError, match=r"must be a torch\.nn\.Linear"):
        smgemm.nn.Linear.from_linear(torch.nn.Conv1d(1, 1, 1))


def test_swap_linears_with_filter(device, calls):
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(),
        torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 8)),
    ).to(device)
    x = randn((4, 16), torch.float32, device)
    expected = model(x)
    names = smgemm.nn.swap_linears(model, filter=lambda name, m: m.out_features == 32, num_sms=2)
    assert names == ["0", "2.0"]
    assert isinstance(model[0], smgemm.nn.Linear) and isinstance(model[2][0], smgemm.nn.Linear)
    assert type(model[2][1]) is torch.nn.Linear
    with torch.no_grad():
        torch.testing.assert_close(model(x), expected, rtol=1e-5, atol=1e-5)
    assert calls == []  # nothing for autograd to record: the kernel is called without the dispatcher
    model(x.requires_grad_()).sum().backward()
    assert [n for _, n, *_ in calls] == [2, 2, 2, 2, 2, 2]  # 2 forwards + 2 x 2 gradient GEMMs, all on 2 SMs


# ---------------------------------------------------------------- autograd


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("b_layout", ["row", "col"])
def test_addmm_gradients(dtype, b_layout, device, calls):
    m, k, n = 20, 24, 12
    a = randn((m, k), dtype, device).requires_grad_()
    b = randn((k, n), dtype, device, transposed=b_layout == "col").detach().requires_grad_()
    bias = randn((n,), dtype, device).requires_grad_()
    y = smgemm.addmm(bias, a, b, alpha=0.5, beta=-2.0)
    g = randn((m, n), dtype, device)
    y.backward(g)
    # Each gradient is itself a GEMM: check it element by element against float64 with the GEMM error bound.
    assert_gemm_close(a.grad, g, b.detach().t(), alpha=0.5)
    assert_gemm_close(b.grad, a.detach().t(), g, alpha=0.5)
    torch.testing.assert_close(bias.grad.double(), -2.0 * g.double().sum(0), rtol=1e-2, atol=1e-2)
    assert b.grad.stride() == b.stride(), "the gradient has its input's layout"
    # Backward ran 2 smgemm GEMMs on strided views (no transposed copies): a transposed operand shows stride 1
    # along its first dimension.
    assert len(calls) == 3
    assert all(1 in sa and 1 in sb for _, _, sa, sb in calls)


def test_linear_gradients_match_torch(device):
    x = randn((3, 5, 16), torch.float32, device).requires_grad_()
    lin = torch.nn.Linear(16, 8, device=device)
    ours = smgemm.nn.Linear.from_linear(lin)
    grads = []
    for module in (lin, ours):
        x.grad = None
        lin.zero_grad()
        module(x).square().sum().backward()
        grads.append((x.grad.clone(), lin.weight.grad.clone(), lin.bias.grad.clone()))
    for ours_g, torch_g in zip(grads[1], grads[0]):
        torch.testing.assert_close(ours_g, torch_g, rtol=1e-5, atol=1e-5)
    assert lin.weight.grad.is_contiguous()


def test_matmul_double_backward(device):
    a = randn((6, 8), torch.float32, device).requires_grad_()
    b = randn((8, 5), torch.float32, device).requires_grad_()
    (ga,) = torch.autograd.grad(smgemm.matmul(a, b).sum(), a, create_graph=True)
    (gb,) = torch.autograd.grad(ga.square().sum(), b)
    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    (ga64,) = torch.autograd.grad((a64 @ b64).sum(), a64, create_graph=True)
    (gb64,) = torch.autograd.grad(ga64.square().sum(), b64)
    torch.testing.assert_close(gb.double(), gb64, rtol=1e-4, atol=1e-4)


def test_out_with_grad_is_an_error(device):
    a = randn((4, 8), torch.float32, device).requires_grad_()
    b = randn((8, 4), torch.float32, device)
    with pytest.raises(RuntimeError, match="out= do not support automatic differentiation"):
        smgemm.matmul(a, b, out=torch.empty(4, 4, device=device))
    with torch.no_grad():
        smgemm.matmul(a, b, out=torch.empty(4, 4, device=device))


def test_fp8_autograd_is_refused(device):
    a = randn((4, 32), torch.float8_e4m3fn, device)
    b = randn((32, 4), torch.float8_e4m3fn, device)
    sa = torch.tensor(2.0, device=device, requires_grad=True)
    y = smgemm.matmul(a, b, scale_a=sa)
    with pytest.raises(NotImplementedError, match="float8"):
        y.float().sum().backward()


def test_compiled_backward(device):
    torch._dynamo.reset()
    w = randn((8, 16), torch.float32, device).requires_grad_()
    x = randn((4, 16), torch.float32, device).requires_grad_()
    cf = torch.compile(lambda x: smgemm.linear(x, w).square().sum(), backend="aot_eager", fullgraph=True)
    cf(x).backward()
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    torch.nn.functional.linear(x, w).square().sum().backward()
    torch.testing.assert_close(gx, x.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gw, w.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("batched", [False, True])
def test_compiled_graphs_call_the_ops_without_autograd(batched, device):
    """What a compiled graph calls at run time is `smgemm::*_nograd` (`_library._define`): Dynamo's graph of a call that
    autograd need not record, and AOTAutograd's forward and backward graphs of one it must; the differentiable op
    stays in Dynamo's graph only where it records. Both give the same results and gradients (test_compiled_backward)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    name = "smgemm.bmm" if batched else "smgemm.gemm"
    shapes = ((2, 4, 16), (2, 16, 8)) if batched else ((4, 16), (8, 16))
    x, y = (randn(shape, torch.float32, device) for shape in shapes)
    fn = smgemm.bmm if batched else smgemm.linear
    dynamo, forward, backward = [], [], []

    def targets(graphs, gm, boxed=True):
        graphs.append({str(node.target) for node in gm.graph.nodes if node.op == "call_function"})
        return make_boxed_func(gm.forward) if boxed else gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(fn, backend=lambda gm, inputs: targets(dynamo, gm, False), fullgraph=True)(x, y)
    assert f"{name}_nograd.default" in dynamo[0] and f"{name}.default" not in dynamo[0]
    torch._dynamo.reset()
    aot = aot_autograd(fw_compiler=lambda gm, inputs: targets(forward, gm),
                       bw_compiler=lambda gm, inputs: targets(backward, gm))
    recorded = torch.compile(fn, backend=lambda gm, inputs: (targets(dynamo, gm, False), aot(gm, inputs))[1],
                             fullgraph=True)
    recorded(x.clone().requires_grad_(), y).sum().backward()
    assert f"{name}.default" in dynamo[1]
    assert f"{name}_nograd.default" in forward[0] and f"{name}.default" not in forward[0]
    assert f"{name}_nograd.default" in backward[0] and f"{name}.default" not in backward[0]


@pytest.mark.gpu
def test_reduce_overhead_graphs_replay_the_twins():
    """torch.compile's CUDA graphs (mode="reduce-overhead": inductor with cudagraph trees) over a layer under no_grad,
    the serving case: the graph's GEMMs call the ops' twins without autograd (`*_nograd`), whose launches the graphs
    capture, and every replay on fresh inputs gives the eager result bitwise."""
    torch._dynamo.reset()
    lin = smgemm.nn.Linear(256, 384, device="cuda", dtype=torch.bfloat16, schedule="streamk")
    infer = torch.compile(lambda x: lin(x), mode="reduce-overhead")
    for _ in range(4):
        x = randn((64, 256), torch.bfloat16, "cuda")
        torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad():
            got = infer(x).clone()
            want = lin(x)
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_compiled_graph_without_gradients_is_not_reused_for_them(device):
    """A function compiled where nothing required grad (its graph calls `gemm_nograd`, which records nothing) is
    compiled again once an input requires grad (Dynamo guards on grad mode and requires_grad), so the gradients
    come, with the values of the eager ones."""
    import warnings

    torch._dynamo.reset()
    x, w = randn((4, 16), torch.float32, device), randn((8, 16), torch.float32, device)
    f = torch.compile(lambda x, w: smgemm.linear(x, w), backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        f(x, w)
    f(x, w)
    grads = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # torch warns where it backprops through an op without autograd
        for which in (0, 1):
            args = [x, w]
            args[which] = args[which].clone().requires_grad_()
            f(*args).square().sum().backward()
            grads.append(args[which].grad)
    x_ref, w_ref = x.clone().requires_grad_(), w.clone().requires_grad_()
    torch.nn.functional.linear(x_ref, w_ref).square().sum().backward()
    torch.testing.assert_close(grads[0], x_ref.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grads[1], w_ref.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_module_backward_and_compile_on_second_gpu():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs a second GPU")
    torch._dynamo.reset()
    lin = torch.nn.Linear(256, 384, device="cuda:1", dtype=torch.bfloat16)
    ours = smgemm.nn.Linear.from_linear(lin, schedule="streamk")
    x = randn((64, 256), torch.bfloat16, "cuda:1").requires_grad_()
    y = torch.compile(ours, backend="aot_eager", fullgraph=True)(x)
    assert y.device == torch.device("cuda:1")
    y.float().sum().backward()
    assert x.grad.device == torch.device("cuda:1") and lin.weight.grad.device == torch.device("cuda:1")
    g = torch.ones_like(y)
    assert_gemm_close(x.grad, g, lin.weight.detach())
    assert_gemm_close(lin.weight.grad, g.t(), x.detach())
