"""What a PyTorch user expects of a matmul: autocast, torch.matmul's shape rules, torch modes and transforms that
see the op (fake tensors, meta, FLOP counting, torch.func), and torch.export with dynamic shapes."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import smgemm
from reference import assert_gemm_close, randn

AUTOCAST_DTYPES = [torch.bfloat16, torch.float16]


def _autocast(device, dtype):
    return torch.autocast("cuda" if device == "cuda" else "cpu", dtype=dtype)


@pytest.mark.parametrize("dtype", AUTOCAST_DTYPES)
def test_autocast_casts_as_torch_does(dtype, device):
    x = randn((4, 64), torch.float32, device)
    lin = smgemm.nn.Linear(64, 32, device=device)
    ref = torch.nn.Linear(64, 32, device=device)
    ref.load_state_dict(lin.state_dict())
    with _autocast(device, dtype):
        y, want = lin(x), ref(x)
        assert y.dtype == want.dtype == dtype
        torch.testing.assert_close(y.float(), want.float(), rtol=2e-2, atol=2e-2)
        # a low-precision activation with an fp32 weight: cast, as torch does
        z = smgemm.linear(x.to(dtype), lin.weight, lin.bias)
        assert z.dtype == dtype
        m = smgemm.matmul(x, lin.weight.t())
        assert m.dtype == dtype
        a = smgemm.addmm(lin.bias, x, lin.weight.t())
        assert a.dtype == torch.addmm(ref.bias, x, ref.weight.t()).dtype == dtype
    # outside the block: fp32 again
    assert lin(x).dtype == torch.float32


def test_autocast_leaves_fp8_and_mxfp4_alone(device):
    a8 = randn((16, 32), torch.float8_e4m3fn, device)
    b8 = randn((32, 16), torch.float8_e4m3fn, device)
    w4 = smgemm.quantize_mxfp4(torch.randn(16, 64)).to(device)
    x = randn((4, 64), torch.float32, device)
    with _autocast(device, torch.float16):
        assert smgemm.matmul(a8, b8).dtype == torch.bfloat16  # fp8 keeps its own rule (bf16 out)
        y = smgemm.linear(x, w4)  # x cast to fp16; the MXFP4 weight is not touched
        assert y.dtype == torch.float16
    torch.testing.assert_close(y.float(), (x.half().float() @ w4.dequantize(torch.float32).t()), rtol=2e-2,
                               atol=2e-2)


def test_autocast_training_step_of_a_swapped_llama(device):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(device)
    swapped = copy.deepcopy(model)
    smgemm.nn.swap_linears(swapped)
    ids = torch.randint(0, 128, (2, 8), device=device)
    losses = []
    for m in (model, swapped):
        with _autocast(device, torch.bfloat16):
            loss = m(ids, labels=ids).loss
        loss.backward()
        losses.append(loss.item())
    assert abs(losses[0] - losses[1]) < 2e-2 * abs(losses[0])
    for (name, p), q in zip(model.named_parameters(), swapped.parameters()):
        assert q.grad is not None and q.grad.dtype == torch.float32, name  # master weights stay fp32
        scale = p.grad.abs().max().item() + 1e-6
        assert (q.grad - p.grad).abs().max().item() <= 0.1 * scale, name  # bf16 products, either order


@pytest.mark.parametrize(("a_shape", "b_shape"), [
    ((2, 8, 32), (2, 32, 16)), ((8, 32), (3, 32, 16)), ((2, 1, 8, 32), (3, 32, 16)), ((32,), (2, 32, 16)),
    ((4, 2, 8, 32), (2, 32, 16)), ((32,), (32, 16)), ((8, 32), (32,)), ((32,), (32,)), ((2, 3, 8, 32), (32, 16)),
    ((2, 8, 32), (32,)), ((4, 0, 32), (32, 16)), ((5, 8, 0), (0, 16)),
])
def test_matmul_follows_torch_matmul_shapes(a_shape, b_shape, device):
    a, b = randn(a_shape, torch.float32, device), randn(b_shape, torch.float32, device)
    out = smgemm.matmul(a, b)
    want = torch.matmul(a.double(), b.double())
    assert out.shape == want.shape
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("a_shape", "b_shape"), [
    ((2, 8, 32), (32, 16)), ((32,), (32, 16)), ((8, 32), (32,)), ((32,), (32,)), ((2, 3, 8, 32), (32,)),
    ((2, 8, 32), (2, 32, 16)), ((8, 32), (3, 32, 16)), ((2, 1, 8, 32), (3, 32, 16)), ((32,), (2, 32, 16)),
])
def test_matmul_writes_out_of_any_shape(a_shape, b_shape, device):
    """out= as torch.matmul takes it, for every shape rule: written in place where the folded product's rows nest in
    out's strides, else through a buffer (a transposed out); the result is out itself, every element written."""
    a, b = randn(a_shape, torch.float32, device), randn(b_shape, torch.float32, device)
    want = torch.matmul(a.double(), b.double())
    layouts = [torch.full(want.shape, float("nan"), device=device)]
    if want.dim() >= 2:
        flipped = want.shape[:-2] + want.shape[-2:][::-1]
        layouts.append(torch.full(flipped, float("nan"), device=device).transpose(-1, -2))
    for out in layouts:
        got = smgemm.matmul(a, b, out=out)
        assert got is out
        torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="out must have the product's shape"):
        smgemm.matmul(a, b, out=torch.empty(want.numel() + 1, device=device))
    with pytest.raises(RuntimeError, match="out= do not support automatic differentiation"):
        smgemm.matmul(a.requires_grad_(), b, out=torch.empty(want.shape, device=device))
    if want.dim() >= 2:
        with pytest.raises(RuntimeError, match="out= do not support automatic differentiation"):
            smgemm.matmul(a.detach(), b, out=layouts[-1].detach().requires_grad_())


def test_matmul_folds_batch_dims_of_a_view(device):
    a = randn((3, 16, 40), torch.float16, device)[:, :, 4:36]  # not contiguous: folded with a copy
    b = randn((16, 32), torch.float16, device).t()
    torch.testing.assert_close(smgemm.matmul(a, b).float(), (a.float() @ b.float()), rtol=1e-2, atol=1e-2)
    g = torch.randn(3, 8, 32, device=device, requires_grad=True)
    smgemm.matmul(g, b.float()).sum().backward()
    torch.testing.assert_close(g.grad, b.float().sum(1).expand(3, 8, 32), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("a_shape", "b_shape", "match"), [
    ((3, 4, 8), (2, 8, 4), r"do not broadcast"),
    ((), (4, 4), r"at least 1 dim"),
])
def test_matmul_refuses_what_it_does_not_do(a_shape, b_shape, match, device):
    with pytest.raises(ValueError, match=match):
        smgemm.matmul(torch.randn(a_shape, device=device), torch.randn(b_shape, device=device))


def test_flop_counter_counts_smgemm(device):
    a, b = randn((16, 32), torch.float16, device), randn((32, 8), torch.float16, device)
    w4 = smgemm.quantize_mxfp4(torch.randn(8, 64)).to(device)
    x = randn((16, 64), torch.bfloat16, device)
    with FlopCounterMode(display=False) as counter:
        smgemm.matmul(a, b)
        smgemm.linear(x, w4)
    assert counter.get_total_flops() == 2 * 16 * 32 * 8 + 2 * 16 * 8 * 64
    lin = smgemm.nn.Linear(32, 8, device=device)
    with FlopCounterMode(display=False) as counter:
        lin(torch.randn(16, 32, device=device, requires_grad=True)).sum().backward()
    assert counter.get_total_flops() == 3 * 2 * 16 * 32 * 8  # forward, and both gradients


def test_eager_autograd_skips_the_dispatcher_with_the_ops_gradients(device):
    """An eager call that only autograd must record (dense, batched, MXFP4) runs the kernel under an
    autograd.Function, with the custom op's backward (`_library.route`): the same output and gradients as the op's
    own autograd, and the op still where a mode is active (FlopCounterMode above counts the forward and both
    gradients through it)."""
    from smgemm import _library

    x = randn((24, 40), torch.float16, device).requires_grad_()
    w = torch.nn.Parameter(randn((16, 40), torch.float16, device))
    bias = randn((16,), torch.float16, device).requires_grad_()
    assert _library.route(x, w, bias) == _library.AUTOGRAD
    with torch.no_grad():
        assert _library.route(x, w, bias) == _library.KERNEL
    y = smgemm.linear(x, w, bias)
    assert type(y.grad_fn).__name__ == "EagerBackward"
    g = randn((24, 16), torch.float16, device)
    y.backward(g)
    grads = [t.grad.clone() for t in (x, w, bias)]
    for t in (x, w, bias):
        t.grad = None
    y_op = _library.call_gemm(x, w.t(), bias, 1.0, 1.0, None, None, None, "auto", None)
    assert type(y_op.grad_fn).__name__ != "EagerBackward"
    y_op.backward(g)
    assert torch.equal(y, y_op)
    for got, want in zip(grads, (x.grad, w.grad, bias.grad)):
        assert torch.equal(got, want)
    a3 = randn((2, 8, 40), torch.float16, device).requires_grad_()
    assert type(smgemm.bmm(a3, randn((2, 40, 8), torch.float16, device)).grad_fn).__name__ == "EagerBackward"
    w4 = smgemm.quantize_mxfp4(torch.randn(16, 64)).to(device)
    x4 = randn((8, 64), torch.bfloat16, device).requires_grad_()
    assert type(smgemm.linear(x4, w4).grad_fn).__name__ == "EagerBackward"  # 2-D x: the product's own output
    y4 = smgemm.linear(x4.reshape(2, 4, 64), w4).grad_fn  # a view of the product's output ([..., N])
    assert type(y4.next_functions[0][0]).__name__ == "EagerBackward"
    bad = randn((41, 8), torch.float16, device)
    with pytest.raises(ValueError) as with_grad:
        smgemm.matmul(x, bad)
    with torch.no_grad(), pytest.raises(ValueError) as without:
        smgemm.matmul(x, bad)
    assert str(with_grad.value) == str(without.value) and "b.shape[0]" in str(without.value)


def test_double_backward_through_the_eager_autograd_path(device):
    """A gradient of a gradient (create_graph): the backward's products then run under autograd themselves
    (`_library._product`). The same values, bit for bit, as through the custom op's autograd (the same kernels on
    the same operands); fp32 without TF32 (FMA), so also within 1e-4 of float64 torch (chained products of K = 16)."""
    from smgemm import _library

    x = torch.randn(8, 16, device=device, requires_grad=True)
    w = torch.nn.Parameter(torch.randn(4, 16, device=device))
    results = []
    for forward in (lambda: smgemm.linear(x, w),
                    lambda: _library.call_gemm(x, w.t(), None, 1.0, 1.0, None, None, None, "auto", None)):
        x.grad = w.grad = None
        (gx,) = torch.autograd.grad(forward().pow(2).sum(), x, create_graph=True)
        gx.pow(2).sum().backward()
        results.append((gx.detach(), w.grad.clone(), x.grad.clone()))
    for ours, op in zip(*results):
        assert torch.equal(ours, op)
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    (gx64,) = torch.autograd.grad(F.linear(x64, w64).pow(2).sum(), x64, create_graph=True)
    gx64.pow(2).sum().backward()
    for got, want in zip(results[0], (gx64, w64.grad, x64.grad)):
        torch.testing.assert_close(got.double(), want.detach(), rtol=1e-4, atol=1e-4)


def test_fake_and_meta_tensors_get_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        y = smgemm.linear(torch.randn(2, 5, 32), torch.randn(8, 32), torch.randn(8))
    assert y.shape == (2, 5, 8)
    m = smgemm.matmul(torch.empty(16, 32, device="meta"), torch.empty(32, 8, device="meta"))
    assert m.shape == (16, 8) and m.device.type == "meta"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_forward_mode_ad_gives_the_tangent(dtype, device):
    """Forward-mode AD through addmm, matmul (a repeated call, which the eager fast path would compute without its
    tangent), linear, bmm and an MXFP4 linear, with dual tensors (`torch.autograd.forward_ad`) and `torch.func.jvp`:
    the tangent is alpha * (dA @ B + A @ dB) + beta * dC, checked against float64 as one product of twice the K."""
    import torch.autograd.forward_ad as fwAD

    m, n, k = 24, 40, 64
    a, ta, c, tc = (randn(shape, dtype, device) for shape in ((m, k), (m, k), (m, n), (m, n)))
    b, tb = (randn((n, k), dtype, device).t() for _ in range(2))
    with fwAD.dual_level():
        y = smgemm.addmm(fwAD.make_dual(c, tc), fwAD.make_dual(a, ta), fwAD.make_dual(b, tb), alpha=0.5, beta=2.0)
        primal, tangent = fwAD.unpack_dual(y)
    assert_gemm_close(primal, a, b, alpha=0.5, beta=2.0, c=c)
    assert_gemm_close(tangent, torch.cat([ta, a], 1), torch.cat([b, tb], 0), alpha=0.5, beta=2.0, c=tc)
    smgemm.matmul(a, b)  # remembered: a repeat would launch at once
    with fwAD.dual_level():
        assert_gemm_close(fwAD.unpack_dual(smgemm.matmul(fwAD.make_dual(a, ta), b)).tangent, ta, b)
    _, tangent = torch.func.jvp(lambda w: smgemm.linear(a, w), (b.t(),), (tb.t(),))
    assert_gemm_close(tangent, a, tb)
    a3, ta3, b3, tb3 = (randn(shape, dtype, device) for shape in ((2, m, k), (2, m, k), (2, k, n), (2, k, n)))
    with fwAD.dual_level():
        tangent = fwAD.unpack_dual(smgemm.bmm(fwAD.make_dual(a3, ta3), fwAD.make_dual(b3, tb3))).tangent
    for i in range(2):
        assert_gemm_close(tangent[i], torch.cat([ta3[i], a3[i]], 1), torch.cat([b3[i], tb3[i]], 0))
    w = smgemm.quantize_mxfp4(torch.randn(n, k)).to(device)
    x, tx = a.half(), ta.half()
    with fwAD.dual_level():
        tangent = fwAD.unpack_dual(smgemm.linear(fwAD.make_dual(x, tx), w)).tangent
    assert_gemm_close(tangent, tx, w.dequantize(torch.float32).t())


def test_torch_func_through_an_mxfp4_weight(device):
    """torch.func.grad, jvp and vmap of a linear with an MXFP4 weight (the activations differentiated; the weight is
    frozen): the gradient as eager autograd's, the tangent and the mapped rows against float64 on the dequantized
    weight."""
    w = smgemm.quantize_mxfp4(torch.randn(16, 64)).to(device)
    x, tx = randn((4, 64), torch.float16, device), randn((4, 64), torch.float16, device)
    grad = torch.func.grad(lambda x: smgemm.linear(x, w).float().square().sum())(x)
    x_ref = x.clone().requires_grad_()
    smgemm.linear(x_ref, w).float().square().sum().backward()
    torch.testing.assert_close(grad, x_ref.grad)
    _, tangent = torch.func.jvp(lambda x: smgemm.linear(x, w), (x,), (tx,))
    assert_gemm_close(tangent, tx, w.dequantize(torch.float32).t())
    rows = torch.func.vmap(lambda row: smgemm.linear(row, w))(x.unsqueeze(1)).squeeze(1)
    assert_gemm_close(rows, x, w.dequantize(torch.float32).t())


@pytest.mark.filterwarnings("ignore:There is a performance drop")  # the older vmap's loop over the batch
def test_functionalize_and_batched_gradients(device):
    """torch.func.functionalize (which sees ops, not autograd.Functions), and backwards that torch runs under its
    older vmap (`torch.autograd.grad(..., is_grads_batched=True)`, `jacobian(..., vectorize=True)`), against the
    same with F.linear."""
    x, w = randn((3, 8), torch.float32, device), randn((5, 8), torch.float32, device)
    torch.testing.assert_close(torch.func.functionalize(lambda x: smgemm.linear(x, w))(x), F.linear(x, w),
                               rtol=1e-5, atol=1e-5)
    grads = []
    for linear in (smgemm.linear, F.linear):
        xg = x.clone().requires_grad_()
        seeds = torch.eye(15, device=device).reshape(15, 3, 5)
        grads.append(torch.autograd.grad(linear(xg, w), xg, seeds, is_grads_batched=True)[0])
        grads.append(torch.autograd.functional.jacobian(lambda w, f=linear: f(x, w), w, vectorize=True))
    for ours, want in zip(grads[:2], grads[2:]):
        torch.testing.assert_close(ours, want, rtol=1e-5, atol=1e-5)


def test_hessian_forward_over_reverse(device):
    """torch.func.hessian (jacfwd of jacrev: the backward's products differentiated in forward mode under vmap) and a
    dual tensor through a gradient taken with create_graph, against the same with F.linear."""
    import torch.autograd.forward_ad as fwAD

    w, x = randn((5, 6), torch.float32, device), randn((3, 6), torch.float32, device)

    def loss(linear):
        return lambda x: linear(x, w).square().sum()

    want = torch.func.hessian(loss(F.linear))(x)
    torch.testing.assert_close(torch.func.hessian(loss(smgemm.linear))(x), want, rtol=1e-4, atol=1e-4)
    tangents = []
    for linear in (smgemm.linear, F.linear):
        xg = x.clone().requires_grad_()
        with fwAD.dual_level():
            (g,) = torch.autograd.grad(loss(linear)(fwAD.make_dual(xg, torch.ones_like(xg))), xg, create_graph=True)
            tangents.append(fwAD.unpack_dual(g).tangent)
    torch.testing.assert_close(tangents[0], tangents[1], rtol=1e-4, atol=1e-4)


@pytest.mark.filterwarnings("error:There is a performance drop")  # torch's per-element fallback: a batching rule
def test_torch_func_grad_and_per_sample_grads(device):
    from torch.func import functional_call, grad, vmap

    lin = smgemm.nn.Linear(32, 8, device=device)
    ref = torch.nn.Linear(32, 8, device=device)
    ref.load_state_dict(lin.state_dict())
    x = torch.randn(4, 32, device=device)

    def loss(module):
        return lambda params, x: functional_call(module, params, (x,)).square().sum()

    for transform in (grad, lambda f: vmap(grad(f), in_dims=(None, 0))):
        xs = x if transform is grad else x.unsqueeze(1)
        ours = transform(loss(lin))(dict(lin.named_parameters()), xs)
        want = transform(loss(ref))(dict(ref.named_parameters()), xs)
        for name in want:
            torch.testing.assert_close(ours[name], want[name], rtol=1e-4, atol=1e-4)
    y = vmap(lambda row: smgemm.matmul(row, lin.weight.t()))(x.unsqueeze(1))
    torch.testing.assert_close(y.squeeze(1), F.linear(x, lin.weight), rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("error:There is a performance drop")  # torch's per-element fallback: a batching rule
def test_vmap_runs_the_batched_kernels(device):
    from torch.func import vmap

    f16 = torch.float16
    x, w, bias = randn((5, 6, 32), f16, device), randn((5, 8, 32), f16, device), randn((5, 8), f16, device)
    c = randn((6, 8), torch.float32, device)

    def dense(a, b):
        return (a.double() @ b.double()).to(f16)

    cases = [  # (function, in_dims, operands, reference per element)
        (lambda a, b: smgemm.matmul(a, b), (0, None), (x, w[0].t()), lambda a, b: dense(a, b)),
        (lambda a, b: smgemm.matmul(a, b), (None, 0), (x[0], w.transpose(1, 2)), lambda a, b: dense(a, b)),
        (lambda a, b: smgemm.matmul(a, b), (0, 0), (x, w.transpose(1, 2)), lambda a, b: dense(a, b)),
        (lambda a, b: smgemm.linear(a, w[0], b), (0, 0), (x, bias), lambda a, b: dense(a, w[0].t()) + b),
        (lambda a, b: smgemm.linear(a, b, bias[0]), (1, 0), (x.transpose(0, 1), w),
         lambda a, b: dense(a, b.t()) + bias[0]),
        (lambda a, k: smgemm.addmm(k, a, w[0].t(), beta=0.5), (0, None), (x, c),
         lambda a, k: dense(a, w[0].t()) + 0.5 * k),
        (lambda a, b: smgemm.bmm(a, b), (0, None), (x.reshape(5, 2, 3, 32), w[:2].transpose(1, 2)),
         lambda a, b: torch.stack([dense(a[i], b[i]) for i in range(2)])),
    ]
    wq = smgemm.quantize_mxfp4(torch.randn(8, 32)).to(device)
    w_mx = wq.dequantize(torch.float64)
    cases.append((lambda a, b: smgemm.linear(a, wq, b), (0, 0), (x, bias),
                  lambda a, b: (a.double() @ w_mx.t() + b.double()).to(f16)))
    wh = smgemm.quantize_mxfp4(torch.randn(8, 128), layout="hopper").to(device)  # the op carries the layout
    wh_mx, xh = wh.dequantize(torch.float64), randn((5, 6, 128), f16, device)
    cases.append((lambda a: smgemm.linear(a, wh), (0,), (xh,), lambda a: (a.double() @ wh_mx.t()).to(f16)))
    for fn, in_dims, args, ref in cases:
        got = vmap(fn, in_dims=in_dims)(*args)
        moved = [arg.movedim(d, 0) if d is not None else arg for arg, d in zip(args, in_dims)]
        want = torch.stack([ref(*(arg[i] if d is not None else arg for arg, d in zip(moved, in_dims)))
                            for i in range(5)])
        torch.testing.assert_close(got.float(), want.float(), rtol=2e-3, atol=2e-3)


def test_export_with_a_dynamic_batch_saves_and_loads(tmp_path, device):
    from torch.export import Dim, export

    lin = smgemm.nn.Linear(64, 32, device=device)
    program = export(lin, (torch.randn(8, 64, device=device),), dynamic_shapes={"x": {0: Dim("M")}})
    path = tmp_path / "linear.pt2"
    torch.export.save(program, str(path))
    loaded = torch.export.load(str(path)).module()
    for m in (3, 17):
        x = torch.randn(m, 64, device=device)
        torch.testing.assert_close(loaded(x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)
