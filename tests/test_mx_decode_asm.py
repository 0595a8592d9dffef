"""The MXFP4 decode's inline PTX (`kernels.common._E2M1X8_TO_BF16`) run by a small PTX emulator on the CPU, against
the e2m1 x e8m0 values in float64: every byte in every position, scales across the whole e8m0 range. The GPU tests
check the same code end to end; this one needs no GPU, so a change to the assembly is checked by CI."""

import re

import torch

from smgemm.kernels.common import _e2m1x8_to_bf16_asm

_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
_M32 = 0xFFFFFFFF


def _bf16(bits: int) -> float:
    return torch.tensor([bits - 0x10000 if bits >= 0x8000 else bits], dtype=torch.int16).view(torch.bfloat16).item()


def _bf16_mul(x: int, y: int) -> int:
    """One 16-bit lane of mul.rn.bf16x2: the exact product (bf16 x bf16 fits float64) rounded to nearest even
    (torch's cast, subnormals kept), NaN canonical."""
    product = torch.tensor([_bf16(x) * _bf16(y)], dtype=torch.float64).to(torch.bfloat16)
    return 0x7FFF if product.isnan() else int(product.view(torch.int16)) & 0xFFFF


def _prmt(a: int, b: int, selector: int) -> int:
    pool = [(a >> 8 * i) & 0xFF for i in range(4)] + [(b >> 8 * i) & 0xFF for i in range(4)]
    out = 0
    for i in range(4):
        nib = (selector >> 4 * i) & 0xF
        byte = pool[nib & 7]
        out |= ((0xFF if byte & 0x80 else 0) if nib & 8 else byte) << 8 * i
    return out


def _run(asm: str, inputs: dict[str, int]) -> dict[str, int]:
    """Execute the straight-line PTX of `asm` on 32-bit registers; `inputs` names $4, $5, ... Returns registers."""
    regs = dict(inputs)

    def val(token: str) -> int:
        token = token.strip()
        return int(token, 0) & _M32 if re.fullmatch(r"-?(0x[0-9a-fA-F]+|\d+)", token) else regs[token]

    for stmt in (s.strip() for s in re.split(r"[;\n]", asm)):
        if not stmt or stmt in "{}" or stmt.startswith(".reg"):
            continue
        op, args = stmt.split(None, 1)
        dst, *src = (t.strip() for t in args.split(","))
        v = [val(t) for t in src]
        if op == "mov.b32":
            r = v[0]
        elif op == "and.b32":
            r = v[0] & v[1]
        elif op == "or.b32":
            r = v[0] | v[1]
        elif op == "shr.b32":
            r = v[0] >> v[1]
        elif op == "shl.b32":
            r = (v[0] << v[1]) & _M32
        elif op == "mul.lo.u32":
            r = (v[0] * v[1]) & _M32
        elif op == "prmt.b32":
            r = _prmt(*v)
        elif op == "mul.rn.bf16x2":
            r = _bf16_mul(v[0] & 0xFFFF, v[1] & 0xFFFF) | _bf16_mul(v[0] >> 16, v[1] >> 16) << 16
        else:
            raise AssertionError(f"the emulator does not know {op}")
        regs[dst] = r
    return regs


def _scale_bits(s: int) -> int:
    """What the kernel passes for an e8m0 scale byte s: the bf16 bits of 2^(s - 127) (NaN for 255)."""
    return 0x0040 if s == 0 else 0x7FC0 if s == 255 else s << 7


def _value(code: int, s: int) -> float:
    if s == 255:
        return float("nan")
    return (-1.0 if code & 8 else 1.0) * _E2M1[code & 7] * 2.0 ** (s - 127)


def test_decode_asm_matches_e2m1_times_e8m0():
    asm = _e2m1x8_to_bf16_asm()
    gen = torch.Generator().manual_seed(0)
    scales = [0, 1, 2, 100, 126, 127, 128, 200, 253, 254, 255]
    for position in range(4):
        for byte in range(256):
            data = torch.randint(0, 256, (4,), generator=gen).tolist()
            data[position] = byte
            sc = [scales[int(i)] for i in torch.randint(0, len(scales), (2,), generator=gen)]  # bytes (0,1), (2,3)
            s_of = [sc[0], sc[0], sc[1], sc[1]]
            word = sum(b << 8 * i for i, b in enumerate(data))
            regs = _run(asm, {"$4": word, "$5": _scale_bits(sc[0]) * 0x10001, "$6": _scale_bits(sc[1]) * 0x10001})
            # $0, $1: even elements (low nibbles) of bytes (0, 1), (2, 3); $2, $3: odd elements (high nibbles)
            got = {}
            for reg, (lo, hi), nibble in (("$0", (0, 1), 0), ("$1", (2, 3), 0), ("$2", (0, 1), 4), ("$3", (2, 3), 4)):
                for half, b in enumerate((lo, hi)):
                    got[(b, nibble)] = _bf16((regs[reg] >> 16 * half) & 0xFFFF)
            for (b, nibble), value in got.items():
                want = _value((data[b] >> nibble) & 0xF, s_of[b])
                exact = torch.tensor([want], dtype=torch.float64).to(torch.bfloat16).double().item()
                assert (value == exact) or (value != value and want != want), (position, byte, b, nibble, value, want)
