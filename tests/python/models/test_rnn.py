"""torch.nn LSTM and GRU: two layers, bidirectional, over packed variable-length
sequences (pack_padded_sequence, unsorted lengths), followed by a linear head on
the final hidden states. Training step and bf16 autocast against CPU."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from compare import Case, check_bf16_autocast, check_train_step

FEATURES, HIDDEN, CLASSES = 6, 8, 3
LENGTHS = [5, 7, 2, 4]  # unsorted: packing sorts and the output is unsorted back


class PackedRNN(nn.Module):
    def __init__(self, rnn_class):
        super().__init__()
        self.rnn = rnn_class(FEATURES, HIDDEN, num_layers=2, bidirectional=True)
        self.head = nn.Linear(2 * HIDDEN, CLASSES)

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths, enforce_sorted=False)
        out, state = self.rnn(packed)
        h_n = state[0] if isinstance(state, tuple) else state
        padded, out_lengths = pad_packed_sequence(out, total_length=x.shape[0])
        assert out_lengths.tolist() == list(lengths)
        # The last layer's final forward and backward states.
        return self.head(torch.cat([h_n[-2], h_n[-1]], dim=1)), padded, state


def inputs(gen):
    x = torch.randn(max(LENGTHS), len(LENGTHS), FEATURES, generator=gen)
    return {"x": x, "lengths": LENGTHS, "target": torch.randint(0, CLASSES, (len(LENGTHS),), generator=gen)}


def loss(model, x):
    logits, padded, state = model(x["x"], x["lengths"])
    extra = sum(s.float().square().mean() for s in (state if isinstance(state, tuple) else (state,)))
    return F.cross_entropy(logits.float(), x["target"]) + padded.float().square().mean() + extra, padded


CASES = [Case("lstm", lambda: PackedRNN(nn.LSTM), inputs, loss),
         Case("gru", lambda: PackedRNN(nn.GRU), inputs, loss)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_train_step_matches_cpu(device, case):
    check_train_step(case)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bf16_autocast_matches_cpu(device, case):
    check_bf16_autocast(case)
