"""The overlap benchmarks' memory-bound partner (smgemm.tools.attention): paged GQA decode attention, checked
against torch's scaled_dot_product_attention in float64."""

import pytest
import torch

from smgemm.tools.attention import decode_attention, paged_cache, reference_attention


def test_paged_decode_attention_matches_sdpa(device):
    q, k_cache, v_cache, table, lens = paged_cache(3, 2, 32, 40, page_size=16, device=device, seed=1)
    lens = torch.tensor([40, 17, 33], dtype=torch.int32, device=device)  # partial last pages, one of one token
    for programs in (1, 4, 64):  # persistent grids smaller and larger than the 6 (sequence, KV head) items
        out = decode_attention(q, k_cache, v_cache, table, lens, num_programs=programs)
        ref = reference_attention(q, k_cache, v_cache, table, lens)
        # bf16 output (half an ulp, 2^-9 relative) and probabilities rounded to bf16 before the PV product (each
        # term's weight off by <= 2^-9 relative: <= 2^-9 max|v| in all); fp32 softmax and sums are far below that
        bound = 2.0**-9 * (ref.abs() + v_cache.double().abs().max()) + 1e-5
        assert not out.isnan().any()
        assert ((out.double() - ref).abs() <= bound).all(), (programs, (out.double() - ref).abs().max())


def test_refuses_what_it_cannot_read(device):
    q, k_cache, v_cache, table, lens = paged_cache(2, 2, 32, 32, page_size=16, device=device)
    with pytest.raises(ValueError, match="shapes do not fit"):
        decode_attention(q[:, :3], k_cache, v_cache, table, lens)
    with pytest.raises(ValueError, match="k_cache must be contiguous bf16"):
        decode_attention(q, k_cache.float(), v_cache, table, lens)
