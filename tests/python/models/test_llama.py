"""A LLaMA-style decoder (transformers LlamaForCausalLM, tiny config, random weights):
RMSNorm, rotary position embeddings, grouped-query attention through SDPA, SiLU
gated MLP. Training step with a padding mask, greedy generate and bf16 autocast
against CPU."""

import pytest
import torch

from compare import Case, build_model, check_bf16_autocast, check_greedy_generate, check_train_step, import_transformers

transformers = import_transformers()

VOCAB = 96


def build():
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, hidden_act="silu", rms_norm_eps=1e-6,
        attention_dropout=0.0, bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
    config._attn_implementation = "sdpa"
    return transformers.LlamaForCausalLM(config)


def inputs(gen):
    ids = torch.randint(3, VOCAB, (3, 10), generator=gen)
    mask = torch.ones_like(ids)
    mask[2, 6:] = 0  # the last sequence is right-padded
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.where(mask == 1, ids, -100)}


def loss(model, x):
    out = model(**x)
    return out.loss, out.logits


CASE = Case("llama", build, inputs, loss)
CASES = [CASE]


def test_uses_sdpa():
    assert build_model(CASE).config._attn_implementation == "sdpa"


def test_train_step_matches_cpu(device):
    check_train_step(CASE)


def test_bf16_autocast_matches_cpu(device):
    check_bf16_autocast(CASE)


def test_greedy_generate_matches_cpu(device):
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(3, VOCAB, (2, 6), generator=gen)
    mask = torch.ones_like(ids)
    ids[0, :2], mask[0, :2] = 0, 0  # left padding
    check_greedy_generate(build_model(CASE), {"input_ids": ids, "attention_mask": mask},
                          max_new_tokens=8, pad_token_id=0)
