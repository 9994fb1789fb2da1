"""torch.autocast("openreg") applies every policy CUDA's autocast applies.

The references are PyTorch's own: the ops with an AutocastCUDA kernel, the
AutocastCUDA kernel of binary_cross_entropy (called on CPU tensors, which it
refuses before looking at them), torch.get_autocast_dtype("cuda"), and each
op computed on CPU in the dtype the policy prescribes.
"""

import warnings

import pytest
import torch
import torch.nn.functional as F

# CUDA-only ops: no openreg tensor reaches them.
CUDA_ONLY_OPS = {"aten::cudnn_convolution", "aten::cudnn_convolution_transpose"}


def ops_with_kernel(key):
    return {
        name
        for name in torch._C._dispatch_get_all_op_names()
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
    }


def test_every_op_cuda_autocasts_is_autocast_on_openreg(device):
    cuda_ops = ops_with_kernel("AutocastCUDA")
    assert len(cuda_ops) > 100  # the probe itself works
    assert ops_with_kernel("AutocastPrivateUse1") == cuda_ops - CUDA_ONLY_OPS


def cuda_refusal(op, *args):
    """CUDA's autocast kernel for op, called directly: its error."""
    keys = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA)
    with pytest.raises(RuntimeError) as info:
        op.redispatch(keys, *args)
    return info


def test_binary_cross_entropy_is_refused_as_on_cuda(device):
    p, t = torch.rand(6), torch.rand(6)
    expected = cuda_refusal(torch.ops.aten.binary_cross_entropy.default, p, t)
    assert "binary_cross_entropy_with_logits" in str(expected.value)
    with torch.autocast(device_type="openreg"):
        with pytest.raises(RuntimeError) as got:
            F.binary_cross_entropy(p.to(device), t.to(device))
        with pytest.raises(RuntimeError) as got_module:
            torch.nn.BCELoss()(p.to(device), t.to(device))
    assert str(got.value).splitlines()[:5] == str(expected.value).splitlines()[:5]
    assert str(got_module.value).splitlines()[:5] == str(expected.value).splitlines()[:5]
    # The safe replacement the message names runs, in float32 (fp32 list).
    with torch.autocast(device_type="openreg"):
        out = F.binary_cross_entropy_with_logits(p.half().to(device), t.to(device))
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.cpu(), F.binary_cross_entropy_with_logits(p.half().float(), t))


def test_binary_cross_entropy_outside_autocast_and_with_autocast_disabled(device):
    p, t = torch.rand(6), torch.rand(6)
    ref = F.binary_cross_entropy(p, t)
    torch.testing.assert_close(F.binary_cross_entropy(p.to(device), t.to(device)).cpu(), ref)
    with torch.autocast(device_type="openreg", enabled=False):
        torch.testing.assert_close(F.binary_cross_entropy(p.to(device), t.to(device)).cpu(), ref)
    # Autocast of another device leaves openreg tensors alone.
    with torch.autocast(device_type="cpu"):
        torch.testing.assert_close(F.binary_cross_entropy(p.to(device), t.to(device)).cpu(), ref)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fp32_set_opt_dtype_policy(device, dtype):
    # softmax, log_softmax, sum, prod, cumsum, cumprod, vector norm: float32
    # unless the caller names a dtype.
    x = torch.rand(4, 5).to(dtype)
    cases = [
        (lambda t: torch.softmax(t, 1), lambda t: torch.softmax(t.float(), 1)),
        (lambda t: torch.log_softmax(t, 0), lambda t: torch.log_softmax(t.float(), 0)),
        (lambda t: t.sum(), lambda t: t.float().sum()),
        (lambda t: t.sum(1), lambda t: t.float().sum(1)),
        (lambda t: t.prod(0), lambda t: t.float().prod(0)),
        (lambda t: t.cumsum(1), lambda t: t.float().cumsum(1)),
        (lambda t: t.cumprod(1), lambda t: t.float().cumprod(1)),
        (lambda t: torch.linalg.vector_norm(t), lambda t: torch.linalg.vector_norm(t.float())),
    ]
    with torch.autocast(device_type="openreg", dtype=dtype):
        for fn, ref_fn in cases:
            out = fn(x.to(device))
            assert out.dtype == torch.float32
            torch.testing.assert_close(out.cpu(), ref_fn(x))
        # A dtype given by the caller wins.
        assert torch.softmax(x.to(device), 1, dtype=torch.float64).dtype == torch.float64


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fp32_append_dtype_policy(device, dtype):
    x = torch.rand(4, 5).to(dtype)
    with torch.autocast(device_type="openreg", dtype=dtype):
        whole, rows = torch.norm(x.to(device)), torch.norm(x.to(device), dim=1)
    assert whole.dtype == rows.dtype == torch.float32
    torch.testing.assert_close(whole.cpu(), torch.norm(x.float()))
    torch.testing.assert_close(rows.cpu(), torch.norm(x.float(), dim=1))


def test_promote_policy(device):
    # addcmul, atan2, dot, cross, index_put, scatter_add...: the widest float dtype.
    torch.manual_seed(0)
    h, f = torch.rand(6).half(), torch.rand(6)
    with torch.autocast(device_type="openreg", dtype=torch.float16):
        addcmul = torch.addcmul(h.to(device), f.to(device), f.to(device))
        atan2 = torch.atan2(h.to(device), f.to(device))
        dot = torch.dot(h.to(device), f.to(device))
        scattered = h.to(device).scatter_add(0, torch.tensor([0, 2], device=device), f[:2].to(device))
    for out in (addcmul, atan2, dot, scattered):
        assert out.dtype == torch.float32
    torch.testing.assert_close(addcmul.cpu(), torch.addcmul(h.float(), f, f))
    torch.testing.assert_close(atan2.cpu(), torch.atan2(h.float(), f))
    torch.testing.assert_close(dot.cpu(), torch.dot(h.float(), f))
    torch.testing.assert_close(scattered.cpu(), h.float().scatter_add(0, torch.tensor([0, 2]), f[:2]))


def test_autocast_dtype_and_availability_as_cuda(device):
    assert torch.amp.is_autocast_available("openreg")
    # Both CUDA and openreg default to float16 (CPU: bfloat16).
    assert torch.get_autocast_dtype("openreg") == torch.get_autocast_dtype("cuda") == torch.float16
    try:
        torch.set_autocast_dtype("openreg", torch.bfloat16)
        assert torch.get_autocast_dtype("openreg") == torch.bfloat16
        with torch.autocast(device_type="openreg"):  # no dtype: the one set
            assert torch.is_autocast_enabled("openreg")
            out = torch.mm(torch.rand(2, 2, device=device), torch.rand(2, 2, device=device))
        assert out.dtype == torch.bfloat16
        assert not torch.is_autocast_enabled("openreg")
    finally:
        torch.set_autocast_dtype("openreg", torch.float16)


def test_unsupported_autocast_dtype_disables_autocast_with_a_warning(device):
    # As CUDA: a dtype outside the supported list warns and turns autocast off.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autocast(device_type="openreg", dtype=torch.float64):
            out = torch.mm(torch.rand(2, 2, device=device), torch.rand(2, 2, device=device))
    assert out.dtype == torch.float32
    assert any("not supported" in str(w.message) for w in caught)
