"""Launches read A and B through tensor descriptors built on the host (`_launch.reads_host_descriptors`,
`with_descriptors`) wherever the kernel reads them through TMA, unless `plan.overrides(host_descriptors=False)` has
the kernel build them; both compute the same products, 2-D and batched."""

import pytest
import torch

import smgemm
import smgemm._launch as L
from reference import assert_gemm_close
from smgemm._device import INTERPRETER_SPEC
from smgemm.plan import TileConfig, host_descriptors_pay, make_plan

TILES = [
    (TileConfig(128, 128, 32, num_warps=8, num_stages=3, tma=True, tma_store=True, flatten=True), "persistent"),
    (TileConfig(64, 64, 32, num_warps=4, num_stages=2, tma=True), "streamk"),
]


class _Seen(list):
    stores: list


@pytest.fixture
def descriptor_kinds(monkeypatch):
    """(mode, what the kernel was given) for A and B of every launch that builds descriptors on the host:
    "pointers" modes get tensors, descriptor modes host-built descriptors."""
    seen, stores = _Seen(), []
    real = L.with_descriptors

    def spy(tensors, ints, meta, *make):
        out = real(tensors, ints, meta, *make)
        seen.extend((mode, type(t).__name__) for mode, t in zip((meta["A_DESC"], meta["B_DESC"]), out[:2]))
        stores.append((meta["D_DESC"], type(out[10]).__name__))
        return out

    monkeypatch.setattr(L, "with_descriptors", spy)
    seen.stores = stores  # (D_DESC, what the kernel was given as D's store descriptor) of the same launches
    return seen


def _operands(device, dtype, layout, m, n, k, batch=None):
    """A [m, k] and B [k, n] (with a leading batch dim if `batch`): "n" as stored, "t" a column-major view."""
    lead = () if batch is None else (batch,)
    a = torch.randn(*lead, m, k, device=device).to(dtype)
    w = torch.randn(*lead, n, k, device=device).to(dtype)
    if layout[0] == "t":
        a = a.transpose(-1, -2).contiguous().transpose(-1, -2)  # column-major A: a descriptor over A^T
    b = w.transpose(-1, -2) if layout[1] == "t" else w.transpose(-1, -2).contiguous()
    return a, b


@pytest.mark.parametrize(("dtype", "layout"), [(torch.float16, "nt"), (torch.float16, "tn"), (torch.float16, "nn"),
                                               (torch.float8_e4m3fn, "nt")])  # (fp8's TMA reads need K-major rows)
@pytest.mark.parametrize(("cfg", "schedule"), TILES)
@pytest.mark.parametrize(("m", "n", "k"), [(200, 136, 96), (130, 70, 256)])
def test_host_built_descriptors_read_what_device_built_ones_read(descriptor_kinds, device, dtype, layout, cfg,
                                                                   schedule, m, n, k):
    a, b = _operands(device, dtype, layout, m, n, k)
    with smgemm.overrides(config=cfg, schedule=schedule):
        outs = [smgemm.matmul(a, b) for _ in range(2)]  # the second call repeats the first's signature
    with smgemm.overrides(config=cfg, schedule=schedule, host_descriptors=False):
        built = smgemm.matmul(a, b)
    for out in outs:
        assert_gemm_close(out, a, b)
        assert torch.equal(out, built)  # the same tiles read the same values: bit for bit
    # the first call builds Triton's TensorDescriptors; on a GPU the repeat's launch makes HostDescriptors
    assert len(descriptor_kinds) in (2, 4)  # staged operands (no repeat launch) build them on both calls
    assert any(mode != "pointers" for mode, _ in descriptor_kinds)
    assert all((mode == "pointers") == (kind == "Tensor") for mode, kind in descriptor_kinds), descriptor_kinds
    # D's store descriptor built on the host with A's and B's where the tile stores through TMA
    assert all(kind == "NoneType" for d_desc, kind in descriptor_kinds.stores if not d_desc)
    stored = cfg.tma_store and n * 2 % 16 == 0 and schedule != "streamk"  # a 2-byte D; Stream-K builds its own
    assert any(d_desc for d_desc, _ in descriptor_kinds.stores) == stored


@pytest.mark.parametrize("layout", ["nt", "tn"])
@pytest.mark.parametrize("schedule", ["persistent", "streamk"])
def test_batched_products_read_host_built_3d_descriptors(descriptor_kinds, device, layout, schedule):
    cfg = TileConfig(64, 64, 32, num_warps=4, num_stages=2, tma=True, tma_store=True)
    a, b = _operands(device, torch.float16, layout, 70, 80, 96, batch=3)
    with smgemm.overrides(config=cfg, schedule=schedule):
        out = smgemm.bmm(a, b, num_sms=4)
    with smgemm.overrides(config=cfg, schedule=schedule, host_descriptors=False):
        built = smgemm.bmm(a, b, num_sms=4)
    for i in range(3):
        assert_gemm_close(out[i], a[i], b[i])
    assert torch.equal(out, built)
    assert [mode for mode, _ in descriptor_kinds] == (["stored", "transposed"] if layout == "nt" else
                                                      ["transposed", "stored"])
    # (a launcher compiled for an earlier identical plan launches HostDescriptors at once)
    assert all(kind in ("TensorDescriptor", "HostDescriptor") for _, kind in descriptor_kinds)


def test_device_built_descriptors_where_asked_and_for_mxfp4(descriptor_kinds, device):
    a, b = _operands(device, torch.float16, "nt", 200, 136, 96)
    cfg = TILES[0][0]
    with smgemm.overrides(config=cfg, host_descriptors=False):
        assert_gemm_close(smgemm.matmul(a, b), a, b)
    assert descriptor_kinds == []
    plan = make_plan(512, 4096, 4096, torch.bfloat16, INTERPRETER_SPEC, schedule="persistent", config=cfg)
    meta = {"A_MX": "", "B_MX": "hopper", "A_DESC": "stored", "B_DESC": "pointers", "BATCHED": False}
    assert not L.reads_host_descriptors(plan, meta)  # an MXFP4 product's activations: device-built
    assert L.reads_host_descriptors(plan, {**meta, "B_MX": ""})
    assert not L.reads_host_descriptors(plan, {**meta, "B_MX": "", "A_DESC": "pointers"})  # nothing through TMA
    several = make_plan(1024, 14336, 4096, torch.bfloat16, INTERPRETER_SPEC, schedule="persistent", config=cfg)
    assert not L.reads_host_descriptors(several, {**meta, "B_MX": ""})  # where they measured slower
    with smgemm.overrides(host_descriptors=True):
        assert L.reads_host_descriptors(several, {**meta, "B_MX": ""})
    with pytest.raises(TypeError, match="host_descriptors must be a bool"):
        with smgemm.overrides(host_descriptors=1):
            pass


def test_descriptor_boxes_are_the_kernels_views():
    ints = ((200, 136, 96), (96, 1), (1, 96), (144, 1), (0, 0), (0, 0), (0, 0), (1, 0, 0, 0, 0), (4, 0))
    meta = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "A_DESC": "stored", "B_DESC": "transposed",
            "BATCHED": False, "D_DESC": 2, "HAS_C": False, "C_ROW": False, "STREAMK": False}
    assert L.descriptor_boxes(ints, meta) == (([200, 96], [96, 1], [128, 32]), ([136, 96], [96, 1], [64, 32]),
                                              ([200, 136], [144, 1], [128, 32]))  # D in half-tile boxes
    col_major = ((200, 136, 96), (1, 200), (136, 1), (136, 1), (0, 0), (0, 0), (0, 0), (1, 0, 0, 0, 0), (4, 0))
    assert L.descriptor_boxes(col_major, {**meta, "A_DESC": "transposed", "B_DESC": "stored", "D_DESC": 1}) == (
        ([96, 200], [200, 1], [32, 128]), ([96, 136], [136, 1], [32, 64]), ([200, 136], [136, 1], [128, 64]))
    assert L.descriptor_boxes(ints, {**meta, "A_DESC": "pointers"})[0] is None
    assert L.descriptor_boxes(ints, {**meta, "D_DESC": 0})[2] is None  # stored through pointers
    assert L.descriptor_boxes(ints, {**meta, "HAS_C": True})[2] is None  # beside a C matrix: built in the kernel
    assert L.descriptor_boxes(ints, {**meta, "STREAMK": True})[2] is None  # by Stream-K plans too
    assert L.descriptor_boxes(ints, {**meta, "HAS_C": True, "C_ROW": True})[2] is not None  # a bias is no matrix
    batched = (*ints[:7], (3, 19200, 13056, 0, 27200), (4, 0))
    assert L.descriptor_boxes(batched, {**meta, "BATCHED": True}) == (
        ([3, 200, 96], [19200, 96, 1], [1, 128, 32]), ([3, 136, 96], [13056, 96, 1], [1, 64, 32]),
        ([3, 200, 136], [27200, 144, 1], [1, 128, 32]))


def test_host_descriptor_reads_as_triton_reads_its_own():
    d = L.HostDescriptor(4096, [3, 200, 96], [19200, 96, 1], [1, 128, 32])
    assert d.base.data_ptr() == 4096 and d.padding == "zero" and d.round_f32_to_tf32 is False
    assert (d.shape, d.strides, d.block_shape, d.encoded) == ([3, 200, 96], [19200, 96, 1], [1, 128, 32], None)


def test_host_descriptors_pay_where_measured():
    """Host-built everywhere measured faster: one wave, Stream-K, 128 x 256 tiles, batches, 128 x 128 tiles over up to
    three waves or short K loops; not over more than three waves of persistent 128 x 128 tiles of one product with
    K loops of 64 steps or more."""
    bf16, spec = torch.bfloat16, INTERPRETER_SPEC

    def plan(m, n, k, tile, schedule="persistent"):
        cfg = TileConfig(*tile, num_warps=8, num_stages=3, tma=True, tma_store=True)
        return make_plan(m, n, k, bf16, spec, schedule=schedule, config=cfg)

    one_wave, long_run = plan(512, 4096, 4096, (128, 128, 64)), plan(1024, 14336, 4096, (128, 128, 64))
    assert one_wave.dp_tiles <= one_wave.num_programs and long_run.sk_tiles == 0
    assert long_run.dp_tiles > 3 * long_run.num_programs and long_run.k_iters == 64
    assert host_descriptors_pay(one_wave, False) and not host_descriptors_pay(long_run, False)
    assert not host_descriptors_pay(plan(10799, 1029, 6437, (128, 128, 64)), False)
    assert host_descriptors_pay(long_run, True)  # a batch's
    three_waves = plan(1024, 6144, 4096, (128, 128, 64))
    assert 2 * three_waves.num_programs < three_waves.dp_tiles <= 3 * three_waves.num_programs
    assert host_descriptors_pay(three_waves, False)
    short_k = plan(1159, 7289, 249, (128, 128, 64))
    assert short_k.dp_tiles > 3 * short_k.num_programs and host_descriptors_pay(short_k, False)
    assert host_descriptors_pay(plan(1024, 14336, 4096, (128, 256, 64)), False)
    split = plan(512, 10240, 8192, (128, 128, 64), "streamk")
    assert split.sk_tiles and host_descriptors_pay(split, False)


def test_repeat_launches_reuse_one_descriptor_per_address(monkeypatch):
    """A repeat call's launch (`_launch.Repeat`) gives the launcher HostDescriptors of A, B and D in the kernel's
    positions (0, 1, 10), made once per address and reused whenever an operand comes back to one (the last launch's
    triple without a lookup), each over its own operand's address and box."""
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 0, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    cfg = TileConfig(128, 128, 64, num_warps=8, num_stages=3, tma=True, tma_store=True, flatten=True)
    plan = make_plan(256, 256, 128, torch.float16, INTERPRETER_SPEC, schedule="persistent", config=cfg)
    bufs = [torch.empty(256, 128, dtype=torch.float16) for _ in range(3)]
    w = torch.empty(256, 128, dtype=torch.float16)
    outs = [torch.empty(256, 256, dtype=torch.float16) for _ in range(2)]
    ints, meta = L.static_args(plan, L.Operands(bufs[0], w.t(), outs[0]), 0, 0, False)
    assert (meta["A_DESC"], meta["B_DESC"], meta["D_DESC"]) == ("stored", "transposed", 2)
    seen = []
    repeat = L.Repeat(plan, ints, meta, lambda args, stream: seen.append(args), 0, False, False)
    calls = [(0, 0), (1, 1), (0, 0), (2, 0), (0, 1), (0, 0)]  # (A buffer, output buffer): the last, D only
    for i, o in calls:
        assert repeat(bufs[i], w.t(), outs[o], None, None, None, (1.0, 0.0))
    for (i, o), args in zip(calls, seen):
        a, b, d = args[0], args[1], args[10]
        assert [x.address for x in (a, b, d)] == [bufs[i].data_ptr(), w.data_ptr(), outs[o].data_ptr()]
        assert (a.shape, a.strides, a.block_shape) == ([256, 128], [128, 1], [128, 64])
        assert (b.shape, b.strides, b.block_shape) == ([256, 128], [128, 1], [128, 64])  # B^T, the weight as stored
        assert (d.shape, d.strides, d.block_shape) == ([256, 256], [256, 1], [128, 64])  # half-tile boxes
        assert args[2] == outs[o].data_ptr()  # D's pointer too (Stream-K's finisher and the dtype read it)
    assert seen[0][0] is seen[2][0] and seen[0][10] is seen[2][10] and seen[0][1] is seen[4][1]  # reused
    assert seen[1][0] is not seen[0][0] and seen[4][10] is seen[1][10]
    assert [len(made) for made in repeat.descriptors] == [3, 1, 2]
    sizes = []
    for k in range(2 * L._DESCRIPTORS_PER_OPERAND):  # bounded: a full cache starts over
        repeat._operand(0, 1 << (20 + k))
        sizes.append(len(repeat.descriptors[0]))
    assert max(sizes) == L._DESCRIPTORS_PER_OPERAND and 1 in sizes
