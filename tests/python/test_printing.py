"""repr/str of openreg tensors must equal the CPU repr plus the device suffix.

The CPU repr is the independent reference: the expected string is built from it
by inserting ``device='openreg:N'`` as the first suffix (which is where PyTorch
puts it). Suffix line-wrapping may differ once the device suffix is added, so
the comparison normalises whitespace; the tensor body (everything before the
suffixes) must match exactly.
"""

import re

import pytest
import torch

_SUFFIX = re.compile(r",\s*(?:size|dtype|grad_fn|requires_grad)=")


def split_cpu_repr(cpu_repr):
    """-> (body, rest): body is 'tensor(<data>', rest is the suffixes and ')'."""
    assert cpu_repr.startswith("tensor(") and cpu_repr.endswith(")"), cpu_repr
    m = _SUFFIX.search(cpu_repr)
    cut = m.start() if m else len(cpu_repr) - 1
    return cpu_repr[:cut], cpu_repr[cut:]


def _norm(s):
    return re.sub(r"\s+", " ", s)


def check_repr(dev_tensor, cpu_tensor, device_str="openreg:0"):
    cpu_repr = repr(cpu_tensor)
    assert "device=" not in cpu_repr
    body, rest = split_cpu_repr(cpu_repr)
    expected = f"{body}, device='{device_str}'{rest}"
    got = repr(dev_tensor)
    assert got.startswith(body), f"tensor body differs\n got: {got}\nwant: {expected}"
    assert _norm(got) == _norm(expected), f"\n got: {got}\nwant: {expected}"
    assert str(dev_tensor) == got
    return got


def sample(dtype):
    """Deterministic CPU values exercising each dtype's formatter."""
    if dtype == torch.bool:
        return torch.tensor([[True, False, True], [False, False, True]])
    if dtype == torch.uint8:
        return torch.tensor([[0, 7, 255], [128, 1, 64]], dtype=dtype)
    if dtype in (torch.int8, torch.int16, torch.int32, torch.int64):
        info = torch.iinfo(dtype)
        return torch.tensor([[info.min, -5, 0], [3, 42, info.max]], dtype=dtype)
    if dtype.is_complex:
        return torch.tensor([[1 + 2j, -0.5j, 3.25], [0, -1e-3 + 7j, 2.5 - 2.5j]], dtype=dtype)
    return torch.tensor([[1.5, -2.25, 0.0], [1e-2, 123.0, -7.125]], dtype=dtype)


DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_repr_matches_cpu(device, dtype):
    x = sample(dtype)
    check_repr(x.to(device), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str)
def test_repr_float_formats(device, dtype):
    cases = [
        torch.tensor([1.0, 2.0, -3.0]),  # integral values: "1., 2."
        torch.tensor([1e-8, 1.0, 1e8]),  # scientific notation
        torch.tensor([float("nan"), float("inf"), -float("inf"), 0.5]),
        torch.tensor([0.1, 0.25, 1 / 3]),
        torch.tensor([-0.0, 0.0]),
    ]
    for c in cases:
        x = c.to(dtype)
        check_repr(x.to(device), x)


def test_repr_int_only_float_and_vector(device):
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4) - 5
    check_repr(x.to(device), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
def test_repr_large_summarised(device, dtype):
    x = (torch.arange(2000) * 3 - 1000).to(dtype)
    got = check_repr(x.to(device), x)
    assert "..." in got


def test_repr_large_2d_summarised(device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 300, generator=g)
    got = check_repr(x.to(device), x)
    assert "..." in got


def test_repr_wide_rows_wrap(device):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 20, generator=g, dtype=torch.float64) * 1000
    check_repr(x.to(device), x)


@pytest.mark.parametrize("value,dtype", [(3.25, torch.float32), (-7, torch.int64), (True, torch.bool), (2.5, torch.float16)], ids=str)
def test_repr_zero_dim(device, value, dtype):
    x = torch.tensor(value, dtype=dtype)
    assert x.dim() == 0
    check_repr(x.to(device), x)


@pytest.mark.parametrize(
    "shape,dtype",
    [((0,), torch.float32), ((2, 0), torch.float32), ((0,), torch.int64), ((0, 3), torch.float16)],
    ids=str,
)
def test_repr_empty(device, shape, dtype):
    x = torch.empty(shape, dtype=dtype)
    check_repr(x.to(device), x)


def test_repr_requires_grad_leaf(device):
    x = torch.tensor([1.0, 2.5, -3.0], requires_grad=True)
    d = x.detach().to(device).requires_grad_()
    got = check_repr(d, x)
    assert "requires_grad=True" in got


def test_repr_grad_fn(device):
    x = torch.tensor([1.0, 2.5, -3.0], requires_grad=True)
    d = x.detach().to(device).requires_grad_()
    got = check_repr(d * 2, x * 2)
    assert "grad_fn=<MulBackward0>" in got
    got = check_repr((d + 1).sum(), (x + 1).sum())
    assert "grad_fn=<SumBackward0>" in got


def test_repr_non_contiguous(device):
    x = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    d = x.to(device)
    check_repr(d.t(), x.t())
    check_repr(d[::2, 1::2], x[::2, 1::2])


def test_repr_second_device(device):
    x = sample(torch.float32)
    check_repr(x.to("openreg:1"), x, device_str="openreg:1")
