"""Makes Inductor treat openreg graphs as it treats CPU graphs where the choice is
about the generated C++ code.

Inductor picks its code generator per device (inductor.py registers CppScheduling for
openreg), but a few of its decisions test ``device.type == "cpu"`` rather than ask the
device's scheduler. For openreg they must take the CPU branch, since openreg's kernels
are the CPU's C++ kernels:

* ``get_current_backend()`` names the kernel language: "cpp" (``config.cpu_backend``),
  not "triton". It decides, e.g., whether bfloat16/float16 math is upcast the Triton way.
* ``BaseSchedulerNode.is_cpu()`` keeps the scheduler from reindexing loops for fusion in
  ways CppScheduling does not support (it crashed on a Linear + GELU backward).
* ``ir.is_cpu()``: the CPU's thresholds for when to realise a buffer.

Each is wrapped, not replaced: for every other device the original answers. The list
was found by reading every ``== "cpu"`` test in torch 2.13's Inductor (docs/design.md,
"torch.compile", says which ones are left alone and why).
"""

import functools

DEVICE = "openreg"


def _device_type(x):
    return getattr(x, "type", x)


def install() -> None:
    import torch._inductor.codegen.common as codegen_common
    import torch._inductor.config as config
    import torch._inductor.ir as ir
    import torch._inductor.kernel.mm_common as mm_common
    import torch._inductor.scheduler as scheduler
    import torch._inductor.utils as utils

    original_backend = utils.get_current_backend

    @functools.wraps(original_backend)
    def get_current_backend(device_type=None):
        if device_type is None:
            from torch._inductor.virtualized import V

            device_type = V.graph.get_current_device_or_throw().type
        if device_type == DEVICE:
            return config.cpu_backend
        return original_backend(device_type)

    # Modules that imported the function by name look it up in their own globals.
    for module in (utils, codegen_common, scheduler, mm_common):
        module.get_current_backend = get_current_backend

    original_node_is_cpu = scheduler.BaseSchedulerNode.is_cpu

    def node_is_cpu(self) -> bool:
        device = self.get_device()
        return (device is not None and device.type == DEVICE) or original_node_is_cpu(self)

    scheduler.BaseSchedulerNode.is_cpu = node_is_cpu

    original_ir_is_cpu = ir.is_cpu

    def ir_is_cpu(x) -> bool:
        return ir.get_device_type(x) == DEVICE or original_ir_is_cpu(x)

    ir.is_cpu = ir_is_cpu
