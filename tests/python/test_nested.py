"""Nested tensors (torch.nested, strided layout) on the device: the eval-mode fast
paths of TransformerEncoder and MultiheadAttention, which build nested tensors from
padding masks, and the basic nested-tensor API. CPU is the reference.

Nested ops run on the host path (PyTorch's NestedTensorCPU kernels over the device
memory), so openreg.stats() counts them under ``host_ref``."""

import copy

import pytest
import torch
import torch.nn as nn

# PyTorch warns once that strided nested tensors are a prototype.
pytestmark = pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")

D_MODEL, HEADS, SEQ, BATCH = 8, 2, 5, 2

# Key padding masks (True = padding), one row per batch element.
MASKS = {
    "some_padding": [[False] * 5, [False, False, False, True, True]],
    "all_valid": [[False] * 5, [False] * 5],
    "both_padded": [[False, False, False, False, True], [False, True, True, True, True]],
    "one_row_all_padding": [[False] * 5, [True] * 5],
    # Not left-aligned: the encoder checks and keeps the dense path.
    "not_left_aligned": [[False, True, False, False, False], [False] * 5],
}


def host_calls(openreg, op):
    return openreg.stats().get(op, {}).get("host_ref", 0)


def make_encoder(batch_first, seed=0):
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, dim_feedforward=16, dropout=0.0, batch_first=batch_first)
    # PyTorch only nests batch-first inputs (and warns when asked to otherwise).
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=batch_first).eval()


@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("batch_first", [True, False], ids=["batch_first", "seq_first"])
def test_transformer_encoder_eval_fast_path_matches_cpu(openreg, device, assert_close_cpu, batch_first, mask_name):
    model = make_encoder(batch_first)
    gen = torch.Generator().manual_seed(1)
    shape = (BATCH, SEQ, D_MODEL) if batch_first else (SEQ, BATCH, D_MODEL)
    x = torch.randn(shape, generator=gen)
    mask = torch.tensor(MASKS[mask_name])
    dev_model = copy.deepcopy(model).to(device)
    with torch.no_grad():
        ref = model(x, src_key_padding_mask=mask)
        openreg.reset_stats()
        out = dev_model(x.to(device), src_key_padding_mask=mask.to(device))
    assert not out.is_nested
    assert_close_cpu(out, ref, atol=1e-5, rtol=0)
    # batch_first with a left-aligned mask is the nested fast path (PyTorch keeps
    # the dense path otherwise); make sure the device took it too.
    nested_path = batch_first and mask_name != "not_left_aligned"
    assert (host_calls(openreg, "aten::_nested_tensor_from_mask") == 1) == nested_path
    assert (host_calls(openreg, "aten::_transformer_encoder_layer_fwd") == 2) == nested_path


def test_transformer_encoder_fast_path_agrees_with_float64_slow_path(device):
    # An independent check: the float64 CPU model in training mode (no fast path,
    # dropout is 0) gives the same values at the non-padded positions.
    model = make_encoder(batch_first=True, seed=3)
    x = torch.randn(BATCH, SEQ, D_MODEL, generator=torch.Generator().manual_seed(4))
    mask = torch.tensor(MASKS["both_padded"])
    with torch.no_grad():
        out = copy.deepcopy(model).to(device)(x.to(device), src_key_padding_mask=mask.to(device)).cpu()
        ref64 = copy.deepcopy(model).double().train()(x.double(), src_key_padding_mask=mask)
    keep = ~mask
    torch.testing.assert_close(out[keep].double(), ref64[keep], atol=1e-5, rtol=1e-5)
    assert torch.all(out[mask] == 0)  # the fast path pads with zeros


@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention_fast_path_with_key_padding_mask(openreg, device, assert_close_cpu, need_weights):
    torch.manual_seed(5)
    mha = nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True).eval()
    x = torch.randn(BATCH, SEQ, D_MODEL, generator=torch.Generator().manual_seed(6))
    kpm = torch.tensor(MASKS["some_padding"])
    dev = copy.deepcopy(mha).to(device)
    xd = x.to(device)
    with torch.no_grad():
        ref, ref_w = mha(x, x, x, key_padding_mask=kpm, need_weights=need_weights)
        openreg.reset_stats()
        out, w = dev(xd, xd, xd, key_padding_mask=kpm.to(device), need_weights=need_weights)
    assert "aten::_native_multi_head_attention" in openreg.stats()
    assert_close_cpu(out, ref, atol=1e-5, rtol=0)
    if need_weights:
        assert_close_cpu(w, ref_w, atol=1e-5, rtol=0)
    else:
        assert ref_w is None
        assert w is None, f"weights: {w!r}"


def nested_cpu(seed=7, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return torch.nested.nested_tensor(
        [torch.randn(2, D_MODEL, generator=gen).to(dtype), torch.randn(4, D_MODEL, generator=gen).to(dtype)]
    )


def assert_nested_close(dev, ref, atol=0.0):
    assert dev.is_nested and dev.device.type == "openreg", (dev.is_nested, dev.device)
    assert ref.is_nested and ref.device.type == "cpu"
    dev_parts, ref_parts = dev.cpu().unbind(), ref.unbind()
    assert len(dev_parts) == len(ref_parts)
    for d, r in zip(dev_parts, ref_parts):
        torch.testing.assert_close(d, r, atol=atol, rtol=0 if atol == 0 else 1e-5)


def test_multihead_attention_and_encoder_layer_on_nested_input(device):
    torch.manual_seed(8)
    mha = nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True).eval()
    layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, dim_feedforward=16, dropout=0.0, batch_first=True).eval()
    nt = nested_cpu()
    ntd = nt.to(device)
    with torch.no_grad():
        ref, _ = mha(nt, nt, nt, need_weights=False)
        out, _ = copy.deepcopy(mha).to(device)(ntd, ntd, ntd, need_weights=False)
        assert_nested_close(out, ref, atol=1e-5)
        assert_nested_close(copy.deepcopy(layer).to(device)(ntd), layer(nt), atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool, torch.bfloat16])
def test_round_trip_to_device_and_back(device, dtype):
    ref = nested_cpu(dtype=dtype)
    dev = ref.to(device)
    assert dev.is_nested and dev.device.type == "openreg" and dev.dtype == dtype
    back = dev.cpu()
    assert back.is_nested and back.device.type == "cpu"
    assert_nested_close(dev, ref)
    # and the constructor straight onto the device
    assert_nested_close(torch.nested.nested_tensor(list(ref.unbind()), device=device), ref)


def test_to_another_device_index_and_dtype(device):
    ref = nested_cpu()
    dev = ref.to(device)
    other = dev.to(f"{device}:1")
    assert other.device == torch.device(device, 1)
    assert_nested_close(other, ref)
    # results stay on the device of their inputs, views and new tensors alike
    assert other.to_padded_tensor(0.0).device == other.device
    assert other.unbind()[1].device == other.device
    assert (other + other).device == other.device
    as64 = dev.to(torch.float64)
    assert as64.dtype == torch.float64
    assert_nested_close(as64, ref.to(torch.float64))


def test_to_padded_tensor(device, assert_close_cpu):
    ref = nested_cpu()
    dev = ref.to(device)
    assert_close_cpu(dev.to_padded_tensor(-1.0), ref.to_padded_tensor(-1.0), atol=0, rtol=0)
    assert_close_cpu(
        torch.nested.to_padded_tensor(dev, 0.0, (2, 6, D_MODEL)),
        torch.nested.to_padded_tensor(ref, 0.0, (2, 6, D_MODEL)),
        atol=0,
        rtol=0,
    )


def test_unbind_gives_device_views(device, assert_close_cpu):
    ref = nested_cpu()
    dev = ref.to(device)
    parts = dev.unbind()
    for d, r in zip(parts, ref.unbind()):
        assert_close_cpu(d, r, atol=0, rtol=0)
    parts[0].fill_(3.0)  # views of the nested tensor's memory: writes show through
    assert torch.all(dev.cpu().unbind()[0] == 3.0)
    assert torch.equal(dev.cpu().unbind()[1], ref.unbind()[1])


def test_nested_ops_match_cpu(device):
    ref = nested_cpu()
    dev = ref.to(device)
    weight = torch.randn(3, D_MODEL, generator=torch.Generator().manual_seed(9))
    assert_nested_close(dev + dev, ref + ref)
    assert_nested_close(torch.relu(dev), torch.relu(ref))
    assert_nested_close(torch.softmax(dev, -1), torch.softmax(ref, -1), atol=1e-6)
    assert_nested_close(dev.transpose(1, 2).contiguous(), ref.transpose(1, 2).contiguous())
    # matmul and linear have composite kernels that PyTorch would pick over the
    # device's nested path; they must still run as nested ops.
    assert_nested_close(torch.matmul(dev, dev.transpose(1, 2)), torch.matmul(ref, ref.transpose(1, 2)), atol=1e-5)
    assert_nested_close(nn.functional.linear(dev, weight.to(device)), nn.functional.linear(ref, weight), atol=1e-5)


def test_in_place_and_copy(device):
    ref = nested_cpu()
    dev = ref.to(device)
    assert dev.mul_(2.0) is dev
    assert_nested_close(dev, ref * 2.0)
    target = torch.nested.nested_tensor([torch.zeros(2, D_MODEL), torch.zeros(4, D_MODEL)], device=device)
    assert target.copy_(ref) is target
    assert_nested_close(target, ref)
    back = torch.zeros_like(ref)
    back.copy_(target)
    assert torch.equal(back.to_padded_tensor(0), ref.to_padded_tensor(0))


def test_nested_metadata_stays_on_cpu(device):
    dev = nested_cpu().to(device)
    sizes = dev._nested_tensor_size()
    assert sizes.device.type == "cpu"
    assert sizes.tolist() == [[2, D_MODEL], [4, D_MODEL]]
    assert dev.size(0) == 2 and dev.dim() == 3


def test_nested_ops_count_as_host_path(openreg, device):
    dev = nested_cpu().to(device)
    openreg.reset_stats()
    dev.to_padded_tensor(0.0)
    dev.to_padded_tensor(0.0)
    assert host_calls(openreg, "aten::to_padded_tensor") == 2


def test_op_without_nested_kernel_names_it(device):
    dev = nested_cpu().to(device)
    with pytest.raises(RuntimeError, match=r"aten::cumsum is not supported on nested tensors on the openreg device"):
        torch.cumsum(dev, 1)


def test_mixing_cpu_and_device_nested_tensors_is_an_error(device):
    ref = nested_cpu()
    with pytest.raises(RuntimeError, match="expected all nested tensors on the openreg device"):
        ref + ref.to(device)

