"""Inductor code generation for openreg: C++/OpenMP kernels on device memory.

An openreg tensor's memory is host memory (engines keep tensors there), so the kernels
Inductor generates for the CPU can run on device tensors' data pointers unchanged:
openreg registers CppScheduling (the C++ kernel generator), a Python wrapper that waits
for the execution queue before each generated kernel (wrapper.py), and the CPU's device
op overrides (no device to set, no stream to launch on). Ops Inductor leaves as
fallbacks (matmul, convolution, ...) are ordinary device ops: the engines run them.
"""

import glob
import os

from torch._inductor.codegen import common
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides
from torch._inductor.custom_graph_pass import CustomGraphModulePass, get_hash_for_files

from . import cpu_like
from .wrapper import OpenRegPythonWrapperCodegen

DEVICE = "openreg"


class _CodeVersion(CustomGraphModulePass):
    """Changes nothing in the graph. Its uuid, the hash of this package's sources, of
    conv_layout.py (the layouts FakeTensor predicts) and of the core library (the
    layouts the device's ops give, which compiled graphs assert), is part of
    Inductor's FX graph cache key, so a graph compiled by another version of this code
    is compiled again rather than loaded from the cache."""

    _uuid = None

    def __call__(self, gm) -> None:
        pass

    def uuid(self) -> bytes:
        if _CodeVersion._uuid is None:
            here = os.path.dirname(os.path.abspath(__file__))
            package = os.path.dirname(here)
            files = sorted(glob.glob(os.path.join(here, "*.py")))
            files += [os.path.join(package, "conv_layout.py"), os.path.join(package, "lib", "libopenreg_core.so")]
            _CodeVersion._uuid = get_hash_for_files(tuple(f for f in files if os.path.exists(f)))
        return _CodeVersion._uuid


def register() -> None:
    common.register_backend_for_device(DEVICE, CppScheduling, OpenRegPythonWrapperCodegen,
                                       device_custom_pass=_CodeVersion())
    common.register_device_op_overrides(DEVICE, CpuDeviceOpOverrides())
    cpu_like.install()
