"""nn.LSTM and nn.GRU on the device run a layer at a time
(core/src/aten/lstm_layer.cpp, gru_layer.cpp): results and every gradient match
torch CPU whichever outputs the loss uses, second derivatives too, and the
backward computes the weight gradients once per layer, not once per step. A
float32 LSTM layer is one aten::mkldnn_rnn_layer call in inference; in training
it is that call and one aten::mkldnn_rnn_layer_backward call, both on one
engine (core/src/aten/lstm_layer.cpp says why)."""


import pytest
import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

import openreg

LAYERS = {"LSTM": nn.LSTM, "GRU": nn.GRU}


def _close(dev, ref, what, tol=1e-5):
    assert dev is not None, f"{what}: no gradient on the device"
    dev = dev.detach().cpu()
    scale = ref.abs().max().item() or 1.0
    err = (dev - ref).abs().max().item() / scale
    assert err < tol, f"{what}: relative difference {err:.2e}"


def _pair(kind, **kwargs):
    torch.manual_seed(0)
    ref = LAYERS[kind](6, 8, **kwargs)
    dev = LAYERS[kind](6, 8, **kwargs)
    dev.load_state_dict(ref.state_dict())
    return ref, dev.to("openreg")


def _states(kind, layers, batch, requires_grad):
    """(CPU state, device state): (h0, c0) for LSTM, h0 for GRU."""
    count = 2 if kind == "LSTM" else 1
    cpu = [torch.randn(layers, batch, 8, requires_grad=requires_grad) for _ in range(count)]
    dev = [s.detach().to("openreg").requires_grad_(requires_grad) for s in cpu]
    return (tuple(cpu), tuple(dev)) if kind == "LSTM" else (cpu[0], dev[0])


def _flat(state):
    return list(state) if isinstance(state, tuple) else [state]


LOSSES = {
    "output": lambda out, finals: out.square().sum(),
    "h_n only": lambda out, finals: finals[0].square().sum(),
    "last state only": lambda out, finals: (2 * finals[-1]).sum(),
    "all": lambda out, finals: out.sum() + sum((k + 1) * f.square().sum() for k, f in enumerate(finals)),
}


@pytest.mark.parametrize("loss_name", LOSSES)
@pytest.mark.parametrize(
    "kwargs",
    [dict(num_layers=3), dict(num_layers=2, bidirectional=True, batch_first=True), dict(bias=False)],
    ids=str,
)
@pytest.mark.parametrize("kind", LAYERS)
def test_gradients_match_cpu(kind, kwargs, loss_name):
    ref, dev = _pair(kind, **kwargs)
    loss = LOSSES[loss_name]
    count = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    shape = (3, 5, 6) if kwargs.get("batch_first") else (5, 3, 6)
    x = torch.randn(*shape, requires_grad=True)
    x_d = x.detach().to("openreg").requires_grad_()
    s0, s0_d = _states(kind, count, 3, requires_grad=True)
    out, finals = ref(x, s0)
    out_d, finals_d = dev(x_d, s0_d)
    _close(out_d, out, "output")
    for a, b in zip(_flat(finals_d), _flat(finals)):
        _close(a, b, "final state")
    loss(out, _flat(finals)).backward()
    loss(out_d, _flat(finals_d)).backward()
    _close(x_d.grad, x.grad, "gradient of the input")
    for k, (a, b) in enumerate(zip(_flat(s0_d), _flat(s0))):
        _close(a.grad, b.grad, f"gradient of initial state {k}")
    for (name, p), p_d in zip(ref.named_parameters(), dev.parameters()):
        _close(p_d.grad, p.grad, f"gradient of {name}")


@pytest.mark.parametrize("kind", LAYERS)
def test_only_weights_need_gradients(kind):
    # No gradient for the input or the initial state: the weights still get theirs.
    ref, dev = _pair(kind, num_layers=2)
    x = torch.randn(4, 2, 6)
    ref(x)[0].sum().backward()
    dev(x.to("openreg"))[0].sum().backward()
    for (name, p), p_d in zip(ref.named_parameters(), dev.parameters()):
        _close(p_d.grad, p.grad, f"gradient of {name}")


@pytest.mark.parametrize(
    "kwargs",
    [dict(num_layers=2, bidirectional=True), dict(bias=False, batch_first=True), dict(dtype=torch.float64)],
    ids=str,
)
@pytest.mark.parametrize("context", ["no_grad", "inference_mode"])
@pytest.mark.parametrize("kind", LAYERS)
def test_inference_matches_cpu(kind, context, kwargs):
    ref, dev = _pair(kind, **kwargs)
    x = torch.randn(7, 2, 6, dtype=kwargs.get("dtype", torch.float32))
    with getattr(torch, context)():
        out, finals = ref(x)
        out_d, finals_d = dev(x.to("openreg"))
    assert not out_d.requires_grad
    _close(out_d, out, "output")
    for a, b in zip(_flat(finals_d), _flat(finals)):
        _close(a, b, "final state")


def test_lstm_inference_is_one_call_per_layer_and_direction():
    # Without a backward, a float32 LSTM layer is one aten::mkldnn_rnn_layer
    # call (CPU's whole-layer op), not a GEMM and a cell per time step.
    _, dev = _pair("LSTM", num_layers=2, bidirectional=True)
    x = torch.randn(9, 2, 6, device="openreg")
    with torch.no_grad(), _OpCounter() as counter:
        dev(x)
    assert counter.calls.get("mkldnn_rnn_layer", 0) == 4, counter.calls
    assert counter.calls.get("_thnn_fused_lstm_cell", 0) == 0, counter.calls


@pytest.mark.parametrize("kind", LAYERS)
def test_dropout_between_layers_is_applied_in_training_only(kind):
    ref, dev = _pair(kind, num_layers=2, dropout=0.5)
    x = torch.randn(5, 3, 6)
    ref.eval(), dev.eval()
    _close(dev(x.to("openreg"))[0], ref(x)[0], "eval output")
    dev.train()
    torch.manual_seed(1)
    a = dev(x.to("openreg"))[0].cpu()
    torch.manual_seed(2)
    b = dev(x.to("openreg"))[0].cpu()
    assert not torch.allclose(a, b), "dropout between layers did nothing in training mode"


@pytest.mark.parametrize("kind", LAYERS)
def test_double_backward_matches_cpu(kind):
    # A gradient penalty: the input's gradient, taken with create_graph=True,
    # differentiated again down to the weights.
    ref, dev = _pair(kind, num_layers=2)
    x = torch.randn(4, 2, 6, requires_grad=True)
    x_d = x.detach().to("openreg").requires_grad_()
    for model, inp in ((ref, x), (dev, x_d)):
        out, finals = model(inp)
        (g,) = torch.autograd.grad(out.square().sum() + _flat(finals)[-1].sum(), inp, create_graph=True)
        g.square().sum().backward()
    _close(x_d.grad, x.grad, "second-order gradient of the input")
    for (name, p), p_d in zip(ref.named_parameters(), dev.parameters()):
        _close(p_d.grad, p.grad, f"second-order gradient of {name}")


class _OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.calls[name] = self.calls.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("kind", LAYERS)
def test_one_weight_gradient_gemm_per_layer(kind):
    # ATen's composite runs an input-projection GEMM per step and two
    # weight-gradient GEMMs per step; the layer path runs those once per layer.
    # (float64: on the reference engine's chain alone a float32 LSTM layer is two
    # whole-layer calls instead.)
    steps = 12
    cell = "_thnn_fused_lstm_cell" if kind == "LSTM" else "_thnn_fused_gru_cell"
    cell_backward = "_thnn_fused_lstm_cell_backward_impl" if kind == "LSTM" else "_thnn_fused_gru_cell_backward"
    _, dev = _pair(kind, dtype=torch.float64)
    x = torch.randn(steps, 2, 6, device="openreg", dtype=torch.float64)
    with _OpCounter() as counter:
        dev(x)[0].sum().backward()
    assert counter.calls.get(cell, 0) == steps
    assert counter.calls.get(cell_backward, 0) == steps
    gemms = counter.calls.get("mm", 0) + counter.calls.get("addmm", 0)
    # forward: 1 projection + 1 hidden GEMM per step; backward: 1 per step + 2 weight GEMMs
    assert gemms <= 2 * steps + 4, counter.calls


def test_lstm_projections_still_run_through_aten():
    torch.manual_seed(0)
    ref = nn.LSTM(6, 8, proj_size=3)
    dev = nn.LSTM(6, 8, proj_size=3)
    dev.load_state_dict(ref.state_dict())
    dev.to("openreg")
    x = torch.randn(4, 2, 6)
    _close(dev(x.to("openreg"))[0], ref(x)[0], "output with proj_size")


def _first_whole_layer_engine():
    """The first engine of the chain that serves aten::mkldnn_rnn_layer for float32
    (the reference engine serves every op), or None."""
    torch.ones(1, device="openreg")
    info = openreg.info()
    engines = {e["name"]: e for e in info["engines"]}
    for name in info["chain"]:
        e = engines[name]
        if e["any_op"] or "float32" in e["ops"].get("aten::mkldnn_rnn_layer", []):
            return name
    return None


def test_lstm_training_path_follows_the_chain():
    # A float32 LSTM layer with a backward to keep is one aten::mkldnn_rnn_layer
    # call (train=True) forward and one aten::mkldnn_rnn_layer_backward call
    # backward, both on one engine (the forward's workspace means something only to
    # the engine that made it): the chain's first engine serving them (onednn's
    # own loop or primitives, else the reference engine's replay of CPU's kernels).
    # A chain without them would run a GEMM and a fused cell per time step each way.
    _, dev = _pair("LSTM", num_layers=2, bidirectional=True)
    steps = 9
    x = torch.randn(steps, 2, 6, device="openreg", requires_grad=True)
    openreg.reset_stats()
    with _OpCounter() as counter:
        out, (h_n, c_n) = dev(x)
        (out.sum() + h_n.sum() + c_n.sum()).backward()
    stats = openreg.stats()
    forward, backward = stats.get("aten::mkldnn_rnn_layer", {}), stats.get("aten::mkldnn_rnn_layer_backward", {})
    engine = _first_whole_layer_engine()
    if engine is not None:
        assert counter.calls.get("mkldnn_rnn_layer", 0) == 4, counter.calls
        assert counter.calls.get("mkldnn_rnn_layer_backward", 0) == 4, counter.calls
        for step_op in ("_thnn_fused_lstm_cell", "_thnn_fused_lstm_cell_backward_impl"):
            assert counter.calls.get(step_op, 0) == 0, counter.calls
        assert forward == backward == {engine: 4}, stats
    else:
        assert not forward and not backward, stats
        assert counter.calls.get("_thnn_fused_lstm_cell", 0) == 4 * steps, counter.calls
        assert counter.calls.get("_thnn_fused_lstm_cell_backward_impl", 0) == 4 * steps, counter.calls


def test_lstm_training_takes_strided_operands():
    # CPU's whole-layer kernel reads its operands as contiguous and time-major:
    # core hands it dense copies of strided inputs, states, weights and biases.
    torch.manual_seed(0)
    layers, batch, steps, hidden = 2, 3, 5, 8
    bases = [torch.randn(batch, steps, 6)] + [torch.randn(batch, layers, hidden) for _ in range(2)]
    for layer in range(layers):
        bases += [torch.randn(6 if layer == 0 else hidden, 4 * hidden), torch.randn(hidden, 4 * hidden),
                  torch.randn(8 * hidden), torch.randn(4 * hidden)]

    def run(leaves):
        # Transposed input and states ([T, B, I], [layers, B, H]), transposed
        # weights ([4H, in]), every other element for one bias.
        x, h0, c0 = (t.transpose(0, 1) for t in leaves[:3])
        params = [t.t() if t.dim() == 2 else (t[::2] if t.numel() == 8 * hidden else t) for t in leaves[3:]]
        assert not x.is_contiguous() and not params[0].is_contiguous() and not params[2].is_contiguous()
        out, h_n, c_n = torch._VF.lstm(x, (h0, c0), params, True, layers, 0.0, True, False, False)
        (out.sum() + h_n.square().sum() + c_n.sum()).backward()
        return out

    leaves = [t.clone().requires_grad_() for t in bases]
    leaves_d = [t.to("openreg").requires_grad_() for t in bases]
    _close(run(leaves_d), run(leaves), "output")
    for k, (a, b) in enumerate(zip(leaves_d, leaves)):
        _close(a.grad, b.grad, f"gradient of operand {k}")


def test_backward_conformance_cases_pass_on_the_serving_engine():
    # The conformance cases of the training backward (python/openreg/
    # conformance_cases_rnn.py) against torch CPU, judged for each engine of this
    # chain: whichever serves them (onednn; aten_ref, which the gate never
    # judges, on the other chains) passes, and none fails. (The forward's
    # workspace output, when both sides size it alike, would be compared byte by
    # byte by the runner: CPU's holds uninitialised padding.)
    from openreg import conformance

    torch.ones(1, device="openreg")
    op = "aten::mkldnn_rnn_layer_backward"
    results = {e: conformance.check_row(conformance.Runner(e), op, torch.float32, True)
               for e in openreg.info()["chain"]}
    assert all(r != "FAIL" for r, _ in results.values()), results
    assert any(r == "pass" for r, _ in results.values()), results
