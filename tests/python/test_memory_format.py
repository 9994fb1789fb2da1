"""Memory formats propagate on the device as on CPU.

A convolution whose input or weight is channels-last gives channels-last results
(output, grad_input, grad_weight), as CPU's and CUDA's kernels do, so that a model
moved to ``channels_last`` keeps that layout from layer to layer. Reference: the same
calls on torch CPU, layouts and values.
"""

import pytest
import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

CL = {4: torch.channels_last, 5: torch.channels_last_3d}


def layout(t):
    if not isinstance(t, torch.Tensor) or t.dim() not in CL:
        return None
    if t.is_contiguous(memory_format=CL[t.dim()]) and not t.is_contiguous():
        return "channels_last"
    return "contiguous" if t.is_contiguous() else "strided"


# (label, input shape, weight shape, transposed, stride, padding, output_padding)
CONVS = [
    ("2-d", (2, 3, 9, 8), (5, 3, 3, 3), False, [2, 1], [1, 1], [0, 0]),
    ("3-d", (2, 3, 5, 6, 4), (4, 3, 3, 3, 3), False, [1, 1, 1], [1, 0, 1], [0, 0, 0]),
    ("transposed 2-d", (2, 3, 5, 5), (3, 4, 3, 3), True, [2, 2], [1, 1], [1, 1]),
]


@pytest.mark.parametrize("which", ["input", "weight", "both"])
@pytest.mark.parametrize("conv", CONVS, ids=[c[0] for c in CONVS])
def test_convolution_results_follow_channels_last_as_on_cpu(openreg, assert_close_cpu, conv, which):
    _, xs, ws, transposed, stride, pad, opad = conv
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(xs, generator=g), torch.randn(ws, generator=g)
    fmt = CL[len(xs)]
    if which in ("input", "both"):
        x = x.to(memory_format=fmt)
    if which in ("weight", "both"):
        w = w.to(memory_format=fmt)
    args = (stride, pad, [1] * len(stride), transposed, opad, 1)
    y = torch.ops.aten.convolution(x, w, None, *args)
    gy = torch.randn(y.shape, generator=g)
    grads = torch.ops.aten.convolution_backward(gy, x, w, None, *args, [True, True, False])

    xd, wd, gyd = (t.to("openreg") for t in (x, w, gy))
    assert layout(xd) == layout(x) and layout(wd) == layout(w)
    yd = torch.ops.aten.convolution(xd, wd, None, *args)
    grads_d = torch.ops.aten.convolution_backward(gyd, xd, wd, None, *args, [True, True, False])

    assert layout(y) == "channels_last", "the reference changed"
    assert layout(yd) == layout(y)
    assert_close_cpu(yd, y, atol=1e-4, rtol=1e-4)
    for d, c in zip(grads_d[:2], grads[:2]):
        assert layout(d) == layout(c)
        assert_close_cpu(d, c, atol=1e-4, rtol=1e-4)


class _Layouts(TorchDispatchMode):
    """Records (op, layouts of its tensor results) of every op run under it."""

    def __init__(self):
        super().__init__()
        self.log = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        self.log.append((str(func), tuple(layout(o) for o in outs)))
        return out


def test_a_channels_last_model_keeps_the_layout_op_by_op_as_on_cpu(openreg):
    def run(device):
        torch.manual_seed(0)
        m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 1))
        m = m.to(device).to(memory_format=torch.channels_last)
        x = torch.randn(2, 3, 8, 8).to(device).to(memory_format=torch.channels_last).requires_grad_()
        with _Layouts() as rec:
            y = m(x)
            y.backward(torch.ones_like(y))
        return rec.log, y, x.grad

    cpu_log, y, gx = run("cpu")
    dev_log, yd, gxd = run("openreg")
    assert dev_log == cpu_log
    assert sum(1 for _, outs in cpu_log if "channels_last" in outs) >= 6, "the reference changed"
    torch.testing.assert_close(yd.cpu(), y, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(gxd.cpu(), gx, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("shape", [(2, 6, 5, 7), (2, 6, 3, 4, 5)], ids=["2-d", "3-d"])
def test_group_norm_takes_channels_last_input_as_on_cpu(openreg, assert_close_cpu, shape):
    """nn.GroupNorm in a channels_last model: ATen's composite group norm views its
    input as [1, N * groups, -1], which raised on a channels-last device tensor."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g).to(memory_format=CL[len(shape)])
    m = nn.GroupNorm(3, 6)
    with torch.no_grad():
        m.weight.copy_(torch.randn(6, generator=g))
        m.bias.copy_(torch.randn(6, generator=g))
    md = nn.GroupNorm(3, 6).to("openreg")
    md.load_state_dict(m.state_dict())
    xc, xd = x.clone().requires_grad_(), x.to("openreg").requires_grad_()
    gy = torch.randn(shape, generator=g)
    y, yd = m(xc), md(xd)
    y.backward(gy)
    yd.backward(gy.to("openreg"))
    assert layout(yd) == layout(y) == "channels_last"
    assert_close_cpu(yd, y, atol=1e-5, rtol=1e-4)
    assert_close_cpu(xd.grad, xc.grad, atol=1e-5, rtol=1e-4)
    for pd, pc in zip(md.parameters(), m.parameters()):
        assert_close_cpu(pd.grad, pc.grad, atol=1e-5, rtol=1e-4)
