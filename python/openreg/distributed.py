"""torch.distributed on openreg tensors through gloo (docs/design.md, "Distributed (gloo)").

Device memory is host memory, so gloo reads and writes openreg tensors in place through
CPU tensors over the same bytes (no copy; each alias owns a reference to the device
storage, so the memory stays allocated while gloo holds it).
:func:`install` (run by ``import openreg``) does two things:

- it tells c10d that gloo serves the ``openreg`` device, so ``init_process_group("gloo")``
  and ``"cpu:gloo,openreg:gloo"`` both register the process group's gloo backend for it
  (and ``init_process_group()`` without a backend picks gloo for openreg);
- it replaces torch's PrivateUse1 kernels of the c10d ops (they hand device tensors to the
  backend, and gloo only takes CPU and CUDA tensors) with one, in C++
  (python/csrc/c10d_on_aliases.cpp), that asks :func:`_before_collective` to check the
  backend and that the ranks agree on the collective, its shapes and dtypes
  (:func:`_check_agreement`), waits for the device's queued work, swaps every openreg
  tensor for its CPU alias, runs the op's CPU kernel (the same gloo backend) and answers
  with the device tensors. The tensors never reach Python (the C++ file says why).
"""

import atexit
import hashlib
import os

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

_installed = False


def _check_gloo(pg):
    """The kernel runs the op's CPU kernel, so the openreg device's backend must be the
    CPU's gloo backend: say so rather than run the op on another backend. Returns the
    process group and that backend."""
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
    return pg, cpu_backend


# ------------------------------------------------------- agreement of the ranks
#
# Gloo checks little across ranks: a collective whose ranks disagree on its size aborts
# the process that receives too much (gloo::EnforceNotMet), on CPU tensors as well. So,
# before gloo runs, the ranks exchange a fingerprint of the collective (its name, root,
# and the shapes and dtypes that must be equal on every rank) over a side gloo group of
# the same ranks, as c10d's ProcessGroupWrapper does under TORCH_DISTRIBUTED_DEBUG=DETAIL;
# when the fingerprints differ, every rank raises the same RuntimeError and the process
# group, which never saw the collective, stays usable. OPENREG_DIST_CHECK=0 skips it.

#: The Python name of each c10d op, and the arguments whose shapes and dtypes every rank
#: must share. "dtype:" arguments may differ in shape across ranks (all_to_all's splits)
#: and are compared by dtype and trailing dimensions only. send/recv are not collective:
#: no check.
_AGREEMENT = {
    "allreduce_": ("all_reduce", ("tensors",)),
    "allreduce_coalesced_": ("all_reduce_coalesced", ("tensors",)),
    "broadcast_": ("broadcast", ("tensors",)),
    "reduce_": ("reduce", ("tensors",)),
    "allgather_": ("all_gather", ("input_tensors",)),
    "_allgather_base_": ("all_gather_into_tensor", ("input_tensor",)),
    "allgather_coalesced_": ("all_gather_coalesced", ("input_list",)),
    "allgather_into_tensor_coalesced_": ("all_gather_into_tensor (coalesced)", ("inputs",)),
    "reduce_scatter_": ("reduce_scatter", ("output_tensors",)),
    "_reduce_scatter_base_": ("reduce_scatter_tensor", ("output_tensor", "input_tensor")),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter_tensor (coalesced)", ("outputs", "inputs")),
    "gather_": ("gather", ("input_tensors",)),
    "scatter_": ("scatter", ("output_tensors",)),
    "alltoall_": ("all_to_all", ("dtype:output_tensors", "dtype:input_tensors")),
    "alltoall_base_": ("all_to_all_single", ("dtype:output", "dtype:input")),
    "barrier": ("barrier", ()),
}

_side_groups = {}  # ProcessGroup -> the gloo group of the same ranks that runs the check


def _describe(x, trailing_only=False) -> str:
    """"float32[3, 4]" (trailing_only: "float32[*, 4]"), lists of them, or repr."""
    if isinstance(x, torch.Tensor):
        dims = [str(d) for d in x.shape]
        if trailing_only and dims:
            dims[0] = "*"
        return f"{str(x.dtype).removeprefix('torch.')}[{', '.join(dims)}]"
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(_describe(v, trailing_only) for v in x) + "]"
    return repr(x)


def _fingerprint(name: str, args: dict) -> str:
    """The collective as every rank must see it, e.g. "all_reduce(tensors=[float32[4]])"."""
    api, checked = _AGREEMENT[name]
    parts = [f"root={args['root_rank']}"] if "root_rank" in args else []
    for arg in checked:
        trailing_only = arg.startswith("dtype:")
        arg = arg.removeprefix("dtype:")
        parts.append(f"{arg}={_describe(args[arg], trailing_only)}")
    return f"{api}({', '.join(parts)})"


def _side_group(pg, timeout):
    """A gloo group of pg's ranks over pg's store, made at pg's first checked collective
    (which every rank of pg reaches: a collective)."""
    import torch.distributed as dist

    side = _side_groups.get(pg)
    if side is None:
        c10d = dist.distributed_c10d
        for stale in [g for g in _side_groups if g not in c10d._world.pg_map]:
            del _side_groups[stale]
        store = dist.PrefixStore(f"openreg_check/{pg.group_name}/", c10d._world.pg_map[pg][1])
        side = _side_groups[pg] = dist.ProcessGroupGloo(store, pg.rank(), pg.size(), timeout)
    return side


def _drop_side_groups() -> None:
    """At exit, while the interpreter still runs: let go of the side groups. c10d's
    destroy_process_group() tears down the groups it knows; these it does not know, so
    without this they would be torn down (their gloo threads joined, their connections
    closed while the other ranks exit too) during the interpreter's finalisation, which is
    where a gloo group that was never destroyed aborts a process (torch CPU's too)."""
    groups = list(_side_groups.values())
    _side_groups.clear()
    del groups  # the last references: each group's destructor joins its threads here


def _all_gather_bytes(side, data: bytes) -> list:
    """Every rank's ``data`` (any lengths), over the side group."""
    length = torch.tensor([len(data)], dtype=torch.int64)
    lengths = torch.empty(side.size(), dtype=torch.int64)
    side._allgather_base(lengths, length).wait()
    width = int(lengths.max())
    mine = torch.zeros(width, dtype=torch.uint8)
    mine[: len(data)] = torch.tensor(list(data), dtype=torch.uint8)
    every = torch.empty(side.size() * width, dtype=torch.uint8)
    side._allgather_base(every, mine).wait()
    return [bytes(every[r * width: r * width + n].tolist()) for r, n in enumerate(lengths.tolist())]


def _lost(name: str, pg, timeout, error: RuntimeError) -> RuntimeError:
    """The exchange's error, with the collective, group and timeout first."""
    import torch.distributed as dist

    return type(error)(
        f"openreg: {_AGREEMENT[name][0]} on openreg tensors, rank {pg.rank()} of process group "
        f"{pg.group_name!r} (global ranks {dist.get_process_group_ranks(pg)}): the ranks could not compare "
        f"this collective within the group's timeout ({timeout.total_seconds():g} s): a rank may have died "
        f"or hung, or called a collective on CPU tensors instead. The exchange raised: {error}"
    )


def _check_agreement(name: str, args: dict, pg, backend):
    """Start comparing this collective's fingerprint with the other ranks of pg; returns
    a function that waits for the answer (None: no check) and raises the same
    RuntimeError on every rank unless all fingerprints are equal. A rank that died or
    hangs makes the exchange fail within pg's timeout; the error then says which
    collective was waiting. (Started before the kernel waits for the device's queue, so
    the exchange overlaps that wait.)"""
    import torch.distributed as dist

    if name not in _AGREEMENT or pg.size() == 1 or os.environ.get("OPENREG_DIST_CHECK", "1") == "0":
        return None
    if not isinstance(backend, dist.ProcessGroupGloo):
        return None  # TORCH_DISTRIBUTED_DEBUG=DETAIL's wrapper checks the same itself
    if pg not in dist.distributed_c10d._world.pg_map:
        return None  # a group c10d does not know: no store to make the side group on
    mine = _fingerprint(name, args)
    timeout = backend.options._timeout
    digest = int.from_bytes(hashlib.blake2b(mine.encode(), digest_size=8).digest(), "little", signed=True)
    digests = torch.empty(pg.size(), dtype=torch.int64)
    try:
        side = _side_group(pg, timeout)
        work = side._allgather_base(digests, torch.tensor([digest], dtype=torch.int64))
    except RuntimeError as e:
        raise _lost(name, pg, timeout, e) from e

    def wait_for_agreement():
        try:
            work.wait()
            if bool((digests == digest).all()):
                return
            every = [b.decode() for b in _all_gather_bytes(side, mine.encode())]
        except RuntimeError as e:
            raise _lost(name, pg, timeout, e) from e
        lines = "\n".join(f"  rank {r}: {f}" for r, f in enumerate(every))
        raise RuntimeError(
            f"openreg: the ranks of process group {pg.group_name!r} called mismatched collectives on "
            f"openreg tensors (they must agree on the collective, its root, shapes and dtypes; "
            f"gloo would abort a process on this):\n{lines}\n"
            "Nothing was sent: the process group is still usable. (OPENREG_DIST_CHECK=0 skips this check.)"
        )

    return wait_for_agreement

_ARG_NAMES = {}  # c10d op name -> the names of its arguments, in order


def _before_collective(name: str, args: tuple):
    """What the c10d ops' PrivateUse1 kernel (python/csrc/c10d_on_aliases.cpp) asks before
    it runs op ``name``: checks the process group's backend and starts the ranks' agreement
    check; returns the function that waits for its answer, or None. ``args`` are the op's
    arguments, each openreg tensor as a meta tensor of its shape and dtype."""
    named = dict(zip(_ARG_NAMES[name], args))
    pg, backend = _check_gloo(named["process_group"])
    return _check_agreement(name, named, pg, backend)


def install() -> None:
    """Let gloo serve the openreg device (idempotent; nothing without gloo)."""
    global _installed
    if _installed or not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        return
    from torch.distributed import Backend

    if "openreg" not in Backend.backend_capability[Backend.GLOO]:
        Backend.backend_capability[Backend.GLOO].append("openreg")
    Backend.default_device_backend_map.setdefault("openreg", Backend.GLOO)
    for name in _OPS:
        _ARG_NAMES[name] = [a.name for a in getattr(torch.ops.c10d, name).default._schema.arguments]
    _C._register_c10d_kernels(list(_OPS), _before_collective)
    _installed = True
    atexit.register(_drop_side_groups)
