"""Device properties (torch.openreg.get_device_properties / _name / _capability) against
independent sources (/proc/meminfo, lscpu, torch's thread count, the engine chain's own
ABI versions), and torch.accelerator.get_device_capability's dtype set against what
tensors of those dtypes can do on the device."""

import itertools
import platform
import re
import shutil
import subprocess
import warnings

import pytest
import torch


@pytest.fixture
def supported_dtypes(openreg):
    return torch.accelerator.get_device_capability("openreg")["supported_dtypes"]


# ---- torch.accelerator.get_device_capability


def _same_bits(a, b):
    # Bitwise, as bytes: CPU's torch.equal has no ComplexHalf kernel.
    return a.dtype == b.dtype and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def test_capability_lists_the_usual_dtypes(supported_dtypes):
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                  torch.int8, torch.uint8, torch.bool, torch.complex64):
        assert dtype in supported_dtypes, dtype
    # Not every dtype: the default DeviceCapability would claim them all (quantized ones too).
    assert torch.qint8 not in supported_dtypes


def test_capability_is_the_same_for_every_device(openreg, supported_dtypes):
    for i in range(torch.openreg.device_count()):
        assert torch.accelerator.get_device_capability(f"openreg:{i}")["supported_dtypes"] == supported_dtypes


def test_capability_bad_index(openreg):
    with pytest.raises(RuntimeError, match="invalid device index 9"):
        torch.accelerator.get_device_capability("openreg:9")


def test_every_supported_dtype_allocates_and_copies(supported_dtypes):
    values = torch.tensor([[0, 1, 2], [3, 4, 5]])
    for dtype in supported_dtypes:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "ComplexHalf support is experimental"
            cpu = values.to(dtype)
            empty = torch.empty(2, 3, dtype=dtype, device="openreg")
        assert (empty.dtype, empty.device.type, tuple(empty.shape)) == (dtype, "openreg", (2, 3))
        dev = cpu.to("openreg")
        assert dev.dtype == dtype
        assert _same_bits(dev.cpu(), cpu), dtype
        empty.copy_(dev)  # device to device
        assert _same_bits(empty.cpu(), cpu), dtype


def test_every_supported_dtype_converts_to_every_other(supported_dtypes):
    # "type conversion across supported dtypes", as torch.accelerator documents the set.
    values = torch.tensor([[0, 1, 2], [3, 4, 5]])
    with warnings.catch_warnings():
        # complex -> real discards the (zero) imaginary part; ComplexHalf is "experimental"
        warnings.simplefilter("ignore")
        for src, dst in itertools.product(supported_dtypes, repeat=2):
            cpu = values.to(src)
            got = cpu.to("openreg").to(dst)
            assert got.device.type == "openreg" and got.dtype == dst, (src, dst)
            assert _same_bits(got.cpu(), cpu.to(dst)), (src, dst)


# ---- torch.openreg.get_device_properties


def _meminfo_total_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            m = re.match(r"MemTotal:\s+(\d+) kB", line)
            if m:
                return int(m.group(1)) * 1024
    pytest.skip("no MemTotal in /proc/meminfo")


def test_total_memory_is_the_hosts(openreg):
    assert torch.openreg.get_device_properties(0).total_memory == _meminfo_total_bytes()


def test_name_is_the_cpu_model(openreg):
    props = torch.openreg.get_device_properties()
    m = re.fullmatch(r"openreg \((.+)\)", props.name)
    assert m, props.name
    assert torch.openreg.get_device_name() == props.name
    if platform.machine() not in ("x86_64", "i686") or not shutil.which("lscpu"):
        # Elsewhere lscpu names the core from its own tables, /proc/cpuinfo has no model.
        pytest.skip("no x86 lscpu to compare the CPU model with")
    out = subprocess.run(["lscpu"], capture_output=True, text=True, env={"LC_ALL": "C"}).stdout
    model = re.search(r"^Model name:\s*(.+)$", out, re.M)
    if not model:
        pytest.skip("lscpu names no model")
    assert m.group(1) == model.group(1).strip()


def test_multi_processor_count_follows_the_intra_op_threads(openreg):
    before = torch.get_num_threads()
    try:
        assert torch.openreg.get_device_properties().multi_processor_count == before
        torch.set_num_threads(1)
        assert torch.openreg.get_device_properties().multi_processor_count == 1
    finally:
        torch.set_num_threads(before)


def test_capability_is_the_abi_version_the_chain_speaks(openreg):
    info = openreg.info()
    host_major, host_minor = (int(v) for v in info["abi_version"].split("."))
    # Each engine speaks min(its own minor, the host's); the chain, the lowest of those.
    engine_minors = [int(e["abi_version"].split(".")[1]) for e in info["engines"]]
    for e in info["engines"]:
        assert int(e["abi_version"].split(".")[0]) == host_major
    expected = (host_major, min([host_minor] + engine_minors))
    props = torch.openreg.get_device_properties()
    assert (props.major, props.minor) == expected
    assert torch.openreg.get_device_capability() == expected
    assert props.engines == tuple(info["chain"])


def test_same_properties_for_every_device_form(openreg):
    first = torch.openreg.get_device_properties(0)
    for device in (None, 1, "openreg", "openreg:1", torch.device("openreg", 1)):
        assert torch.openreg.get_device_properties(device) == first, device
    assert first.is_integrated is True
    assert "total_memory=" in repr(first) and first.name in repr(first)


def test_bad_device(openreg):
    with pytest.raises(RuntimeError, match="invalid device index 7"):
        torch.openreg.get_device_properties(7)
    with pytest.raises(ValueError, match="expected an openreg device"):
        torch.openreg.get_device_name("cpu")


def test_cpu_capability_follows_aten(run_python, describe):
    # ATEN_CPU_CAPABILITY caps ATen's kernels (hence aten_ref's and the host path's).
    proc = run_python(
        "import torch; print('ISA', torch.openreg.get_device_properties().cpu_capability)",
        {"ATEN_CPU_CAPABILITY": "default"},
    )
    assert proc.returncode == 0, describe(proc)
    assert re.search(r"^ISA DEFAULT$", proc.stdout, re.M), describe(proc)
