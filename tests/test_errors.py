"""Bad input fails early with an error that names the argument."""

import pytest
import torch

import smgemm
import smgemm._gemm


def t(*shape, dtype=torch.float16, device="cpu"):
    return torch.randn(shape).to(dtype).to(device)


@pytest.fixture
def on(device):
    def make(*shape, dtype=torch.float16):
        return t(*shape, dtype=dtype, device=device)

    return make


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda on: smgemm.matmul(on(4), on(4, 4)), ValueError, r"a must be 2-D"),
        (lambda on: smgemm.matmul(on(4, 4), on(2, 4, 4)), ValueError, r"b must be 2-D"),
        (lambda on: smgemm.matmul(on(4, 5), on(6, 4)), ValueError, r"a.shape\[1\] \(K=5\) must equal b.shape\[0\]"),
        (lambda on: smgemm.matmul(on(4, 4), on(4, 4, dtype=torch.float32)), TypeError, r"same dtype"),
        (lambda on: smgemm.matmul(on(4, 4, dtype=torch.float64), on(4, 4, dtype=torch.float64)), TypeError,
         r"a has unsupported dtype torch.float64"),
        (lambda on: smgemm.matmul("a", on(4, 4)), TypeError, r"a must be a torch.Tensor"),
        (lambda on: smgemm.matmul(on(4, 4), on(4, 4), num_sms=0), ValueError, r"num_sms must be None or an int"),
        (lambda on: smgemm.matmul(on(4, 4), on(4, 4), num_sms=2.5), ValueError, r"num_sms"),
        (lambda on: smgemm.matmul(on(4, 4), on(4, 4), num_sms=True), ValueError, r"num_sms"),
        (lambda on: smgemm.matmul(on(4, 4), on(4, 4), schedule="fast"), ValueError, r"schedule must be one of"),
        (lambda on: smgemm.matmul(on(0, 4), on(4, 4), schedule="fast"), ValueError, r"schedule must be one of"),
        (lambda on: smgemm.matmul(on(4, 4), on(4, 4), out_dtype=torch.int32), TypeError, r"out_dtype must be"),
        (lambda on: smgemm.matmul(on(4, 4), on(4, 5), out=on(4, 4)), ValueError, r"out must have shape \(M, N\)"),
        (lambda on: smgemm.matmul(on(4, 4), on(4, 4), out=on(4, 4, dtype=torch.float32)), TypeError,
         r"out must have dtype torch.float16"),
        (lambda on: smgemm.matmul(on(4, 4), on(4, 4), out=on(1, 4).expand(4, 4)), ValueError,
         r"out has overlapping elements"),
        (lambda on: (lambda a: smgemm.matmul(a, on(4, 4), out=a))(on(4, 4)), ValueError, r"out overlaps a"),
        (lambda on: (lambda b: smgemm.matmul(on(4, 4), b, out=b.t()))(on(4, 4)), ValueError, r"out overlaps b"),
        (lambda on: (lambda c: smgemm.addmm(c[:4], on(4, 4), on(4, 4), out=c[1:5]))(on(6, 4)), ValueError,
         r"out overlaps input"),
        (lambda on: smgemm.addmm(on(3), on(4, 4), on(4, 5)), ValueError, r"input must be broadcastable"),
        (lambda on: smgemm.addmm(on(1, 1, 5), on(4, 4), on(4, 5)), ValueError, r"input must be broadcastable"),
        (lambda on: smgemm.addmm(on(5, dtype=torch.float64), on(4, 4), on(4, 5)), TypeError, r"input must be one"),
        (lambda on: smgemm.matmul(on(4, 4), on(4, 4), scale_a=on(1, dtype=torch.float32)), ValueError,
         r"scale_a / scale_b apply to float8_e4m3fn"),
        (lambda on: smgemm.matmul(on(4, 8, dtype=torch.float8_e4m3fn), on(8, 4, dtype=torch.float8_e4m3fn),
                                  scale_a=on(3, 1, dtype=torch.float32)), ValueError, r"scale_a must hold one value"),
        (lambda on: smgemm.matmul(on(4, 8, dtype=torch.float8_e4m3fn), on(8, 4, dtype=torch.float8_e4m3fn),
                                  scale_b=on(4, 1, dtype=torch.float32)), ValueError, r"scale_b must hold one value"),
        (lambda on: smgemm.matmul(on(4, 8, dtype=torch.float8_e4m3fn), on(8, 4, dtype=torch.float8_e4m3fn),
                                  scale_b=on(1)), TypeError, r"scale_b must be float32"),
        (lambda on: smgemm.linear(on(3, 4), on(4)), ValueError, r"weight must be 2-D"),
        (lambda on: smgemm.linear(on(3, 4), on(5, 6)), ValueError, r"x.shape\[-1\] \(K=4\) must equal weight"),
        (lambda on: smgemm.linear(on(3, 4), on(5, 4), on(4)), ValueError, r"bias must have shape \[N\] = \[5\]"),
    ],
)
def test_bad_input_raises_naming_the_argument(call, exc, match, on):
    with pytest.raises(exc, match=match):
        call(on)


def test_tensors_on_different_devices():
    with pytest.raises(ValueError, match=r"b is on meta but a is on cpu"):
        smgemm.matmul(t(4, 4), torch.empty(4, 4, dtype=torch.float16, device="meta"))


def test_cpu_tensors_without_the_interpreter(monkeypatch):
    monkeypatch.setattr(smgemm._gemm, "interpreter_active", lambda: False)
    with pytest.raises(ValueError, match=r"a is on cpu: smgemm runs on CUDA tensors"):
        smgemm.matmul(t(4, 4), t(4, 4))
