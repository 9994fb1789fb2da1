"""ResNet image classification (transformers, tiny config, random weights):
convolutions, batch norm in training mode (running statistics compared too), ReLU,
max pooling, residual shortcuts with strided 1x1 convolutions, adaptive average
pooling. Training step, bf16 autocast, and an eval-mode forward against CPU."""

import copy

import pytest
import torch

from compare import Case, build_model, check_bf16_autocast, check_tensor_fp32, check_train_step, import_transformers, make_inputs

transformers = import_transformers()

LABELS = 5


def build():
    config = transformers.ResNetConfig(
        num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic",
        hidden_act="relu", num_labels=LABELS)
    return transformers.ResNetForImageClassification(config)


def inputs(gen):
    return {"pixel_values": torch.randn(4, 3, 32, 32, generator=gen),
            "labels": torch.randint(0, LABELS, (4,), generator=gen)}


def loss(model, x):
    out = model(**x)
    return out.loss, out.logits


CASE = Case("resnet", build, inputs, loss)
CASES = [CASE]


def test_train_step_matches_cpu(device):
    check_train_step(CASE)


def test_bf16_autocast_matches_cpu(device):
    check_bf16_autocast(CASE)


def test_eval_forward_uses_running_statistics(device):
    model, x = build_model(CASE), make_inputs(CASE)
    with torch.no_grad():
        model(**x)  # one training-mode forward moves the running statistics away from 0 / 1
    model.eval()
    dev_model = copy.deepcopy(model).to(device)
    with torch.no_grad():
        ref = model(pixel_values=x["pixel_values"]).logits
        ref64 = copy.deepcopy(model).double()(pixel_values=x["pixel_values"].double()).logits
        out = dev_model(pixel_values=x["pixel_values"].to(device)).logits.cpu()
    check_tensor_fp32("eval logits", out, ref, ref64)
