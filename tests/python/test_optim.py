"""Optimizer steps on openreg must track CPU (max abs diff <= 1e-5, float32)."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

TOL = 1e-5
STEPS = 5

OPTIMIZERS = {
    "sgd_momentum": lambda params, foreach: torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=foreach),
    "adam": lambda params, foreach: torch.optim.Adam(params, lr=1e-2, foreach=foreach),
}


def _model():
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def _max_abs_diff(dev, ref):
    assert dev.device.type == "openreg"
    return (dev.detach().cpu().double() - ref.detach().double()).abs().max().item()


@pytest.mark.parametrize("foreach", [None, False], ids=["foreach_default", "foreach_off"])
@pytest.mark.parametrize("name", list(OPTIMIZERS), ids=str)
def test_optimizer_steps_match_cpu(device, name, foreach):
    torch.manual_seed(0)
    cpu_model = _model()
    dev_model = copy.deepcopy(cpu_model).to(device)
    # The CPU reference always uses the plain per-parameter implementation.
    cpu_opt = OPTIMIZERS[name](cpu_model.parameters(), False)
    dev_opt = OPTIMIZERS[name](dev_model.parameters(), foreach)

    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 4, generator=g)
    y = torch.randn(16, 2, generator=g)
    x_dev, y_dev = x.to(device), y.to(device)

    initial = [p.detach().clone() for p in cpu_model.parameters()]
    for step in range(STEPS):
        cpu_opt.zero_grad()
        dev_opt.zero_grad()
        loss_cpu = F.mse_loss(cpu_model(x), y)
        loss_dev = F.mse_loss(dev_model(x_dev), y_dev)
        assert abs(loss_dev.item() - loss_cpu.item()) <= TOL, f"step {step}: loss differs"
        loss_cpu.backward()
        loss_dev.backward()
        cpu_opt.step()
        dev_opt.step()
        for i, (p, q) in enumerate(zip(cpu_model.parameters(), dev_model.parameters())):
            diff = _max_abs_diff(q, p)
            assert diff <= TOL, f"step {step}, parameter {i}: max abs diff {diff}"

    # The reference really moved (so the comparison above is meaningful).
    moved = max((p.detach() - p0).abs().max().item() for p, p0 in zip(cpu_model.parameters(), initial))
    assert moved > 1e-3

    # Optimizer state lives on the device and matches the CPU state.
    for p_cpu, p_dev in zip(cpu_model.parameters(), dev_model.parameters()):
        s_cpu, s_dev = cpu_opt.state[p_cpu], dev_opt.state[p_dev]
        assert s_cpu.keys() == s_dev.keys()
        for key, v_cpu in s_cpu.items():
            v_dev = s_dev[key]
            if isinstance(v_cpu, torch.Tensor) and v_cpu.dim() > 0:
                assert v_dev.device.type == "openreg", key
                diff = _max_abs_diff(v_dev, v_cpu)
                assert diff <= TOL, f"optimizer state {key}: max abs diff {diff}"
            elif isinstance(v_cpu, torch.Tensor):  # Adam's scalar `step`
                assert float(v_dev) == float(v_cpu), key
