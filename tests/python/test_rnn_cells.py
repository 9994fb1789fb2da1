"""LSTM and GRU on the device match CPU.

On accelerators ATen runs each time step through the fused cells
(aten::_thnn_fused_lstm_cell / _thnn_fused_gru_cell and their backwards), which
have no CPU kernel: the engines serve them (the SDK's rnn.hpp), and core composes
them of device ops (core/src/aten/rnn_cells.cpp) when no engine does or one
declines. The suite runs once per engine (pytest --engine), so each path meets
torch CPU's nn.LSTM / nn.GRU / nn.LSTMCell / nn.GRUCell here.
"""

import json

import pytest
import torch
import torch.nn as nn

CASES = [
    (nn.LSTM, dict(num_layers=2, bidirectional=True)),
    (nn.LSTM, dict(num_layers=1, bias=False, batch_first=True)),
    (nn.LSTM, dict(num_layers=2, proj_size=3)),
    (nn.GRU, dict(num_layers=2, bidirectional=True)),
    (nn.GRU, dict(num_layers=1, bias=False, batch_first=True)),
    (nn.RNN, dict(num_layers=2, nonlinearity="relu")),
]


def _pair(cls, kwargs):
    torch.manual_seed(0)
    ref = cls(5, 7, **kwargs)
    dev = cls(5, 7, **kwargs)
    dev.load_state_dict(ref.state_dict())
    return ref, dev.to("openreg")


def _close(dev, ref, what):
    dev = dev.detach().cpu()
    scale = ref.abs().max().item() or 1.0
    err = (dev - ref).abs().max().item() / scale
    assert err < 1e-5, f"{what}: relative difference {err:.2e}"


@pytest.mark.parametrize("cls,kwargs", CASES, ids=lambda v: v.__name__ if isinstance(v, type) else str(v))
def test_forward_and_gradients_match_cpu(cls, kwargs):
    ref, dev = _pair(cls, kwargs)
    x = torch.randn(6, 3, 5)
    x_dev = x.to("openreg").requires_grad_()
    x.requires_grad_()
    out, h = ref(x)
    out_d, h_d = dev(x_dev)
    _close(out_d, out, "output")
    for a, b in zip(h_d if isinstance(h_d, tuple) else (h_d,), h if isinstance(h, tuple) else (h,)):
        _close(a, b, "final state")
    # Use every output, the final cell state alone included (LSTM's backward then
    # gets no gradient for the hidden state of that step).
    def loss(o, hs):
        hs = hs if isinstance(hs, tuple) else (hs,)
        return o.square().sum() + sum((k + 1) * s.sum() for k, s in enumerate(hs))
    loss(out, h).backward()
    loss(out_d, h_d).backward()
    _close(x_dev.grad, x.grad, "input gradient")
    for (name, p), p_d in zip(ref.named_parameters(), dev.parameters()):
        _close(p_d.grad, p.grad, f"gradient of {name}")


def test_packed_sequences_match_cpu():
    ref, dev = _pair(nn.LSTM, dict(num_layers=1, bidirectional=True))
    x = torch.randn(6, 3, 5)
    lengths = torch.tensor([6, 4, 2])
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths)
    packed_d = nn.utils.rnn.pack_padded_sequence(x.to("openreg"), lengths)
    out, _ = nn.utils.rnn.pad_packed_sequence(ref(packed)[0])
    out_d, _ = nn.utils.rnn.pad_packed_sequence(dev(packed_d)[0])
    _close(out_d, out, "packed output")
    out.sum().backward()
    out_d.sum().backward()
    for (name, p), p_d in zip(ref.named_parameters(), dev.parameters()):
        _close(p_d.grad, p.grad, f"gradient of {name}")


def test_cells_reject_mismatched_gates():
    gates = torch.randn(2, 8, device="openreg")
    with pytest.raises(RuntimeError, match="_thnn_fused_lstm_cell expects"):
        torch.ops.aten._thnn_fused_lstm_cell(gates, torch.randn(2, 4, device="openreg"), torch.randn(2, 2, device="openreg"))


CELL_OPS = ("aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_lstm_cell_backward_impl",
            "aten::_thnn_fused_gru_cell", "aten::_thnn_fused_gru_cell_backward")


def _serving_engine():
    """The chain's first engine when it serves the cells (an in-tree engine), else None."""
    import openreg

    torch.ones(1, device="openreg")
    first = openreg.info()["chain"][0]
    return first if first in ("onednn", "eigen") else None


@pytest.mark.parametrize("cls", [nn.LSTMCell, nn.GRUCell], ids=lambda c: c.__name__)
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("given_state", [True, False], ids=["hx", "no_hx"])
def test_cells_match_cpu(cls, bias, given_state):
    import openreg

    torch.manual_seed(1)
    ref = cls(6, 11, bias=bias)
    dev = cls(6, 11, bias=bias)
    dev.load_state_dict(ref.state_dict())
    dev = dev.to("openreg")
    x = torch.randn(4, 6)
    state = None
    if given_state:
        state = (torch.randn(4, 11), torch.randn(4, 11)) if cls is nn.LSTMCell else torch.randn(4, 11)
    leaves = [x] + (list(state) if isinstance(state, tuple) else [state] if state is not None else [])
    leaves = [t.clone().requires_grad_() for t in leaves]
    leaves_d = [t.detach().to("openreg").requires_grad_() for t in leaves]

    def run(module, ts):
        st = None if not given_state else (tuple(ts[1:]) if cls is nn.LSTMCell else ts[1])
        out = module(ts[0], st)
        outs = out if isinstance(out, tuple) else (out,)
        # hy and cy both carry gradient (LSTM's backward gets both).
        return outs, sum((k + 1) * (o * o).sum() for k, o in enumerate(outs))

    openreg.reset_stats()
    outs, loss = run(ref, leaves)
    outs_d, loss_d = run(dev, leaves_d)
    loss.backward()
    loss_d.backward()
    for k, (a, b) in enumerate(zip(outs_d, outs)):
        _close(a, b, f"output {k}")
    for k, (a, b) in enumerate(zip(leaves_d, leaves)):
        _close(a.grad, b.grad, f"gradient of input {k}")
    for (name, p), p_d in zip(ref.named_parameters(), dev.parameters()):
        _close(p_d.grad, p.grad, f"gradient of {name}")
    engine = _serving_engine()
    if engine is not None:  # the engine's kernels ran, not core's composite
        stats = openreg.stats()
        kind = "lstm" if cls is nn.LSTMCell else "gru"
        for op in CELL_OPS:
            if kind in op:
                assert stats.get(op, {}).get(engine, 0) == 1, f"{op}: {stats.get(op)}"


def _lstm_formula(ig, hg, cx, ib, hb):
    """The cell on CPU in float64 (an independent reference for the direct op calls)."""
    gates = ig.double() + hg.double() + ib.double() + hb.double()
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx.double() + i * g
    return (o * cy.tanh()).float(), cy.float(), torch.cat([i, f, g, o], 1).float()


@pytest.mark.parametrize("layout", ["row_strided", "transposed"])
def test_lstm_cell_on_strided_operands(layout):
    """A step of a [T, B, 4H] tensor (rows contiguous, strided: engines serve it) and
    transposed gates (engines decline; core's composite runs): both match CPU."""
    torch.manual_seed(2)
    b, h = 5, 7
    seq = torch.randn(3, b, 4 * h)
    ig = seq[1] if layout == "row_strided" else torch.randn(4 * h, b).t()
    hg, cx = torch.randn(b, 4 * h), torch.randn(b, h)
    ib, hb = torch.randn(4 * h), torch.randn(4 * h)
    if layout == "row_strided":
        ig_d = seq.to("openreg")[1]
    else:
        ig_d = ig.t().contiguous().to("openreg").t()
    got = torch.ops.aten._thnn_fused_lstm_cell(ig_d, hg.to("openreg"), cx.to("openreg"), ib.to("openreg"),
                                               hb.to("openreg"))
    for k, (a, r) in enumerate(zip(got, _lstm_formula(ig, hg, cx, ib, hb))):
        _close(a, r, f"output {k}")


def test_lstm_backward_with_one_gradient_absent():
    """grad_hy or grad_cy undefined (an optional tensor): the other alone drives it."""
    torch.manual_seed(3)
    b, h = 4, 9
    cx, cy = torch.randn(b, h), torch.randn(b, h)
    ws = torch.cat([torch.rand(b, h), torch.rand(b, h), torch.rand(b, h) * 2 - 1, torch.rand(b, h)], 1)
    g = torch.randn(b, h)
    i, f, gg, o = ws.double().chunk(4, 1)
    tc = cy.double().tanh()
    for which in ("grad_hy", "grad_cy"):
        if which == "grad_hy":
            d_cy = g.double() * o * (1 - tc * tc)
            d_o = g.double() * tc * o * (1 - o)
            args = (g.to("openreg"), None)
        else:
            d_cy = g.double()
            d_o = torch.zeros_like(d_cy)
            args = (None, g.to("openreg"))
        want = torch.cat([d_cy * gg * i * (1 - i), d_cy * cx.double() * f * (1 - f), d_cy * i * (1 - gg * gg), d_o], 1)
        got = torch.ops.aten._thnn_fused_lstm_cell_backward_impl(*args, cx.to("openreg"), cy.to("openreg"),
                                                                 ws.to("openreg"), True)
        _close(got[0], want.float(), f"{which}: grad_gates")
        _close(got[1], (d_cy * f).float(), f"{which}: grad_cx")
        _close(got[2], want.sum(0).float(), f"{which}: grad_bias")


def test_gru_cell_rejects_mismatched_gates():
    gates = torch.randn(2, 9, device="openreg")
    with pytest.raises(RuntimeError, match="_thnn_fused_gru_cell expects"):
        torch.ops.aten._thnn_fused_gru_cell(gates, torch.randn(2, 6, device="openreg"), torch.randn(2, 3, device="openreg"))


def test_reference_only_chain_runs_decomposable_ops_whole(run_python):
    # On a chain of the reference engine alone, a fused cell or a _foreach_ op is one
    # aten_ref call (ATen's CPU kernel) rather than its decomposition's small ops,
    # each of which would go to aten_ref too. Results still match CPU. (float64: a
    # float32 LSTM layer in training is two whole-layer calls, no cells.)
    code = """
import json, torch, openreg
torch.manual_seed(0)
ref = torch.nn.LSTM(6, 8, dtype=torch.float64)
dev = torch.nn.LSTM(6, 8, dtype=torch.float64)
dev.load_state_dict(ref.state_dict())
dev.to("openreg")
x = torch.randn(4, 2, 6, dtype=torch.float64)
ref(x)[0].sum().backward()
dev(x.to("openreg"))[0].sum().backward()
torch._foreach_add_([p.grad for p in ref.parameters()], 1.0)
torch._foreach_add_([p.grad for p in dev.parameters()], 1.0)
err = max((a.grad - b.grad.cpu()).abs().max().item() for a, b in zip(ref.parameters(), dev.parameters()))
print(json.dumps({"err": err, "stats": openreg.stats()}))
"""
    proc = run_python(code, env_extra={"OPENREG_ENGINE": "aten_ref"})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    stats = out["stats"]
    assert out["err"] < 1e-5, out
    assert stats["aten::_thnn_fused_lstm_cell"] == {"aten_ref": 4}, stats
    assert stats["aten::_thnn_fused_lstm_cell_backward_impl"] == {"aten_ref": 4}, stats
    assert stats["aten::_foreach_add_.Scalar"] == {"aten_ref": 1}, stats
    assert "aten::sigmoid" not in stats, stats  # the cell's decomposition did not run
