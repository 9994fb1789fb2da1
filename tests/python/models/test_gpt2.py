"""GPT-2 (transformers, tiny config, random weights): the LM head is tied to the
token embedding; training step, greedy generate and bf16 autocast against CPU."""

import pytest
import torch

from compare import Case, build_model, check_bf16_autocast, check_greedy_generate, check_train_step, import_transformers, tied_groups

transformers = import_transformers()

VOCAB = 96


def build():
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=1, eos_token_id=1, pad_token_id=0)
    return transformers.GPT2LMHeadModel(config)


def inputs(gen):
    return {"input_ids": torch.randint(2, VOCAB, (3, 12), generator=gen)}


def loss(model, x):
    out = model(input_ids=x["input_ids"], labels=x["input_ids"])
    return out.loss, out.logits


CASE = Case("gpt2", build, inputs, loss)
CASES = [CASE]


def test_train_step_matches_cpu(device):
    check_train_step(CASE)


def test_bf16_autocast_matches_cpu(device):
    check_bf16_autocast(CASE)


def test_lm_head_stays_tied_to_the_embedding(device):
    model = build_model(CASE).to(device)
    assert model.lm_head.weight is model.transformer.wte.weight
    assert tied_groups(model) == [["lm_head.weight", "transformer.wte.weight"]]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss(model, {"input_ids": inputs(torch.Generator().manual_seed(0))["input_ids"].to(device)})[0].backward()
    opt.step()
    assert model.lm_head.weight is model.transformer.wte.weight


def test_greedy_generate_matches_cpu(device):
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(2, VOCAB, (2, 7), generator=gen)
    mask = torch.ones_like(ids)
    ids[1, :3], mask[1, :3] = 0, 0  # the second prompt is left-padded
    check_greedy_generate(build_model(CASE), {"input_ids": ids, "attention_mask": mask},
                          max_new_tokens=8, pad_token_id=0)
