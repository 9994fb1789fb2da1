"""Device runtime: availability, device count/index management, registration."""

import os
import re

import pytest
import torch


def _expected_device_count():
    # The spec: 2 devices by default, OPENREG_DEVICE_COUNT overrides.
    return int(os.environ.get("OPENREG_DEVICE_COUNT", "2"))


@pytest.fixture
def restore_device(openreg):
    before = torch.openreg.current_device()
    yield before
    torch.openreg.set_device(before)
    assert torch.openreg.current_device() == before


def test_is_available(openreg):
    assert torch.openreg.is_available() is True


def test_device_count_in_process(openreg):
    assert torch.openreg.device_count() == _expected_device_count()
    assert torch.openreg.device_count() >= 2, "the test suite needs at least 2 devices"


def test_device_count_default_subprocess(run_python, describe):
    proc = run_python(
        "import torch, openreg; print('COUNT', torch.openreg.device_count())",
        {"OPENREG_DEVICE_COUNT": None},
    )
    assert proc.returncode == 0, describe(proc)
    assert re.search(r"^COUNT 2$", proc.stdout, re.M), describe(proc)


def test_device_count_env_override_subprocess(run_python, describe):
    code = (
        "import torch, openreg\n"
        "print('COUNT', torch.openreg.device_count())\n"
        "t = torch.ones(2, device='openreg:2')\n"
        "print('DEV', t.device)\n"
        "print('OK', torch.equal(t.cpu(), torch.ones(2)))\n"
    )
    proc = run_python(code, {"OPENREG_DEVICE_COUNT": "3"})
    assert proc.returncode == 0, describe(proc)
    assert re.search(r"^COUNT 3$", proc.stdout, re.M), describe(proc)
    assert re.search(r"^DEV openreg:2$", proc.stdout, re.M), describe(proc)
    assert re.search(r"^OK True$", proc.stdout, re.M), describe(proc)


# What initialises the device: its first use, or set_device (torch.cuda.set_device
# initialises CUDA; DeviceMesh, for FSDP2, relies on it).
_FIRST_USE = {"a tensor": ("torch.ones(1, device='openreg')", 0), "set_device": ("torch.openreg.set_device(1)", 1)}


@pytest.mark.parametrize("first_use", sorted(_FIRST_USE))
def test_lazy_initialisation_subprocess(run_python, describe, first_use):
    statement, device = _FIRST_USE[first_use]
    code = (
        "import torch, openreg\n"
        "print('BEFORE', torch.openreg.is_initialized())\n"
        f"{statement}\n"
        "print('AFTER', torch.openreg.is_initialized(), torch.openreg.current_device())\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, describe(proc)
    assert re.search(r"^BEFORE False$", proc.stdout, re.M), describe(proc)
    assert re.search(rf"^AFTER True {device}$", proc.stdout, re.M), describe(proc)


def test_current_device_default(openreg):
    assert torch.openreg.current_device() == 0
    t = torch.empty(1, device="openreg")
    assert t.device == torch.device("openreg", 0)


def test_set_device(openreg, restore_device):
    torch.openreg.set_device(1)
    assert torch.openreg.current_device() == 1
    t = torch.ones(3, device="openreg")
    assert t.device == torch.device("openreg", 1)
    assert torch.equal(t.cpu(), torch.ones(3))
    # An explicit index still wins over the current device.
    u = torch.zeros(2, device="openreg:0")
    assert u.device == torch.device("openreg", 0)
    torch.openreg.set_device(0)
    assert torch.openreg.current_device() == 0
    assert torch.empty(1, device="openreg").device == torch.device("openreg", 0)


def test_device_context_manager(openreg, restore_device):
    assert torch.openreg.current_device() == 0
    with torch.openreg.device(1):
        assert torch.openreg.current_device() == 1
        t = torch.arange(4, device="openreg")
        assert t.device == torch.device("openreg", 1)
        assert torch.equal(t.cpu(), torch.arange(4))
    assert torch.openreg.current_device() == 0
    assert torch.empty(1, device="openreg").device == torch.device("openreg", 0)


def test_device_context_manager_restores_on_exception(openreg, restore_device):
    with pytest.raises(ZeroDivisionError):
        with torch.openreg.device(1):
            assert torch.openreg.current_device() == 1
            1 / 0
    assert torch.openreg.current_device() == 0


def test_synchronize(openreg):
    x = torch.arange(1000, dtype=torch.float32)
    d = x.to("openreg", non_blocking=True)
    assert torch.openreg.synchronize() is None
    assert torch.equal(d.cpu(), x)


def test_is_initialized_and_lazy_init(openreg):
    torch.openreg._lazy_init()
    torch.openreg._lazy_init()  # idempotent
    assert torch.openreg.is_initialized() is True
    torch.ones(1, device="openreg")
    assert torch.openreg.is_initialized() is True


def test_not_in_bad_fork(openreg):
    # The process that initialised the device is not a forked child (test_fork.py has those).
    torch.ones(1, device="openreg")
    assert torch.openreg._is_in_bad_fork() is False


def test_tensor_device_type(openreg):
    t = torch.zeros(2, 3, device="openreg")
    assert t.device.type == "openreg"
    assert t.device.index == 0
    assert str(t.device) == "openreg:0"
    assert t.is_cpu is False
    assert torch.device("openreg").type == "openreg"
    assert torch.device("openreg:1").index == 1


def test_generated_tensor_helpers(openreg):
    cpu = torch.ones(2)
    t = cpu.openreg()
    assert t.device == torch.device("openreg", 0)
    assert t.is_openreg is True
    assert cpu.is_openreg is False
    assert torch.equal(t.cpu(), cpu)
    t1 = cpu.openreg(1)
    assert t1.device == torch.device("openreg", 1)
    assert torch.equal(t1.cpu(), cpu)


def test_generated_module_helper(openreg):
    torch.manual_seed(0)
    ref = torch.nn.Linear(2, 2)
    model = torch.nn.Linear(2, 2)
    model.load_state_dict(ref.state_dict())
    out = model.openreg()
    assert out is model
    for name, p in model.named_parameters():
        assert p.device.type == "openreg", name
        assert p.is_openreg, name
        assert torch.equal(p.detach().cpu(), getattr(ref, name).detach())
    x = torch.tensor([[1.0, -2.0]])
    y = model(x.openreg())
    assert y.device.type == "openreg"
    torch.testing.assert_close(y.detach().cpu(), ref(x).detach(), atol=1e-6, rtol=1e-6)


def test_out_of_range_device_index_tensor(openreg):
    bad = torch.openreg.device_count() + 3
    with pytest.raises(RuntimeError, match=r"(?i)device"):
        torch.ones(1, device=f"openreg:{bad}")


def test_out_of_range_set_device(openreg, restore_device):
    bad = torch.openreg.device_count() + 5
    # The exception type is not pinned down for set_device (CUDA: RuntimeError).
    with pytest.raises((RuntimeError, ValueError, IndexError), match=r"(?i)device"):
        torch.openreg.set_device(bad)
    assert torch.openreg.current_device() == restore_device


def test_import_twice(run_python, describe):
    code = (
        "import torch\n"
        "import openreg\n"
        "import openreg as again\n"
        "import importlib\n"
        "assert again is openreg\n"
        "m = importlib.import_module('openreg')\n"
        "assert m is openreg\n"
        "print('VAL', (torch.ones(2, device='openreg') * 2).cpu().tolist())\n"
    )
    for autoload in ("1", "0"):
        proc = run_python(code, {"TORCH_DEVICE_BACKEND_AUTOLOAD": autoload})
        assert proc.returncode == 0, describe(proc)
        expected = (torch.ones(2) * 2).tolist()
        assert f"VAL {expected}" in proc.stdout, describe(proc)


def test_import_openreg_before_torch(run_python, describe):
    # `import openreg` as the very first import: openreg imports torch, whose
    # backend autoload must not re-enter the partially initialised package.
    code = "import openreg\nimport torch\nprint('DEV', torch.ones(1, device='openreg').device)\n"
    for autoload in (None, "0"):
        proc = run_python(code, {"TORCH_DEVICE_BACKEND_AUTOLOAD": autoload})
        assert proc.returncode == 0, describe(proc)
        assert re.search(r"^DEV openreg:0$", proc.stdout, re.M), describe(proc)


def test_autoload_with_plain_import_torch(run_python, describe):
    # Only `import torch`: the torch.backends entry point must load openreg.
    code = "import torch\nprint(torch.ones(2, device='openreg') + 1)\n"
    proc = run_python(code, {"TORCH_DEVICE_BACKEND_AUTOLOAD": None})
    assert proc.returncode == 0, describe(proc)
    cpu_repr = repr(torch.ones(2) + 1)  # "tensor([2., 2.])"
    expected = cpu_repr[:-1] + ", device='openreg:0')"
    lines = proc.stdout.strip().splitlines()
    assert lines and lines[-1] == expected, describe(proc)


def test_autoload_disabled(run_python, describe):
    code = (
        "import torch\n"
        "try:\n"
        "    torch.ones(2, device='openreg')\n"
        "except RuntimeError as e:\n"
        "    print('BEFORE_IMPORT RuntimeError')\n"
        "else:\n"
        "    print('BEFORE_IMPORT worked')\n"
        "import openreg\n"
        "t = torch.ones(2, device='openreg')\n"
        "print('AFTER_IMPORT', t.device, torch.equal(t.cpu(), torch.ones(2)))\n"
    )
    proc = run_python(code, {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert proc.returncode == 0, describe(proc)
    assert re.search(r"^BEFORE_IMPORT RuntimeError$", proc.stdout, re.M), describe(proc)
    assert re.search(r"^AFTER_IMPORT openreg:0 True$", proc.stdout, re.M), describe(proc)
