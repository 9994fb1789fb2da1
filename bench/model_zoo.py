"""The models bench/models.py and bench/step_ops.py time: openreg.workloads's real
models plus examples/train.py's digits CNN (the main job's model)."""

import os
import sys

import torch.nn as nn

from openreg import workloads
from openreg.workloads import Workload  # noqa: F401  (re-exported for the benches)

HERE = os.path.dirname(os.path.abspath(__file__))


def digits_cnn(device):
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
    from train import make_model

    import torch
    g = torch.Generator().manual_seed(8)
    x = {"x": torch.rand(64, 1, 8, 8, generator=g), "y": torch.randint(0, 10, (64,), generator=g)}
    return workloads.workload(make_model(), x, lambda m, x: nn.functional.cross_entropy(m(x["x"]), x["y"]), device,
                              lr=1e-2)


# name -> builder(device) -> Workload. The order is the table's.
MODELS = {"digits CNN": digits_cnn, **workloads.MODELS}
DESCRIPTIONS = {"digits CNN": "examples/train.py's model, batch 64 of 8x8", **workloads.DESCRIPTIONS}


def build(name, device):
    """The named model's workload on ``device``, from seed 0 (same weights on every device)."""
    import torch
    torch.manual_seed(0)
    return MODELS[name](device)
