"""Device -> Python scalar/list conversions, against the same calls on CPU."""

import pytest
import torch

SCALARS = [
    (3.75, torch.float32),
    (-1.0e-3, torch.float64),
    (2.5, torch.float16),
    (-8.0, torch.bfloat16),
    (-123456789012, torch.int64),
    (-7, torch.int32),
    (-100, torch.int8),
    (250, torch.uint8),
    (True, torch.bool),
    (False, torch.bool),
    (1.5 - 2j, torch.complex64),
]


def _same(a, b):
    assert type(a) is type(b), f"{type(a)} != {type(b)}"
    assert a == b, f"{a!r} != {b!r}"


@pytest.mark.parametrize("value,dtype", SCALARS, ids=str)
def test_item(device, value, dtype):
    cpu = torch.tensor(value, dtype=dtype)
    dev = cpu.to(device)
    _same(dev.item(), cpu.item())
    # one-element tensors of any rank
    _same(dev.reshape(1, 1).item(), cpu.item())


@pytest.mark.parametrize("value,dtype", [s for s in SCALARS if not s[1].is_complex], ids=str)
def test_python_number_conversions(device, value, dtype):
    cpu = torch.tensor(value, dtype=dtype)
    dev = cpu.to(device)
    _same(float(dev), float(cpu))
    _same(int(dev), int(cpu))
    _same(bool(dev), bool(cpu))


def test_item_of_computed_value(device):
    x = torch.arange(10, dtype=torch.float32)
    _same(x.to(device).sum().item(), x.sum().item())
    _same((x.to(device) > 4).sum().item(), (x > 4).sum().item())
    _same(x.to(device).max().item(), x.max().item())


def test_item_on_second_device(device):
    cpu = torch.tensor(6.5)
    _same(cpu.to("openreg:1").item(), cpu.item())


def test_item_multi_element_raises_like_cpu(device):
    cpu = torch.ones(2)
    with pytest.raises(RuntimeError) as cpu_err:
        cpu.item()
    with pytest.raises(RuntimeError) as dev_err:
        cpu.to(device).item()
    assert str(dev_err.value) == str(cpu_err.value)


@pytest.mark.parametrize(
    "cpu",
    [
        torch.tensor([[1.5, -2.0], [0.25, 8.0]]),
        torch.arange(6).reshape(2, 3),
        torch.tensor([True, False, True]),
        torch.tensor([1.0, 2.5], dtype=torch.float64),
        torch.tensor(4.5),
        torch.empty(0),
        torch.arange(12).reshape(3, 4).t(),
    ],
    ids=["float2d", "int2d", "bool", "float64", "scalar", "empty", "transposed"],
)
def test_tolist(device, cpu):
    _same(cpu.to(device).tolist(), cpu.tolist())


def test_numpy_on_device_raises(device):
    dev = torch.ones(3, device=device)
    with pytest.raises((TypeError, RuntimeError), match=r"(?i)numpy|cpu\(\)"):
        dev.numpy()


def test_cpu_numpy_works(device):
    np = pytest.importorskip("numpy", reason="numpy is needed to test .cpu().numpy()")
    cpu = torch.tensor([[1.0, -2.0], [3.5, 4.0]])
    arr = cpu.to(device).cpu().numpy()
    assert isinstance(arr, np.ndarray)
    assert arr.dtype == cpu.numpy().dtype
    assert np.array_equal(arr, cpu.numpy())
