"""Device work that is still queued when a test looks right after enqueuing it: the
shared workload of the stream, event, record_stream and sync-point tests."""

import os

import torch

# A 768x768 matmul takes milliseconds; looking at the queue takes microseconds.
SIZE, STEPS = 768, 6


def launch_blocking():
    """OPENREG_LAUNCH_BLOCKING=1 runs each op at its call: nothing is ever queued."""
    return os.environ.get("OPENREG_LAUNCH_BLOCKING", "") not in ("", "0")


def slow(x, steps=STEPS):
    """``steps`` dependent matmuls: x <- tanh(x @ w). w's norm is below 1, so the
    iteration contracts and rounding differences between engines do not grow."""
    g = torch.Generator().manual_seed(99)
    w = (torch.randn(SIZE, SIZE, generator=g) * (0.4 / SIZE**0.5)).to(x.device)
    for _ in range(steps):
        x = torch.tanh(x @ w)
    return x


def make_input(seed=0):
    """A SIZE x SIZE CPU input, the same for every seed on every run."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(SIZE, SIZE, generator=g)
