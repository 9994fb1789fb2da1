"""The Python wrapper Inductor generates for an openreg graph.

Generated C++ kernels run on the calling thread, while openreg's ops run on the
execution queue's worker behind it (docs/design.md, "torch.compile"). Before each
generated kernel the wrapper waits for the queue: the kernel then reads what queued ops
wrote, no queued op still reads memory the kernel reuses, and the ops enqueued after it
run after it. A queued op's asynchronous error is raised there, before the kernel reads
its output.
"""

from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.virtualized import V

DEVICE = "openreg"


class _OpenRegKernelCalls:
    """Kernel calls of an openreg graph: a wait for the queue, then the C++ kernel."""

    def write_header(self) -> None:
        super().write_header()
        self.imports.splice("from openreg.compile.runtime import wait_for_device_work", strip=True)

    def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True, **kwargs):
        device = device or V.graph.get_current_device_or_throw()
        if device.type == DEVICE and not triton:
            index = device.index if device.index is not None else 0
            self.writeline(f"wait_for_device_work({index})")
            self.writeline(self.wrap_kernel_call(kernel_name, call_args))
            return
        super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton, **kwargs)


class OpenRegSubgraphWrapperCodegen(_OpenRegKernelCalls, SubgraphPythonWrapperCodegen):
    pass


class OpenRegPythonWrapperCodegen(_OpenRegKernelCalls, PythonWrapperCodegen):
    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            return OpenRegSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return OpenRegPythonWrapperCodegen()
