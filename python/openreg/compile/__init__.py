"""torch.compile on openreg: Dynamo's device interface, Inductor's code generation for
the device, and a Dynamo backend named "openreg".

``install()`` runs at ``import openreg``, which ``import torch`` does through the
autoload entry point. Importing Dynamo then would add ~1.5 s to every ``import torch``,
so the registration waits for ``torch._dynamo`` to be imported (``torch.compile`` does
it first thing) and runs right after that import: see ``_after_import``.
"""

import importlib.abc
import sys

_DYNAMO = "torch._dynamo"
_done = False


def register() -> None:
    """Registers openreg with Dynamo and Inductor (imports both; idempotent)."""
    global _done
    if _done:
        return
    _done = True
    from torch._dynamo.backends.registry import register_backend
    from torch._dynamo.device_interface import register_interface_for_device

    from . import backend, inductor
    from .device_interface import OpenRegInterface

    register_interface_for_device("openreg", OpenRegInterface)
    inductor.register()
    register_backend(compiler_fn=backend.openreg_backend, name="openreg")


class _AfterDynamoImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of ``torch._dynamo`` so that
    :func:`register` runs once that package has been executed."""

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
            register()

        spec.loader.exec_module = exec_then_register
        return spec


def install() -> None:
    if _DYNAMO in sys.modules:
        register()
    elif not any(isinstance(f, _AfterDynamoImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterDynamoImport())
