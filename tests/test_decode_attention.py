"""The overlap benchmarks' memory-bound partner (smgemm.tools.attention): paged GQA decode attention, checked
against torch's scaled_dot_product_attention in float64."""

import math

import pytest
import torch

from smgemm.tools import attention
from smgemm.tools.attention import decode_attention, paged_cache, reference_attention


@pytest.fixture(autouse=True)
def _poison_output(monkeypatch):
    """The attention's output starts as NaN, so a row no kernel writes fails the comparison."""
    monkeypatch.setattr(attention, "_output", lambda q: torch.full_like(q, float("nan")))


@pytest.mark.parametrize("warps,chunks,parts", [(1, 1, 1), (2, 1, 1), (2, 2, 1), (2, 4, 1), (1, 4, 1), (1, 1, 2),
                                               (1, 2, 2)])
def test_paged_decode_attention_matches_sdpa(warps, chunks, parts, device):
    """Each warp's tokens of a page, and each chunk of a sequence's pages, keep their own running softmax, merged
    at the end: chunks and warps that see no token (a sequence of one page, a last page of one token) weigh 0.
    Pages read in parts (`parts`) take their blocks' rows from the same table entry."""
    q, k_cache, v_cache, table, lens = paged_cache(3, 2, 32, 100, page_size=32, device=device, seed=1)
    lens = torch.tensor([100, 9, 65], dtype=torch.int32, device=device)  # partial last pages, one of one token
    for programs in (1, 4, 64):  # persistent grids smaller and larger than the (sequence, KV head, chunk) items
        out = decode_attention(q, k_cache, v_cache, table, lens, num_programs=programs, warps=warps, chunks=chunks,
                               parts=parts)
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
    with pytest.raises(ValueError, match="multiple of 16 tokens a warp"):
        decode_attention(q, k_cache, v_cache, table, lens, warps=2)
    with pytest.raises(ValueError, match="parts must be a power of two"):
        decode_attention(q, k_cache, v_cache, table, lens, warps=1, parts=3)
    with pytest.raises(ValueError, match="in each of 2 parts"):
        decode_attention(q, k_cache, v_cache, table, lens, warps=1, parts=2)
    with pytest.raises(ValueError, match="chunks must be a power of two"):
        decode_attention(q, k_cache, v_cache, table, lens, warps=1, chunks=3)


@pytest.mark.gpu
@pytest.mark.parametrize("group", [1, 4, 8])
def test_gluon_kernel_matches_sdpa(group):
    """The Gluon kernel (Triton 3.6, Hopper): each warp's 16 tokens of a page keep their own running softmax, merged
    through the idle slots at the end of an item. Sequences of one token, one whole page and a partial last page
    leave warps, slots and chunks without a token; grids smaller and larger than the items."""
    fast = attention._gluon()
    q, k_cache, v_cache, table, lens = paged_cache(5, 2, 128, 1000, seed=2)
    if fast is None or not fast.fits(q, k_cache):
        pytest.skip("needs Triton 3.6's Gluon on a Hopper GPU")
    q = torch.randn(5, 2 * group, 128, dtype=torch.bfloat16, device="cuda")
    lens = torch.tensor([1000, 1, 64, 65, 37], dtype=torch.int32, device="cuda")
    ref = reference_attention(q, k_cache, v_cache, table, lens)
    bound = 2.0**-9 * (ref.abs() + v_cache.double().abs().max()) + 1e-5  # as in the tl kernel's test
    # chunks of none to 16 pages; with chunks None (`attention.tail_chunks`) 3 and 7 programs split the last 1 and 3
    # pairs in 2, 4 the last 2, 64 all 10, 6 none
    for programs, chunks in ((1, 1), (3, 1), (64, 1), (3, 2), (7, 4), (64, None), (3, None), (4, None), (6, None),
                             (7, None)):
        out = decode_attention(q, k_cache, v_cache, table, lens, num_programs=programs, chunks=chunks, kernel="gluon")
        assert not out.isnan().any()
        assert ((out.double() - ref).abs() <= bound).all(), (programs, chunks, (out.double() - ref).abs().max())


def test_tail_chunks_split_only_the_last_round():
    assert attention.tail_chunks(512, 72, 256) == (504, 9)  # 24 SMs' 72 programs: 8 pairs left, 9 chunks each
    assert attention.tail_chunks(512, 84, 256) == (504, 10)  # 80 chunks in one more round of 84
    assert attention.tail_chunks(512, 128, 256) == (512, 1)  # whole rounds
    assert attention.tail_chunks(512, 396, 256) == (396, 3)  # the whole H200's 396 programs: 348 chunks of 116 pairs
    assert attention.tail_chunks(100, 64, 256) == (100, 1)  # 36 left: chunks would not halve the last round
    assert attention.tail_chunks(10, 64, 16) == (0, 2)  # fewer pairs than programs, at least 8 pages a chunk
    assert attention.tail_chunks(10, 64, 1000) == (0, 6)


def test_chunk_states_merge_from_an_offset_with_padding(device):
    """`_chunks_kernel` merges `chunks` states a pair (not a power of two: padded, padding weighing 0) into the rows
    of pairs first_pair.. of the output, and leaves the other rows alone."""
    gen = torch.Generator().manual_seed(3)
    group, group_pad, dim, chunks, tokens = 3, 8, 32, 3, 40
    pairs, first = 4, 2
    q = torch.randn(pairs, group, dim, generator=gen, dtype=torch.float64)
    k = torch.randn(pairs, tokens, dim, generator=gen, dtype=torch.float64)
    v = torch.randn(pairs, tokens, dim, generator=gen, dtype=torch.float64)
    scores = q @ k.transpose(1, 2) * math.log2(math.e) / math.sqrt(dim)  # [pairs, group, tokens], base 2
    want = torch.softmax(scores * math.log(2), dim=-1) @ v
    split = (pairs - first) * chunks
    part_ml = torch.zeros(split, 2, group_pad, dtype=torch.float32)
    part_acc = torch.zeros(split, group_pad, dim, dtype=torch.float32)
    bounds = [0, 7, 7, tokens]  # the second chunk sees no token
    for p in range(first, pairs):
        for c in range(chunks):
            i = (p - first) * chunks + c
            s = scores[p, :, bounds[c]:bounds[c + 1]]
            top = s.max(-1).values if s.shape[-1] else torch.full((group,), float("-inf"), dtype=torch.float64)
            w = torch.exp2(s - top[:, None]) if s.shape[-1] else s
            part_ml[i, 0, :group], part_ml[i, 0, group:] = top, float("-inf")
            part_ml[i, 1, :group] = w.sum(-1)
            part_acc[i, :group] = w @ v[p, bounds[c]:bounds[c + 1]]
    out = torch.full((pairs * group, dim), float("nan"), dtype=torch.bfloat16, device=device)
    attention._chunks_kernel[(pairs - first,)](part_ml.to(device), part_acc.to(device), out, first, chunks,
                                               GROUP=group, GROUP_PAD=group_pad, HEAD_DIM=dim, CHUNKS_PAD=4,
                                               num_warps=4)
    out = out.view(pairs, group, dim).double().cpu()
    assert out[:first].isnan().all()
    torch.testing.assert_close(out[first:], want[first:], rtol=1e-2, atol=1e-2)


def test_kernel_choice_is_checked(device):
    q, k_cache, v_cache, table, lens = paged_cache(2, 2, 32, 32, page_size=16, device=device)
    with pytest.raises(ValueError, match="kernel must be 'auto', 'tl' or 'gluon'"):
        decode_attention(q, k_cache, v_cache, table, lens, kernel="cuda")
    with pytest.raises(ValueError, match=r"kernel='gluon' needs Triton 3\.6, a Hopper GPU, pages of 64 tokens"):
        decode_attention(q, k_cache, v_cache, table, lens, kernel="gluon")  # pages of 16 tokens, head_dim 32

