"""torch.autocast on openreg follows PyTorch's autocast op lists, as on CPU."""

import pytest
import torch


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_matmul_and_linear_run_in_lower_precision(device, dtype):
    torch.manual_seed(0)
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    lin = torch.nn.Linear(16, 4)
    with torch.autocast(device_type="cpu", dtype=dtype):
        ref_mm, ref_lin = a @ b, lin(a)
    lin_dev = torch.nn.Linear(16, 4).to(device)
    lin_dev.load_state_dict(lin.state_dict())
    with torch.autocast(device_type="openreg", dtype=dtype):
        out_mm = a.to(device) @ b.to(device)
        out_lin = lin_dev(a.to(device))
        # Ops outside the lists keep their input dtype (they fall through).
        kept = a.to(device) + 1
    assert out_mm.dtype == ref_mm.dtype == dtype
    assert out_lin.dtype == ref_lin.dtype == dtype
    assert kept.dtype == torch.float32
    torch.testing.assert_close(out_mm.cpu(), ref_mm, atol=0, rtol=0)
    torch.testing.assert_close(out_lin.cpu(), ref_lin, atol=0, rtol=0)


def test_autocast_fp32_policy_upcasts(device):
    # exp is on PyTorch's fp32 list (as on CUDA): computed from the upcast input.
    x = torch.rand(5, dtype=torch.bfloat16)
    with torch.autocast(device_type="openreg", dtype=torch.bfloat16):
        out = torch.exp(x.to(device))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.cpu(), torch.exp(x.float()))


def test_autocast_backward(device):
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 3).to(device)
    x = torch.randn(4, 8, device=device)
    with torch.autocast(device_type="openreg", dtype=torch.bfloat16):
        loss = lin(x).float().pow(2).mean()
    loss.backward()
    assert lin.weight.grad is not None and lin.weight.grad.dtype == torch.float32
