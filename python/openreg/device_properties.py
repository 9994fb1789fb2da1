"""``torch.openreg.get_device_properties`` and friends, shaped like ``torch.cuda``'s.

An openreg device is the host CPU seen through the engine chain, so its properties
are host facts: every device of a process has the same ones. What each field means
here (docs/design.md, "Device properties and fork"):

* ``name``: ``"openreg (<CPU model>)"``, the model from ``/proc/cpuinfo``.
* ``total_memory``: the host's physical memory in bytes (device memory is host memory).
* ``multi_processor_count``: the intra-op threads a kernel can use, the count engines
  get from the host (``torch.get_num_threads()``; follows ``torch.set_num_threads``).
* ``major``, ``minor``: the engine ABI version the chain speaks: the ABI's major (an
  engine of another major is refused) and the lowest minor negotiated by an engine of
  the chain (``min(host minor, engine minor)``); what CUDA's compute capability is to
  kernels, the feature level every engine of the chain shares.
* ``is_integrated``: True, the device shares the host's memory.
* ``engines``: the engine chain, in routing order.
* ``cpu_capability``: the vector ISA of ATen's CPU kernels
  (``torch.backends.cpu.get_cpu_capability()``), which aten_ref and the host path use.

The dtypes a device tensor supports are ``torch.accelerator.get_device_capability``'s.
"""

import dataclasses
import os
import platform

import torch

from . import _C
from .device_module import _DeviceLike, _index


@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    name: str
    total_memory: int
    multi_processor_count: int
    major: int
    minor: int
    is_integrated: bool
    engines: tuple
    cpu_capability: str

    def __repr__(self) -> str:
        # torch.cuda's layout: memory in MB.
        return (
            f"_OpenRegDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory // (1024 * 1024)}MB, "
            f"multi_processor_count={self.multi_processor_count}, engines={list(self.engines)}, "
            f"cpu_capability='{self.cpu_capability}')"
        )


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                # x86 says "model name"; some ARM kernels only "Processor" or "Hardware".
                if key.strip() in ("model name", "Processor", "Hardware") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.machine() or "unknown CPU"


def _host_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def get_device_properties(device: _DeviceLike = None) -> DeviceProperties:
    """The properties of an openreg device (None: the current one); loads the engine
    chain if needed, so it raises as the device's first use would (a forked child...)."""
    _index(device)
    _C._lazy_init()
    chain = _C._engine_chain()
    major, host_minor = (int(v) for v in _C._abi_version().split("."))
    return DeviceProperties(
        name=f"openreg ({_cpu_model()})",
        total_memory=_host_memory(),
        multi_processor_count=torch.get_num_threads(),
        major=major,
        minor=min([host_minor] + [e["negotiated_minor"] for e in chain]),
        is_integrated=True,
        engines=tuple(e["name"] for e in chain),
        cpu_capability=torch.backends.cpu.get_cpu_capability(),
    )


def get_device_name(device: _DeviceLike = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: _DeviceLike = None) -> tuple:
    """``(major, minor)``: the engine ABI version the chain speaks (see the module doc)."""
    props = get_device_properties(device)
    return props.major, props.minor
