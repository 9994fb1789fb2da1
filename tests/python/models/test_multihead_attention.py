"""torch.nn.MultiheadAttention: cross-attention with different key and value sizes,
a key padding mask, a float attention mask and the averaged attention weights;
training step and bf16 autocast against CPU, and the eval-mode fused self-attention
(aten::_native_multi_head_attention) against CPU."""

import copy

import pytest
import torch
import torch.nn as nn

from compare import Case, build_model, check_bf16_autocast, check_tensor_fp32, check_train_step, make_inputs

EMBED, HEADS, KDIM, VDIM = 32, 4, 24, 20
QUERIES, KEYS = 5, 7
KEY_LENGTHS = [7, 4, 6]


def build():
    return nn.MultiheadAttention(EMBED, HEADS, batch_first=True, kdim=KDIM, vdim=VDIM, bias=True)


def inputs(gen):
    batch = len(KEY_LENGTHS)
    pad = torch.arange(KEYS).expand(batch, -1) >= torch.tensor(KEY_LENGTHS)[:, None]
    # Both masks additive floats (mixing a bool and a float mask is deprecated).
    return {"q": torch.randn(batch, QUERIES, EMBED, generator=gen),
            "k": torch.randn(batch, KEYS, KDIM, generator=gen),
            "v": torch.randn(batch, KEYS, VDIM, generator=gen),
            "pad": torch.zeros(batch, KEYS).masked_fill(pad, float("-inf")),
            "bias": torch.randn(QUERIES, KEYS, generator=gen)}


def loss(model, x):
    out, weights = model(x["q"], x["k"], x["v"], key_padding_mask=x["pad"], attn_mask=x["bias"],
                         need_weights=True, average_attn_weights=True)
    return out.float().square().mean() + (weights.float() * x["bias"]).mean(), out


CASE = Case("multihead_attention", build, inputs, loss)
CASES = [CASE]


def test_train_step_matches_cpu(device):
    check_train_step(CASE)


def test_bf16_autocast_matches_cpu(device):
    check_bf16_autocast(CASE)


def test_eval_fused_self_attention_matches_cpu(device):
    torch.manual_seed(0)
    model = nn.MultiheadAttention(EMBED, HEADS, batch_first=True).eval()
    x = make_inputs(CASE)
    q, pad = x["q"], torch.arange(QUERIES).expand(len(KEY_LENGTHS), -1) >= torch.tensor([5, 3, 4])[:, None]
    dev_model = copy.deepcopy(model).to(device)
    with torch.inference_mode():
        ref = model(q, q, q, key_padding_mask=pad, need_weights=False)[0]
        ref64 = copy.deepcopy(model).double()(q.double(), q.double(), q.double(), key_padding_mask=pad,
                                              need_weights=False)[0]
        qd = q.to(device)
        out = dev_model(qd, qd, qd, key_padding_mask=pad.to(device), need_weights=False)[0].cpu()
    check_tensor_fp32("eval output", out, ref, ref64)
