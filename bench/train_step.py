"""One training step of examples/train.py (batch 64, Adam) on a device: the unit
both bench/engines.py and bench/step_ops.py time."""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
from train import make_model  # noqa: E402


def make_train_step(device, batch=64, seed=0):
    """A closure running one step (zero_grad, forward, loss, backward, Adam) and
    returning the loss tensor; the model, data and optimizer live on ``device``."""
    torch.manual_seed(seed)
    model = make_model().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(seed + 4)
    x = torch.rand(batch, 1, 8, 8, generator=g).to(device)
    y = torch.randint(0, 10, (batch,), generator=g).to(device)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step
