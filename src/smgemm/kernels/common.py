"""`@triton.jit` building blocks that every smgemm schedule composes.

Naming follows one map: `pid_` program/tile coordinates, `offs_` offsets, `mask_` masks, `p_` pointers,
`b_` blocks (register tiles). Shapes are noted as `# [BM, BK] @ [BK, BN] -> [BM, BN]`.
"""

import triton
import triton.language as tl


@triton.jit
def tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Output-tile coordinates of linear tile `tile_id`, walking GROUP_M tile-rows at a time.

    Consecutive tiles share B columns within a group and A rows across groups, so programs that run at the
    same time touch a small, L2-resident part of both operands.
    """
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (tile_id % num_pid_in_group) % group_size_m
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def smid():
    """The id of the SM this program runs on (PTX %smid); tests use it to observe the SM budget."""
    return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def round_to_bf16_rtne(x):
    """x (fp32) rounded to the nearest bf16 value, ties to even, still as fp32 (bit arithmetic).

    The interpreter's fp32 -> bf16 cast truncates; after this rounding the truncation is exact.
    """
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _e2m1_code_values(codes):
    """fp32 values of e2m1 `codes` (uint8 0..15), unscaled. Exact.

    An e2m1 code's 3 magnitude bits placed at fp32 bits 24..22 (exponent field = the e2m1 exponent e, top mantissa
    bit = m) read as 2^(e - 127) * 1.m for e > 0 and as the subnormal 2^-127 * 0.m for e = 0: the e2m1 value times
    2^-126 in every case, sign included. Multiplying by 2^126 (exact) gives the value; 4 integer ops per element."""
    codes = codes.to(tl.uint32)
    bits = ((codes & 7) << 22) | ((codes & 8) << 28)
    return bits.to(tl.float32, bitcast=True) * 8.507059173023462e37  # 2^126


@triton.jit
def _e8m0_scales(scales):
    """fp32 2^(s - 127) of e8m0 `scales` from its bits: exponent field s (s = 0: the subnormal 2^-127; s = 255: NaN).
    Bit arithmetic, not exp2, whose fast GPU form flushes subnormals."""
    s = scales.to(tl.uint32)
    return tl.where(s == 0, 0x00400000, tl.where(s == 255, 0x7FC00000, s << 23)).to(tl.float32, bitcast=True)


@triton.jit
def e2m1_value(codes, scales):
    """fp32 values of e2m1 `codes` (uint8 0..15) times e8m0 `scales` of the same shape. Exact; NaN for scale 255."""
    return _e2m1_code_values(codes) * _e8m0_scales(scales)


@triton.jit
def e2m1_values(codes, scales, ROWS: tl.constexpr, COLS: tl.constexpr, GROUP: tl.constexpr):
    """[ROWS, COLS] fp32 values of e2m1 `codes` (uint8 0..15) times their e8m0 `scales` (uint8 [ROWS, COLS // GROUP],
    one per GROUP consecutive columns). Exact (e2m1 times a power of two); NaN for scale 255."""
    value = _e2m1_code_values(codes)
    return (value.reshape(ROWS, COLS // GROUP, GROUP) * _e8m0_scales(scales)[:, :, None]).reshape(ROWS, COLS)


@triton.jit
def mx_dequant(packed, scales, ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """[ROWS, BLOCK_K] fp32 values of MXFP4 data: `packed` uint8 [ROWS, BLOCK_K // 2] (element 2i in the low nibble
    of byte i), `scales` uint8 e8m0 [ROWS, BLOCK_K // 32]."""
    codes = tl.join(packed & 0xF, packed >> 4).reshape(ROWS, BLOCK_K)  # interleaved, as stored
    return e2m1_values(codes, scales, ROWS, BLOCK_K, 32)


# e2m1 pairs to bf16 on the GPU, 4 packed bytes (8 values) per asm block: $4 the bytes b0..b3; $5, $6 the bf16x2
# scales of (b0, b1) and (b2, b3). Out: $0, $1 the low nibbles' values (even k) of (b0, b1), (b2, b3); $2, $3 the
# high nibbles' (odd k). x / h hold the low / high nibbles of the four bytes; per output one PRMT puts two nibbles in
# the low bits of the two 16-bit halves (a selector nibble with bit 3 set reads a byte below 0x80 as zero), the
# multiply by 0x1040 (t << 6 plus t << 12, which cannot overlap for 4-bit halves) moves each nibble's 3 magnitude
# bits to bf16 bits 8..6 and its sign to bit 15, and the mask keeps them: the e2m1 value times 2^-126 (the same trick
# as `e2m1_values`, subnormal for the codes 0 and 0.5). Multiplying by 2^126 and by the scale (bf16 multiplies keep
# subnormals, and every product is exact or overflows to inf) gives the value. 23 instructions per 8 values (the
# shift-and-mask form takes 26; the fp32 route about 10 per value).
def _e2m1x8_to_bf16_asm() -> str:
    pair = "prmt.b32 t, x, h, {sel}; mul.lo.u32 t, t, 0x1040; and.b32 t, t, 0x81C081C0; mul.rn.bf16x2 t, t, c; " \
           "mul.rn.bf16x2 ${out}, t, ${scale};"
    outs = [pair.format(out=out, sel=sel, scale=5 + out % 2)
            for out, sel in enumerate(("0x8180", "0x8382", "0x8584", "0x8786"))]
    return "\n".join(["{", ".reg .b32 x, h, t, c;", "mov.b32 c, 0x7E807E80;", "and.b32 x, $4, 0x0F0F0F0F;",
                      "shr.b32 h, $4, 4;", "and.b32 h, h, 0x0F0F0F0F;", *outs, "}"])


_E2M1X8_TO_BF16: tl.constexpr = tl.constexpr(_e2m1x8_to_bf16_asm())


# The expansion of a "hopper" word (`mxfp4.WORD_BITS`): $4 a word of 4 stored bytes, $5 the bf16x2 factor of its
# scale group (the 4 bytes share one). Out: $k (k < 4) the bf16x2 (element 2i, element 2i + 1) of byte k, one MMA
# fragment register: its bits, placed by an AND (byte 0), a shift and an AND (bytes 1, 2) or three shifts and their
# ANDs (byte 3), read as the two e2m1 values times 2^-126 (as in `_e2m1_code_values`), then multiplied by 2^126 and
# the scale, or with `folded` by the one factor 2^(s - 1) (a bf16 for s <= 128). 10 integer instructions and 4 (8)
# bf16x2 multiplies for 8 values.
_PAIR_MASK = 0x81C081C0


def _e2m1x8_words_asm(folded: bool) -> str:
    scale = "mul.rn.bf16x2 ${k}, t, $5;" if folded else "mul.rn.bf16x2 t, t, c; mul.rn.bf16x2 ${k}, t, $5;"
    places = ["and.b32 t, $4, {mask};", "shl.b32 t, $4, 3; and.b32 t, t, {mask};",
              "shl.b32 t, $4, 6; and.b32 t, t, {mask};",
              "shl.b32 t, $4, 1; and.b32 t, t, 0x80008000; shr.b32 u, $4, 3; and.b32 u, u, 0x01800180; "
              "or.b32 t, t, u; shr.b32 u, $4, 7; and.b32 u, u, 0x00400040; or.b32 t, t, u;"]
    body = [place.format(mask=hex(_PAIR_MASK)) + " " + scale.format(k=k) for k, place in enumerate(places)]
    return "\n".join(["{", ".reg .b32 t, u, c;", "mov.b32 c, 0x7E807E80;", *body, "}"])


_E2M1X8_WORDS: tl.constexpr = tl.constexpr(_e2m1x8_words_asm(False))
_E2M1X8_WORDS_FOLDED: tl.constexpr = tl.constexpr(_e2m1x8_words_asm(True))


@triton.jit
def _e8m0_bf16_bits(s):
    """bf16 bits of 2^(s - 127) for unsigned e8m0 codes `s`: exponent field s (s = 0: the subnormal 2^-127;
    s = 255: NaN)."""
    return tl.where(s == 0, 0x0040, tl.where(s == 255, 0x7FC0, s << 7))


@triton.jit
def _bf16_bits(x):
    """fp32 `x` that holds bf16 values, as bf16, exactly (its top 16 bits)."""
    return (x.to(tl.uint32, bitcast=True) >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def mx_dequant_bf16(packed, scales, ROWS: tl.constexpr, BLOCK_K: tl.constexpr, INTERPRETER: tl.constexpr):
    """The bf16 values of MXFP4 data (`packed` uint8 [ROWS, BLOCK_K // 2], `scales` uint8 e8m0 [ROWS, BLOCK_K // 32])
    as (even, odd) [ROWS, BLOCK_K // 2]: elements 2i and 2i + 1, the low and high nibbles of byte i. Exact.

    On the GPU through `_E2M1X8_TO_BF16`; the interpreter, which cannot run PTX, takes the fp32 route.
    """
    HALF: tl.constexpr = BLOCK_K // 2
    if INTERPRETER:  # the values are bf16 values: keep their top 16 bits (the interpreter's cast loses subnormals)
        even = _bf16_bits(e2m1_values(packed & 0xF, scales, ROWS, HALF, 16))
        odd = _bf16_bits(e2m1_values(packed >> 4, scales, ROWS, HALF, 16))
    else:
        scale = _e8m0_bf16_bits(scales.to(tl.uint16)).to(tl.uint16)  # one per byte
        scale = tl.broadcast_to(scale[:, :, None], (ROWS, BLOCK_K // 32, 16)).reshape(ROWS, HALF)
        even, odd = tl.inline_asm_elementwise(
            _E2M1X8_TO_BF16, "=r,=r,=r,=r,r,r,r", [packed, scale.to(tl.bfloat16, bitcast=True)],
            dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4,
        )
    return even, odd


@triton.jit
def _word_pair_bits(word, K: tl.constexpr):
    """Byte K's two e2m1 codes of a "hopper" word placed as a bf16x2 of their values times 2^-126 (the integer part
    of `_e2m1x8_words_asm`, for the interpreter and for `load_mx_raw`)."""
    if K == 0:
        t = word & 0x81C081C0
    elif K == 1:
        t = (word << 3) & 0x81C081C0
    elif K == 2:
        t = (word << 6) & 0x81C081C0
    else:
        t = ((word << 1) & 0x80008000) | ((word >> 3) & 0x01800180) | ((word >> 7) & 0x00400040)
    return t


@triton.jit
def _word_pair(word, K: tl.constexpr, s):
    """The interpreter's stand-in for output K of `_e2m1x8_words_asm`: the same bits, scaled exactly through fp32,
    as bf16x2 bits (even element low)."""
    t = _word_pair_bits(word, K)
    scale = _e8m0_scales(s) * 8.507059173023462e37  # 2^126
    lo = ((t & 0xFFFF) << 16).to(tl.float32, bitcast=True) * scale
    hi = (t & 0xFFFF0000).to(tl.float32, bitcast=True) * scale
    return (lo.to(tl.uint32, bitcast=True) >> 16) | (hi.to(tl.uint32, bitcast=True) & 0xFFFF0000)


@triton.jit
def _load_words(p_data, p_scales, offs_rows, stride_row, stride_scale_row, k0, K,
                ROWS: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """The 32-bit words uint32 [ROWS, BLOCK_K // 8] and e8m0 scales uint8 [ROWS, BLOCK_K // 32] at K offset k0 of a
    "hopper" or "kwords" MXFP4 operand [rows, K/2] (row stride and base multiples of 16 bytes; K and BLOCK_K
    multiples of 128).
    Word (g, t, jw) of a row's step holds the "ocp" bytes 16 jw + 4 jj + t (jj < 4) of its 64-byte group g in a
    "hopper" operand, word w the bytes 4 w + jj in a "kwords" one (their bits rearranged: `mxfp4.WORD_BITS`); a
    word's bytes share one scale group. A K tail reads zero codes with scale 2^0."""
    offs_w = k0 // 8 + tl.arange(0, BLOCK_K // 8)
    offs_s = k0 // 32 + tl.arange(0, BLOCK_K // 32)
    p_words = p_data.to(tl.pointer_type(tl.uint32)) + offs_rows[:, None] * (stride_row // 4) + offs_w[None, :]
    p_scale = p_scales + offs_rows[:, None] * stride_scale_row + offs_s[None, :]
    if EVEN_K:
        words = tl.load(p_words)
        scales = tl.load(p_scale)
    else:  # whole 128-element groups: a word is in or out with its group
        words = tl.load(p_words, mask=offs_w[None, :] < K // 8, other=0)
        scales = tl.load(p_scale, mask=offs_s[None, :] < K // 32, other=127)
    return words, scales


@triton.jit
def _hopper_order(o0, o1, o2, o3, ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """[ROWS, BLOCK_K // 2] in K order from the per-word values of bytes jj = 0..3 ([ROWS, BLOCK_K // 8] each, one
    per word (g, t, jw)): element (g, jw, jj, t). On the GPU only a renaming of registers."""
    both = tl.join(tl.join(o0, o2), tl.join(o1, o3))  # [.., p, q] = byte 2 p + q of the word
    return both.reshape(ROWS, BLOCK_K // 128, 4, 4, 4).permute(0, 1, 3, 4, 2).reshape(ROWS, BLOCK_K // 2)


@triton.jit
def _word_order_pairs(o0, o1, o2, o3, ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """[ROWS, BLOCK_K // 2] in word order from the per-word values of bytes jj = 0..3: element (w, jj), the loaded
    words' own order (`word_order` gives the matching order of a K-ordered operand)."""
    both = tl.join(tl.join(o0, o1), tl.join(o2, o3))  # [.., i, j] = byte 2 j + i of the word
    return both.permute(0, 1, 3, 2).reshape(ROWS, BLOCK_K // 2)


@triton.jit
def word_order(x, ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """A K-ordered [ROWS, BLOCK_K] tile in the order of a "hopper" weight tile expanded in word order
    (`mx_words_weight_tile` WORD_ORDER): position 8 w + 2 jj + e of a step holds element 2 (16 jw + 4 jj + t) + e of
    its 128-element group g, for the step's word w = 16 g + 4 t + jw. A dot of two tiles in this order sums the same
    products as in K order."""
    return x.reshape(ROWS, BLOCK_K // 128, 4, 4, 4, 2).permute(0, 1, 4, 2, 3, 5).reshape(ROWS, BLOCK_K)


@triton.jit
def fragment_order(x, ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """A K-ordered [ROWS, BLOCK_K] tile in the order of a "kwords" weight tile expanded in fragment order
    (`mx_words_weight_tile`): position 2 (16 jw + 4 jj + t) + e of a 128-element group holds its element
    2 (16 t + 4 jw + jj) + e. A dot of two tiles in this order sums the same products as in K order."""
    return x.reshape(ROWS, BLOCK_K // 128, 4, 4, 4, 2).permute(0, 1, 3, 4, 2, 5).reshape(ROWS, BLOCK_K)


@triton.jit
def mx_words_weight_tile(w_ptr, mxw_ptr, offs_n, stride_wn, stride_mxw, k0, K, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, INTERPRETER: tl.constexpr,
                         FOLDED: tl.constexpr, WORD_ORDER: tl.constexpr = False, LAYOUT: tl.constexpr = "hopper"):
    """The [BLOCK_N, BLOCK_K] bf16 tile at K offset k0 of a "hopper" or "kwords" (LAYOUT) MXFP4 weight [N, K/2] (row
    stride and base multiples of 16 bytes; K and BLOCK_K multiples of 128), and its e8m0 scales
    [BLOCK_N, BLOCK_K // 32].

    Each thread loads whole 32-bit words, 4 stored bytes of one row (their bits rearranged: `mxfp4.WORD_BITS`). One
    asm block expands a word into 4 bf16x2 pairs (element 2i, 2i + 1). By default the pairs are joined in the order of
    the wgmma's register fragments, which only renames registers on the GPU: in a "hopper" weight that is K order
    (word (g, t, jw) of a row's step holds the "ocp" bytes 16 jw + 4 jj + t, jj < 4, of its 64-byte group g), in a
    "kwords" weight the order `fragment_order` gives a K-ordered operand. WORD_ORDER: the tile in the words' own
    order, the mma.sync fragments' order: K order in a "kwords" weight, the order `word_order` gives a K-ordered
    operand in a "hopper" one. FOLDED: 2^126 folded into the scale, exact only while every scale is <= 128 (`k_loop`
    checks the scales returned). The interpreter computes the same pairs through fp32.
    """
    words, scales = _load_words(w_ptr, mxw_ptr, offs_n, stride_wn, stride_mxw, k0, K, BLOCK_N, BLOCK_K, EVEN_K)
    G: tl.constexpr = BLOCK_K // 128
    if LAYOUT == "kwords":  # word w holds elements 8 w .. 8 w + 7: scale group w // 4
        s = tl.broadcast_to(scales.reshape(BLOCK_N, 4 * G, 1), (BLOCK_N, 4 * G, 4)).reshape(BLOCK_N, BLOCK_K // 8)
    else:  # word (g, t, jw): scale group 4 g + jw
        s = tl.broadcast_to(scales.reshape(BLOCK_N, G, 1, 4), (BLOCK_N, G, 4, 4)).reshape(BLOCK_N, BLOCK_K // 8)
    if INTERPRETER:
        o0 = _word_pair(words, 0, s)
        o1 = _word_pair(words, 1, s)
        o2 = _word_pair(words, 2, s)
        o3 = _word_pair(words, 3, s)
    else:
        f = s.to(tl.uint32)
        if FOLDED:  # bf16 bits of 2^(s - 1): exponent field s + 126
            f = (f + 126) << 7
            asm: tl.constexpr = _E2M1X8_WORDS_FOLDED
        else:  # of 2^(s - 127)
            f = _e8m0_bf16_bits(f)
            asm: tl.constexpr = _E2M1X8_WORDS
        o0, o1, o2, o3 = tl.inline_asm_elementwise(
            asm, "=r,=r,=r,=r,r,r", [words, f | (f << 16)], dtype=(tl.uint32, tl.uint32, tl.uint32, tl.uint32),
            is_pure=True, pack=1)
    if WORD_ORDER:
        pairs = _word_order_pairs(o0, o1, o2, o3, BLOCK_N, BLOCK_K)
    else:
        pairs = _hopper_order(o0, o1, o2, o3, BLOCK_N, BLOCK_K)
    even = pairs.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    odd = (pairs >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    return tl.join(even, odd).reshape(BLOCK_N, BLOCK_K), scales


@triton.jit
def mx_weight_tile(w_ptr, mxw_ptr, offs_n, stride_wn, stride_mxw, k0, K, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, INTERPRETER: tl.constexpr, MX_FP16: tl.constexpr,
                   LAYOUT: tl.constexpr, WORD_ORDER: tl.constexpr = False):
    """The [BLOCK_N, BLOCK_K] weight tile at K offset k0 of an MXFP4 weight [N, K/2] (bytes in LAYOUT), expanded
    (exactly) to bf16, or to fp16 when MX_FP16 (fp16 cannot hold most scales' range: the exact fp32 values are
    rounded once). A "hopper" or "kwords" weight's bf16 tile comes in the order `mx_words_weight_tile` gives it
    (its fragments', or WORD_ORDER its words'); fp16 tiles in K order."""
    if LAYOUT != "ocp" and not MX_FP16:
        return mx_words_weight_tile(w_ptr, mxw_ptr, offs_n, stride_wn, stride_mxw, k0, K, BLOCK_N, BLOCK_K, EVEN_K,
                                    INTERPRETER, False, WORD_ORDER, LAYOUT)[0]
    w_packed, w_scales = load_mx_raw(w_ptr, mxw_ptr, offs_n, stride_wn, stride_mxw, k0, K, BLOCK_N, BLOCK_K, EVEN_K,
                                     LAYOUT)
    if MX_FP16:
        b_w = mx_dequant(w_packed, w_scales, BLOCK_N, BLOCK_K).to(tl.float16)
    else:
        even, odd = mx_dequant_bf16(w_packed, w_scales, BLOCK_N, BLOCK_K, INTERPRETER)
        b_w = tl.join(even, odd).reshape(BLOCK_N, BLOCK_K)
    return b_w


@triton.jit
def load_mx_raw(p_data, p_scales, offs_rows, stride_row, stride_scale_row, k0, K,
                ROWS: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, LAYOUT: tl.constexpr):
    """The packed bytes uint8 [ROWS, BLOCK_K // 2] (in "ocp" order) and e8m0 scales uint8 [ROWS, BLOCK_K // 32] at
    K offset k0 of an MXFP4 operand stored [rows, K / 2] (packed along K, bytes in LAYOUT). A K tail (K is a
    multiple of 32, so it covers whole scale groups) reads zero codes with scale 2^0. A "hopper" or "kwords" operand
    (K a multiple of 128, BLOCK_K too) is read as words (`_load_words`), its bytes rebuilt from their
    rearranged bits: the path of fp16 and MXFP4 activations; bf16 ones expand such a weight in
    `mx_words_weight_tile`."""
    if LAYOUT != "ocp":
        words, scales = _load_words(p_data, p_scales, offs_rows, stride_row, stride_scale_row, k0, K, ROWS,
                                    BLOCK_K, EVEN_K)
        b0 = _pair_byte(_word_pair_bits(words, 0))
        b1 = _pair_byte(_word_pair_bits(words, 1))
        b2 = _pair_byte(_word_pair_bits(words, 2))
        b3 = _pair_byte(_word_pair_bits(words, 3))
        if LAYOUT == "kwords":
            return _word_order_pairs(b0, b1, b2, b3, ROWS, BLOCK_K), scales
        return _hopper_order(b0, b1, b2, b3, ROWS, BLOCK_K), scales
    offs_kp = k0 // 2 + tl.arange(0, BLOCK_K // 2)
    offs_ks = k0 // 32 + tl.arange(0, BLOCK_K // 32)
    p_packed = p_data + offs_rows[:, None] * stride_row + offs_kp[None, :]
    p_scale = p_scales + offs_rows[:, None] * stride_scale_row + offs_ks[None, :]
    if EVEN_K:
        packed = tl.load(p_packed)
        scales = tl.load(p_scale)
    else:
        packed = tl.load(p_packed, mask=offs_kp[None, :] < K // 2, other=0)
        scales = tl.load(p_scale, mask=offs_ks[None, :] < K // 32, other=127)
    return packed, scales


@triton.jit
def _pair_byte(t):
    """The "ocp" byte (even code low, odd code high) of a `_word_pair_bits` pair."""
    lo = ((t >> 6) & 7) | ((t >> 12) & 8)
    hi = ((t >> 22) & 7) | ((t >> 28) & 8)
    return (lo | (hi << 4)).to(tl.uint8)


@triton.jit
def wrapped_offsets(row, col, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, USE_INT64: tl.constexpr):
    """Row and column indices of the tile whose first row and column are (row, col), wrapped (`% M`, `% N`) so that
    loads need no M/N mask."""
    offs_m = (row + tl.arange(0, BLOCK_M)) % M
    offs_n = (col + tl.arange(0, BLOCK_N)) % N
    if USE_INT64:
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
    return offs_m, offs_n


@triton.jit
def k_loop(
    a_ptr, b_ptr, mxa_ptr, mxb_ptr, shape, a_strides, b_strides, mx_strides, row, col, matrix, iter_start, iter_end,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr, INTERPRETER: tl.constexpr, INPUT_PRECISION: tl.constexpr, USE_INT64: tl.constexpr,
    A_MX: tl.constexpr, B_MX: tl.constexpr, MX_FP16: tl.constexpr, A_DESC: tl.constexpr, B_DESC: tl.constexpr,
    MX_SWAP: tl.constexpr, MX_PREFETCH: tl.constexpr, BATCHED: tl.constexpr, STREAMK: tl.constexpr = False,
    A_VEC: tl.constexpr = 1, B_VEC: tl.constexpr = 1, MASK_M: tl.constexpr = False, ONE_ROW: tl.constexpr = False,
):
    """fp32 [BLOCK_M, BLOCK_N] accumulator of A[tile rows, k] @ B[k, tile cols] for the tile whose first row and
    column are (row, col), K-iterations [iter_start, iter_end), for `shape` (M, N, K) and the (row, column) strides of
    A [M, K] and B [K, N] (of an MXFP4 operand's packed data, whose scales' rows are `mx_strides` apart).

    Rows and columns past M / N are wrapped (`% M`) instead of masked, so the loop's loads need no M/N mask;
    the epilogue masks the store. Only a K tail (EVEN_K False) is masked, with zeros, and, with MASK_M, the rows of
    a dense A of a few rows read through pointers (decode: `k_loop_dense`); with an MXFP4 weight, ONE_ROW loads an A
    of one row once a step (`k_loop_mx`).
    A_DESC / B_DESC select how a dense operand is read: "pointers", through pointers and strides; "stored", a tensor
    descriptor (TMA on Hopper) over the operand as stored, A [M, K] / B [K, N]; "transposed", a descriptor over its
    transpose, A^T [K, M] / B^T [N, K] (a column-major A, an nn.Linear weight). TMA fills rows, columns and K past
    the edge with zeros. BATCHED: the descriptors are 3-D, [batch, rows, cols], read at matrix `matrix`.
    A_VEC / B_VEC: a dense operand read through pointers whose K-contiguous rows (A) / columns (B) start at multiples
    of this many elements (`_launch.vector_elements`); 1 where that is unknown or not so.
    MXFP4 operands (B_MX: B given as an [N, K/2] weight; A_MX: A stored [M, K/2]) go to `k_loop_mx`; A_MX / B_MX
    are "" for a dense operand, else the MXFP4 operand's byte layout (one of `mxfp4.LAYOUTS`).
    INTERPRETER feeds the dot fp32 copies of the operands: the Triton interpreter's bf16 dot reads raw bits, and
    bf16 -> fp32 is exact, so CPU runs of the same kernel stay trustworthy.
    """
    M, N, K = shape
    stride_am, stride_ak = a_strides
    stride_bk, stride_bn = b_strides
    stride_mxa, stride_mxb = mx_strides
    if B_MX != "":
        # A "hopper" or "kwords" weight's decode tiles (bf16 A, BLOCK_M <= 16) first fold e2m1's bias into the scale
        # (`k_loop_mx` FOLD); a tile that met a scale past 2^1 runs again exactly. On the swapped tiles of M = 17-128 it
        # takes 13-23% fewer K-loop instructions without spilling, but its times on the H200 ranged from 7% below to 5%
        # above the exact expansion's (benchmarks/sweep_mxfp4.py --layout hopper, planner rows, same run). The second
        # loop's state costs registers: in a kernel that also runs Stream-K (STREAMK, the kernel's flag) the 8-row tile
        # takes 168 registers with FOLD and 96 without (benchmarks/compile_report.py --tile 8,64,256 --warps 4
        # --stages 4 --b-mx --mx-swap --mx-layout hopper --streamk), and split by Stream-K it ran 1 x 8192 x 28672 in
        # 62.6 us with FOLD and 56.7 without, 1 x 4096 x 14336 21.4 -> 19.1 and 4 x 128256 x 4096 164 -> 126 (H200; the
        # forced 8 x 64 x 256 Stream-K plan timed by tools.timing.time_rotating, e9ca43d with and without FOLD in one
        # run), so those tiles expand exactly.
        FOLD: tl.constexpr = B_MX != "ocp" and A_MX == "" and BLOCK_M <= 16 and not (
            INTERPRETER or MX_FP16 or MX_PREFETCH or (STREAMK and BLOCK_M == 8))
        acc, top = k_loop_mx(
            a_ptr, b_ptr, mxa_ptr, mxb_ptr, M, N, K, stride_am, stride_ak, stride_bn, stride_mxa, stride_mxb,
            row, col, iter_start, iter_end, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, INTERPRETER, USE_INT64,
            A_MX, B_MX, MX_FP16, A_DESC, MX_SWAP, MX_PREFETCH, FOLD, ONE_ROW)
        if FOLD:
            if tl.max(top) > 128:
                acc, top = k_loop_mx(
                    a_ptr, b_ptr, mxa_ptr, mxb_ptr, M, N, K, stride_am, stride_ak, stride_bn, stride_mxa, stride_mxb,
                    row, col, iter_start, iter_end, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, INTERPRETER, USE_INT64,
                    A_MX, B_MX, MX_FP16, A_DESC, MX_SWAP, MX_PREFETCH, False, ONE_ROW)
    else:
        acc = k_loop_dense(
            a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, row, col, matrix, iter_start,
            iter_end, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, INTERPRETER, INPUT_PRECISION, USE_INT64, A_DESC, B_DESC,
            BATCHED, A_VEC, B_VEC, MASK_M,
        )
    return acc


@triton.jit
def _desc_block(desc, matrix, row, col, ROWS: tl.constexpr, COLS: tl.constexpr, BATCHED: tl.constexpr):
    """The [ROWS, COLS] block at (row, col) of a 2-D descriptor, or of matrix matrix of a 3-D one (BATCHED)."""
    if BATCHED:
        return desc.load([matrix, row, col]).reshape(ROWS, COLS)
    else:
        return desc.load([row, col])


@triton.jit
def _desc_store(desc, matrix, row, col, block, BATCHED: tl.constexpr):
    """Store `block` [ROWS, COLS] at (row, col) of a 2-D descriptor, or of matrix `matrix` of a 3-D one (BATCHED)."""
    if BATCHED:
        desc.store([matrix, row, col], block.reshape(1, block.shape[0], block.shape[1]))
    else:
        desc.store([row, col], block)


@triton.jit
def _dense_blocks(a_ptr, b_ptr, p_a, p_b, it, K, row, col, matrix, offs_k, rows_ok, more,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, MASK_K: tl.constexpr,
                  A_DESC: tl.constexpr, B_DESC: tl.constexpr, BATCHED: tl.constexpr, MASK_M: tl.constexpr,
                  MASK_MORE: tl.constexpr = False):
    """The A [tile rows, K step it] and B [K step it, tile cols] blocks; MASK_K: pointer loads masked at K (the K
    tail); MASK_M: A's pointer loads masked to its `rows_ok`; MASK_MORE: pointer loads masked to `more` (a step that
    may lie past the loop's end, loaded ahead)."""
    if A_DESC == "stored":
        b_a = _desc_block(a_ptr, matrix, row, it * BLOCK_K, BLOCK_M, BLOCK_K, BATCHED)
    elif A_DESC == "transposed":
        b_a = tl.trans(_desc_block(a_ptr, matrix, it * BLOCK_K, row, BLOCK_K, BLOCK_M, BATCHED))
    elif MASK_MORE and MASK_M:
        b_a = tl.load(p_a, mask=rows_ok[:, None] & more, other=0.0)
    elif MASK_MORE:
        b_a = tl.load(p_a, mask=more, other=0.0)
    elif MASK_K and MASK_M:
        b_a = tl.load(p_a, mask=rows_ok[:, None] & (offs_k[None, :] < K - it * BLOCK_K), other=0.0)
    elif MASK_K:
        b_a = tl.load(p_a, mask=offs_k[None, :] < K - it * BLOCK_K, other=0.0)
    elif MASK_M:
        b_a = tl.load(p_a, mask=rows_ok[:, None], other=0.0)
    else:
        b_a = tl.load(p_a)
    if B_DESC == "stored":
        b_b = _desc_block(b_ptr, matrix, it * BLOCK_K, col, BLOCK_K, BLOCK_N, BATCHED)
    elif B_DESC == "transposed":
        b_b = tl.trans(_desc_block(b_ptr, matrix, col, it * BLOCK_K, BLOCK_N, BLOCK_K, BATCHED))
    elif MASK_MORE:
        b_b = tl.load(p_b, mask=more, other=0.0)
    elif MASK_K:
        b_b = tl.load(p_b, mask=offs_k[:, None] < K - it * BLOCK_K, other=0.0)
    else:
        b_b = tl.load(p_b)
    return b_a, b_b


@triton.jit
def _dense_dot(acc, b_a, b_b, INTERPRETER: tl.constexpr, INPUT_PRECISION: tl.constexpr):
    """acc + b_a @ b_b ([BM, BK] @ [BK, BN] -> [BM, BN])."""
    if INTERPRETER:
        b_a = b_a.to(tl.float32)
        b_b = b_b.to(tl.float32)
    # fp8 on Hopper: the tensor cores' own accumulation (about 13 mantissa bits, Triton's default). Promoting
    # to fp32 every K step (max_num_imprecise_acc=BLOCK_K) measured 3x slower, see docs/performance.md.
    return tl.dot(b_a, b_b, acc, input_precision=INPUT_PRECISION)


@triton.jit
def _dense_step(acc, a_ptr, b_ptr, p_a, p_b, it, K, row, col, matrix, offs_k, rows_ok,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, MASK_K: tl.constexpr,
                INTERPRETER: tl.constexpr, INPUT_PRECISION: tl.constexpr, A_DESC: tl.constexpr, B_DESC: tl.constexpr,
                BATCHED: tl.constexpr, MASK_M: tl.constexpr):
    """acc + A[tile rows, K step it] @ B[K step it, tile cols] (`_dense_blocks`)."""
    b_a, b_b = _dense_blocks(a_ptr, b_ptr, p_a, p_b, it, K, row, col, matrix, offs_k, rows_ok, True, BLOCK_M,
                             BLOCK_N, BLOCK_K, MASK_K, A_DESC, B_DESC, BATCHED, MASK_M)
    return _dense_dot(acc, b_a, b_b, INTERPRETER, INPUT_PRECISION)


@triton.jit
def _dense_pointers(a_ptr, b_ptr, offs_m, offs_n, offs_k, k0, stride_am, stride_ak, stride_bk, stride_bn,
                    A_DESC: tl.constexpr, B_DESC: tl.constexpr, A_VEC: tl.constexpr = 1, B_VEC: tl.constexpr = 1):
    """Pointers to the [BM, BK] A and [BK, BN] B blocks at K offset k0 (a multiple of BLOCK_K) of operands read
    through pointers; an operand read through a descriptor gets its base back, never read as a pointer.

    Triton vectorizes a load only as far as it can prove the alignment of each contiguous run, and it learns a
    stride's only from its own specialisation (divisible by 16). A_VEC / B_VEC (`k_loop`) tell it that every K-run
    starts at a multiple of that many elements, so rows aligned to 2, 4 or 8 elements load 4, 8 or 16 bytes at a
    time (and asynchronously) instead of one element at a time."""
    p_a = a_ptr
    p_b = b_ptr
    if A_DESC == "pointers":
        off_a = offs_m[:, None] * stride_am + (k0 + offs_k)[None, :] * stride_ak
        if A_VEC > 1:
            off_a = tl.multiple_of(off_a, [1, A_VEC])
        p_a = a_ptr + off_a
    if B_DESC == "pointers":
        off_b = (k0 + offs_k)[:, None] * stride_bk + offs_n[None, :] * stride_bn
        if B_VEC > 1:
            off_b = tl.multiple_of(off_b, [B_VEC, 1])
        p_b = b_ptr + off_b
    return p_a, p_b


@triton.jit
def k_loop_dense(
    a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, row, col, matrix, iter_start, iter_end,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr, INTERPRETER: tl.constexpr, INPUT_PRECISION: tl.constexpr, USE_INT64: tl.constexpr,
    A_DESC: tl.constexpr, B_DESC: tl.constexpr, BATCHED: tl.constexpr, A_VEC: tl.constexpr = 1,
    B_VEC: tl.constexpr = 1, MASK_M: tl.constexpr = False,
):
    """k_loop for dense operands (bf16, fp16, fp32, fp8).

    MASK_M (a 2-D A read through pointers, M at most a quarter of BLOCK_M: `_launch.static_args`): A's rows past M are
    masked (zeros) rather than wrapped. Wrapped, a decode tile's rows are copies of its few real ones, and every
    program asks L2 for the same bytes BLOCK_M / M times a step: on the H200 the bf16 16-row plans at M = 1 ran
    1 x 4096 x 4096 in 16.8 us wrapped and 12.9 masked, 1 x 14336 x 4096 37.5 -> 34.8; from M = 8 on masking was
    level or up to 4% slower (docs/performance.md, "Decode").

    With a K tail read through pointers, only the tail's step is masked: a mask in every step would hide from the
    compiler that whole rows of the step are in bounds, and it would load element by element (on the H200 that
    made such GEMMs up to ~10x slower). TMA needs no mask (it zero-fills past the edge), so descriptor reads keep
    one loop."""
    offs_m, offs_n = wrapped_offsets(row, col, M, N, BLOCK_M, BLOCK_N, USE_INT64)
    offs_k = tl.arange(0, BLOCK_K)
    rows_ok = (row + tl.arange(0, BLOCK_M)) < M  # read with MASK_M only
    p_a, p_b = _dense_pointers(a_ptr, b_ptr, offs_m, offs_n, offs_k, iter_start * BLOCK_K, stride_am, stride_ak,
                               stride_bk, stride_bn, A_DESC, B_DESC, A_VEC, B_VEC)
    PEEL: tl.constexpr = not EVEN_K and (A_DESC == "pointers" or B_DESC == "pointers")
    full_end = iter_end
    if PEEL:
        full_end = tl.minimum(iter_end, K // BLOCK_K)  # the steps before the K tail
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # 32-deep tiles reading both 1- or 2-byte operands one element a load (odd rows: `plan.INPLACE_CONFIGS`) load
    # each step's blocks one step ahead, into registers: the compiler pipelines only asynchronous copies (4 bytes or
    # more), so such loads would otherwise wait out their latency every step. On the H200 (fp16 planner rows of
    # benchmarks/sweep_configs.py, with and without, one call) odd-row problems ran 0.64-0.97x the time: 65 x 2747 x
    # 417 16.3 -> 10.4 us, 67 x 83 x 175 5.68 -> 4.73, 83 x 7475 x 319 13.6 -> 11.2, 93 x 341 x 1815 (Stream-K)
    # 10.0 -> 8.9; read in place, bf16 85 x 10993 x 1471 58.4 -> 44.0 and 84 x 15219 x 1233 52.1 -> 39.7.
    AHEAD: tl.constexpr = A_DESC == "pointers" and B_DESC == "pointers" and A_VEC == 1 and B_VEC == 1 and \
        BLOCK_K == 32 and a_ptr.dtype.element_ty.primitive_bitwidth < 32
    if AHEAD:
        n_a, n_b = _dense_blocks(a_ptr, b_ptr, p_a, p_b, iter_start, K, row, col, matrix, offs_k, rows_ok,
                                 iter_start < full_end, BLOCK_M, BLOCK_N, BLOCK_K, False, A_DESC, B_DESC, BATCHED,
                                 MASK_M, True)
        for it in range(iter_start, full_end):
            b_a, b_b = n_a, n_b
            p_a += BLOCK_K * stride_ak
            p_b += BLOCK_K * stride_bk
            n_a, n_b = _dense_blocks(a_ptr, b_ptr, p_a, p_b, it + 1, K, row, col, matrix, offs_k, rows_ok,
                                     it + 1 < full_end, BLOCK_M, BLOCK_N, BLOCK_K, False, A_DESC, B_DESC, BATCHED,
                                     MASK_M, True)
            acc = _dense_dot(acc, b_a, b_b, INTERPRETER, INPUT_PRECISION)
    else:
        for it in range(iter_start, full_end):
            acc = _dense_step(acc, a_ptr, b_ptr, p_a, p_b, it, K, row, col, matrix, offs_k, rows_ok, BLOCK_M,
                              BLOCK_N, BLOCK_K, False, INTERPRETER, INPUT_PRECISION, A_DESC, B_DESC, BATCHED, MASK_M)
            if A_DESC == "pointers":
                p_a += BLOCK_K * stride_ak
            if B_DESC == "pointers":
                p_b += BLOCK_K * stride_bk
    if PEEL:
        if full_end < iter_end:  # the K tail, masked; its pointers formed anew, so the loop's die with the loop
            t_a, t_b = _dense_pointers(a_ptr, b_ptr, offs_m, offs_n, offs_k, full_end * BLOCK_K, stride_am,
                                       stride_ak, stride_bk, stride_bn, A_DESC, B_DESC, A_VEC, B_VEC)
            acc = _dense_step(acc, a_ptr, b_ptr, t_a, t_b, full_end, K, row, col, matrix, offs_k, rows_ok,
                              BLOCK_M, BLOCK_N, BLOCK_K, True, INTERPRETER, INPUT_PRECISION, A_DESC, B_DESC, BATCHED,
                              MASK_M)
    return acc


@triton.jit
def k_loop_mx(
    a_ptr, w_ptr, mxa_ptr, mxw_ptr, M, N, K, stride_am, stride_ak, stride_wn, stride_mxa, stride_mxw,
    row, col, iter_start, iter_end,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr, INTERPRETER: tl.constexpr, USE_INT64: tl.constexpr,
    A_MX: tl.constexpr, B_MX: tl.constexpr, MX_FP16: tl.constexpr, A_DESC: tl.constexpr, MX_SWAP: tl.constexpr,
    MX_PREFETCH: tl.constexpr, FOLD: tl.constexpr, ONE_ROW: tl.constexpr = False,
):
    """k_loop with an MXFP4 weight W [N, K/2] (scales in mxw) and A bf16 / fp16 (dense, read per A_DESC) or MXFP4
    (A_MX: [M, K/2], scales in mxa), K steps [iter_start, iter_end). Returns the fp32 [BLOCK_M, BLOCK_N] accumulator
    of A @ W^T, and with FOLD the largest weight scale met per (row, scale column) of the tile (zeros otherwise).

    The tiles are dequantized in registers (exactly) to bf16 (`mx_dequant_bf16`; fp16 when MX_FP16, to match an fp16 A)
    and fed to `tl.dot`. (`tl.dot_scaled`, which Triton emulates on Hopper the same way, measured slower.) MX_SWAP
    computes the transposed product W @ A^T ([BLOCK_N, BLOCK_M]) and transposes it once at the end, the weight tile
    being the dot's left operand (with a "hopper" or "kwords" weight, its register operand). MX_PREFETCH expands the
    next step's weight tile after issuing this step's dot, so that the expansion can run while the tensor cores work.
    FOLD ("hopper" or "kwords" weight, GPU) expands with e2m1's 2^126 bias folded into the scale (one multiply a pair
    instead of two): exact while every scale is <= 2^1, the usual case for weights; the caller runs the loop again
    without it when the returned scales say otherwise. ONE_ROW (M = 1, a dense A read through pointers): the one row
    is loaded once a step and broadcast to the tile's rows, where wrapped rows (`% M`) would load it BLOCK_M times;
    on the H200 (CUDA-graph replays) 1 x 14336 x 4096 with a "hopper" weight took 19.5 us wrapped and 17.0 broadcast,
    1 x 4096 x 14336 19.5 -> 17.2, 1 x 4096 x 4096 9.14 -> 8.25 (docs/performance.md, "Decode").
    """
    offs_m, offs_n = wrapped_offsets(row, col, M, N, BLOCK_M, BLOCK_N, USE_INT64)
    offs_k = tl.arange(0, BLOCK_K)
    # 8-row swapped tiles of a "hopper" or "kwords" weight: the dot is [BLOCK_N, K] @ [K, 8], which runs on
    # mma.sync, whose fragments are the expanded words in their own order: K order in a "kwords" weight; a "hopper"
    # weight's activation tile is put in that order instead (`word_order`). 16-row unswapped tiles of a "kwords"
    # weight likewise: [16, K] @ [K, BLOCK_N] on mma.sync, the words the right operand's fragments in K order. The
    # other tiles of a "kwords" weight (expanded in bf16) take the wgmma's fragment order, and the activation tile is
    # put in it (`fragment_order`).
    WORDS: tl.constexpr = ((B_MX != "ocp" and MX_SWAP and BLOCK_M == 8) or
                           (B_MX == "kwords" and not MX_SWAP and BLOCK_M == 16)) and \
        A_MX == "" and not (MX_FP16 or MX_PREFETCH)
    FRAGMENTS: tl.constexpr = B_MX == "kwords" and not (WORDS or MX_FP16)
    if MX_SWAP:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    top = tl.zeros((BLOCK_N, BLOCK_K // 32), dtype=tl.uint8)
    if MX_PREFETCH:
        w_next = mx_weight_tile(w_ptr, mxw_ptr, offs_n, stride_wn, stride_mxw, iter_start * BLOCK_K, K,
                                BLOCK_N, BLOCK_K, EVEN_K, INTERPRETER, MX_FP16, B_MX)
    for it in range(iter_start, iter_end):
        k0 = it * BLOCK_K
        if MX_PREFETCH:  # expanded during the previous step's dot
            b_w = w_next
        elif FOLD:
            b_w, w_scales = mx_words_weight_tile(w_ptr, mxw_ptr, offs_n, stride_wn, stride_mxw, k0, K, BLOCK_N,
                                                 BLOCK_K, EVEN_K, INTERPRETER, True, WORDS, B_MX)
            top = tl.maximum(top, w_scales)
        else:
            b_w = mx_weight_tile(w_ptr, mxw_ptr, offs_n, stride_wn, stride_mxw, k0, K,
                                 BLOCK_N, BLOCK_K, EVEN_K, INTERPRETER, MX_FP16, B_MX, WORDS)
        if A_MX != "":
            a_packed, a_scales = load_mx_raw(a_ptr, mxa_ptr, offs_m, stride_am, stride_mxa, k0, K,
                                             BLOCK_M, BLOCK_K, EVEN_K, A_MX)
            a_even, a_odd = mx_dequant_bf16(a_packed, a_scales, BLOCK_M, BLOCK_K, INTERPRETER)
            b_a = tl.join(a_even, a_odd).reshape(BLOCK_M, BLOCK_K)
        elif A_DESC == "stored":
            b_a = a_ptr.load([row, k0])
        elif A_DESC == "transposed":
            b_a = tl.trans(a_ptr.load([k0, row]))
        else:
            if ONE_ROW:
                p_r = a_ptr + (k0 + offs_k) * stride_ak
                if EVEN_K:
                    a_row = tl.load(p_r)
                else:
                    a_row = tl.load(p_r, mask=offs_k < K - k0, other=0.0)
                b_a = tl.broadcast_to(a_row[None, :], (BLOCK_M, BLOCK_K))
            else:
                p_a = a_ptr + offs_m[:, None] * stride_am + (k0 + offs_k)[None, :] * stride_ak
                if EVEN_K:
                    b_a = tl.load(p_a)
                else:
                    b_a = tl.load(p_a, mask=offs_k[None, :] < K - k0, other=0.0)
        if WORDS and B_MX == "hopper":
            b_a = word_order(b_a, BLOCK_M, BLOCK_K)
        elif FRAGMENTS:
            b_a = fragment_order(b_a, BLOCK_M, BLOCK_K)
        if INTERPRETER:
            b_a = b_a.to(tl.float32)
            b_w = b_w.to(tl.float32)
        if MX_SWAP:  # [BN, BK] @ [BK, BM] -> [BN, BM]
            acc = tl.dot(b_w, tl.trans(b_a), acc)
        else:  # [BM, BK] @ [BK, BN] -> [BM, BN]
            acc = tl.dot(b_a, tl.trans(b_w), acc)
        if MX_PREFETCH:  # the last step re-expands its own tile: harmless, and no branch in the loop
            w_next = mx_weight_tile(w_ptr, mxw_ptr, offs_n, stride_wn, stride_mxw,
                                    tl.minimum(it + 1, iter_end - 1) * BLOCK_K, K,
                                    BLOCK_N, BLOCK_K, EVEN_K, INTERPRETER, MX_FP16, B_MX)
    if MX_SWAP:
        acc = tl.trans(acc)
    return acc, top


@triton.jit
def epilogue(
    acc, row, col, shape, d_ptr, d_desc, d_strides, c_ptr, c_strides, sa_ptr, sb_ptr, scale_strides, coeffs,
    HAS_C: tl.constexpr, C_ROW: tl.constexpr, HAS_SCALE_A: tl.constexpr, HAS_SCALE_B: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, USE_INT64: tl.constexpr, INTERPRETER: tl.constexpr,
    D_DESC: tl.constexpr, matrix=0, BATCHED: tl.constexpr = False,
):
    """D = alpha * (scale_a[m] * scale_b[n] * acc) + beta * C[m, n], computed in fp32, cast to D's dtype, for the
    tile whose first row and column are (row, col) in `shape` (M, N, K); (alpha, beta) = `coeffs`.

    C is any (M, N)-broadcastable tensor given by its strides: a bias along N has stride_cm == 0, a full
    matrix has both strides. C is not read unless HAS_C, so beta == 0 never propagates NaN from C. C_ROW: C is one
    row broadcast over M (stride_cm == 0), read as a [BLOCK_N] vector: a [BLOCK_M, BLOCK_N] tile load would need a
    layout conversion through shared memory as large as the tile (Triton 3.7 keeps it beside the pipeline's
    buffers in a flattened loop: 128 x 256 fp32 tiles then fit one stage only).
    scale_a is per row (or per tensor with stride 0), scale_b per column (or per tensor).
    D_DESC: the TMA stores a tile takes through the tensor descriptor `d_desc` (clipped at the edges; BATCHED: 3-D,
    [batch, M, N], written at matrix `matrix`): 1, the whole tile, or 2, two column halves, so that their staging
    buffer is half as large (Triton then waits for the first half's store to leave it before writing the second);
    0: through `d_ptr` and the strides, masked. A 4-byte C matrix is read, added and stored a column quarter at a
    time (`_add_c_store`, through a descriptor of quarter-wide boxes where D_DESC; never with D_DESC == 1).
    """
    M, N, _ = shape
    stride_dm, stride_dn = d_strides
    stride_cm, stride_cn = c_strides
    stride_sa, stride_sb = scale_strides
    alpha, beta = coeffs
    offs_m = row + tl.arange(0, BLOCK_M)
    offs_n = col + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    if USE_INT64:
        offs_m = offs_m.to(tl.int64)
        offs_n = offs_n.to(tl.int64)
    if HAS_SCALE_A:
        acc = acc * tl.load(sa_ptr + offs_m * stride_sa, mask=mask_m, other=0.0)[:, None]
    if HAS_SCALE_B:
        acc = acc * tl.load(sb_ptr + offs_n * stride_sb, mask=mask_n, other=0.0)[None, :]
    acc = acc * alpha
    if HAS_C and not C_ROW and c_ptr.dtype.element_ty.primitive_bitwidth > 16:
        # A 4-byte C matrix tile is added, cast and stored one column quarter at a time: its load in the accumulator's
        # layout then holds a quarter of the registers, and its layout conversion a quarter of the shared memory, so
        # fp32 (TF32) 128 x 256 x 32 tiles keep 3 pipeline stages (213 KB). Whole, they spilled and fit one stage;
        # in halves, two. On the H200 (python -m smgemm bench --epilogue, tf32 addmm, quarters at 1574c39 against
        # halves at c5f7fe4 in one run) 4096^3 ran 250 -> 372 TFLOP/s (torch 347), 8192^3 257 -> 333 (331),
        # 2048 x 14336 x 4096 249 -> 372 (313), 1024 x 6144 x 4096 329 -> 321 (311). 2-byte C tiles (which do not
        # spill) ran within 2% or faster whole: bf16 8192^3 addmm 1482 against 1711 us in halves, baddbmm
        # 32 x 2048 x 2048 x 128 222 against 283.
        tl.static_assert(D_DESC != 1, "a 4-byte C matrix is stored in parts")
        Q: tl.constexpr = BLOCK_N // 4
        left, right = tl.split(acc.reshape(BLOCK_M, 2, BLOCK_N // 2).permute(0, 2, 1))
        q0, q1 = tl.split(left.reshape(BLOCK_M, 2, Q).permute(0, 2, 1))
        q2, q3 = tl.split(right.reshape(BLOCK_M, 2, Q).permute(0, 2, 1))
        _add_c_store(q0, offs_m, row, col, shape, d_ptr, d_desc, d_strides, c_ptr, c_strides, beta, Q,
                     USE_INT64, INTERPRETER, D_DESC, matrix, BATCHED)
        _add_c_store(q1, offs_m, row, col + Q, shape, d_ptr, d_desc, d_strides, c_ptr, c_strides, beta, Q,
                     USE_INT64, INTERPRETER, D_DESC, matrix, BATCHED)
        _add_c_store(q2, offs_m, row, col + 2 * Q, shape, d_ptr, d_desc, d_strides, c_ptr, c_strides, beta,
                     Q, USE_INT64, INTERPRETER, D_DESC, matrix, BATCHED)
        _add_c_store(q3, offs_m, row, col + 3 * Q, shape, d_ptr, d_desc, d_strides, c_ptr, c_strides, beta,
                     Q, USE_INT64, INTERPRETER, D_DESC, matrix, BATCHED)
    else:
        mask = mask_m[:, None] & mask_n[None, :]
        if HAS_C and C_ROW:
            acc += beta * tl.load(c_ptr + offs_n * stride_cn, mask=mask_n, other=0.0).to(tl.float32)[None, :]
        elif HAS_C:
            p_c = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
            acc += beta * tl.load(p_c, mask=mask, other=0.0).to(tl.float32)
        if INTERPRETER and d_ptr.dtype.element_ty == tl.bfloat16:
            acc = round_to_bf16_rtne(acc)  # the GPU's cast rounds to nearest even; the interpreter's truncates
        if D_DESC == 1:
            _desc_store(d_desc, matrix, row, col, acc.to(d_ptr.dtype.element_ty), BATCHED)
        elif D_DESC:
            halves = acc.to(d_ptr.dtype.element_ty).reshape(BLOCK_M, 2, BLOCK_N // 2).permute(0, 2, 1)
            left, right = tl.split(halves)
            _desc_store(d_desc, matrix, row, col, left, BATCHED)
            _desc_store(d_desc, matrix, row, col + BLOCK_N // 2, right, BATCHED)
        else:
            p_d = d_ptr + offs_m[:, None] * stride_dm + offs_n[None, :] * stride_dn
            tl.store(p_d, acc.to(d_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _add_c_store(
    acc, offs_m, row, col, shape, d_ptr, d_desc, d_strides, c_ptr, c_strides, beta, WIDTH: tl.constexpr,
    USE_INT64: tl.constexpr, INTERPRETER: tl.constexpr, D_DESC: tl.constexpr, matrix, BATCHED: tl.constexpr,
):
    """`epilogue`'s end for a C matrix: D[offs_m, col:col + WIDTH] = acc + beta * C there (acc: the scaled product,
    [len(offs_m), WIDTH]; `row`: offs_m's first), through `d_desc` (blocks WIDTH wide) or `d_ptr`, masked."""
    M, N, _ = shape
    stride_dm, stride_dn = d_strides
    stride_cm, stride_cn = c_strides
    offs_n = col + tl.arange(0, WIDTH)
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    if USE_INT64:
        offs_n = offs_n.to(tl.int64)
    acc += beta * tl.load(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, mask=mask,
                          other=0.0).to(tl.float32)
    if INTERPRETER and d_ptr.dtype.element_ty == tl.bfloat16:
        acc = round_to_bf16_rtne(acc)  # the GPU's cast rounds to nearest even; the interpreter's truncates
    if D_DESC:
        _desc_store(d_desc, matrix, row, col, acc.to(d_ptr.dtype.element_ty), BATCHED)
    else:
        tl.store(d_ptr + offs_m[:, None] * stride_dm + offs_n[None, :] * stride_dn, acc.to(d_ptr.dtype.element_ty),
                 mask=mask)
