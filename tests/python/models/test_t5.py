"""An encoder-decoder: T5 (transformers, tiny config, random weights) with its
relative position buckets, RMS-style layer norm and the input embedding shared by
encoder, decoder and LM head. Training step with an encoder padding mask, greedy
generate and bf16 autocast against CPU; the shared embedding stays one Parameter."""

import pytest
import torch

from compare import Case, build_model, check_bf16_autocast, check_greedy_generate, check_train_step, import_transformers, tied_groups

transformers = import_transformers()

VOCAB = 96


def build():
    config = transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
        relative_attention_num_buckets=8, relative_attention_max_distance=16, dropout_rate=0.0,
        feed_forward_proj="gated-gelu", tie_word_embeddings=True,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    return transformers.T5ForConditionalGeneration(config)


def inputs(gen):
    ids = torch.randint(2, VOCAB, (3, 10), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = 0
    labels = torch.randint(2, VOCAB, (3, 6), generator=gen)
    labels[2, 4:] = -100
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def loss(model, x):
    out = model(**x)
    return out.loss, out.logits


CASE = Case("t5", build, inputs, loss)
CASES = [CASE]

SHARED = ["decoder.embed_tokens.weight", "encoder.embed_tokens.weight", "lm_head.weight", "shared.weight"]


def test_train_step_matches_cpu(device):
    check_train_step(CASE)


def test_bf16_autocast_matches_cpu(device):
    check_bf16_autocast(CASE)


def test_shared_embedding_stays_one_parameter(device):
    model = build_model(CASE)
    assert tied_groups(model) == [SHARED]
    model = model.to(device)
    assert tied_groups(model) == [SHARED]
    assert model.shared.weight.device.type == torch.device(device).type


def test_greedy_generate_matches_cpu(device):
    x = inputs(torch.Generator().manual_seed(5))
    check_greedy_generate(build_model(CASE), {"input_ids": x["input_ids"], "attention_mask": x["attention_mask"]},
                          max_new_tokens=8)
