"""nn.LSTM on the device runs a layer at a time (core/src/aten/lstm_layer.cpp):
the results and every gradient match torch CPU, whichever outputs the loss uses,
and the backward computes the weight gradients once per layer, not per step."""

import pytest
import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode


def _close(dev, ref, what, tol=1e-5):
    assert dev is not None, f"{what}: no gradient on the device"
    dev = dev.detach().cpu()
    scale = ref.abs().max().item() or 1.0
    err = (dev - ref).abs().max().item() / scale
    assert err < tol, f"{what}: relative difference {err:.2e}"


def _pair(**kwargs):
    torch.manual_seed(0)
    ref = nn.LSTM(6, 8, **kwargs)
    dev = nn.LSTM(6, 8, **kwargs)
    dev.load_state_dict(ref.state_dict())
    return ref, dev.to("openreg")


LOSSES = {
    "output": lambda out, h, c: out.square().sum(),
    "h_n only": lambda out, h, c: h.square().sum(),
    "c_n only": lambda out, h, c: (2 * c).sum(),
    "all": lambda out, h, c: out.sum() + h.square().sum() + c.sum(),
}


@pytest.mark.parametrize("loss_name", LOSSES)
@pytest.mark.parametrize(
    "kwargs",
    [dict(num_layers=3), dict(num_layers=2, bidirectional=True, batch_first=True), dict(bias=False)],
    ids=str,
)
def test_gradients_match_cpu(kwargs, loss_name):
    ref, dev = _pair(**kwargs)
    loss = LOSSES[loss_name]
    directions = 2 if kwargs.get("bidirectional") else 1
    layers = kwargs.get("num_layers", 1)
    shape = (3, 5, 6) if kwargs.get("batch_first") else (5, 3, 6)
    x = torch.randn(*shape, requires_grad=True)
    h0 = torch.randn(layers * directions, 3, 8, requires_grad=True)
    c0 = torch.randn(layers * directions, 3, 8, requires_grad=True)
    x_d, h0_d, c0_d = (t.detach().to("openreg").requires_grad_() for t in (x, h0, c0))
    out, (h, c) = ref(x, (h0, c0))
    out_d, (h_d, c_d) = dev(x_d, (h0_d, c0_d))
    for a, b, what in ((out_d, out, "output"), (h_d, h, "h_n"), (c_d, c, "c_n")):
        _close(a, b, what)
    loss(out, h, c).backward()
    loss(out_d, h_d, c_d).backward()
    for a, b, what in ((x_d, x, "input"), (h0_d, h0, "h0"), (c0_d, c0, "c0")):
        _close(a.grad, b.grad, f"gradient of {what}")
    for (name, p), p_d in zip(ref.named_parameters(), dev.parameters()):
        _close(p_d.grad, p.grad, f"gradient of {name}")


def test_only_weights_need_gradients():
    # No gradient for the input or the initial state: the backward still gives
    # the weights theirs.
    ref, dev = _pair(num_layers=2)
    x = torch.randn(4, 2, 6)
    ref(x)[0].sum().backward()
    dev(x.to("openreg"))[0].sum().backward()
    for (name, p), p_d in zip(ref.named_parameters(), dev.parameters()):
        _close(p_d.grad, p.grad, f"gradient of {name}")


@pytest.mark.parametrize("context", ["no_grad", "inference_mode"])
def test_inference_matches_cpu(context):
    ref, dev = _pair(num_layers=2, bidirectional=True)
    x = torch.randn(7, 2, 6)
    with getattr(torch, context)():
        out, (h, c) = ref(x)
        out_d, (h_d, c_d) = dev(x.to("openreg"))
    assert not out_d.requires_grad
    for a, b, what in ((out_d, out, "output"), (h_d, h, "h_n"), (c_d, c, "c_n")):
        _close(a, b, what)


def test_dropout_between_layers_is_applied_in_training_only():
    ref, dev = _pair(num_layers=2, dropout=0.5)
    x = torch.randn(5, 3, 6)
    ref.eval(), dev.eval()
    _close(dev(x.to("openreg"))[0], ref(x)[0], "eval output")
    dev.train()
    torch.manual_seed(1)
    a = dev(x.to("openreg"))[0].cpu()
    torch.manual_seed(2)
    b = dev(x.to("openreg"))[0].cpu()
    assert not torch.allclose(a, b), "dropout between layers did nothing in training mode"


class _OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.calls[name] = self.calls.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def test_one_weight_gradient_gemm_per_layer():
    # ATen's composite would run two weight-gradient GEMMs per step (and one
    # input-projection GEMM per step); the layer path runs them once per layer.
    steps = 12
    _, dev = _pair()
    x = torch.randn(steps, 2, 6, device="openreg")
    with _OpCounter() as counter:
        dev(x)[0].sum().backward()
    cells = counter.calls.get("_thnn_fused_lstm_cell", 0)
    gemms = counter.calls.get("mm", 0) + counter.calls.get("addmm", 0)
    assert cells == steps
    assert counter.calls.get("_thnn_fused_lstm_cell_backward_impl", 0) == steps
    # forward: 1 projection + one hidden GEMM per step; backward: one per step + 2 weight GEMMs
    assert gemms <= 2 * steps + 4, counter.calls


def test_projections_still_run_through_aten():
    torch.manual_seed(0)
    ref = nn.LSTM(6, 8, proj_size=3)
    dev = nn.LSTM(6, 8, proj_size=3)
    dev.load_state_dict(ref.state_dict())
    dev.to("openreg")
    x = torch.randn(4, 2, 6)
    out, _ = ref(x)
    out_d, _ = dev(x.to("openreg"))
    _close(out_d, out, "output with proj_size")


def test_double_backward_matches_cpu():
    # A gradient penalty: the input's gradient, taken with create_graph=True,
    # differentiated again down to the weights.
    ref, dev = _pair(num_layers=2)
    x = torch.randn(4, 2, 6, requires_grad=True)
    x_d = x.detach().to("openreg").requires_grad_()
    for model, inp in ((ref, x), (dev, x_d)):
        out, (h, c) = model(inp)
        (g,) = torch.autograd.grad(out.square().sum() + c.sum(), inp, create_graph=True)
        g.square().sum().backward()
    _close(x_d.grad, x.grad, "second-order gradient of the input")
    for (name, p), p_d in zip(ref.named_parameters(), dev.parameters()):
        _close(p_d.grad, p.grad, f"second-order gradient of {name}")
