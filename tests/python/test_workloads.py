"""openreg.workloads: the models bench/models.py times and `python -m openreg tune`
measures. Its digits CNN must stay examples/train.py's model, the main job's."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_the_digits_cnn_is_the_training_examples_model(openreg):
    import torch

    from openreg import workloads

    sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
    try:
        from train import make_model
    finally:
        sys.path.pop(0)
    example, ours = make_model(), workloads.digits_cnn_model()
    assert str(example) == str(ours)
    assert [p.shape for p in example.parameters()] == [p.shape for p in ours.parameters()]
    x = torch.rand(4, 1, 8, 8)
    assert ours(x).shape == example(x).shape == (4, 10)
