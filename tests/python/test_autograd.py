"""Forward + backward on openreg must match CPU (max abs diff <= 1e-5, float32)."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

TOL = 1e-5


def max_abs_diff(dev, ref):
    assert dev is not None and ref is not None
    assert dev.device.type == "openreg", f"tensor is on {dev.device}"
    assert dev.shape == ref.shape and dev.dtype == ref.dtype
    return (dev.detach().cpu().double() - ref.detach().double()).abs().max().item() if ref.numel() else 0.0


def assert_tol(dev, ref, what):
    diff = max_abs_diff(dev, ref)
    assert diff <= TOL, f"{what}: max abs diff {diff} > {TOL}"


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, kernel_size=3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(4 * 4 * 4, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.bn(self.conv(x))))
        return self.fc(x.flatten(1))


def _pair(model_cls, seed=0):
    torch.manual_seed(seed)
    cpu_model = model_cls()
    dev_model = copy.deepcopy(cpu_model).to("openreg")
    for p in dev_model.parameters():
        assert p.device.type == "openreg"
    return cpu_model, dev_model


def _compare_params_and_grads(cpu_model, dev_model):
    cpu_params = dict(cpu_model.named_parameters())
    dev_params = dict(dev_model.named_parameters())
    assert cpu_params.keys() == dev_params.keys()
    for name, p in cpu_params.items():
        q = dev_params[name]
        assert p.grad is not None, name
        assert q.grad is not None, f"{name}: no gradient on openreg"
        assert q.grad.device == q.device, f"{name}: gradient on {q.grad.device}, parameter on {q.device}"
        assert_tol(q, p, f"parameter {name}")
        assert_tol(q.grad, p.grad, f"gradient of {name}")
    cpu_bufs = dict(cpu_model.named_buffers())
    dev_bufs = dict(dev_model.named_buffers())
    assert cpu_bufs.keys() == dev_bufs.keys()
    for name, b in cpu_bufs.items():
        if b.dtype.is_floating_point:
            assert_tol(dev_bufs[name], b, f"buffer {name}")
        else:
            assert torch.equal(dev_bufs[name].cpu(), b), f"buffer {name}"


def test_mlp_forward_backward(device):
    cpu_model, dev_model = _pair(MLP)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 8, generator=g)
    target = torch.randn(5, 4, generator=g)

    out_cpu = cpu_model(x)
    out_dev = dev_model(x.to(device))
    assert_tol(out_dev, out_cpu, "forward output")

    loss_cpu = F.mse_loss(out_cpu, target)
    loss_dev = F.mse_loss(out_dev, target.to(device))
    assert_tol(loss_dev, loss_cpu, "loss")
    loss_cpu.backward()
    loss_dev.backward()
    _compare_params_and_grads(cpu_model, dev_model)


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_cnn_forward_backward(device, train):
    cpu_model, dev_model = _pair(SmallCNN, seed=2)
    cpu_model.train(train)
    dev_model.train(train)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 3, 8, 8, generator=g)
    labels = torch.randint(0, 10, (4,), generator=g)

    out_cpu = cpu_model(x)
    out_dev = dev_model(x.to(device))
    assert_tol(out_dev, out_cpu, "forward output")

    loss_cpu = F.cross_entropy(out_cpu, labels)
    loss_dev = F.cross_entropy(out_dev, labels.to(device))
    assert_tol(loss_dev, loss_cpu, "cross_entropy loss")
    loss_cpu.backward()
    loss_dev.backward()
    _compare_params_and_grads(cpu_model, dev_model)  # includes BatchNorm running stats


def test_input_gradient(device):
    cpu_model, dev_model = _pair(SmallCNN, seed=4)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, 8, 8, generator=g)
    x_cpu = x.clone().requires_grad_()
    x_dev = x.to(device).requires_grad_()
    cpu_model(x_cpu).logsumexp(1).sum().backward()
    dev_model(x_dev).logsumexp(1).sum().backward()
    assert x_dev.grad is not None and x_dev.grad.device.type == "openreg"
    assert_tol(x_dev.grad, x_cpu.grad, "input gradient")


def _f(x):
    return (x**3 + torch.sin(x) * x).sum()


def test_autograd_grad(device):
    g = torch.Generator().manual_seed(6)
    x = torch.randn(7, generator=g)
    x_cpu = x.clone().requires_grad_()
    x_dev = x.to(device).requires_grad_()
    (g_cpu,) = torch.autograd.grad(_f(x_cpu), x_cpu)
    (g_dev,) = torch.autograd.grad(_f(x_dev), x_dev)
    assert_tol(g_dev, g_cpu, "autograd.grad")
    assert x_dev.grad is None  # autograd.grad does not accumulate


def test_autograd_grad_second_order(device):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(5, generator=g)
    x_cpu = x.clone().requires_grad_()
    x_dev = x.to(device).requires_grad_()
    (g_cpu,) = torch.autograd.grad(_f(x_cpu), x_cpu, create_graph=True)
    (g_dev,) = torch.autograd.grad(_f(x_dev), x_dev, create_graph=True)
    (h_cpu,) = torch.autograd.grad(g_cpu.sum(), x_cpu)
    (h_dev,) = torch.autograd.grad(g_dev.sum(), x_dev)
    assert_tol(h_dev, h_cpu, "second derivative")


def test_backward_non_scalar_with_gradient(device):
    g = torch.Generator().manual_seed(8)
    x = torch.randn(3, 4, generator=g)
    v = torch.randn(3, 4, generator=g)
    x_cpu = x.clone().requires_grad_()
    x_dev = x.to(device).requires_grad_()
    y_cpu = x_cpu * 2 + x_cpu**2
    y_dev = x_dev * 2 + x_dev**2
    y_cpu.backward(gradient=v)
    y_dev.backward(gradient=v.to(device))
    assert_tol(x_dev.grad, x_cpu.grad, "x.grad")
    # gradients accumulate on a second backward, like on CPU
    (x_cpu * 3).sum().backward()
    (x_dev * 3).sum().backward()
    assert_tol(x_dev.grad, x_cpu.grad, "accumulated x.grad")


def test_backward_non_scalar_without_gradient_fails_like_cpu(device):
    x_cpu = torch.ones(3, requires_grad=True)
    x_dev = torch.ones(3, device=device, requires_grad=True)
    with pytest.raises(RuntimeError) as cpu_err:
        (x_cpu * 2).backward()
    with pytest.raises(RuntimeError) as dev_err:
        (x_dev * 2).backward()
    assert str(dev_err.value) == str(cpu_err.value)
