"""torch.nn.EmbeddingBag with offsets (an empty bag included) in sum mode with
per-sample weights, mean mode with a padding index, max mode, and sum mode with
the offsets' end included (include_last_offset), each followed by a linear head:
training step and bf16 autocast against CPU."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from compare import Case, check_bf16_autocast, check_train_step

NUM, DIM, CLASSES = 40, 16, 4
OFFSETS = [0, 3, 3, 8, 9]  # bag 1 is empty
TOKENS = 14


class BagClassifier(nn.Module):
    def __init__(self, mode, padding_idx=None, include_last_offset=False):
        super().__init__()
        self.bag = nn.EmbeddingBag(NUM, DIM, mode=mode, padding_idx=padding_idx,
                                   include_last_offset=include_last_offset)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, ids, offsets, weights=None):
        if self.bag.include_last_offset:
            offsets = torch.cat([offsets, offsets.new_tensor([ids.numel()])])
        return self.head(self.bag(ids, offsets, per_sample_weights=weights))


def inputs(gen):
    ids = torch.randint(0, NUM, (TOKENS,), generator=gen)
    ids[[4, 10]] = 0  # padding_idx 0 in the mean case: these entries are skipped
    return {"ids": ids, "offsets": torch.tensor(OFFSETS), "weights": torch.rand(TOKENS, generator=gen),
            "target": torch.randint(0, CLASSES, (len(OFFSETS),), generator=gen)}


def weighted_loss(model, x):
    out = model(x["ids"], x["offsets"], x["weights"])
    return F.cross_entropy(out.float(), x["target"]), out


def plain_loss(model, x):
    out = model(x["ids"], x["offsets"])
    return F.cross_entropy(out.float(), x["target"]), out


CASES = [Case("embedding_bag_sum", lambda: BagClassifier("sum"), inputs, weighted_loss),
         Case("embedding_bag_mean", lambda: BagClassifier("mean", padding_idx=0), inputs, plain_loss),
         Case("embedding_bag_max", lambda: BagClassifier("max"), inputs, plain_loss),
         Case("embedding_bag_last_offset", lambda: BagClassifier("sum", include_last_offset=True), inputs,
              plain_loss)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_train_step_matches_cpu(device, case):
    check_train_step(case)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bf16_autocast_matches_cpu(device, case):
    check_bf16_autocast(case)
