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
    """Makes ``device`` current, initialising the device first (as torch.cuda.set_device
    does: DeviceMesh sets the device and expects it initialised)."""
    idx = _index(device)
    _lazy_init()
    _C._set_device(idx)


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


class device_of(device):
    """Context manager that makes the device of tensor ``obj`` current, or does nothing
    when ``obj`` is not on an openreg device (torch.cuda.device_of)."""

    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.get_device() if obj.device.type == "openreg" else None)


def is_initialized() -> bool:
    return _C._is_initialized()


def __getattr__(name: str) -> Any:
    # torch.cuda._initialized is a module attribute that torch reads directly:
    # torch.utils.checkpoint stashes and restores a device's random state only when
    # its module says it is initialised, so without it a checkpointed region's
    # dropout (its mask drawn from the device generator) was recomputed with a new mask.
    if name == "_initialized":
        return _C._is_initialized()
    raise AttributeError(f"module 'torch.openreg' has no attribute '{name}'")


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


# ---- memory: torch.accelerator's allocator statistics (the device allocator's, as
# torch.cuda reports its own), under torch.cuda's names

OutOfMemoryError = torch.OutOfMemoryError  # what an allocation past the host's memory raises


def memory_stats(device: _DeviceLike = None) -> dict:
    """torch.cuda.memory_stats's keys ("allocated_bytes.all.current", ...); the device has
    one pool, so the "all" figures are the ones that move."""
    return torch.accelerator.memory_stats(_index(device))


def memory_allocated(device: _DeviceLike = None) -> int:
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device: _DeviceLike = None) -> int:
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device: _DeviceLike = None) -> int:
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device: _DeviceLike = None) -> int:
    return torch.accelerator.max_memory_reserved(_index(device))


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: _DeviceLike = None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def mem_get_info(device: _DeviceLike = None) -> tuple:
    """(free, total) bytes: device memory is the host's, so the host's free and total RAM."""
    return torch.accelerator.get_memory_info(_index(device))


def memory_summary(device: _DeviceLike = None, abbreviated: bool = False) -> str:
    """A readable table of memory_stats(), as torch.cuda.memory_summary gives (without
    its large/small pool split: the device has one pool)."""
    idx = _index(device)
    stats = memory_stats(idx)

    def size(n: int) -> str:
        for unit in ("B", "KiB", "MiB", "GiB"):
            if abs(n) < 1024 or unit == "GiB":
                return f"{n} {unit}" if unit == "B" else f"{n:.2f} {unit}"
            n /= 1024
        return str(n)

    rows = [("Allocated memory", "allocated_bytes", size), ("Reserved memory", "reserved_bytes", size),
            ("Allocations", "allocation", str), ("Segments", "segment", str)]
    if not abbreviated:
        rows += [("Active memory", "active_bytes", size), ("Active allocations", "active", str)]
    lines = [f"openreg:{idx} memory summary", f"{'':<20}{'current':>14}{'peak':>14}{'allocated':>14}{'freed':>14}"]
    for label, key, fmt in rows:
        values = [fmt(stats.get(f"{key}.all.{k}", 0)) for k in ("current", "peak", "allocated", "freed")]
        lines.append(f"{label:<20}" + "".join(f"{v:>14}" for v in values))
    lines.append(f"device allocations: {stats.get('num_device_alloc', 0)}, frees: {stats.get('num_device_free', 0)}")
    return "\n".join(lines) + "\n"


def empty_cache() -> None:
    """Frees the device memory the allocator keeps cached for reuse (as
    ``torch.cuda.empty_cache``), once the queued work that may still use it ran;
    tensors in use are untouched."""
    torch.accelerator.empty_cache()


# ---- autocast (AMP) defaults, as torch.amp asks of a device module


def get_amp_supported_dtype() -> list:
    return [torch.float16, torch.bfloat16]


def is_bf16_supported() -> bool:
    return True


from .device_properties import get_device_capability, get_device_name, get_device_properties  # noqa: E402,F401 (uses _index)
