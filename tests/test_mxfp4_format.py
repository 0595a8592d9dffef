"""The MXFP4 format, exactly: codes, packing, scales, rounding, special blocks (plain torch, no kernel)."""

import pytest
import torch

from smgemm.mxfp4 import BLOCK, E2M1_VALUES, WORD_BITS, MXFP4Tensor, _interleave, quantize_mxfp4

ALL_CODES = [c for c in range(16)]
CODE_VALUES = [E2M1_VALUES[c & 7] * (-1 if c >= 8 else 1) for c in ALL_CODES]


def _codes(q: MXFP4Tensor) -> torch.Tensor:
    return torch.stack((q.data & 0xF, q.data >> 4), -1).flatten(-2)


def test_all_16_codes_decode_and_encode_exactly():
    codes = torch.tensor(ALL_CODES * 2, dtype=torch.uint8)
    q = MXFP4Tensor((codes[0::2] | codes[1::2] << 4), torch.tensor([127], dtype=torch.uint8))
    values = q.dequantize(torch.float32)
    assert values.tolist() == CODE_VALUES * 2
    assert torch.signbit(values[8]), "code 8 is -0"
    again = quantize_mxfp4(values)  # amax 6: scale 2^0, every value representable
    assert torch.equal(again.scales, q.scales) and torch.equal(again.data, q.data)


def test_packing_order_low_nibble_first():
    x = torch.zeros(BLOCK)
    x[0], x[1], x[2] = 1.0, 6.0, -0.5
    q = quantize_mxfp4(x)
    assert q.data[0].item() == 0x72  # element 0 (1.0, code 2) low, element 1 (6.0, code 7) high
    assert q.data[1].item() == 0x09  # element 2 (-0.5, code 9) low, element 3 (+0) high
    assert q.data.shape == (16,) and q.scales.shape == (1,)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_scale_is_floor_log2_amax_minus_2(dtype):
    for amax, expected in ((6.0, 127), (4.0, 127), (7.9, 127), (8.0, 128), (3.99, 126), (0.5, 124), (1000.0, 134)):
        x = torch.zeros(BLOCK, dtype=dtype)
        x[5] = -amax
        assert quantize_mxfp4(x).scales.item() == expected, amax


def test_rtne_ties_and_saturation():
    mids = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    expect = [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0]  # ties go to the even code (mantissa bit 0)
    x = torch.zeros(BLOCK)
    x[: len(mids)] = torch.tensor(mids)
    x[-1] = 6.0  # fixes the scale at 2^0
    d = quantize_mxfp4(x).dequantize(torch.float32)
    assert d[: len(mids)].tolist() == expect
    assert quantize_mxfp4(-x).dequantize(torch.float32)[: len(mids)].tolist() == [-v for v in expect]
    # floor: amax 7.9 keeps scale 2^0 and saturates to 6; "up" takes 2^1 and keeps 8 (7.9 / 2 -> 4).
    x[-1] = 7.9
    assert quantize_mxfp4(x).dequantize(torch.float32)[-1].item() == 6.0
    assert quantize_mxfp4(x, rounding="up").dequantize(torch.float32)[-1].item() == 8.0
    assert quantize_mxfp4(x, rounding="up").scales.item() == 128


def test_zero_nan_inf_blocks():
    x = torch.randn(4, BLOCK)
    x[0] = 0.0
    x[1, 3] = float("nan")
    x[2, 7] = float("inf")
    q = quantize_mxfp4(x)
    assert q.scales[0].item() == 0 and (q.data[0] == 0).all()
    assert q.scales[1].item() == 255 and q.scales[2].item() == 255
    d = q.dequantize(torch.float32)
    assert (d[0] == 0).all()
    assert d[1].isnan().all() and d[2].isnan().all(), "a NaN scale makes the whole block NaN"
    assert d[3].isfinite().all()


def test_e8m0_range_edges():
    tiny = torch.full((BLOCK,), 2.0**-140, dtype=torch.float32)  # floor(log2) - 2 = -142: clamped to -127
    q = quantize_mxfp4(tiny)
    assert q.scales.item() == 0
    assert (q.dequantize(torch.float32) == 0).all()  # 2^-140 / 2^-127 = 2^-13 rounds to 0
    small = torch.full((BLOCK,), 2.0**-126, dtype=torch.float32)  # 2^-126 / 2^-127 = 2 is representable
    assert (quantize_mxfp4(small).dequantize(torch.float32) == 2.0**-126).all()
    huge = torch.full((BLOCK,), torch.finfo(torch.float32).max)
    q = quantize_mxfp4(huge)
    assert q.scales.item() == 127 + 125
    assert (q.dequantize(torch.float32) == 6.0 * 2.0**125).all()  # saturated, finite


@pytest.mark.parametrize("rounding", ["floor", "up"])
def test_round_trip_error_bound(rounding):
    x = torch.randn(64, 4 * BLOCK) * torch.logspace(-3, 3, 64).unsqueeze(1)
    q = quantize_mxfp4(x, rounding=rounding)
    scale = torch.exp2(q.scales.double() - 127).repeat_interleave(BLOCK, -1)
    v = x.double().abs() / scale
    spacing = torch.where(v < 2, 0.5, torch.where(v < 4, 1.0, 2.0))  # distance between neighbouring e2m1 values
    bound = torch.where(v <= 6, spacing / 2, v - 6) * scale  # half a step, or the saturation (floor only)
    err = (q.dequantize(torch.float32).double() - x.double()).abs()
    assert (err <= bound).all()
    if rounding == "up":
        assert (v <= 6).all()
    assert torch.equal(q.dequantize(torch.bfloat16).float(), q.dequantize(torch.float32)), "exact in bf16"


def test_leading_dims_and_errors():
    q = quantize_mxfp4(torch.randn(2, 3, 64, dtype=torch.bfloat16))
    assert q.shape == (2, 3, 64) and q.data.shape == (2, 3, 32) and q.scales.shape == (2, 3, 2)
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_mxfp4(torch.randn(4, 48))
    with pytest.raises(TypeError, match="float32 / bfloat16 / float16"):
        quantize_mxfp4(torch.randn(4, 32).to(torch.float8_e4m3fn))
    with pytest.raises(ValueError, match="rounding must be"):
        quantize_mxfp4(torch.randn(4, 32), rounding="nearest")
    with pytest.raises(ValueError, match="one value per 32 elements"):
        MXFP4Tensor(torch.zeros(4, 32, dtype=torch.uint8), torch.zeros(4, 3, dtype=torch.uint8))
    with pytest.raises(TypeError, match="must be a uint8 tensor"):
        MXFP4Tensor(torch.zeros(4, 16), torch.zeros(4, 1, dtype=torch.uint8))


def test_hopper_layout_permutes_bytes_within_groups_and_round_trips():
    """'hopper' byte 16 t + j of every 64-byte group is 'ocp' byte 4 j + t, with each 32-bit word's bits then
    rearranged (WORD_BITS); both directions exact, values equal."""
    q = quantize_mxfp4(torch.randn(3, 2, 384) * 5)
    h = q.to_layout("hopper")
    assert h.layout == "hopper" and h.scales is q.scales and h.shape == q.shape
    ocp = q.data.reshape(-1, 192)
    stored = _interleave(h.data, inverse=True).reshape(-1, 192)
    for group in range(3):
        for t in range(4):
            for j in range(16):
                assert torch.equal(stored[:, 64 * group + 16 * t + j], ocp[:, 64 * group + 4 * j + t])
    assert torch.equal(h.to_layout("ocp").data, q.data) and h.to_layout("hopper") is h
    assert torch.equal(h.dequantize(torch.float32), q.dequantize(torch.float32))
    direct = quantize_mxfp4(torch.randn(5, 256), layout="hopper")
    assert direct.layout == "hopper"
    assert torch.equal(direct.to_layout("ocp").data, quantize_mxfp4(direct.dequantize(torch.float32)).data)
    every = torch.randint(0, 256, (7, 64), dtype=torch.uint8)
    assert torch.equal(_interleave(_interleave(every, inverse=False), inverse=True), every)
    assert sorted(b for bits in WORD_BITS for b in bits) == list(range(32))


def test_kwords_layout_keeps_ocp_byte_order_and_round_trips():
    """'kwords' holds the 'ocp' bytes in their order, each 32-bit word's bits rearranged as in 'hopper'; every
    conversion between the three layouts is exact and shares the scales."""
    q = quantize_mxfp4(torch.randn(3, 2, 384) * 5)
    kw = q.to_layout("kwords")
    assert kw.layout == "kwords" and kw.scales is q.scales and kw.shape == q.shape
    assert torch.equal(_interleave(kw.data, inverse=True), q.data)
    assert not torch.equal(kw.data, q.data)
    h = q.to_layout("hopper")
    assert torch.equal(kw.to_layout("hopper").data, h.data) and torch.equal(h.to_layout("kwords").data, kw.data)
    assert torch.equal(kw.to_layout("ocp").data, q.data) and kw.to_layout("kwords") is kw
    assert torch.equal(kw.dequantize(torch.float32), q.dequantize(torch.float32))
    direct = quantize_mxfp4(torch.randn(5, 256), layout="kwords")
    assert direct.layout == "kwords"
    assert torch.equal(direct.to_layout("ocp").data, quantize_mxfp4(direct.dequantize(torch.float32)).data)


def test_hopper_words_expand_with_the_kernels_bit_operations():
    """The kernel's expansion of a 'hopper' word (kernels.common: an AND, a shift and an AND, or three shifts) gives,
    for byte k, the bf16x2 bits of its two elements times 2^-126: every byte value in every position."""
    data = torch.arange(256, dtype=torch.uint8).repeat_interleave(4).reshape(16, 64)  # word w: 4 copies of byte w
    data = data[:, torch.randperm(64)]
    h = MXFP4Tensor(data, torch.full((16, 4), 127, dtype=torch.uint8)).to_layout("hopper")
    words = h.data.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    pairs = [words & 0x81C081C0, (words << 3) & 0x81C081C0, (words << 6) & 0x81C081C0,
             ((words << 1) & 0x80008000) | ((words >> 3) & 0x01800180) | ((words >> 7) & 0x00400040)]
    stored = _interleave(h.data, inverse=True).view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    for k, pair in enumerate(pairs):
        byte = (stored >> (8 * k)) & 0xFF  # byte k of each word, bits as before the rearrangement
        for half, nibble in ((pair & 0xFFFF, byte & 0xF), ((pair >> 16) & 0xFFFF, byte >> 4)):
            value = (half.to(torch.int32) << 16).view(torch.float32).double() * 2.0 ** 126
            want = torch.tensor(CODE_VALUES, dtype=torch.float64)[nibble]
            assert torch.equal(value, want), k


def test_hopper_layout_needs_k_multiple_of_128():
    q = quantize_mxfp4(torch.randn(4, 96))
    with pytest.raises(ValueError, match="multiple of 128, got K = 96"):
        q.to_layout("hopper")
    with pytest.raises(ValueError, match="multiple of 128"):
        MXFP4Tensor(q.data, q.scales, "hopper")
    with pytest.raises(ValueError, match="'kwords' layout needs K a multiple of 128, got K = 96"):
        q.to_layout("kwords")
    with pytest.raises(ValueError, match="layout 'kwords' needs K a multiple of 128"):
        MXFP4Tensor(q.data, q.scales, "kwords")
    with pytest.raises(ValueError, match="layout must be one of"):
        q.to_layout("blackwell")
    with pytest.raises(ValueError, match="layout must be one of"):
        quantize_mxfp4(torch.randn(4, 128), layout="nope")
