"""float64 references and per-element error bounds justified by the dtypes and K."""

from __future__ import annotations

import torch

# Unit roundoff (half an ulp, relative) of each dtype a result is rounded to.
_UNIT_ROUNDOFF = {
    torch.float32: 2.0**-24,
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-8,
}


def randn(shape, dtype, device, *, transposed=False, scale=1.0):
    """Fresh random data in `dtype`; `transposed` returns a transposed view of a contiguous tensor."""
    if transposed:
        return randn(tuple(reversed(shape)), dtype, device, scale=scale).t()
    x = torch.randn(shape, device=device) * scale
    return x.to(dtype)


def assert_gemm_close(out, a, b, *, alpha=1.0, beta=0.0, c=None, scale_a=None, scale_b=None, tf32=False):
    """Check out == alpha * (sa * sb * a @ b) + beta * c element by element against a float64 reference.

    Bound per element: the fp32 accumulation over K terms (gamma_K = K * u32 times sum |a||b|; with TF32 each
    operand is first rounded to 11 significant bits, 2 * 2^-11 relative per product), plus rounding the result to
    out.dtype (u_out * |ref|, or half a subnormal step near zero), plus fp32 rounding in the epilogue. No element
    may be NaN.

    fp8 on a GPU: Hopper's fp8 tensor cores add each MMA step's 32 products into the accumulator keeping about
    13 mantissa bits (DeepSeek-V3 report, sec. 3.3.2), so each of the K/32 steps may lose 2^-13 of the running
    sum (<= sum |a||b|), plus 2^-13 of the step's own products: 2^-13 * (K/32 + 1) * sum |a||b|.
    """
    a64, b64 = a.double(), b.double()
    prod = a64 @ b64
    absprod = a64.abs() @ b64.abs()
    if scale_a is not None:
        sa = scale_a.double().reshape(-1, 1) if scale_a.numel() > 1 else scale_a.double().reshape(())
        prod, absprod = prod * sa, absprod * sa.abs()
    if scale_b is not None:
        sb = scale_b.double().reshape(1, -1) if scale_b.numel() > 1 else scale_b.double().reshape(())
        prod, absprod = prod * sb, absprod * sb.abs()
    ref = alpha * prod
    k = a.shape[1]
    u32 = 2.0**-24
    per_product = 2 * 2.0**-11 if tf32 else 0.0
    accumulation = k * u32 * 1.01
    if a.dtype == torch.float8_e4m3fn and a.is_cuda:
        accumulation = 2.0**-13 * (k / 32 + 1)
    bound = abs(alpha) * absprod * (accumulation + per_product + 4 * u32)
    if c is not None and beta != 0:
        c64 = c.double().expand_as(ref)
        ref = ref + beta * c64
        bound = bound + 2 * u32 * abs(beta) * c64.abs()
    # Rounding to out.dtype: relative for normal results, half the subnormal spacing absolute near zero (a bias
    # can cancel the product: a 1.4e-6 result is subnormal in fp16 and rounds to a multiple of 2^-24).
    finfo = torch.finfo(out.dtype)
    bound = bound + _UNIT_ROUNDOFF[out.dtype] * ref.abs() * 1.01 + finfo.tiny * finfo.eps / 2 * 1.01 + 1e-30
    out64 = out.double().cpu()
    ref, bound = ref.cpu(), bound.cpu()
    assert not torch.isnan(out64).any(), f"{int(torch.isnan(out64).sum())} NaN elements (unwritten tiles?)"
    err = (out64 - ref).abs()
    bad = err > bound
    if bad.any():
        i = int(bad.flatten().nonzero()[0])
        idx = (i // ref.shape[1], i % ref.shape[1])
        raise AssertionError(
            f"{int(bad.sum())}/{bad.numel()} elements out of bound; first at {idx}: "
            f"got {out64[idx].item()}, expected {ref[idx].item()}, bound {bound[idx].item():.3g}; "
            f"max err/bound {(err / bound).max().item():.3g}"
        )
