"""torch.compile on openreg: Dynamo's device interface, Inductor's code generation for
the device, and a Dynamo backend named "openreg".

``install()`` runs at ``import openreg``, which ``import torch`` does through the
autoload entry point. Importing Dynamo or Inductor then would add ~1.5 s to every
``import torch``, so each half is registered when its side of PyTorch first needs it:

* Dynamo (device interface, backend): right after the ``torch._dynamo`` package has been
  imported (``torch.compile`` imports it first thing), by a finder on ``sys.meta_path``
  that wraps that one import. It imports only ``torch._dynamo.device_interface`` and
  ``torch._dynamo.backends.registry``, which need nothing but torch.
* Inductor (code generation): when Inductor initialises its device backends
  (``torch._inductor.codegen.common.init_backend_registration``), which asks the
  PrivateUse1 device module for ``Scheduling``: that lookup registers openreg's backend.
  Importing Inductor any earlier breaks: the ``torch._dynamo`` import above may itself
  be part of a half-done ``torch._inductor`` import (``import torch._inductor.config``).
"""

import importlib.abc
import sys
import warnings

_DYNAMO = "torch._dynamo"
# What Inductor's PrivateUse1 hook asks the device module for.
_INDUCTOR_HOOKS = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")
_registered = set()


def register_dynamo() -> None:
    """The device interface and the "openreg" backend (idempotent)."""
    if "dynamo" in _registered:
        return
    _registered.add("dynamo")
    from torch._dynamo.backends.registry import register_backend
    from torch._dynamo.device_interface import register_interface_for_device

    from .backend import openreg_backend
    from .device_interface import OpenRegInterface

    register_interface_for_device("openreg", OpenRegInterface)
    register_backend(compiler_fn=openreg_backend, name="openreg")


def register_inductor() -> None:
    """Inductor's code generation for the device (idempotent)."""
    if "inductor" in _registered:
        return
    _registered.add("inductor")
    register_dynamo()
    from . import inductor

    inductor.register()


def _warn_on_failure(register) -> None:
    try:
        register()
    except Exception as e:  # torch.compile must keep working for the CPU
        warnings.warn(f"openreg: torch.compile cannot use the openreg device: {type(e).__name__}: {e}")


class _AfterDynamoImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of ``torch._dynamo`` so that
    :func:`register_dynamo` runs once that package has been executed."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _DYNAMO:
            return None
        sys.meta_path.remove(self)  # once; and lets the real finders answer below
        import importlib.util

        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            _warn_on_failure(register_dynamo)

        spec.loader.exec_module = exec_then_register
        return spec


def _no_such_attribute(name):
    raise AttributeError(f"module 'torch.openreg' has no attribute {name!r}")


def _with_inductor_hooks(own_getattr):
    """``torch.openreg.<name>`` for the names the device module does not define: its
    own module ``__getattr__`` (``_initialized``), after registering Inductor's backend
    when Inductor asks for one of its hooks."""

    def getattr_(name):
        if name in _INDUCTOR_HOOKS:
            # Registers directly: the hook's four classes cannot carry the device op
            # overrides, the cache key or the CPU-like decisions (inductor.py). Answering
            # "no such attribute" then makes Inductor skip its own registration.
            _warn_on_failure(register_inductor)
        return own_getattr(name)

    getattr_.openreg_inductor_hooks = True
    return getattr_


def install(device_module) -> None:
    """Arranges both registrations (see the module doc); ``device_module`` is torch.openreg."""
    own = device_module.__dict__.get("__getattr__", _no_such_attribute)
    if not getattr(own, "openreg_inductor_hooks", False):
        device_module.__getattr__ = _with_inductor_hooks(own)
    if _DYNAMO in sys.modules:
        _warn_on_failure(register_dynamo)
    elif not any(isinstance(f, _AfterDynamoImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterDynamoImport())
