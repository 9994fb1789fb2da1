"""Quantized tensors: refused on openreg with one clear error, never served wrong.

openreg has no quantized tensors (no engine takes a quantized dtype, and a
quantized tensor's scale and zero point have nowhere to live on the device).
Every way to make or use one raises a NotImplementedError that says so and
that the CPU is where to quantize. Each case is first run on the CPU, which
accepts it, so the test knows the call itself is valid.
"""

import warnings

import pytest
import torch

MESSAGE = "quantized tensors are not supported on the openreg device"


@pytest.fixture(autouse=True)
def _quiet_deprecation():
    # PyTorch 2.13 warns that its quantized tensor creation functions are deprecated.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*")
        yield


def quantized_cpu(x, dtype=torch.qint8):
    return torch.quantize_per_tensor(x, 0.1, 3 if dtype == torch.quint8 else 0, dtype)


# name -> fn(device): each builds or uses a quantized tensor on `device`.
CASES = {
    "quantize_per_tensor qint8": lambda d: torch.quantize_per_tensor(torch.randn(4, 3, device=d), 0.1, 0, torch.qint8),
    "quantize_per_tensor quint8": lambda d: torch.quantize_per_tensor(torch.randn(4, 3, device=d), 0.1, 3, torch.quint8),
    "quantize_per_tensor qint32": lambda d: torch.quantize_per_tensor(torch.randn(4, 3, device=d), 0.1, 0, torch.qint32),
    "quantize_per_tensor tensor qparams": lambda d: torch.quantize_per_tensor(
        torch.randn(4, 3, device=d), torch.tensor(0.1, device=d), torch.tensor(0, device=d), torch.qint8
    ),
    "quantize_per_tensor_dynamic": lambda d: torch.quantize_per_tensor_dynamic(
        torch.randn(4, 3, device=d), torch.quint8, False
    ),
    "quantize_per_channel": lambda d: torch.quantize_per_channel(
        torch.randn(4, 3, device=d),
        torch.tensor([0.1, 0.2, 0.3], device=d),
        torch.zeros(3, dtype=torch.long, device=d),
        1,
        torch.quint8,
    ),
    "empty": lambda d: torch.empty(3, dtype=torch.qint8, device=d),
    "_empty_affine_quantized": lambda d: torch._empty_affine_quantized(
        [3], scale=0.1, zero_point=0, dtype=torch.qint8, device=d
    ),
    "quantized tensor to device": lambda d: quantized_cpu(torch.randn(4, 3)).to(d),
    "empty_like of a quantized tensor": lambda d: torch.empty_like(quantized_cpu(torch.randn(4, 3)), device=d),
}


# Calls CPU refuses too (its quantized kernels are missing); openreg's error is
# the same one as above, not CPU's.
CPU_REFUSES = {
    "zeros": lambda d: torch.zeros(3, dtype=torch.quint8, device=d),
    "empty_strided": lambda d: torch.empty_strided((3,), (1,), dtype=torch.qint8, device=d),
    "copy_ from a quantized tensor": lambda d: torch.empty(4, 3, device=d).copy_(quantized_cpu(torch.randn(4, 3))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_quantized_op_is_refused_with_one_clear_error(device, name):
    made = CASES[name]("cpu")
    assert made.is_quantized  # valid on the CPU
    with pytest.raises(NotImplementedError, match=MESSAGE) as info:
        CASES[name](device)
        torch.openreg.synchronize()
    assert "quantize_per_tensor(x.cpu()" in str(info.value)  # what to do instead
    # Refused before anything was queued: the device goes on working.
    torch.testing.assert_close((torch.ones(2, device=device) * 3).cpu(), torch.full((2,), 3.0))


@pytest.mark.parametrize("name", sorted(CPU_REFUSES))
def test_quantized_calls_cpu_refuses_too_get_the_same_error(device, name):
    with pytest.raises((RuntimeError, NotImplementedError)):
        CPU_REFUSES[name]("cpu")
    with pytest.raises(NotImplementedError, match=MESSAGE):
        CPU_REFUSES[name](device)
        torch.openreg.synchronize()


def test_a_refused_copy_leaves_its_destination_untouched(device):
    dst = torch.zeros(4, 3, device=device)
    with pytest.raises(NotImplementedError, match=MESSAGE):
        dst.copy_(quantized_cpu(torch.randn(4, 3)))
    torch.testing.assert_close(dst.cpu(), torch.zeros(4, 3))


def test_quantized_dtype_view_of_device_memory_is_refused_in_ops(device):
    # view(dtype) reinterprets bytes (allowed, as on CPU); computing on it is refused.
    raw = torch.ones(4, dtype=torch.int8, device=device).view(torch.qint8)
    assert raw.dtype == torch.qint8
    with pytest.raises(NotImplementedError, match=MESSAGE):
        raw + raw
    with pytest.raises(NotImplementedError, match=MESSAGE):
        torch.empty(3, device=device).to(torch.qint8)


@pytest.mark.parametrize("dtype", [torch.qint8, torch.quint8, torch.qint32])
def test_the_advised_path_quantize_on_cpu_then_dequantize_to_the_device(device, dtype):
    torch.manual_seed(0)
    x = torch.randn(5, 7)
    q = quantized_cpu(x, dtype)
    on_device = q.dequantize().to(device)
    torch.testing.assert_close(on_device.cpu(), q.dequantize(), atol=0, rtol=0)
    # int_repr / q_scale / q_zero_point stay CPU tensors' business; their values can
    # still travel as ordinary tensors.
    torch.testing.assert_close(q.int_repr().to(device).cpu(), q.int_repr(), atol=0, rtol=0)


def test_fake_quantize_is_a_float_op_and_matches_cpu(device):
    # fake_quantize_* simulate quantization in float: served like any op.
    torch.manual_seed(0)
    x = torch.randn(6, 4) * 5
    ref = torch.fake_quantize_per_tensor_affine(x, 0.1, 0, -128, 127)
    out = torch.fake_quantize_per_tensor_affine(x.to(device), 0.1, 0, -128, 127)
    torch.testing.assert_close(out.cpu(), ref, atol=0, rtol=0)
    scales, zeros = torch.rand(4) + 0.05, torch.zeros(4, dtype=torch.int32)
    ref_c = torch.fake_quantize_per_channel_affine(x, scales, zeros, 1, -128, 127)
    out_c = torch.fake_quantize_per_channel_affine(x.to(device), scales.to(device), zeros.to(device), 1, -128, 127)
    torch.testing.assert_close(out_c.cpu(), ref_c, atol=0, rtol=0)
