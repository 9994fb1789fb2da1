"""ViT image classification (transformers, tiny config, random weights): patch
embedding by a strided convolution, class token, SDPA encoder, GELU. Training step
and bf16 autocast against CPU."""

import pytest
import torch

from compare import Case, check_bf16_autocast, check_train_step, import_transformers

transformers = import_transformers()

LABELS = 5


def build():
    config = transformers.ViTConfig(
        image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, num_labels=LABELS, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return transformers.ViTForImageClassification(config)


def inputs(gen):
    return {"pixel_values": torch.randn(3, 3, 16, 16, generator=gen),
            "labels": torch.randint(0, LABELS, (3,), generator=gen)}


def loss(model, x):
    out = model(**x)
    return out.loss, out.logits


CASE = Case("vit", build, inputs, loss)
CASES = [CASE]


def test_train_step_matches_cpu(device):
    check_train_step(CASE)


def test_bf16_autocast_matches_cpu(device):
    check_bf16_autocast(CASE)
