"""torch.nn.TransformerEncoder (two post-norm layers, GELU, a final LayerNorm) with a
key padding mask: training step and bf16 autocast against CPU, and the eval-mode
fast path (fused encoder layer over nested tensors) against CPU's."""

import copy

import pytest
import torch
import torch.nn as nn

from compare import Case, build_model, check_bf16_autocast, check_tensor_fp32, check_train_step, make_inputs

D_MODEL, HEADS = 32, 4
LENGTHS = [9, 6, 3]


def build():
    layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, dim_feedforward=64, dropout=0.0, activation="gelu",
                                       batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=2, norm=nn.LayerNorm(D_MODEL), enable_nested_tensor=True)


def inputs(gen):
    x = torch.randn(len(LENGTHS), max(LENGTHS), D_MODEL, generator=gen)
    pad = torch.arange(max(LENGTHS)).expand(len(LENGTHS), -1) >= torch.tensor(LENGTHS)[:, None]
    return {"x": x, "pad": pad}


def loss(model, x):
    out = model(x["x"], src_key_padding_mask=x["pad"])
    keep = (~x["pad"]).unsqueeze(-1)
    return (out.float().sin() * keep).sum() / keep.sum(), out


CASE = Case("transformer_encoder", build, inputs, loss)
CASES = [CASE]


def test_train_step_matches_cpu(device):
    check_train_step(CASE)


def test_bf16_autocast_matches_cpu(device):
    check_bf16_autocast(CASE)


def test_eval_fast_path_matches_cpu(device):
    # In eval mode without grad the encoder takes the fused path
    # (aten::_transformer_encoder_layer_fwd), on nested tensors when there is padding;
    # padded positions come back as zeros.
    model, x = build_model(CASE).eval(), make_inputs(CASE)
    dev_model = copy.deepcopy(model).to(device)
    with torch.inference_mode():
        ref = model(x["x"], src_key_padding_mask=x["pad"])
        ref64 = copy.deepcopy(model).double()(x["x"].double(), src_key_padding_mask=x["pad"])
        out = dev_model(x["x"].to(device), src_key_padding_mask=x["pad"].to(device)).cpu()
    check_tensor_fp32("eval output", out, ref, ref64)
