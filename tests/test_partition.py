"""SMPartition: a stream (a green context where available) plus the GEMM budget; %smid shows where programs ran."""

import pytest
import torch

import smgemm
import smgemm.ops
from reference import assert_gemm_close, randn
from smgemm._gemm import gemm


def test_arguments_are_checked_before_any_cuda_call():
    with pytest.raises(ValueError, match="num_sms must be an int >= 1"):
        smgemm.SMPartition(0)
    with pytest.raises(ValueError, match="must be a CUDA device"):
        smgemm.SMPartition(8, "cpu")
    with pytest.raises(ValueError, match="must be a CUDA device"):
        smgemm.SMPartition.split(8, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("num_sms", [16, 66])
def test_partition_keeps_gemms_on_its_sms(num_sms):
    part = smgemm.SMPartition(num_sms)
    a, b = randn((4096, 1024), torch.bfloat16, "cuda"), randn((1024, 4096), torch.bfloat16, "cuda")
    torch.cuda.synchronize()
    with part:
        assert torch.cuda.current_stream() == part.stream
        assert smgemm.ops._DEFAULTS.num_sms == num_sms  # smgemm GEMMs inside use the partition's budget
        budgeted = torch.full((num_sms,), -1, dtype=torch.int32, device="cuda")
        out = gemm(a, b, num_sms=part.num_sms, smid_out=budgeted)
        # A full-chip grid (one program per tile, 512 programs) on the partition's stream: with a green context
        # the hardware itself keeps every program on the partition's SMs (rounded up to a multiple of 8).
        unbudgeted = torch.full((512,), -1, dtype=torch.int32, device="cuda")
        out_full = gemm(a, b, schedule="data_parallel", smid_out=unbudgeted)
    torch.cuda.current_stream().wait_stream(part.stream)
    torch.cuda.synchronize()
    assert smgemm.ops._DEFAULTS.num_sms is None
    assert_gemm_close(out, a, b)
    assert_gemm_close(out_full, a, b)
    used = set(budgeted.tolist())
    assert -1 not in used and len(used) <= num_sms
    full = set(unbudgeted.tolist())
    assert -1 not in full
    print(f"{part}: budgeted GEMM on {len(used)} SMs; a 512-program grid on {len(full)} SMs")
    if part.isolated:
        assert len(full) <= -(-num_sms // 8) * 8


@pytest.mark.gpu
def test_split_partitions_use_disjoint_sms():
    total = torch.cuda.get_device_properties(0).multi_processor_count
    first, second = smgemm.SMPartition.split(48)
    print(first, second)
    assert first.num_sms == 48 and first.num_sms + second.num_sms <= total
    a, b = randn((4096, 1024), torch.bfloat16, "cuda"), randn((1024, 4096), torch.bfloat16, "cuda")
    smids, outs = [], []
    torch.cuda.synchronize()
    for part in (first, second):
        with part:  # a full-chip grid of 512 programs on each: only the green context keeps it on its SMs
            smid = torch.full((512,), -1, dtype=torch.int32, device="cuda")
            outs.append(gemm(a, b, schedule="data_parallel", smid_out=smid))
            smids.append(smid)
        torch.cuda.current_stream().wait_stream(part.stream)
    torch.cuda.synchronize()
    for out in outs:
        assert_gemm_close(out, a, b)
    used = [set(s.tolist()) for s in smids]
    assert all(-1 not in u for u in used)
    if first.isolated:
        assert not used[0] & used[1], f"shared SMs: {sorted(used[0] & used[1])}"
        assert len(used[0]) <= first.sm_count and len(used[1]) <= second.sm_count
