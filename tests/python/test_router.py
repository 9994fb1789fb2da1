"""The router's own behaviour: output sizing (and its cache of Meta results),
ops that must reach engines as themselves, dtypes the Meta and CPU kernels
disagree on. Every result is compared with the same computation on CPU."""

import pytest
import torch
import torch.nn.functional as F


def _dev(t):
    return t.detach().to("openreg")


def test_meta_cache_keeps_type_promotion_apart(openreg, assert_close_cpu):
    # The same op and shapes, with Python numbers of different types: the cached
    # output dtype must follow the number's type, not the first call's.
    a = torch.arange(6, dtype=torch.int64).reshape(2, 3)
    d = _dev(a)
    for other in (1, 2.5, True, 3, -0.5):
        assert_close_cpu(d + other, a + other)
        assert_close_cpu(d * other, a * other)
    assert (d / 2).dtype == torch.float32


def test_meta_cache_keeps_shapes_strides_and_values_apart(openreg, assert_close_cpu):
    torch.manual_seed(0)
    for shape_a, shape_b in [((3, 4), (4,)), ((3, 4), (3, 1)), ((3, 4), (3, 4)), ((1, 4), (5, 1)), ((3, 4), (4,))]:
        a, b = torch.randn(shape_a), torch.randn(shape_b)
        assert_close_cpu(_dev(a) - _dev(b), a - b)
    m = torch.randn(5, 7)
    # Same sizes, other strides: the output layout follows the input's.
    assert_close_cpu(_dev(m).t().exp(), m.t().exp())
    assert _dev(m).t().exp().stride() == m.t().exp().stride()
    assert_close_cpu(_dev(m).exp(), m.exp())
    # Integer arguments are part of the signature (sum over another dim).
    for dim in (0, 1, 0, -1):
        assert_close_cpu(_dev(m).sum(dim), m.sum(dim))
    # Scalar values change from call to call (Adam's step size): results follow.
    p, e, v = torch.randn(8), torch.randn(8), torch.rand(8) + 1
    pd = _dev(p)
    for step_size in (0.1, 0.01, -3.0):
        p.addcdiv_(e, v, value=step_size)
        pd.addcdiv_(_dev(e), _dev(v), value=step_size)
        assert_close_cpu(pd, p)


def test_meta_cache_resizes_out_arguments_every_time(openreg, assert_close_cpu):
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    for _ in range(3):
        out = torch.empty(0, device="openreg")
        torch.add(_dev(a), _dev(b), out=out)
        assert out.shape == (4, 5)
        assert_close_cpu(out, a + b)


def test_meta_cache_value_shaped_factories(openreg, assert_close_cpu):
    # arange's output size depends on its Scalar values.
    for end in (3, 7, 7.5, 2):
        assert_close_cpu(torch.arange(0, end, 1, device="openreg"), torch.arange(0, end, 1))


def test_meta_cache_convolution_geometry(openreg, assert_close_cpu):
    torch.manual_seed(0)
    x, w = torch.randn(2, 3, 9, 9), torch.randn(4, 3, 3, 3)
    for padding, stride in [(0, 1), (1, 1), (1, 2), (0, 1)]:
        assert_close_cpu(F.conv2d(_dev(x), _dev(w), padding=padding, stride=stride),
                         F.conv2d(x, w, padding=padding, stride=stride), atol=1e-4, rtol=1e-4)


def test_layer_norm_reaches_engines_as_itself(openreg, assert_close_cpu):
    torch.manual_seed(0)
    x = torch.randn(4, 5, 7, requires_grad=True)
    ln = torch.nn.LayerNorm(7)
    ln_d = torch.nn.LayerNorm(7).to("openreg")
    ln_d.load_state_dict(ln.state_dict())
    xd = _dev(x).requires_grad_()
    openreg.reset_stats()
    y_d = ln_d(xd)
    (y_d * y_d).sum().backward()
    stats = openreg.stats()
    assert "aten::native_layer_norm" in stats, sorted(stats)
    assert "aten::native_layer_norm_backward" in stats, sorted(stats)
    assert "aten::native_batch_norm" not in stats, "layer norm was decomposed into batch norm"
    y = ln(x)
    (y * y).sum().backward()
    assert_close_cpu(y_d, y, atol=1e-5, rtol=1e-5)
    assert_close_cpu(xd.grad, x.grad, atol=1e-4, rtol=1e-4)
    assert_close_cpu(ln_d.weight.grad, ln.weight.grad, atol=1e-4, rtol=1e-4)
    assert_close_cpu(ln_d.bias.grad, ln.bias.grad, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reduced_precision_batch_norm_backward(openreg, assert_close_cpu, dtype):
    # Meta keeps the saved statistics in float32, CPU in the input's dtype: the
    # backward must still work and match CPU.
    torch.manual_seed(0)
    x = torch.randn(8, 3, 5, 5).to(dtype).requires_grad_()
    bn = torch.nn.BatchNorm2d(3).to(dtype)
    bn_d = torch.nn.BatchNorm2d(3).to("openreg", dtype)
    xd = _dev(x).requires_grad_()
    y, y_d = bn(x), bn_d(xd)
    y.float().pow(2).sum().backward()
    y_d.float().pow(2).sum().backward()
    tol = dict(atol=0.1, rtol=0.05)
    assert_close_cpu(y_d, y, **tol)
    assert_close_cpu(xd.grad, x.grad, **tol)
    assert_close_cpu(bn_d.weight.grad, bn.weight.grad, **tol)
    assert_close_cpu(bn_d.running_mean, bn.running_mean, **tol)
