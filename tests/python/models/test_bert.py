"""BERT sequence classification (transformers, tiny config, random weights) with a
padding mask: training step and bf16 autocast against CPU."""

import pytest
import torch

from compare import Case, check_bf16_autocast, check_train_step, import_transformers

transformers = import_transformers()

VOCAB = 96
LABELS = 3


def build():
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=32, type_vocab_size=2, num_labels=LABELS, pad_token_id=0,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return transformers.BertForSequenceClassification(config)


def inputs(gen):
    lengths = [12, 9, 5, 1]
    ids = torch.randint(1, VOCAB, (len(lengths), 12), generator=gen)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    ids[mask == 0] = 0  # right padding
    token_types = (torch.arange(12) >= 4).long().expand_as(ids) * mask
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": token_types,
            "labels": torch.randint(0, LABELS, (len(lengths),), generator=gen)}


def loss(model, x):
    out = model(**x)
    return out.loss, out.logits


CASE = Case("bert", build, inputs, loss)
CASES = [CASE]


def test_train_step_matches_cpu(device):
    check_train_step(CASE)


def test_bf16_autocast_matches_cpu(device):
    check_bf16_autocast(CASE)


def test_padding_is_masked(device):
    # The padded positions' token ids must not change the device's logits.
    x = inputs(torch.Generator().manual_seed(1))
    other = dict(x, input_ids=torch.where(x["attention_mask"] == 1, x["input_ids"], 7))
    model = build().eval().to(device)
    with torch.no_grad():
        a = model(**{k: v.to(device) for k, v in x.items()}).logits.cpu()
        b = model(**{k: v.to(device) for k, v in other.items()}).logits.cpu()
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
