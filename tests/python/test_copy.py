"""Host <-> device and device <-> device copies, against CPU references."""

import pytest
import torch

DTYPES = [
    torch.float32,
    torch.float64,
    torch.int64,
    torch.int32,
    torch.bool,
    torch.bfloat16,
    torch.float16,
    torch.uint8,
    torch.complex64,
]


def make_cpu(shape, dtype, seed=0):
    """Deterministic CPU data of any dtype (the reference values)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype == torch.uint8:
        return torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
    if dtype in (torch.int32, torch.int64, torch.int8, torch.int16):
        return torch.randint(-1000, 1000, shape, generator=g).to(dtype)
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * 10).to(dtype)


def exact(assert_close_cpu, dev, ref):
    assert_close_cpu(dev, ref, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_roundtrip(device, assert_close_cpu, dtype):
    x = make_cpu((3, 5), dtype)
    d = x.to(device)
    assert d.device == torch.device("openreg", 0)
    assert d.dtype == dtype
    assert d.shape == x.shape
    back = d.cpu()
    assert back.device.type == "cpu"
    assert back.dtype == dtype
    assert torch.equal(back, x)
    exact(assert_close_cpu, d, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=str)
def test_roundtrip_scalar_and_large(device, assert_close_cpu, dtype):
    s = make_cpu((), dtype)
    exact(assert_close_cpu, s.to(device), s)
    big = make_cpu((1 << 20,), dtype, seed=1)
    exact(assert_close_cpu, big.to(device), big)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.complex64, torch.float16], ids=str)
def test_copy_between_devices(device, assert_close_cpu, dtype):
    x = make_cpu((4, 6), dtype)
    d0 = x.to("openreg:0")
    d1 = d0.to("openreg:1")
    assert d0.device == torch.device("openreg", 0)
    assert d1.device == torch.device("openreg", 1)
    exact(assert_close_cpu, d1, x)
    back = d1.to("openreg:0")
    assert back.device == torch.device("openreg", 0)
    exact(assert_close_cpu, back, x)
    # copy_ into an existing tensor on the other device
    dst = torch.zeros(4, 6, dtype=dtype, device="openreg:1")
    dst.copy_(d0)
    exact(assert_close_cpu, dst, x)
    # the source is untouched
    exact(assert_close_cpu, d0, x)


def test_copy_between_devices_non_contiguous(device, assert_close_cpu):
    x = make_cpu((6, 8), torch.float32)
    d0 = x.to("openreg:0")
    exact(assert_close_cpu, d0.t().to("openreg:1"), x.t())
    exact(assert_close_cpu, d0[::2, 1::3].to("openreg:1"), x[::2, 1::3])
    dst = torch.zeros(8, 6, device="openreg:1")
    dst.copy_(d0.t())
    exact(assert_close_cpu, dst, x.t().contiguous())


NON_CONTIGUOUS = {
    "transposed": lambda t: t.t(),
    "sliced_step": lambda t: t[::2, 1::3],
    "expanded": lambda t: t[:, :1].expand(6, 5),
    "permuted_3d": lambda t: t.reshape(2, 3, 8).permute(2, 0, 1),
    "offset_slice": lambda t: t[3:, 2:7],
    "column": lambda t: t[:, 3],
}


@pytest.mark.parametrize("view", list(NON_CONTIGUOUS), ids=str)
def test_non_contiguous_cpu_to_device(device, assert_close_cpu, view):
    x = make_cpu((6, 8), torch.float32)
    src = NON_CONTIGUOUS[view](x)
    exact(assert_close_cpu, src.to(device), src)


@pytest.mark.parametrize("view", list(NON_CONTIGUOUS), ids=str)
def test_non_contiguous_device_to_cpu(device, assert_close_cpu, view):
    x = make_cpu((6, 8), torch.float32)
    d = x.to(device)
    src = NON_CONTIGUOUS[view](d)
    back = src.cpu()
    assert torch.equal(back, NON_CONTIGUOUS[view](x))
    # and device -> device (contiguous() materialises on the device)
    exact(assert_close_cpu, src.contiguous(), NON_CONTIGUOUS[view](x).contiguous())
    assert src.contiguous().is_contiguous()


@pytest.mark.parametrize("src_where", ["cpu", "openreg"])
def test_copy_into_non_contiguous_destination(device, assert_close_cpu, src_where):
    src_cpu = make_cpu((4, 4), torch.float32, seed=3)
    src = src_cpu if src_where == "cpu" else src_cpu.to(device)
    ref = torch.zeros(4, 8)
    ref[:, ::2].copy_(src_cpu)
    dst = torch.zeros(4, 8, device=device)
    dst[:, ::2].copy_(src)
    exact(assert_close_cpu, dst, ref)  # also checks the untouched columns


def test_copy_non_contiguous_to_non_contiguous(device, assert_close_cpu):
    x = make_cpu((10, 12), torch.float64)
    ref = torch.full((6, 10), -1.0, dtype=torch.float64)
    ref[:, 1::2].copy_(x[::2, ::2].t())
    dst = torch.full((6, 10), -1.0, dtype=torch.float64, device=device)
    dst[:, 1::2].copy_(x.to(device)[::2, ::2].t())
    exact(assert_close_cpu, dst, ref)


def test_copy_device_into_non_contiguous_cpu_destination(device):
    x = make_cpu((5, 3), torch.int64)
    d = x.to(device)
    dst = torch.zeros(3, 10, dtype=torch.int64)
    dst[:, ::2].copy_(d.t())
    ref = torch.zeros(3, 10, dtype=torch.int64)
    ref[:, ::2].copy_(x.t())
    assert torch.equal(dst, ref)


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4, 2)], ids=str)
def test_zero_size(device, assert_close_cpu, shape):
    x = torch.empty(shape)
    d = x.to(device)
    assert d.shape == x.shape
    assert d.numel() == 0
    back = d.cpu()
    assert back.shape == x.shape
    dst = torch.empty(shape, device=device)
    dst.copy_(x)
    exact(assert_close_cpu, dst, x)
    exact(assert_close_cpu, d.to("openreg:1"), x)


@pytest.mark.parametrize(
    "src_dtype,dst_dtype",
    [
        (torch.float32, torch.float64),
        (torch.float64, torch.float32),
        (torch.float32, torch.int32),
        (torch.int64, torch.float32),
        (torch.int32, torch.int64),
        (torch.float32, torch.float16),
        (torch.float32, torch.bfloat16),
        (torch.float32, torch.bool),
        (torch.bool, torch.float32),
        (torch.uint8, torch.int64),
        (torch.float32, torch.complex64),
    ],
    ids=str,
)
def test_dtype_conversion_during_copy(device, assert_close_cpu, src_dtype, dst_dtype):
    x = make_cpu((4, 5), src_dtype)
    ref = x.to(dst_dtype)
    # CPU -> device with conversion
    exact(assert_close_cpu, x.to(device, dst_dtype), ref)
    # conversion on the device
    exact(assert_close_cpu, x.to(device).to(dst_dtype), ref)
    # device -> CPU with conversion
    back = x.to(device).to("cpu", dst_dtype)
    assert back.dtype == dst_dtype
    assert torch.equal(back, ref)
    # copy_ across dtypes
    dst = torch.empty(4, 5, dtype=dst_dtype, device=device)
    dst.copy_(x)
    exact(assert_close_cpu, dst, ref)


def test_copy_from_cpu_into_existing(device, assert_close_cpu):
    x = make_cpu((3, 4), torch.float32)
    d = torch.zeros(3, 4, device=device)
    ptr = d.data_ptr()
    ret = d.copy_(x)
    assert ret is d
    assert d.data_ptr() == ptr, "copy_ must write in place"
    exact(assert_close_cpu, d, x)
    # broadcasting copy_
    row = torch.tensor([1.0, -2.0, 3.5, 4.25])
    d.copy_(row)
    exact(assert_close_cpu, d, row.expand(3, 4).contiguous())


@pytest.mark.parametrize(
    "data,dtype",
    [
        ([1.5, -2.0, 3.25], None),
        ([[1, 2, 3], [4, 5, 6]], None),
        ([True, False, True], None),
        ([1, 2, 3], torch.float16),
        ([[0.5, 1.5]], torch.float64),
        (7, None),
        ([1 + 2j, -3j], None),
    ],
    ids=repr,
)
def test_torch_tensor_constructor(device, assert_close_cpu, data, dtype):
    ref = torch.tensor(data, dtype=dtype)
    d = torch.tensor(data, dtype=dtype, device=device)
    exact(assert_close_cpu, d, ref)
    d1 = torch.tensor(data, dtype=dtype, device="openreg:1")
    assert d1.device == torch.device("openreg", 1)
    exact(assert_close_cpu, d1, ref)


def test_non_blocking_copies(device, assert_close_cpu):
    x = make_cpu((256, 64), torch.float32)
    d = x.to(device, non_blocking=True)
    back = d.to("cpu", non_blocking=True)
    torch.openreg.synchronize()
    assert torch.equal(back, x)
    exact(assert_close_cpu, d, x)
    dst = torch.empty(256, 64, device=device)
    dst.copy_(x, non_blocking=True)
    d1 = dst.to("openreg:1", non_blocking=True)
    torch.openreg.synchronize()
    exact(assert_close_cpu, dst, x)
    exact(assert_close_cpu, d1, x)


def test_copy_does_not_alias(device, assert_close_cpu):
    x = make_cpu((10,), torch.float32)
    d = x.to(device)
    x.fill_(123.0)  # changing the CPU source afterwards must not affect the device copy
    exact(assert_close_cpu, d, make_cpu((10,), torch.float32))
    back = d.cpu()
    d.fill_(-1.0)
    assert torch.equal(back, make_cpu((10,), torch.float32))
