"""openreg: a PyTorch device ("openreg", on PrivateUse1) whose compute is done by
swappable engine libraries chosen with OPENREG_ENGINE.

Importing this package (``import torch`` does it through the ``torch.backends``
entry point) registers the device, the ``torch.openreg`` module and the
``Tensor.openreg()`` / ``is_openreg`` helpers. Engines load when the device is
first used, so a broken engine never breaks ``import torch``.
"""

import os

import torch

from . import _C  # loads libopenreg_core: kernels, allocator, hooks, guard
from . import _autograd_exit, backend_meta, conv_layout, distributed, tuning
from . import compile as _compile
from . import device_module as _device_module

__all__ = ["stats", "reset_stats", "info", "engines_available", "cmake_prefix_path", "include_dir"]

#: Prefix for ``find_package(openreg)``: ``cmake -DCMAKE_PREFIX_PATH=<this>``.
#: It holds the engine SDK (``include/openreg/engine.h``, ``include/openreg/sdk.hpp``)
#: and its CMake package (``share/cmake/openreg``).
cmake_prefix_path = os.path.dirname(os.path.abspath(__file__))
#: The SDK's include folder (``openreg/engine.h``, ``openreg/sdk.hpp``).
include_dir = os.path.join(cmake_prefix_path, "include")


def _register() -> None:
    name = torch._C._get_privateuse1_backend_name()
    if name == "openreg" and hasattr(torch, "openreg"):
        return  # already registered (imported twice, or autoloaded and imported)
    if name != "openreg":
        torch.utils.rename_privateuse1_backend("openreg")
    torch._register_device_module("openreg", _device_module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )


_register()
_autograd_exit.install()
backend_meta.install()  # backend metadata kept through FakeTensor conversion
conv_layout.install()  # FakeTensor predicts convolution layouts as the device makes them
tuning.apply_at_import()
_compile.install(_device_module)  # torch.compile: registered when Dynamo and Inductor start (compile/__init__.py)
distributed.install()  # gloo serves openreg tensors: init_process_group("gloo"), DDP (distributed.py)


def stats() -> dict:
    """Op calls per engine since the last reset: ``{op_name: {engine_name: calls}}``.

    ``host_ref`` counts the ops that only the host's reference path can produce
    (ops returning views or Python values).
    """
    return _C._stats()


def reset_stats() -> None:
    """Set every counter of :func:`stats` back to zero."""
    _C._reset_stats()


def engines_available() -> list:
    """Engine libraries found on the search path: ``[{name, path}]``."""
    return _C._engines_found()


def info() -> dict:
    """The engines found, the active chain (loading it if needed) and the devices."""
    return {
        "abi_version": _C._abi_version(),
        "engines": _C._engine_chain(),
        "available": _C._engines_found(),
        "chain": [e["name"] for e in _C._engine_chain()],
        "devices": _C._device_count(),
        "engine_dir": _C._engine_dir(),
        "tuned_routes": tuning.active_table(),
    }
