"""LSTM and GRU on the device match CPU.

On accelerators ATen runs each time step through the fused cells
(aten::_thnn_fused_lstm_cell / _thnn_fused_gru_cell and their backwards), which
have no CPU kernel: core composes them of device ops (core/src/aten/rnn_cells.cpp).
"""

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
