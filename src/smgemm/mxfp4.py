"""MXFP4 (OCP Microscaling Formats v1.0): e2m1 elements, one e8m0 scale per block of 32 along the last dim.

    w = smgemm.quantize_mxfp4(weight)          # MXFP4Tensor: data uint8 [..., K/2], scales uint8 [..., K/32]
    y = smgemm.linear(x, w, bias)               # weight-only: x bf16/fp16, w dequantized inside the kernel
    y = smgemm.linear(quantize_mxfp4(x), w)     # both operands MXFP4
    w.dequantize(torch.bfloat16)                # exact: every e2m1 value times a power of two is a bf16 value

Encoding (plain torch, runs anywhere):

* element codes: bit 3 sign, bits 2-1 exponent (bias 1), bit 0 mantissa: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
  negatives; two per byte along the last dim, the first (even index) in the low nibble;
* scale: e8m0, 2^(code - 127); code 255 is NaN (the block held inf or NaN; it dequantizes to NaN);
* rounding="floor" (the OCP rule): shared exponent = floor(log2(amax)) - 2 (2 = e2m1's largest exponent),
  elements = x / scale rounded to nearest, ties to even, saturating at +-6; rounding="up": the smallest
  scale with amax / scale <= 6, so nothing saturates below the top of the range. Exponents are clamped to
  e8m0's [-127, 127]; an all-zero block gets the smallest scale (code 0). Near fp32's largest value an element
  times its scale could pass it (with rounding="up", 3e38 takes the scale 2^126, and 3e38 / 2^126 rounds to 4:
  2^128 = inf): elements saturate instead at the largest e2m1 magnitude whose value stays finite (3 for 2^126,
  1.5 for 2^127), so a finite input always dequantizes to finite values.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

BLOCK = 32  # elements per scale
E2M1_MAX = 6.0
_E2M1_EMAX = 2  # exponent of E2M1_MAX's leading bit
_SCALE_NAN = 255
# Magnitudes of the 8 non-negative e2m1 codes.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Midpoints between consecutive magnitudes, and whether a tie rounds up (to the even code above).
_MIDPOINTS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False), (3.5, True), (5.0, False))


# The byte layouts of `MXFP4Tensor.data` along K:
# * "ocp": the interchange format (OCP, torch's float4_e2m1fn_x2): byte i holds elements 2i (low nibble) and 2i + 1;
# * "hopper": within every group of 64 bytes (128 elements), byte 16 t + j holds what "ocp" has at byte 4 j + t
#   (t < 4, j < 16). An MMA fragment (register operand of wgmma / mma.sync, bf16) gives lane t of each quad the
#   element pairs 2i, 2i + 1 with i = t mod 4 of every 16 elements, so a thread reads its 16 bytes of a group in one
#   16-byte load and each byte expands to one fragment register, with no exchange between threads
#   (`kernels.common.mx_words_weight_tile`). Within each 32-bit word (little-endian, 4 of those bytes) the 32 bits
#   are then rearranged (`_interleave`) so that each byte's pair of elements comes out as a bf16x2 register with one
#   to five integer instructions instead of eight. Needs K to be a multiple of 128.
# * "kwords": the "ocp" bytes in their order, each 32-bit word's bits rearranged as in "hopper": word w expands to
#   elements 8 w .. 8 w + 7 in K order. The 8-row mma.sync decode tiles (M <= 8) read it with the activation tile as
#   it is loaded, where a "hopper" weight makes them put the activation tile in the words' order first; the wgmma
#   tiles (M > 8) put the activation tile in the order of the "hopper" fragments instead. Needs K to be a multiple
#   of 128.
LAYOUTS = ("ocp", "hopper", "kwords")
HOPPER_GROUP = 64  # bytes (128 elements): the "hopper" and "kwords" layouts need whole groups


@dataclass(frozen=True)
class MXFP4Tensor:
    """An MXFP4-quantized tensor of logical shape `shape` ([..., K]): `data` uint8 [..., K/2] (bytes ordered along
    K as `layout` says: "ocp" or "hopper", see LAYOUTS), `scales` uint8 [..., K/32]."""

    data: torch.Tensor
    scales: torch.Tensor
    layout: str = "ocp"

    def __post_init__(self) -> None:
        for name in ("data", "scales"):
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8:
                raise TypeError(f"MXFP4Tensor.{name} must be a uint8 tensor, got "
                                f"{getattr(t, 'dtype', type(t).__name__)}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"MXFP4Tensor.layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.layout != "ocp" and self.data.dim() >= 1 and self.data.shape[-1] % HOPPER_GROUP:
            raise ValueError(f"MXFP4Tensor with layout {self.layout!r} needs K a multiple of {2 * HOPPER_GROUP}, "
                             f"got K = {self.data.shape[-1] * 2}")
        if self.data.dim() < 1 or self.data.shape[:-1] != self.scales.shape[:-1]:
            raise ValueError(f"MXFP4Tensor.data {tuple(self.data.shape)} and scales {tuple(self.scales.shape)} must "
                             "agree on every dim but the last")
        if self.data.shape[-1] * 2 != self.scales.shape[-1] * BLOCK:
            raise ValueError(f"MXFP4Tensor.scales must hold one value per {BLOCK} elements: data "
                             f"{tuple(self.data.shape)} packs K = {self.data.shape[-1] * 2}, so scales needs last dim "
                             f"{self.data.shape[-1] * 2 // BLOCK}, got {self.scales.shape[-1]}")
        if self.data.device != self.scales.device:
            raise ValueError(f"MXFP4Tensor.data is on {self.data.device} but scales on {self.scales.device}")

    @property
    def shape(self) -> torch.Size:
        return torch.Size((*self.data.shape[:-1], self.data.shape[-1] * 2))

    @property
    def device(self) -> torch.device:
        return self.data.device

    def dim(self) -> int:
        return self.data.dim()

    def to(self, device) -> MXFP4Tensor:
        return MXFP4Tensor(self.data.to(device), self.scales.to(device), self.layout)

    def to_layout(self, layout: str) -> MXFP4Tensor:
        """The same values with `data` in `layout` (one of LAYOUTS): `self` if it is already, else a permuted copy
        of the bytes (the scales are shared). Exact every way."""
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        if layout == self.layout:
            return self
        if self.data.shape[-1] % HOPPER_GROUP:
            raise ValueError(f"the {layout!r} layout needs K a multiple of {2 * HOPPER_GROUP}, got K = "
                             f"{self.data.shape[-1] * 2}")
        data = self.data.contiguous()
        if self.layout != "ocp":  # each word's bits back, then (from "hopper") bytes [groups, t, j] -> [groups, j, t]
            data = _interleave(data, inverse=True)
            if self.layout == "hopper":
                data = data.unflatten(-1, (-1, 4, 16)).transpose(-1, -2).flatten(-3).contiguous()
        if layout != "ocp":  # (to "hopper") bytes [groups, j, t] -> [groups, t, j], then each word's bits
            if layout == "hopper":
                data = data.unflatten(-1, (-1, 16, 4)).transpose(-1, -2).flatten(-3).contiguous()
            data = _interleave(data, inverse=False)
        return MXFP4Tensor(data.contiguous(), self.scales, layout)

    def to_torch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The same bits as torch's own MXFP4 dtypes: (data as `torch.float4_e2m1fn_x2`, scales as
        `torch.float8_e8m0fnu`): views without a copy in the "ocp" layout (a copy of the data in the others). Both
        store element 2i in the low nibble of byte i and the scale's exponent as the e8m0 byte. Needs a torch that
        has those dtypes."""
        fp4, e8m0 = _torch_mx_dtypes()
        ocp = self.to_layout("ocp")
        return ocp.data.view(fp4), ocp.scales.view(e8m0)

    @classmethod
    def from_torch(cls, data: torch.Tensor, scales: torch.Tensor) -> MXFP4Tensor:
        """An MXFP4Tensor from torch's `torch.float4_e2m1fn_x2` data and `torch.float8_e8m0fnu` scales (views)."""
        fp4, e8m0 = _torch_mx_dtypes()
        if data.dtype != fp4 or scales.dtype != e8m0:
            raise TypeError(f"data must be {fp4} and scales {e8m0}, got {data.dtype} and {scales.dtype}")
        return cls(data.view(torch.uint8), scales.view(torch.uint8))


    def dequantize(self, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        """The represented values in `dtype` (exact in bf16 and fp32; fp16 may overflow or flush extreme scales)."""
        data = self.to_layout("ocp").data
        lo, hi = data & 0xF, data >> 4
        codes = torch.stack((lo, hi), dim=-1).flatten(-2)  # [..., K], element 2i from the low nibble of byte i
        table = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=self.device)
        values = table[(codes & 7).long()]
        values = torch.where(codes >= 8, -values, values)
        # 2^(s - 127) from its fp32 bits (exponent field s; s = 0 is the subnormal 2^-127): exact on every device,
        # where CUDA's exp2 need not be for subnormal results.
        s = self.scales.to(torch.int32)
        scale = torch.where(s == 0, 0x00400000, s << 23).view(torch.float32)
        scale = torch.where(self.scales == _SCALE_NAN, torch.nan, scale)
        values = values.unflatten(-1, (-1, BLOCK)) * scale.unsqueeze(-1)
        return values.flatten(-2).to(dtype)


# Where the "hopper" and "kwords" layouts keep the bits of byte k's two elements in its 32-bit word, as (bit of the
# word, bit of the bf16x2 pair that the expansion makes of byte k): the pair holds the even element's sign at 15 and its
# exponent and mantissa bits (e1 e0 m) at 8 7 6, the odd element's at 31 and 24 23 22, each as the e2m1 value times
# 2^-126. Bytes 0, 1, 2 sit at the pair's own positions shifted down by 0, 3, 6 (expanded by one AND, or a shift and an
# AND); byte 3 fills the 8 bits left over (a sign shifted up by 1, magnitude bits down by 3 and 7).
_PAIR_BITS = (6, 7, 8, 15, 22, 23, 24, 31)
_BYTE3_BITS = (13, 10, 11, 14, 29, 26, 27, 30)  # the word bits of byte 3's pair bits _PAIR_BITS, in that order
# WORD_BITS[k][c]: the word bit that holds bit c of byte k (c < 4: the even element's code m, e0, e1, sign; c >= 4:
# the odd element's), whose place in the pair is _PAIR_BITS[c].
WORD_BITS = (*(tuple(b - shift for b in _PAIR_BITS) for shift in (0, 3, 6)), _BYTE3_BITS)


def _interleave(data: torch.Tensor, inverse: bool) -> torch.Tensor:
    """Each 4-byte word of uint8 `data` [..., K/2] (in "hopper" or "kwords" byte order) with its bits rearranged per
    WORD_BITS (`inverse`: put back)."""
    words = data.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    out = torch.zeros_like(words)
    for k, positions in enumerate(WORD_BITS):
        for code_bit, word_bit in enumerate(positions):
            src, dst = (8 * k + code_bit, word_bit) if not inverse else (word_bit, 8 * k + code_bit)
            out |= ((words >> src) & 1) << dst
    out = torch.where(out >= 2 ** 31, out - 2 ** 32, out).to(torch.int32)
    return out.view(torch.uint8)


def _torch_mx_dtypes() -> tuple[torch.dtype, torch.dtype]:
    fp4, e8m0 = getattr(torch, "float4_e2m1fn_x2", None), getattr(torch, "float8_e8m0fnu", None)
    if fp4 is None or e8m0 is None:
        raise RuntimeError(f"torch {torch.__version__} has no float4_e2m1fn_x2 / float8_e8m0fnu dtypes")
    return fp4, e8m0


def _encode_e2m1(v: torch.Tensor) -> torch.Tensor:
    """e2m1 codes (uint8, 0..15) of float values v already divided by their scale: RTNE, saturating at +-6."""
    mag = v.abs()
    code = torch.zeros(v.shape, dtype=torch.uint8, device=v.device)
    for mid, tie_up in _MIDPOINTS:
        code += (mag >= mid) if tie_up else (mag > mid)
    return code | torch.signbit(v).to(torch.uint8) << 3  # -0 and negatives that round to 0 keep their sign


def quantize_mxfp4(x: torch.Tensor, *, rounding: str = "floor", layout: str = "ocp") -> MXFP4Tensor:
    """Quantize `x` ([..., K], K a multiple of 32; fp32, bf16 or fp16) to MXFP4 along its last dim, its bytes in
    `layout` ("ocp", or "hopper" / "kwords" for K a multiple of 128: see LAYOUTS)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dtype.itemsize == 1:
        raise TypeError(f"x must be a float32 / bfloat16 / float16 tensor, got {getattr(x, 'dtype', type(x))}")
    if x.dim() < 1 or x.shape[-1] % BLOCK:
        raise ValueError(f"x's last dim must be a multiple of {BLOCK}, got shape {tuple(x.shape)}")
    if rounding not in ("floor", "up"):
        raise ValueError(f"rounding must be 'floor' (OCP) or 'up' (never clips), got {rounding!r}")
    blocks = x.detach().to(torch.float64).unflatten(-1, (-1, BLOCK))  # float64: x / 2^e is exact
    finite = blocks.isfinite().all(-1)
    amax = torch.where(blocks.isfinite(), blocks.abs(), 0).amax(-1)
    _, exp = torch.frexp(amax)  # amax = mant * 2^exp with mant in [0.5, 1): floor(log2(amax)) = exp - 1
    shared = exp.to(torch.float64) - 1 - _E2M1_EMAX  # amax / 2^shared in [4, 8)
    if rounding == "up":
        shared += amax / torch.exp2(shared) > E2M1_MAX  # (6, 8) would saturate: one more, into (3, 4)
    shared = torch.where(amax > 0, shared, -127).clamp(-127, 127)
    codes = _encode_e2m1(blocks / torch.exp2(shared).unsqueeze(-1))
    # The largest magnitude code whose value times 2^shared is finite in fp32 (and bf16): 7 (6.0) up to 2^125,
    # 5 (3.0) at 2^126, 3 (1.5) at 2^127.
    top = torch.where(shared >= 127, 3, torch.where(shared >= 126, 5, 7)).to(torch.uint8).unsqueeze(-1)
    codes = torch.minimum(codes & 7, top) | (codes & 8)
    codes = torch.where(finite.unsqueeze(-1), codes, 0).flatten(-2)
    data = codes[..., 0::2] | (codes[..., 1::2] << 4)
    scales = torch.where(finite, shared + 127, _SCALE_NAN).to(torch.uint8)
    return MXFP4Tensor(data.contiguous(), scales.contiguous()).to_layout(layout)
