"""``torch.openreg``: the device module, shaped like ``torch.cuda``."""

from typing import Any, Optional, Union

import torch

from . import _C

# Streams, events and synchronize (torch.cuda's shape): see streams.py.
from .streams import (  # noqa: F401  (re-exported as torch.openreg.*)
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
    synchronize,
)

_DeviceLike = Union[torch.device, str, int, None]


def _index(device: _DeviceLike = None) -> int:
    """Device index of ``device`` (None: the current device), range-checked."""
    if device is None:
        return _C._current_device()
    if isinstance(device, int):
        idx = device
    else:
        device = torch.device(device)
        if device.type != "openreg":
            raise ValueError(f"expected an openreg device, got {device}")
        idx = device.index if device.index is not None else _C._current_device()
    _C._check_device(idx)
    return idx


def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    return _C._device_count()


def current_device() -> int:
    return _C._current_device()


def set_device(device: _DeviceLike) -> None:
    _C._set_device(_index(device))


class device:
    """Context manager that makes ``device`` the current openreg device."""

    def __init__(self, device: _DeviceLike):
        self.idx = _index(device) if device is not None else -1
        self.prev = -1

    def __enter__(self):
        self.prev = _C._current_device()
        if self.idx >= 0:
            _C._set_device(self.idx)

    def __exit__(self, *exc: Any) -> bool:
        _C._set_device(self.prev)
        return False


def is_initialized() -> bool:
    return _C._is_initialized()


def _lazy_init() -> None:
    """Loads the engine chain (OPENREG_ENGINE); raises RuntimeError if it cannot."""
    _C._lazy_init()


def init() -> None:
    _lazy_init()


def _is_in_bad_fork() -> bool:
    """True in a child forked after the device was initialised: such a child
    cannot use the device (as CUDA); ``torch.manual_seed`` then skips it."""
    return _C._is_in_bad_fork()


# ---- random numbers


def default_generator(device: _DeviceLike = None) -> torch.Generator:
    return _C._get_default_generator(_index(device))


def manual_seed(seed: int) -> None:
    default_generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        _C._get_default_generator(i).manual_seed(int(seed))


def seed() -> None:
    default_generator().seed()


def seed_all() -> None:
    s = default_generator(0).seed()
    for i in range(1, device_count()):
        _C._get_default_generator(i).manual_seed(s)


def initial_seed() -> int:
    return default_generator().initial_seed()


def get_rng_state(device: _DeviceLike = "openreg") -> torch.Tensor:
    return default_generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: _DeviceLike = "openreg") -> None:
    default_generator(device).set_state(new_state)


def get_rng_state_all() -> list:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    for i, s in enumerate(new_states):
        set_rng_state(s, i)


# ---- memory


def memory_stats(device: _DeviceLike = None) -> dict:
    return _C._memory_stats(_index(device))


def memory_allocated(device: _DeviceLike = None) -> int:
    return memory_stats(device)["allocated_bytes.all.current"]


def max_memory_allocated(device: _DeviceLike = None) -> int:
    return memory_stats(device)["allocated_bytes.all.peak"]


def memory_reserved(device: _DeviceLike = None) -> int:
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device: _DeviceLike = None) -> int:
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    _C._reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: _DeviceLike = None) -> None:
    _C._reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    """Frees the device memory the allocator keeps cached for reuse (as
    ``torch.cuda.empty_cache``); tensors in use are untouched."""
    _C._empty_cache()


# ---- autocast (AMP) defaults, as torch.amp asks of a device module


def get_amp_supported_dtype() -> list:
    return [torch.float16, torch.bfloat16]


def is_bf16_supported() -> bool:
    return True


from .device_properties import get_device_capability, get_device_name, get_device_properties  # noqa: E402,F401 (uses _index)
