"""Dynamo's device interface for openreg (``torch._dynamo.device_interface``).

Dynamo and Inductor ask a device type for its runtime through this class: the current
device and stream, synchronisation, events and properties (Inductor records them
before it compiles, and benchmarks with events in max-autotune). Everything answers
from ``torch.openreg``: streams.py, device_module.py, device_properties.py.
"""

from typing import Any

import torch
from torch._dynamo.device_interface import DeviceInterface

from .. import device_module as _mod
from .. import device_properties as _props
from .. import streams as _streams


class OpenRegInterface(DeviceInterface):
    device = _mod.device  # context manager that makes a device current
    Event = _streams.Event  # subclasses torch.Event / torch.Stream, as Dynamo requires
    Stream = _streams.Stream

    class Worker:
        # Inductor's compile workers read properties without touching the device: the
        # host facts of device_properties.py need no device state, only the chain's
        # names and ABI level, which the main process loaded first.
        @staticmethod
        def set_device(device: int) -> None:
            _mod.set_device(device)

        @staticmethod
        def current_device() -> int:
            return _mod.current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> Any:
            return _props.get_device_properties(device)

    current_device = staticmethod(_mod.current_device)
    set_device = staticmethod(_mod.set_device)
    device_count = staticmethod(_mod.device_count)
    is_available = staticmethod(_mod.is_available)
    stream = staticmethod(_streams.stream)
    current_stream = staticmethod(_streams.current_stream)
    set_stream = staticmethod(_streams.set_stream)
    synchronize = staticmethod(_streams.synchronize)
    get_device_properties = staticmethod(_props.get_device_properties)
    get_compute_capability = staticmethod(_props.get_device_capability)
    is_bf16_supported = staticmethod(lambda including_emulation=False: _mod.is_bf16_supported())

    @staticmethod
    def exchange_device(device: int) -> int:
        prev = _mod.current_device()
        if device >= 0 and device != prev:
            _mod.set_device(device)
        return prev

    maybe_exchange_device = exchange_device

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        _streams.set_stream(_streams.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type))

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        # Generated kernels run on the host thread (see compile/wrapper.py); the stream
        # id is what a kernel launcher would be handed.
        return _streams.current_stream(device_idx).stream_id

    @staticmethod
    def memory_allocated(device: torch.types.Device = None) -> int:
        return _mod.memory_allocated(device)

    @staticmethod
    def is_dtype_supported(dtype: torch.dtype, including_emulation: bool = False) -> bool:
        # The engine ABI's dtypes (torch.accelerator.get_device_capability).
        return dtype in torch.accelerator.get_device_capability("openreg")["supported_dtypes"]

    @staticmethod
    def is_triton_capable(device: torch.types.Device = None) -> bool:
        return False  # Inductor generates C++ for openreg (compile/inductor.py)
