"""Moving modules and tensors to the device keeps object identity, as CPU<->CUDA does.

nn.Module._apply swaps a parameter's data in place (``param.data = moved``) when
``torch._has_compatible_shallow_copy_type`` says the two tensors are compatible;
otherwise it makes new Parameters, which unties shared (tied) parameters.
"""

import torch
import torch.nn as nn


def tied_model():
    emb = nn.Embedding(11, 6)
    head = nn.Linear(6, 11, bias=False)
    head.weight = emb.weight
    return nn.Sequential(emb, head)


def test_shallow_copy_compatibility_matches_cpu_and_cuda_rules():
    cpu = torch.ones(3)
    dev = torch.ones(3, device="openreg")
    assert torch._has_compatible_shallow_copy_type(cpu, dev)
    assert torch._has_compatible_shallow_copy_type(dev, cpu)
    assert torch._has_compatible_shallow_copy_type(dev, torch.zeros(2, device="openreg"))
    assert not torch._has_compatible_shallow_copy_type(dev, torch.ones(3).to_sparse())


def test_to_device_keeps_tied_parameters_one_parameter():
    model = tied_model()
    before = list(model.parameters())
    model.to("openreg")
    after = list(model.parameters())
    assert len(after) == len(before) == 1
    assert model[0].weight is model[1].weight
    assert after[0] is before[0], "the Parameter object must survive .to(device)"
    assert after[0].device.type == "openreg"
    # And back: still one Parameter.
    model.cpu()
    assert model[0].weight is model[1].weight and model[0].weight.device.type == "cpu"


def test_tied_gradient_accumulates_both_uses_as_on_cpu():
    torch.manual_seed(0)
    ref = tied_model()
    dev = tied_model()
    dev.load_state_dict(ref.state_dict())
    dev.to("openreg")
    tokens = torch.randint(0, 11, (4, 5))
    ref(tokens).logsumexp(-1).sum().backward()
    dev(tokens.to("openreg")).logsumexp(-1).sum().backward()
    g_ref, g_dev = ref[0].weight.grad, dev[0].weight.grad.cpu()
    assert torch.allclose(g_dev, g_ref, rtol=1e-5, atol=1e-6), (g_dev - g_ref).abs().max()


def test_data_assignment_moves_a_cpu_tensor_to_the_device():
    t = torch.arange(4.0)
    moved = torch.full((2, 3), 7.0, device="openreg")
    t.data = moved
    assert t.device.type == "openreg" and t.shape == (2, 3)
    assert t.cpu().eq(7).all()
    back = torch.zeros(5)
    moved.data = back
    assert moved.device.type == "cpu" and moved.shape == (5,)


def test_to_device_moves_gradients_with_their_parameters():
    model = nn.Linear(3, 2)
    model(torch.randn(4, 3)).sum().backward()
    grad = model.weight.grad.clone()
    param = model.weight
    model.to("openreg")
    assert model.weight is param
    assert model.weight.grad.device.type == "openreg"
    assert torch.equal(model.weight.grad.cpu(), grad)
