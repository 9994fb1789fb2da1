"""_foreach_ ops over lists that ATen's fast route does not take whole (tensors of several
dtypes, an item that broadcasts): the device gives CPU's results, through the per-tensor
loop, instead of offering the call to an engine (which declined it on the worker, where
nothing could run that loop: an asynchronous "no engine covers" error)."""

import pytest
import torch


def _lists(device, g):
    a = [torch.randn(4, generator=g), torch.randn(2, 3, generator=g)]
    b = [torch.randn(1, generator=g), torch.randn(2, 3, generator=g).to(torch.bfloat16)]
    return [t.to(device) for t in a], [t.to(device) for t in b]


def _check(got, want):
    assert len(got) == len(want)
    for g_, w in zip(got, want):
        assert g_.device.type == "openreg" and g_.dtype == w.dtype and g_.shape == w.shape
        torch.testing.assert_close(g_.cpu(), w, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", ["add", "mul", "div", "maximum"])
def test_in_place_over_mixed_dtypes_and_broadcast_items_matches_cpu(device, op):
    da, db = _lists(device, torch.Generator().manual_seed(1))
    ca, cb = _lists("cpu", torch.Generator().manual_seed(1))
    getattr(torch, f"_foreach_{op}_")(da, db)
    getattr(torch, f"_foreach_{op}_")(ca, cb)
    _check(da, ca)


def test_out_of_place_promotes_as_cpu_does(device):
    g = torch.Generator().manual_seed(2)
    a = [torch.randn(5, generator=g), torch.randn(3, generator=g)]
    b = [torch.randn(5, generator=g, dtype=torch.float64), torch.randn(3, generator=g, dtype=torch.float64)]
    got = torch._foreach_add([t.to(device) for t in a], [t.to(device) for t in b], alpha=0.5)
    want = torch._foreach_add(a, b, alpha=0.5)
    assert [t.dtype for t in want] == [torch.float64, torch.float64]
    _check(got, want)


def test_alike_lists_still_reach_the_engine_whole(device, openreg):
    a = [torch.randn(6).to(device), torch.randn(2, 3).to(device)]
    b = [torch.randn(6).to(device), torch.randn(2, 3).to(device)]
    openreg.reset_stats()
    torch._foreach_add_(a, b)
    torch.openreg.synchronize()
    served = openreg.stats().get("aten::_foreach_add_.List", {})
    per_tensor = openreg.stats().get("aten::add_.Tensor", {})
    assert sum(served.values()) == 1 or (not served and sum(per_tensor.values()) == 2), (served, per_tensor)
