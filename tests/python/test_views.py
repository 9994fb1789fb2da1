"""Views, in-place ops through views, indexing, and shape ops; CPU is the reference."""

import pytest
import torch


def base_cpu(shape=(4, 6), dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def same_storage(a, b):
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def check_result(assert_close_cpu, dev, ref):
    if isinstance(ref, (tuple, list)):
        assert isinstance(dev, (tuple, list)) and len(dev) == len(ref)
        for d, r in zip(dev, ref):
            check_result(assert_close_cpu, d, r)
    else:
        assert_close_cpu(dev, ref, atol=0, rtol=0)


# Ops that must return views: result metadata must be identical to CPU's.
VIEW_OPS = {
    "view": lambda t: t.view(3, 8),
    "view_minus1": lambda t: t.view(-1),
    "view_dtype": lambda t: t.view(torch.int32),
    "reshape_contiguous": lambda t: t.reshape(2, 12),
    "transpose": lambda t: t.transpose(0, 1),
    "t": lambda t: t.t(),
    "permute": lambda t: t.reshape(2, 3, 4).permute(2, 0, 1),
    "slice_rows": lambda t: t[1:3],
    "slice_step": lambda t: t[::2, 1::2],
    "slice_negative": lambda t: t[-3:, :-1],
    "narrow_dim0": lambda t: t.narrow(0, 1, 2),
    "narrow_dim1": lambda t: t.narrow(1, 2, 3),
    "select": lambda t: t.select(1, 2),
    "index_int": lambda t: t[2],
    "index_negative_int": lambda t: t[-1],
    "unsqueeze": lambda t: t.unsqueeze(1),
    "unsqueeze_squeeze": lambda t: t.unsqueeze(0).squeeze(0),
    "squeeze_all": lambda t: t.reshape(1, 4, 1, 6).squeeze(),
    "squeeze_dim": lambda t: t.reshape(4, 1, 6).squeeze(1),
    "expand": lambda t: t[:, :1].expand(4, 5),
    "expand_new_dim": lambda t: t[0].expand(3, 6),
    "as_strided": lambda t: t.as_strided((3, 3), (1, 2), 1),
    "as_strided_overlap": lambda t: t.as_strided((4, 4), (1, 1)),
    "diagonal": lambda t: t.diagonal(),
    "unfold": lambda t: t.unfold(1, 2, 2),
    "none_index": lambda t: t[None, :, None],
    "ellipsis": lambda t: t[..., 1],
}


@pytest.mark.parametrize("op", list(VIEW_OPS), ids=str)
def test_view_ops(device, assert_close_cpu, op):
    fn = VIEW_OPS[op]
    x = base_cpu()
    d = x.to(device)
    r_cpu = fn(x)
    r_dev = fn(d)
    assert r_dev.size() == r_cpu.size()
    assert r_dev.stride() == r_cpu.stride()
    assert r_dev.storage_offset() == r_cpu.storage_offset()
    assert r_dev.is_contiguous() == r_cpu.is_contiguous()
    # Same aliasing as on CPU (note: view(dtype) aliases but is not an autograd view).
    assert r_dev._is_view() == r_cpu._is_view(), f"{op}: _is_view() differs from CPU"
    assert same_storage(r_cpu, x), f"{op}: reference is not an alias (bad test)"
    assert same_storage(r_dev, d), f"{op} result must share storage with its base"
    check_result(assert_close_cpu, r_dev, r_cpu)


# Ops that may or may not copy; only the values (and shapes) must match.
SHAPE_OPS = {
    "reshape_non_contiguous": lambda t: t.t().reshape(-1),
    "contiguous_of_transposed": lambda t: t.t().contiguous(),
    "contiguous_of_slice": lambda t: t[:, 1::2].contiguous(),
    "flatten": lambda t: t.flatten(),
    "flatten_permuted": lambda t: t.reshape(2, 3, 4).permute(1, 2, 0).flatten(1),
    "split": lambda t: t.split(2, dim=1),
    "chunk": lambda t: t.chunk(3, dim=0),
    "unbind": lambda t: t.unbind(1),
    "clone_of_expand": lambda t: t[:1].expand(3, 6).clone(),
    "flip": lambda t: t.flip(0),
    "roll": lambda t: t.roll(2, 1),
}


@pytest.mark.parametrize("op", list(SHAPE_OPS), ids=str)
def test_shape_ops(device, assert_close_cpu, op):
    fn = SHAPE_OPS[op]
    x = base_cpu()
    check_result(assert_close_cpu, fn(x.to(device)), fn(x))


def test_contiguous(device, assert_close_cpu):
    x = base_cpu()
    d = x.to(device)
    assert d.contiguous() is d  # already contiguous: no copy
    t = d.t()
    assert not t.is_contiguous()
    c = t.contiguous()
    assert c.is_contiguous()
    assert c.stride() == x.t().contiguous().stride()
    assert not same_storage(c, d)
    assert_close_cpu(c, x.t().contiguous(), atol=0, rtol=0)


def test_views_share_storage(device, assert_close_cpu):
    x = base_cpu()
    d = x.to(device)
    v = d.view(3, 8)
    v[0, 0] = 100.0
    x.view(3, 8)[0, 0] = 100.0
    s = d[:, 2]
    s.fill_(-7.0)
    x[:, 2].fill_(-7.0)
    t = d.t()
    t[5, 3] = 42.0
    x.t()[5, 3] = 42.0
    assert v._base is d
    assert same_storage(v, d) and same_storage(s, d) and same_storage(t, d)
    assert_close_cpu(d, x, atol=0, rtol=0)
    # and the base's updates are visible through the views
    d.add_(1.0)
    x.add_(1.0)
    assert_close_cpu(v, x.view(3, 8), atol=0, rtol=0)
    assert_close_cpu(s, x[:, 2], atol=0, rtol=0)


def _set_col(t):
    t[:, 0] = 5


def _set_row_tensor(t):
    t[2] = torch.arange(6, dtype=t.dtype, device=t.device)


INPLACE_ON_VIEWS = {
    "slice_add_": lambda t: t[1:].add_(1),
    "mul_": lambda t: t.mul_(2),
    "zero_": lambda t: t.zero_(),
    "fill_": lambda t: t.fill_(3),
    "setitem_column": _set_col,
    "setitem_row_tensor": _set_row_tensor,
    "transposed_add_": lambda t: t.t().add_(torch.ones(6, 4, device=t.device)),
    "strided_mul_": lambda t: t[:, 1::2].mul_(-1),
    "diagonal_fill_": lambda t: t.diagonal().fill_(7),
    "select_copy_": lambda t: t[0].copy_(t[3]),
    "narrow_sub_": lambda t: t.narrow(1, 1, 3).sub_(0.5),
    "clamp_on_view_": lambda t: t[1:3].clamp_(min=0),
    "view_then_add_": lambda t: t.view(-1)[::5].add_(10),
}


@pytest.mark.parametrize("op", list(INPLACE_ON_VIEWS), ids=str)
def test_inplace_ops_on_views(device, assert_close_cpu, op):
    fn = INPLACE_ON_VIEWS[op]
    x = base_cpu()
    d = x.to(device)
    ptr = d.data_ptr()
    fn(x)
    fn(d)
    assert d.data_ptr() == ptr
    assert_close_cpu(d, x, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_resize_(device, assert_close_cpu, dtype):
    x = torch.arange(6).to(dtype)
    d = x.to(device)
    # shrink: data kept
    x.resize_(2, 2)
    d.resize_(2, 2)
    assert d.shape == x.shape and d.stride() == x.stride()
    assert_close_cpu(d, x, atol=0, rtol=0)
    # grow: old elements preserved, new ones unspecified
    x.resize_(4, 5)
    d.resize_(4, 5)
    assert d.shape == (4, 5) and d.stride() == x.stride()
    assert_close_cpu(d.view(-1)[:6], x.view(-1)[:6], atol=0, rtol=0)
    # the grown tensor is fully usable
    d.fill_(2)
    x.fill_(2)
    assert_close_cpu(d, x, atol=0, rtol=0)


def test_resize_from_empty(device, assert_close_cpu):
    d = torch.empty(0, device=device)
    d.resize_(3, 4)
    assert d.shape == (3, 4)
    d.copy_(base_cpu((3, 4)))
    assert_close_cpu(d, base_cpu((3, 4)), atol=0, rtol=0)
    d.resize_(0)
    assert d.numel() == 0


INDEXING = {
    "index_tensor": lambda t, i: t[i],
    "index_tensor_dim1": lambda t, i: t[:, i],
    "index_two_tensors": lambda t, i: t[i, i + 1],
    "index_select": lambda t, i: t.index_select(1, i),
    "gather": lambda t, i: t.gather(1, i.expand(4, 3)),
}


@pytest.mark.parametrize("op", list(INDEXING), ids=str)
def test_indexing_with_tensors(device, assert_close_cpu, op):
    fn = INDEXING[op]
    x = base_cpu()
    idx = torch.tensor([3, 0, -1]).remainder(4)  # [3, 0, 3]
    check_result(assert_close_cpu, fn(x.to(device), idx.to(device)), fn(x, idx))


def test_indexing_negative_indices(device, assert_close_cpu):
    x = base_cpu()
    idx = torch.tensor([-1, 0, -4, 2])
    assert_close_cpu(x.to(device)[idx.to(device)], x[idx], atol=0, rtol=0)


def test_boolean_mask(device, assert_close_cpu):
    x = base_cpu((5, 7))
    d = x.to(device)
    r = d[d > 0]  # data-dependent output shape
    ref = x[x > 0]
    assert r.shape == ref.shape
    assert_close_cpu(r, ref, atol=0, rtol=0)
    none = d[d > 1e9]
    assert none.shape == (0,)
    assert_close_cpu(d[d == d], x.flatten(), atol=0, rtol=0)


def test_boolean_mask_row_selection(device, assert_close_cpu):
    x = base_cpu((5, 3))
    mask = torch.tensor([True, False, True, True, False])
    assert_close_cpu(x.to(device)[mask.to(device)], x[mask], atol=0, rtol=0)


def test_index_put(device, assert_close_cpu):
    x = base_cpu()
    d = x.to(device)
    idx = torch.tensor([0, 2])
    x[idx] = -1.0
    d[idx.to(device)] = -1.0
    x[x > 1] = 0.0
    d[d > 1] = 0.0
    x.index_put_((torch.tensor([1, 3]), torch.tensor([0, 5])), torch.tensor([9.0, 8.0]), accumulate=True)
    d.index_put_(
        (torch.tensor([1, 3], device=device), torch.tensor([0, 5], device=device)),
        torch.tensor([9.0, 8.0], device=device),
        accumulate=True,
    )
    assert_close_cpu(d, x, atol=0, rtol=0)


@pytest.mark.parametrize("as_tuple", [False, True])
def test_nonzero(device, assert_close_cpu, as_tuple):
    x = base_cpu((4, 5))
    x[x.abs() < 0.5] = 0
    check_result(assert_close_cpu, torch.nonzero(x.to(device), as_tuple=as_tuple), torch.nonzero(x, as_tuple=as_tuple))
    z = torch.zeros(3, 2)
    check_result(assert_close_cpu, torch.nonzero(z.to(device), as_tuple=as_tuple), torch.nonzero(z, as_tuple=as_tuple))
    b = x > 0
    check_result(assert_close_cpu, b.to(device).nonzero(), b.nonzero())


CAT_CASES = {
    "dim0": (lambda ts: torch.cat(ts, 0)),
    "dim1": (lambda ts: torch.cat(ts, 1)),
    "negative_dim": (lambda ts: torch.cat(ts, -1)),
    "non_contiguous_inputs": (lambda ts: torch.cat([t.t() for t in ts], 0)),
    "with_empty": (lambda ts: torch.cat([ts[0], ts[0][:0], ts[1]], 0)),
    "single": (lambda ts: torch.cat(ts[:1], 0)),
}


@pytest.mark.parametrize("case", list(CAT_CASES), ids=str)
def test_cat(device, assert_close_cpu, case):
    fn = CAT_CASES[case]
    ts = [base_cpu((3, 4), seed=i) for i in range(3)]
    assert_close_cpu(fn([t.to(device) for t in ts]), fn(ts), atol=0, rtol=0)


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_stack(device, assert_close_cpu, dim):
    ts = [base_cpu((3, 4), seed=i) for i in range(4)]
    assert_close_cpu(torch.stack([t.to(device) for t in ts], dim), torch.stack(ts, dim), atol=0, rtol=0)


def test_cat_mixed_dtypes_promotes(device, assert_close_cpu):
    a = base_cpu((2, 3))
    b = torch.arange(6).reshape(2, 3)
    assert_close_cpu(torch.cat([a.to(device), b.to(device)]), torch.cat([a, b]), atol=0, rtol=0)
