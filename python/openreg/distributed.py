"""torch.distributed on openreg tensors through gloo (docs/design.md, "Distributed (gloo)").

Device memory is host memory, so gloo reads and writes openreg tensors in place through
CPU tensors over the same bytes (``openreg._C._cpu_alias``, which also keeps the device
memory allocated while gloo holds the alias). :func:`install` does two things:

- it tells c10d that gloo serves the ``openreg`` device, so ``init_process_group("gloo")``
  and ``"cpu:gloo,openreg:gloo"`` both register the process group's gloo backend for it
  (and ``init_process_group()`` with no backend picks gloo for openreg);
- it replaces torch's PrivateUse1 kernels of the c10d collective ops (which would hand
  openreg tensors to gloo, and gloo only takes CPU and CUDA tensors) with one that waits
  for the device's queued work, swaps every openreg tensor for its CPU alias, runs the
  op's CPU kernel (the same gloo backend) and answers with the device tensors.
"""

import warnings

import torch

#: The c10d ops that take tensors; all of torch's PrivateUse1 registrations.
_OPS = (
    "allreduce_", "allreduce_coalesced_", "broadcast_", "reduce_",
    "allgather_", "_allgather_base_", "allgather_coalesced_", "allgather_into_tensor_coalesced_",
    "reduce_scatter_", "_reduce_scatter_base_", "reduce_scatter_tensor_coalesced_",
    "gather_", "scatter_", "alltoall_", "alltoall_base_",
    "barrier", "send", "recv_", "recv_any_source_",
)

_library = None  # the torch.library.Library holding the kernels (kept alive)


def _is_device_tensor(x) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "openreg"


def _to_cpu(x, back: dict, devices: set):
    """x with every openreg tensor replaced by its CPU alias; back maps id(alias) -> tensor."""
    if _is_device_tensor(x):
        alias = _cpu_alias(x)
        back[id(alias)] = x
        devices.add(x.device.index)
        return alias
    if isinstance(x, (list, tuple)):
        return type(x)(_to_cpu(v, back, devices) for v in x)
    return x


def _to_device(x, back: dict):
    """The inverse of _to_cpu on a result: aliases become their device tensors again."""
    if isinstance(x, torch.Tensor):
        return back.get(id(x), x)
    if isinstance(x, (list, tuple)):
        return type(x)(_to_device(v, back) for v in x)
    return x


def _cpu_alias(t: torch.Tensor) -> torch.Tensor:
    from . import _C

    return _C._cpu_alias(t)


def _unbox_work(work):
    import torch.distributed as dist

    return work if isinstance(work, dist.Work) else dist.Work.unbox(work)


def _device_work(work, back: dict):
    """A Work whose future gives the device tensors (DDP's reducer reads its bucket from
    it), completing when gloo's does; gloo's own when it has no future (send, recv)."""
    import torch.distributed as dist

    work = _unbox_work(work)
    try:
        fut = work.get_future()
    except RuntimeError:
        return work.boxed()
    # back (and the aliases it holds) lives as long as the callback.
    mapped = fut.then(lambda f: _to_device(f.value(), back))
    return torch._C._distributed_c10d._create_work_from_future(mapped).boxed()


def _check_gloo(pg) -> None:
    """The openreg backend must be the gloo backend that serves the CPU (the kernel runs
    the op's CPU kernel); say so instead of running the op on another backend."""
    import torch.distributed as dist

    pg = dist.ProcessGroup.unbox(pg)
    cpu = torch.device("cpu")
    device = torch.device("openreg")
    try:
        cpu_backend = pg._get_backend(cpu)
    except RuntimeError:
        raise RuntimeError(
            "openreg: collectives on openreg tensors run on the process group's gloo backend for the CPU, "
            "and this process group has none: initialise it with backend 'gloo' or 'cpu:gloo,openreg:gloo'"
        ) from None
    device_backend = pg._get_backend(device)
    # TORCH_DISTRIBUTED_DEBUG=DETAIL wraps gloo in a wrapper that checks every collective's
    # shapes and dtypes across ranks first.
    gloo_types = (dist.ProcessGroupGloo, getattr(dist.distributed_c10d, "_ProcessGroupWrapper", dist.ProcessGroupGloo))
    if not isinstance(cpu_backend, gloo_types) or cpu_backend is not device_backend:
        raise RuntimeError(
            "openreg: collectives on openreg tensors need the same gloo backend for 'cpu' and 'openreg' "
            f"(got {type(cpu_backend).__name__} for cpu and {type(device_backend).__name__} for openreg): "
            "initialise the process group with backend 'gloo' or 'cpu:gloo,openreg:gloo'"
        )


def _make_kernel(name: str):
    cpu_op = getattr(torch.ops.c10d, name).default
    arg_names = [a.name for a in cpu_op._schema.arguments]

    def kernel(*args, **kwargs):
        bound = dict(zip(arg_names, args), **kwargs)
        _check_gloo(bound["process_group"])
        back, devices = {}, set()
        cpu_args = _to_cpu(args, back, devices)
        cpu_kwargs = {k: _to_cpu(v, back, devices) for k, v in kwargs.items()}
        # The collective sees the results of the work queued before it (and an earlier
        # op's asynchronous error is raised here, not lost).
        for index in devices:
            torch.openreg.synchronize(index)
        out = cpu_op(*cpu_args, **cpu_kwargs)
        tensors, work = out if isinstance(out, tuple) else (None, out)
        if not bound.get("async_op", True):
            # A blocking call (dist.all_reduce(t)): wait on gloo's own work, which raises
            # its error as on CPU tensors (the wrapping work below would not).
            _unbox_work(work).wait()
        work = _device_work(work, back)
        return work if tensors is None else (_to_device(tensors, back), work)

    kernel.__name__ = f"openreg_{name.strip('_')}"
    return kernel


def install() -> None:
    """Let gloo serve the openreg device (idempotent; nothing when torch has no distributed)."""
    global _library
    if _library is not None or not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        return
    from torch.distributed import Backend

    if "openreg" not in Backend.backend_capability[Backend.GLOO]:
        Backend.backend_capability[Backend.GLOO].append("openreg")
    Backend.default_device_backend_map.setdefault("openreg", Backend.GLOO)
    library = torch.library.Library("c10d", "IMPL")
    with warnings.catch_warnings():
        # Replacing torch's PrivateUse1 kernels is the point; its one-time warning is not news.
        warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
        for name in _OPS:
            library.impl(name, _make_kernel(name), "PrivateUse1")
    _library = library
