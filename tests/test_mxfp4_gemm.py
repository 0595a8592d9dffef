"""MXFP4 GEMMs: weight-only and both operands, every schedule, against float64 products of the dequantized values.

The dequantization is exact, so the only error left is the fp32 accumulation and the output rounding: the same
per-element bound as the dense tests (tests/reference.py).
"""

import dataclasses

import pytest
import torch

import smgemm
from reference import assert_gemm_close, randn
from smgemm._gemm import expand_mxfp4, expand_mxfp4_pair, gemm_mxfp4
from smgemm.mxfp4 import MXFP4Tensor, quantize_mxfp4
from smgemm.plan import TileConfig, mx_config, mx_expands

SMALL = TileConfig(16, 32, 64, num_warps=4, num_stages=2)


def _weight(n, k, device, scale=1.0):
    return quantize_mxfp4(torch.randn(n, k, device=device) * scale)


@pytest.mark.parametrize("schedule,num_sms", [("data_parallel", None), ("persistent", 3), ("streamk", 4),
                                              ("auto", None)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_weight_only_every_schedule(schedule, num_sms, dtype, device):
    m, n, k = 37, 70, 224  # M, N not multiples of the tile; K = 3.5 K-blocks: a masked tail of whole scale groups
    x = randn((m, k), dtype, device)
    w = _weight(n, k, device)
    bias = randn((n,), dtype, device)
    out = gemm_mxfp4(x, w, c=bias, alpha=0.5, schedule=schedule, num_sms=num_sms, config=SMALL)
    assert out.dtype == dtype
    assert_gemm_close(out, x, w.dequantize(torch.float32).t(), alpha=0.5, beta=1.0, c=bias)


@pytest.mark.parametrize("schedule", ["persistent", "streamk"])
def test_both_operands_mxfp4(schedule, device):
    m, n, k = 40, 50, 256
    xq = quantize_mxfp4(torch.randn(m, k, device=device) * 3)
    w = _weight(n, k, device, scale=0.01)  # different scale ranges per operand
    out = gemm_mxfp4(xq, w, schedule=schedule, num_sms=4, config=SMALL)
    assert out.dtype == torch.bfloat16
    assert_gemm_close(out, xq.dequantize(torch.float32), w.dequantize(torch.float32).t())


@pytest.mark.parametrize("m,block_m,swap", [(24, 32, False), (40, 64, True)])
def test_default_plan_between_decode_and_large_m(m, block_m, swap, device):
    """16 < M <= 64 under `auto`: mx_config's 32 x 64 tiles (M <= 32) or swapped 64 x 64 tiles, split by Stream-K
    (rows past M masked, in the swapped product's columns for the latter), bias and alpha applied once."""
    n, k = 70, 1024
    cfg = mx_config(m, n, k)
    assert cfg.mx_swap == swap and (cfg.block_m, cfg.block_n) == (block_m, 64)
    x = randn((m, k), torch.bfloat16, device)
    w = _weight(n, k, device)
    bias = randn((n,), torch.bfloat16, device)
    out = gemm_mxfp4(x, w, c=bias, alpha=0.5, num_sms=4)
    assert_gemm_close(out, x, w.dequantize(torch.float32).t(), alpha=0.5, beta=1.0, c=bias)


@pytest.mark.parametrize("swap,prefetch", [(False, False), (True, False), (True, True), (False, True)])
@pytest.mark.parametrize("both", [False, True])
def test_kernel_variants(swap, prefetch, both, device):
    """The MXFP4 k-loop's variants (kernels.common.k_loop_mx): swapped operands, prefetch."""
    m, n, k = 37, 70, 224
    cfg = dataclasses.replace(SMALL, mx_swap=swap, mx_prefetch=prefetch)
    dtype = torch.float16 if (swap and not both) else torch.bfloat16  # fp16 A takes the fp32 expansion route
    x = randn((m, k), dtype, device)
    xq = quantize_mxfp4(x.float()) if both else x
    w = _weight(n, k, device)
    bias = randn((n,), dtype, device)
    out = gemm_mxfp4(xq, w, c=bias, alpha=0.5, schedule="streamk", num_sms=4, config=cfg)
    a = xq.dequantize(torch.float32) if both else x
    assert_gemm_close(out, a, w.dequantize(torch.float32).t(), alpha=0.5, beta=1.0, c=bias)


@pytest.mark.parametrize("layout", ["hopper", "kwords"])
@pytest.mark.parametrize("m", [1, 8, 16, 40, 128, 300])
@pytest.mark.parametrize("schedule,num_sms", [("auto", None), ("data_parallel", None), ("streamk", 3)])
def test_word_layout_weight(m, schedule, num_sms, layout, device):
    """A weight in a word layout ('hopper', 'kwords') through the planner's tiles (swapped; up to M = 8 8-row tiles
    on mma.sync in the words' order, to M = 64 the wgmma's register operand on the GPU; at M = 128 the dense model's
    tiles, at 300 the 256 x 128 ones): K with a tail of whole 128-element groups, N past the tile, bias and alpha;
    MXFP4 activations too (in the weight's layout or 'ocp', and an 'ocp' weight with them)."""
    n, k = (130 if m > 256 else 70), 384  # 256-element K steps: one full step and a masked half step
    x = randn((m, k), torch.bfloat16, device)
    w = _weight(n, k, device).to_layout(layout)
    bias = randn((n,), torch.bfloat16, device)
    out = gemm_mxfp4(x, w, c=bias, alpha=0.5, schedule=schedule, num_sms=num_sms)
    assert_gemm_close(out, x, w.dequantize(torch.float32).t(), alpha=0.5, beta=1.0, c=bias)
    if m in (8, 16):
        xq = quantize_mxfp4(x.float(), layout=layout)
        for a, b in ((xq, w), (xq, w.to_layout("ocp")), (xq.to_layout("ocp"), w)):
            got = gemm_mxfp4(a, b, schedule=schedule, num_sms=num_sms)
            assert_gemm_close(got, a.dequantize(torch.float32), b.dequantize(torch.float32).t())


@pytest.mark.parametrize("config", [TileConfig(128, 256, 64, num_warps=8, num_stages=3, tma=True, tma_store=True,
                                               flatten=True),
                                    TileConfig(64, 128, 128, num_warps=4, num_stages=4)], ids=["128x256", "64x128"])
@pytest.mark.parametrize("layout", ["hopper", "kwords"])
def test_word_layout_dense_model_tiles_are_narrowed(config, layout, device):
    """Tiles the dense model picks between decode and the expansion (M = 129-255) that cannot read a word-layout
    weight as they are (plan.hopper_steps) run narrowed, with the right result."""
    m, n, k = 200, 256, 512
    x = randn((m, k), torch.bfloat16, device)
    w = _weight(n, k, device).to_layout(layout)
    out = gemm_mxfp4(x, w, config=config, schedule="persistent", num_sms=4)
    assert_gemm_close(out, x, w.dequantize(torch.float32).t())


@pytest.mark.parametrize("config", [TileConfig(16, 128, 128, num_warps=4, num_stages=4, mx_swap=True),
                                    TileConfig(32, 128, 256, num_warps=4, num_stages=3, mx_swap=True),
                                    TileConfig(128, 128, 128, num_warps=8, num_stages=3, mx_swap=True)],
                         ids=["16x128x128", "32x128x256", "128x128x128"])
@pytest.mark.parametrize("layout", ["hopper", "kwords"])
def test_word_layout_tiles_of_the_largest_weights(config, layout, device):
    """The tiles the planner gives the largest "hopper" / "kwords" weights at M <= 128 (plan._MX_WIDE_DECODE_MIN),
    forced on a small one: split by Stream-K over a few programs, N past the tile, K with a partial step, a bias."""
    n, k = 200, 384
    w = _weight(n, k, device).to_layout(layout)
    bias = randn((n,), torch.bfloat16, device)
    for m in (1, 20, 100):
        x = randn((m, k), torch.bfloat16, device)
        out = gemm_mxfp4(x, w, c=bias, config=config, schedule="streamk", num_sms=3)
        assert_gemm_close(out, x, w.dequantize(torch.float32).t(), beta=1.0, c=bias)


@pytest.mark.parametrize("block_k", [256, 512])
@pytest.mark.parametrize("schedule,num_sms", [("data_parallel", None), ("streamk", 3)])
def test_kwords_unswapped_sixteen_row_tiles(block_k, schedule, num_sms, device):
    """The 16-row unswapped tile the planner gives a "kwords" weight at 8 < M <= 16 (mma.sync, the words in K order as
    the right operand's fragments, bf16 activations as loaded), forced: M below and at the tile, N past it, K with a
    partial step, a bias; fp16 and MXFP4 activations through the same tile (expanded, in the fragments' order)."""
    n, k = 200, 640
    w = _weight(n, k, device).to_layout("kwords")
    bias = randn((n,), torch.bfloat16, device)
    config = TileConfig(16, 64, block_k, num_warps=4, num_stages=3)
    for m in (1, 9, 16):
        x = randn((m, k), torch.bfloat16, device)
        out = gemm_mxfp4(x, w, c=bias, config=config, schedule=schedule, num_sms=num_sms)
        assert_gemm_close(out, x, w.dequantize(torch.float32).t(), beta=1.0, c=bias)
    x = randn((16, k), torch.float16, device)
    assert_gemm_close(gemm_mxfp4(x, w, config=config, schedule=schedule, num_sms=num_sms), x,
                      w.dequantize(torch.float32).t())
    xq = quantize_mxfp4(randn((16, k), torch.float32, device))
    assert_gemm_close(gemm_mxfp4(xq, w, config=config, schedule=schedule, num_sms=num_sms),
                      xq.dequantize(torch.float32), w.dequantize(torch.float32).t())


def test_eight_row_tiles_forced_on_every_activation_kind(device):
    """The 8-row swapped tile (the planner's for bf16 decode of a "hopper" or "kwords" weight) forced on fp16 and MXFP4
    activations and on an "ocp" weight, which it reads without the word order: every schedule, a K tail, N past the
    tile."""
    n, k = 90, 384
    cfg = TileConfig(8, 64, 256, num_warps=4, num_stages=4, mx_swap=True)
    for layout in ("hopper", "kwords", "ocp"):
        w = _weight(n, k, device).to_layout(layout)
        for m in (1, 8, 13):
            x = randn((m, k), torch.float16, device)
            xq = quantize_mxfp4(x.float(), layout=layout)
            for a, ref in ((x, x), (x.to(torch.bfloat16), x.to(torch.bfloat16)), (xq, xq.dequantize(torch.float32))):
                for schedule, num_sms in (("data_parallel", None), ("streamk", 3)):
                    out = gemm_mxfp4(a, w, config=cfg, schedule=schedule, num_sms=num_sms)
                    assert_gemm_close(out, ref, w.dequantize(torch.float32).t())


@pytest.mark.parametrize("layout", ["hopper", "kwords"])
def test_word_layout_rows_must_be_16_byte_aligned(layout, device):
    w = _weight(8, 256, device)
    padded = torch.zeros(8, 136, dtype=torch.uint8, device=device)  # rows 136 bytes apart: not 16-byte aligned
    padded[:, :128] = w.to_layout(layout).data
    odd = MXFP4Tensor(padded[:, :128], w.scales, layout)
    with pytest.raises(ValueError, match=rf"w\.data of a '{layout}' MXFP4Tensor needs rows that start on 16-byte"):
        gemm_mxfp4(randn((2, 256), torch.bfloat16, device), odd)
    ok = MXFP4Tensor(padded[:, :128].contiguous(), w.scales, layout)
    x = randn((2, 256), torch.bfloat16, device)
    assert_gemm_close(gemm_mxfp4(x, ok), x, w.dequantize(torch.float32).t())


@pytest.mark.parametrize("layout", ["hopper", "kwords"])
def test_word_layout_forced_tiles_read_whole_groups(layout, device):
    """A forced configuration with 64-element K steps is widened to 128 for a word-layout weight (whole groups)."""
    m, n, k = 8, 40, 256
    x = randn((m, k), torch.float16, device)  # fp16 activations: the fp32 expansion route
    w = _weight(n, k, device).to_layout(layout)
    out = gemm_mxfp4(x, w, config=SMALL, schedule="persistent", num_sms=2)
    assert_gemm_close(out, x, w.dequantize(torch.float32).t())
    got = expand_mxfp4(w, torch.bfloat16, 2, block_r=32, block_k=64)
    torch.testing.assert_close(got, w.dequantize(torch.bfloat16), rtol=0, atol=0)
    xq = quantize_mxfp4(x.float())
    a, b = expand_mxfp4_pair(xq, w, torch.bfloat16)
    torch.testing.assert_close(a, xq.dequantize(torch.bfloat16), rtol=0, atol=0)
    torch.testing.assert_close(b, w.dequantize(torch.bfloat16), rtol=0, atol=0)


@pytest.mark.parametrize("num_sms,blocks,pad", [(None, {}, 0), (2, {"block_r": 32, "block_k": 128}, 0),
                                                (2, {"block_r": 32, "block_k": 128}, 3)])
def test_expansion_pass_is_exact(num_sms, blocks, pad, device):
    """The two-pass path's expansion (kernels.mx_expand): every byte value under extreme and ordinary scales, rows
    and K not multiples of its blocks, bit for bit equal to `dequantize` (bf16), or its one rounding (fp16); packed
    rows contiguous or padded by `pad` bytes (an odd row stride)."""
    rows, k = 70, 288  # 64-row blocks and 256-wide K blocks with tails; 9 scale groups per row
    data = torch.randint(0, 256, (rows, k // 2 + pad), dtype=torch.uint8, device=device)[:, :k // 2]
    data[0, :128] = torch.arange(128, 256, dtype=torch.uint8, device=device)
    data[1, :128] = torch.arange(128, dtype=torch.uint8, device=device)
    scales = torch.randint(100, 140, (rows, k // 32), dtype=torch.uint8, device=device)
    scales[:2, :4] = torch.tensor([0, 1, 254, 255], dtype=torch.uint8, device=device)
    w = MXFP4Tensor(data, scales)
    got = expand_mxfp4(w, torch.bfloat16, num_sms, **blocks)  # small blocks: 3 x 3 tiles on 2 programs
    torch.testing.assert_close(got, w.dequantize(torch.bfloat16), rtol=0, atol=0, equal_nan=True)
    got16 = expand_mxfp4(w, torch.float16, num_sms, **blocks)
    torch.testing.assert_close(got16, w.dequantize(torch.float32).to(torch.float16), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("num_sms,blocks", [(None, {}), (2, {"block_r": 32, "block_k": 128})])
def test_expansion_of_two_operands_in_one_launch(num_sms, blocks, device):
    """Activations and weight of a both-MXFP4 GEMM expand in one launch (tiles of the first operand, then of the
    second; under a budget one persistent loop crosses from one to the other): each bit for bit its dequantize."""
    k = 160
    ws = []
    for rows in (45, 70):
        data = torch.randint(0, 256, (rows, k // 2), dtype=torch.uint8, device=device)
        scales = torch.randint(100, 140, (rows, k // 32), dtype=torch.uint8, device=device)
        scales[0, :4] = torch.tensor([0, 1, 254, 255], dtype=torch.uint8, device=device)
        ws.append(MXFP4Tensor(data, scales))
    got_a, got_w = expand_mxfp4_pair(*ws, torch.bfloat16, num_sms, **blocks)
    for got, w in zip((got_a, got_w), ws):
        torch.testing.assert_close(got, w.dequantize(torch.bfloat16), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("both,dtype", [(False, torch.bfloat16), (False, torch.float16), (True, torch.bfloat16)])
def test_two_pass_path(both, dtype, device):
    """expand=True (what `plan.mx_expands` picks for large M): the same results, epilogue and budget as fused."""
    m, n, k = 37, 70, 224
    x = randn((m, k), dtype, device)
    xq = quantize_mxfp4(x.float()) if both else x
    w = _weight(n, k, device)
    c = randn((m, n), torch.float32, device)
    out = torch.empty(m, n, dtype=torch.float32, device=device)
    y = gemm_mxfp4(xq, w, c=c, alpha=0.5, beta=2.0, out=out, out_dtype=torch.float32, schedule="streamk", num_sms=4,
                   expand=True)
    assert y is out
    a = xq.dequantize(torch.float32) if both else x
    assert_gemm_close(out, a, w.dequantize(torch.float32).t(), alpha=0.5, beta=2.0, c=c)
    y = gemm_mxfp4(xq, w, expand=True)
    assert y.dtype == (torch.bfloat16 if both else dtype)
    assert_gemm_close(y, a, w.dequantize(torch.float32).t())


@pytest.mark.parametrize("layout,config", [
    ("hopper", TileConfig(8, 64, 256, num_warps=4, num_stages=4, mx_swap=True)),
    ("kwords", TileConfig(8, 64, 256, num_warps=4, num_stages=4, mx_swap=True)),
    ("kwords", TileConfig(16, 64, 512, num_warps=4, num_stages=3)),
    ("ocp", SMALL)])
def test_one_row_activation_is_broadcast(layout, config, device):
    """An activation of one row (decode at batch 1) is loaded once a K step and broadcast over the tile's rows
    (ONE_ROW), contiguous or with a K stride, with a K tail where the layout allows one, data-parallel and split; two
    rows, or MXFP4 activations, are read as a tile."""
    from smgemm._device import device_spec
    from smgemm._launch import Operands, static_args
    from smgemm.plan import make_plan

    n, k = 90, 512 if layout != "ocp" else 224
    w = _weight(n, k, device).to_layout(layout)
    ref_w = w.dequantize(torch.float32).t()
    spec = device_spec(torch.device(device))
    for a in (randn((1, k), torch.bfloat16, device), randn((1, 2 * k), torch.float16, device)[:, ::2],
              randn((2, k), torch.bfloat16, device), quantize_mxfp4(torch.randn(1, k, device=device))):
        ref_a = a.dequantize(torch.float32) if isinstance(a, MXFP4Tensor) else a
        for schedule, num_sms in (("data_parallel", None), ("streamk", 3)):
            out = gemm_mxfp4(a, w, config=config, schedule=schedule, num_sms=num_sms)
            assert_gemm_close(out, ref_a, ref_w)
        plan = make_plan(a.shape[0], n, k, torch.bfloat16, spec, schedule="streamk", num_sms=3, config=config)
        meta = static_args(plan, Operands(a, w, out), 0, 0, False)[1]
        assert meta["ONE_ROW"] == (a.shape[0] == 1 and not isinstance(a, MXFP4Tensor))


def test_decode_shapes_and_default_plan(device):
    x = randn((40, 2048), torch.bfloat16, device)  # 32 < M <= 64: Stream-K over swapped 64 x 64 x 256 tiles
    w = _weight(200, 2048, device)
    assert_gemm_close(smgemm.linear(x, w), x, w.dequantize(torch.float32).t())
    for m in (1, 16):
        x = randn((m, 128), torch.bfloat16, device)
        w = _weight(96, 128, device)
        assert_gemm_close(smgemm.linear(x, w), x, w.dequantize(torch.float32).t())


def test_linear_leading_dims_bias_out_dtype(device):
    x = randn((2, 3, 64), torch.bfloat16, device)
    w = _weight(48, 64, device)
    bias = randn((48,), torch.float32, device)
    y = smgemm.linear(x, w, bias, out_dtype=torch.float32)
    assert y.shape == (2, 3, 48) and y.dtype == torch.float32
    assert_gemm_close(y.reshape(6, 48), x.reshape(6, 64), w.dequantize(torch.float32).t(), beta=1.0, c=bias)
    xq = quantize_mxfp4(x.float())
    y = smgemm.linear(xq, w)
    assert y.shape == (2, 3, 48)
    assert_gemm_close(y.reshape(6, 48), xq.dequantize(torch.float32).reshape(6, 64), w.dequantize(torch.float32).t())


def test_nan_scale_block_gives_nan(device):
    x = randn((4, 64), torch.bfloat16, device)
    wt = torch.randn(8, 64, device=device)
    wt[3, 40] = float("inf")  # row 3's second block: scale NaN
    y = smgemm.linear(x, quantize_mxfp4(wt))
    assert y[:, 3].isnan().all()
    assert y[:, [0, 1, 2, 4, 5, 6, 7]].isfinite().all()


@pytest.mark.gpu
@pytest.mark.parametrize("config", [None, TileConfig(16, 64, 256, num_warps=4, num_stages=4),
                                    TileConfig(8, 64, 256, num_warps=4, num_stages=4, mx_swap=True),
                                    TileConfig(256, 128, 64, num_warps=8, num_stages=3, mx_swap=True),
                                    TileConfig(128, 128, 64, num_warps=8, num_stages=3, mx_swap=True, mx_prefetch=True),
                                    TileConfig(64, 64, 128), mx_config(32, 4096, 4096),
                                    mx_config(64, 4096, 4096), TileConfig(16, 128, 128, num_stages=4, mx_swap=True),
                                    TileConfig(32, 128, 256, num_stages=3, mx_swap=True),
                                    TileConfig(128, 128, 128, num_warps=8, num_stages=3, mx_swap=True), "expand"])
@pytest.mark.parametrize("layout", ["ocp", "hopper", "kwords"])
@pytest.mark.parametrize("largest", [255, 128])
def test_every_code_and_scale_is_exact_on_gpu(config, layout, largest):
    """Every byte (two e2m1 codes) under scales from the e8m0 extremes, read back through an identity activation:
    the GPU's bf16 conversion (an asm block the interpreter cannot run) must reproduce `dequantize` exactly. With
    scales up to 128 only, a hopper weight's decode tiles keep their folded expansion (k_loop_mx)."""
    k = 512  # a row holds the 256 byte values once: 16 scale groups
    finite = [s for s in (0, 1, 2, 3, 50, 100, 126, 127, 128, 129, 200, 250, 251, 252) if s <= largest]
    specials = [253, 254, 255] if largest == 255 else []  # 2^126, 2^127 overflow some values; 255 is NaN
    scales = torch.tensor([*finite, *specials], dtype=torch.uint8, device="cuda")
    data = torch.arange(256, dtype=torch.uint8, device="cuda").repeat(len(scales), 1)
    data = data[:, torch.randperm(256, device="cuda")]  # codes meet every position of the K loop
    w = MXFP4Tensor(data, scales[:, None].expand(-1, k // 32).contiguous()).to_layout(layout)
    eye = torch.eye(k, dtype=torch.bfloat16, device="cuda")
    if config == "expand":  # the two-pass path: the expansion kernel, then the dense GEMM
        out = gemm_mxfp4(eye, w, out_dtype=torch.float32, expand=True)  # out[m, n] = W[n, m]
    else:
        out = gemm_mxfp4(eye, w, out_dtype=torch.float32, config=config)
    ref = w.dequantize(torch.float32).t()
    torch.testing.assert_close(ref.cpu(), w.to("cpu").dequantize(torch.float32).t(), rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(out[:, :len(finite)], ref[:, :len(finite)], rtol=0, atol=0)
    # Scales 2^126, 2^127 overflow some values to inf (and 0 * inf makes the whole column NaN); 255 is NaN.
    assert not out[:, len(finite):].isfinite().any() and not ref[:, len(finite):].isfinite().all(dim=0).any()
    if isinstance(config, TileConfig) and config.block_m == 8:
        # The Stream-K kernel of the 8-row tiles expands without FOLD (`kernels.common.k_loop`): the same bytes and
        # scales repeated along K, so that the K loops are long enough to split.
        long = MXFP4Tensor(data.repeat(1, 8), scales[:, None].expand(-1, 8 * k // 32).contiguous()).to_layout(layout)
        got = gemm_mxfp4(torch.eye(8 * k, dtype=torch.bfloat16, device="cuda"), long, out_dtype=torch.float32,
                         config=config, schedule="streamk")
        torch.testing.assert_close(got[:, :len(finite)], long.dequantize(torch.float32).t()[:, :len(finite)], rtol=0,
                                   atol=0)
        assert not got[:, len(finite):].isfinite().any()
    if largest == 128:  # also through the decode plans' own tiles (16 x 64; 8 x 64 for a hopper weight at M <= 8;
        # folded) on a wider weight
        wide = MXFP4Tensor(data.repeat(8, 1)[:128], w.to_layout("ocp").scales.repeat(8, 1)[:128]).to_layout(layout)
        for rows in (16, 8, 3):
            got = gemm_mxfp4(eye[:rows], wide, out_dtype=torch.float32)
            torch.testing.assert_close(got, wide.dequantize(torch.float32)[:, :rows].t(), rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("both", [False, True])
def test_two_pass_path_under_cuda_graphs_and_compile(both):
    """The default plan for M >= 512 (two passes): graph replays and torch.compile give the eager result bitwise,
    with the expansion's copies allocated inside the capture."""
    m, n, k = 640, 768, 512
    assert mx_expands(m, n, k, both)
    x = randn((m, k), torch.bfloat16, "cuda")
    act = quantize_mxfp4(x.float()) if both else x
    w = _weight(n, k, "cuda")
    bias = randn((n,), torch.bfloat16, "cuda")
    eager = smgemm.linear(act, w, bias)
    assert_gemm_close(eager, act.dequantize(torch.float32) if both else x, w.dequantize(torch.float32).t(),
                      beta=1.0, c=bias)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up outside the capture
        smgemm.linear(act, w, bias)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = smgemm.linear(act, w, bias)
    for _ in range(20):
        captured.fill_(float("nan"))
        graph.replay()
        assert torch.equal(captured, eager)
    if not both:  # MXFP4 activations are a dataclass of tensors: compile the weight-only form
        compiled = torch.compile(lambda t: smgemm.linear(t, w, bias), fullgraph=True)
        assert torch.equal(compiled(x), eager)


def test_errors(device):
    x = randn((4, 64), torch.bfloat16, device)
    w = _weight(8, 64, device)
    with pytest.raises(ValueError, match=r"a.shape\[1\] \(K=32\) must equal w.shape\[1\]"):
        smgemm.linear(randn((4, 32), torch.bfloat16, device), w)
    with pytest.raises(TypeError, match="a must be bfloat16, float16 or an MXFP4Tensor"):
        smgemm.linear(x.float(), w)
    with pytest.raises(ValueError, match=r"w\.data must be contiguous along K"):
        gemm_mxfp4(x, MXFP4Tensor(torch.zeros(32, 8, dtype=torch.uint8, device=device).t(), w.scales))
    with pytest.raises(TypeError, match="needs an MXFP4Tensor weight"):
        smgemm.linear(quantize_mxfp4(x.float()), randn((8, 64), torch.bfloat16, device))
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_mxfp4(torch.randn(8, 40, device=device))
    with pytest.raises(ValueError, match="MXFP4 carries its own scales"):
        smgemm.linear(x, w, scale_a=torch.ones((), device=device))


# ---------------------------------------------------------------- modules, autograd, compile


def test_mxfp4_linear_makes_its_weight_once(device):
    """MXFP4Linear.weight is one MXFP4Tensor of the buffers, made again only when a buffer is replaced: a checkpoint
    loads into the same buffers, and the next forward reads the loaded bytes."""
    layer = smgemm.nn.MXFP4Linear.from_linear(torch.nn.Linear(128, 16, device=device, dtype=torch.bfloat16))
    fresh = smgemm.nn.MXFP4Linear.empty(128, 16, device=device)
    w = fresh.weight
    assert fresh.weight is w and w.data is fresh.weight_data and w.layout == fresh.layout
    x = randn((4, 128), torch.bfloat16, device)
    with torch.no_grad():
        zeros = fresh(x)
        fresh.load_state_dict(layer.state_dict())
        assert fresh.weight is w
        assert torch.equal(fresh(x), layer(x)) and not torch.equal(fresh(x), zeros)
        fresh.weight_data = fresh.weight_data.clone()  # a replaced buffer
        assert fresh.weight is not w and fresh.weight.data is fresh.weight_data
        assert torch.equal(fresh(x), layer(x))


@pytest.mark.parametrize("k,layout", [(64, "ocp"), (128, "hopper"), (256, "kwords")])
def test_mxfp4_linear_module_and_activation_gradient(k, layout, device):
    """Through the custom op (the input requires grad): forward and the activation gradient, which dequantizes the
    stored weight in its own layout (the default's, or "kwords" as asked)."""
    lin = torch.nn.Linear(k, 24, device=device, dtype=torch.bfloat16)
    q = smgemm.nn.MXFP4Linear.from_linear(lin, num_sms=2, layout="kwords" if layout == "kwords" else None)
    assert q.bias is lin.bias and q.weight_data.dtype == torch.uint8 and f"mxfp4 ({layout})" in repr(q)
    deq = smgemm.quantize_mxfp4(lin.weight.detach()).dequantize(torch.bfloat16)
    torch.testing.assert_close(q.weight.dequantize(torch.bfloat16), deq, rtol=0, atol=0)
    x = randn((5, k), torch.bfloat16, device).requires_grad_()
    y = q(x)
    assert_gemm_close(y, x.detach(), deq.t().float(), beta=1.0, c=lin.bias.detach())
    g = randn((5, 24), torch.bfloat16, device)
    y.backward(g)
    assert_gemm_close(x.grad, g, deq.float())  # dX = dY @ W_dequantized
    torch.testing.assert_close(lin.bias.grad.float(), g.float().sum(0), rtol=2e-2, atol=2e-2)


def test_swap_linears_mxfp4_and_compile(device):
    model = torch.nn.Sequential(torch.nn.Linear(128, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).to(device)
    model = model.to(torch.bfloat16)
    names = smgemm.nn.swap_linears(model, mxfp4=True)
    assert names == ["0", "2"] and all(isinstance(model[i], smgemm.nn.MXFP4Linear) for i in (0, 2))
    assert (model[0].layout, model[2].layout) == ("hopper", "ocp")  # the op carries each weight's layout
    x = randn((4, 128), torch.bfloat16, device)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=0, atol=0)


def test_empty_dims(device):
    w = _weight(8, 64, device)
    assert smgemm.linear(randn((0, 64), torch.bfloat16, device), w).shape == (0, 8)
    w0 = quantize_mxfp4(torch.randn(8, 0, device=device))
    bias = randn((8,), torch.bfloat16, device)
    torch.testing.assert_close(smgemm.linear(randn((3, 0), torch.bfloat16, device), w0, bias), bias.expand(3, 8))
