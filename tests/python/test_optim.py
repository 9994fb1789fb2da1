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


# ---------------------------------------------------------------------------
# torch.optim's foreach and fused paths: the same results as the same optimizer on
# CPU, and a step that reaches the engine as a number of calls that does not grow
# with the number of parameters.

PATHS = {
    "foreach_default": dict(foreach=None),
    "foreach": dict(foreach=True),
    "fused": dict(fused=True),
}

GROUP_OPTIMIZERS = {
    "adamw": lambda params, **kw: torch.optim.AdamW(params, lr=1e-2, weight_decay=0.05, **kw),
    "adam": lambda params, **kw: torch.optim.Adam(params, lr=1e-2, **kw),
    "adam_amsgrad_wd": lambda params, **kw: torch.optim.Adam(params, lr=1e-2, amsgrad=True, weight_decay=0.01, **kw),
    "sgd_momentum": lambda params, **kw: torch.optim.SGD(params, lr=0.1, momentum=0.9, **kw),
    "sgd_nesterov_wd": lambda params, **kw: torch.optim.SGD(
        params, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01, **kw),
}


def _layers(n):
    """n Linear layers of different widths: 2n parameters of different sizes."""
    widths = [3 + 2 * i for i in range(n + 1)]
    return nn.Sequential(*[nn.Linear(widths[i], widths[i + 1]) for i in range(n)])


def _set_grads(params, step):
    """Gradients from a seeded generator, the same on every device: the comparison
    is of the optimizers alone, not of a backward's rounding."""
    g = torch.Generator().manual_seed(100 + step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g).to(p.device)


@pytest.mark.parametrize("path", list(PATHS), ids=str)
@pytest.mark.parametrize("name", list(GROUP_OPTIMIZERS), ids=str)
def test_foreach_and_fused_match_cpu(device, name, path):
    torch.manual_seed(0)
    cpu_model = _layers(3)
    dev_model = copy.deepcopy(cpu_model).to(device)
    cpu_opt = GROUP_OPTIMIZERS[name](list(cpu_model.parameters()), **PATHS[path])
    dev_opt = GROUP_OPTIMIZERS[name](list(dev_model.parameters()), **PATHS[path])
    initial = [p.detach().clone() for p in cpu_model.parameters()]
    for step in range(4):
        _set_grads(cpu_model.parameters(), step)
        _set_grads(dev_model.parameters(), step)
        cpu_opt.step()
        dev_opt.step()
        for i, (p, q) in enumerate(zip(cpu_model.parameters(), dev_model.parameters())):
            assert q.device.type == "openreg"
            torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-6, atol=1e-7,
                                       msg=lambda m: f"step {step}, parameter {i}: {m}")
    moved = max((p.detach() - p0).abs().max().item() for p, p0 in zip(cpu_model.parameters(), initial))
    assert moved > 1e-2


def test_fused_adamw_grad_scale_and_found_inf_match_cpu(device):
    """AMP's arguments: grads unscaled in place; found_inf=1 leaves everything untouched."""
    torch.manual_seed(0)
    shapes = [(5, 7), (11,), ()]
    g = torch.Generator().manual_seed(3)
    cpu = [[torch.randn(s, generator=g) for s in shapes] for _ in range(3)]
    cpu.append([torch.rand(s, generator=g) for s in shapes])
    steps = [torch.tensor(2.0) for _ in shapes]
    for found in (0.0, 1.0):
        c = [[t.clone() for t in lst] for lst in cpu]
        d = [[t.to(device) for t in lst] for lst in cpu]
        kw = dict(lr=0.01, beta1=0.9, beta2=0.99, weight_decay=0.1, eps=1e-8, amsgrad=False, maximize=True)
        torch._fused_adamw_(*c, [], steps, grad_scale=torch.tensor(4.0), found_inf=torch.tensor(found), **kw)
        torch._fused_adamw_(*d, [], [s.to(device) for s in steps], grad_scale=torch.tensor(4.0, device=device),
                            found_inf=torch.tensor(found, device=device), **kw)
        for lc, ld, l0 in zip(c, d, cpu):
            for tc, td, t0 in zip(lc, ld, l0):
                torch.testing.assert_close(td.cpu(), tc, rtol=1e-6, atol=1e-7)
                if found == 1.0:
                    assert torch.equal(td.cpu(), t0)


def _engine_calls(openreg):
    """Calls that reached an engine (the host's reference path included), by op."""
    return {op: sum(by.values()) for op, by in openreg.stats().items()}


@pytest.mark.parametrize("path", list(PATHS), ids=str)
@pytest.mark.parametrize("name", ["adamw", "adam_amsgrad_wd", "sgd_nesterov_wd"], ids=str)
def test_step_calls_do_not_grow_with_parameters(device, openreg, name, path):
    """A step is a bounded number of engine calls: the same for 4 and 16 parameters,
    on engines that serve the foreach and fused ops (others decompose them)."""
    first = openreg.info()["engines"][0]
    if first["any_op"] or "aten::_foreach_add_.List" not in first["ops"]:
        # aten_ref, or an engine without optimizer kernels (the third-party example):
        # the foreach ops run their per-tensor loop, by design.
        pytest.skip(f"engine {first['name']} serves no _foreach_ ops: the step runs their per-tensor loop")
    counts = []
    for layers in (2, 8):
        model = _layers(layers).to(device)
        opt = GROUP_OPTIMIZERS[name](list(model.parameters()), **PATHS[path])
        for step in range(3):
            _set_grads(model.parameters(), step)
            openreg.reset_stats()
            opt.step()
        calls = _engine_calls(openreg)  # the third step: state exists
        # Whole lists only: no per-tensor op, nothing on the host's reference path.
        assert all(op.startswith(("aten::_foreach_", "aten::_fused_")) for op in calls), calls
        assert not any("host_ref" in by or "aten_ref" in by for by in openreg.stats().values()), openreg.stats()
        counts.append(sum(calls.values()))
    assert counts[0] == counts[1], counts
    assert counts[0] <= 12, counts
