"""Inductor code generation for openreg: C++/OpenMP kernels on device memory.

An openreg tensor's memory is host memory (engines keep tensors there), so the kernels
Inductor generates for the CPU can run on device tensors' data pointers unchanged:
openreg registers CppScheduling (the C++ kernel generator), a Python wrapper that waits
for the execution queue before each generated kernel (wrapper.py), and the CPU's device
op overrides (no device to set, no stream to launch on). Ops Inductor leaves as
fallbacks (matmul, convolution, ...) are ordinary device ops: the engines run them.
"""

import torch
from torch._inductor.codegen import common
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides

from . import cpu_like
from .wrapper import OpenRegPythonWrapperCodegen

DEVICE = "openreg"


def register() -> None:
    common.register_backend_for_device(DEVICE, CppScheduling, OpenRegPythonWrapperCodegen)
    common.register_device_op_overrides(DEVICE, CpuDeviceOpOverrides())
    cpu_like.install()
