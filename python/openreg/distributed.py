"""torch.distributed on openreg tensors through gloo (docs/design.md, "Distributed (gloo)").

Device memory is host memory, so gloo reads and writes openreg tensors in place through
CPU tensors over the same bytes (``_C._cpu_alias``: no copy, and the alias owns a
reference to the device storage, so the memory stays allocated while gloo holds it).
:func:`install` (run by ``import openreg``) does two things:

- it tells c10d that gloo serves the ``openreg`` device, so ``init_process_group("gloo")``
  and ``"cpu:gloo,openreg:gloo"`` both register the process group's gloo backend for it
  (and ``init_process_group()`` without a backend picks gloo for openreg);
- it replaces torch's PrivateUse1 kernels of the c10d ops (they hand device tensors to the
  backend, and gloo only takes CPU and CUDA tensors) with one that waits for the device's
  queued work, swaps every openreg tensor for its CPU alias, runs the op's CPU kernel
  (the same gloo backend) and answers with the device tensors.
"""

import warnings

import torch

from . import _C

#: Every c10d op torch registers a PrivateUse1 kernel for.
_OPS = (
    "allreduce_", "allreduce_coalesced_", "broadcast_", "reduce_",
    "allgather_", "_allgather_base_", "allgather_coalesced_", "allgather_into_tensor_coalesced_",
    "reduce_scatter_", "_reduce_scatter_base_", "reduce_scatter_tensor_coalesced_",
    "gather_", "scatter_", "alltoall_", "alltoall_base_",
    "barrier", "send", "recv_", "recv_any_source_",
)

_library = None  # the torch.library.Library that holds the kernels


class _Aliases:
    """The CPU aliases made for one call, and the device tensors they stand for."""

    def __init__(self):
        self.aliases, self.devices, self.by_id = [], [], {}

    def to_cpu(self, x):
        if isinstance(x, torch.Tensor) and x.device.type == "openreg":
            alias = _C._cpu_alias(x)
            self.aliases.append(alias)
            self.devices.append(x)
            self.by_id[id(alias)] = x
            return alias
        if isinstance(x, (list, tuple)):
            return type(x)(self.to_cpu(v) for v in x)
        return x

    def to_device(self, x):
        if isinstance(x, torch.Tensor):
            return self.by_id.get(id(x), x)
        if isinstance(x, (list, tuple)):
            return type(x)(self.to_device(v) for v in x)
        return x


def _check_gloo(pg) -> None:
    """The kernel runs the op's CPU kernel, so the openreg device's backend must be the
    CPU's gloo backend: say so rather than run the op on another backend."""
    import torch.distributed as dist

    pg = dist.ProcessGroup.unbox(pg)
    device_backend = pg._get_backend(torch.device("openreg"))
    try:
        cpu_backend = pg._get_backend(torch.device("cpu"))
    except RuntimeError:
        # init_process_group() without a backend, or "openreg:gloo": gloo for openreg only.
        # It serves CPU tensors natively, so it becomes the CPU's backend too.
        if not isinstance(device_backend, dist.ProcessGroupGloo):
            raise
        pg._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, device_backend)
        cpu_backend = device_backend
    # TORCH_DISTRIBUTED_DEBUG=DETAIL wraps gloo in a backend that first checks each
    # collective's shapes and dtypes across ranks.
    wrapper = getattr(dist.distributed_c10d, "_ProcessGroupWrapper", dist.ProcessGroupGloo)
    if not isinstance(cpu_backend, (dist.ProcessGroupGloo, wrapper)) or cpu_backend is not device_backend:
        raise RuntimeError(
            "openreg: collectives on openreg tensors need one gloo backend for both 'cpu' and 'openreg' "
            f"(this process group has {type(cpu_backend).__name__} for cpu and {type(device_backend).__name__} "
            "for openreg): initialise it with backend 'gloo' or 'cpu:gloo,openreg:gloo'"
        )


def _make_kernel(name: str):
    import torch.distributed as dist

    cpu_op = getattr(torch.ops.c10d, name).default
    arg_names = [a.name for a in cpu_op._schema.arguments]

    def kernel(*args, **kwargs):
        _check_gloo(dict(zip(arg_names, args), **kwargs)["process_group"])
        calls = _Aliases()
        cpu_args = calls.to_cpu(args)
        cpu_kwargs = {k: calls.to_cpu(v) for k, v in kwargs.items()}
        # Ordered after the work queued before it: the host waits for the queue (and an
        # earlier op's asynchronous error is raised here).
        for index in {t.device.index for t in calls.devices}:
            torch.openreg.synchronize(index)
        out = cpu_op(*cpu_args, **cpu_kwargs)
        tensors, work = out if isinstance(out, tuple) else (None, out)
        work = dist.Work.unbox(work)
        work = _C._device_work(work, calls.aliases, calls.devices).boxed()
        return work if tensors is None else (calls.to_device(tensors), work)

    kernel.__name__ = f"openreg_{name.strip('_')}"
    return kernel


def install() -> None:
    """Let gloo serve the openreg device (idempotent; nothing without gloo)."""
    global _library
    if _library is not None or not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        return
    from torch.distributed import Backend

    if "openreg" not in Backend.backend_capability[Backend.GLOO]:
        Backend.backend_capability[Backend.GLOO].append("openreg")
    Backend.default_device_backend_map.setdefault("openreg", Backend.GLOO)
    library = torch.library.Library("c10d", "IMPL")
    with warnings.catch_warnings():
        # Replacing torch's PrivateUse1 kernels is the point; its one-time warning is no news.
        warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
        for name in _OPS:
            library.impl(name, _make_kernel(name), "PrivateUse1")
    _library = library
