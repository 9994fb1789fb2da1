"""torch.distributed on openreg tensors through gloo (python/openreg/distributed.py).

Each test starts two ranks of this file (``python test_distributed.py <case> <rank>
<store dir>``) on one machine, rendezvous through a FileStore, and waits for both with
a timeout, so a hang fails the test instead of stalling the suite. Every check runs in
the ranks: the collective on device tensors against the same collective on CPU tensors
(gloo's own CPU path, the independent reference), DDP against single-process training.
"""

import datetime
import os
import sys

import pytest
import ranks

WORLD = 2
_BACKENDS = {"gloo": "gloo", "cpu:gloo,openreg:gloo": "explicit", "default": "default"}
RANK_TIMEOUT = 90  # seconds a pair of ranks may take, start-up included
PG_TIMEOUT = datetime.timedelta(seconds=20)  # a collective that waits for a lost peer


def _run_ranks(case, tmp_path):
    # Plain gloo aborts the process on a size mismatch (gloo::EnforceNotMet), CPU tensors
    # included; TORCH_DISTRIBUTED_DEBUG=DETAIL checks shapes and dtypes on every rank first.
    env = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"} if case == "mismatch" else None
    procs = ranks.start(__file__, lambda rank: (case, rank, tmp_path), WORLD, env)
    for rank, (code, out) in enumerate(ranks.finish(procs, case, RANK_TIMEOUT)):
        assert code == 0, f"{case}: rank {rank} failed (exit {code}):\n{out[-6000:]}"
        assert f"{case} rank {rank} ok" in out, out[-3000:]
        # The checked collectives made a side group; none may be left to the interpreter's
        # finalisation (under TORCH_DISTRIBUTED_DEBUG=DETAIL torch's wrapper checks instead).
        made = 0 if case == "mismatch" else 1
        assert f"side groups after the last collective: {made}" in out, out[-3000:]
        assert "side groups alive at exit: 0" in out, out[-3000:]


# "default": init_process_group() without a backend, which picks by the accelerator.
@pytest.mark.parametrize("backend", ["gloo", "cpu:gloo,openreg:gloo", "default"])
def test_collectives(tmp_path, backend):
    _run_ranks("collectives_" + _BACKENDS[backend], tmp_path)


def test_ddp(tmp_path):
    _run_ranks("ddp", tmp_path)


def test_mismatch_raises_on_every_rank(tmp_path):
    _run_ranks("mismatch", tmp_path)


# ----------------------------------------------------------------------- ranks


def _same(fn, rank):
    """fn(device) -> tensors (or a list), run on "cpu" then "openreg": equal results, or
    the same exception message from both."""
    import torch

    results = []
    for device in ("cpu", "openreg"):
        try:
            out = fn(device)
            out = [out] if isinstance(out, torch.Tensor) else list(out)
            results.append(("ok", [t.cpu() for t in out]))
        except Exception as e:  # noqa: BLE001 - compared below
            results.append(("raised", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"))
    (kind_cpu, cpu), (kind_dev, dev) = results
    name = getattr(fn, "__name__", "check")
    assert kind_cpu == kind_dev, f"rank {rank} {name}: cpu {kind_cpu} {cpu if kind_cpu == 'raised' else ''}, openreg {kind_dev} {dev if kind_dev == 'raised' else ''}"
    if kind_cpu == "raised":
        assert cpu == dev, f"{name}: cpu raised {cpu!r}, openreg raised {dev!r}"
        return
    assert len(cpu) == len(dev), name
    for c, d in zip(cpu, dev):
        torch.testing.assert_close(d, c, rtol=0, atol=0, msg=lambda m: f"rank {rank} {name}: {m}")


def _collectives(rank):
    import torch
    import torch.distributed as dist

    R = dist.ReduceOp
    base = torch.arange(1, 13, dtype=torch.float32).reshape(3, 4) * (rank + 1)
    ints = torch.tensor([0b0110, 0b1010, 7, -3], dtype=torch.int64) + rank

    for op in (R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG, R.BAND, R.BOR, R.BXOR):
        for src in (base, ints):
            def all_reduce(device, op=op, src=src):
                t = src.to(device, copy=True)
                dist.all_reduce(t, op=op)
                return t
            _same(all_reduce, rank)

    def all_reduce_after_queued_work(device):
        # The collective sees what the queue computes just before it.
        t = torch.zeros(1 << 16, device=device)
        for _ in range(20):
            t.add_(1.0).mul_(1.0)
        t.add_(rank)
        dist.all_reduce(t)
        return t
    _same(all_reduce_after_queued_work, rank)

    def all_reduce_async(device):
        t = base.to(device, copy=True)
        work = dist.all_reduce(t, async_op=True)
        work.wait()
        (fut,) = work.get_future().value()
        assert fut.device.type == device and fut.data_ptr() == t.data_ptr()
        return t * 2  # queued after wait(): sees the reduced values

    _same(all_reduce_async, rank)

    def all_reduce_async_error(device):  # gloo's error reaches wait(), as on CPU
        t = ints.to(device, copy=True)
        dist.all_reduce(t, op=R.AVG, async_op=True).wait()
        return t
    _same(all_reduce_async_error, rank)

    def all_reduce_dropped_tensor(device):
        # The caller drops its tensor before the work ends: gloo's alias keeps the memory.
        work = dist.all_reduce(torch.full((1 << 18,), float(rank + 1), device=device), async_op=True)
        filler = [torch.full((1 << 18,), -1.0, device=device) for _ in range(4)]
        work.wait()
        return [work.get_future().value()[0]] + filler[:1]
    _same(all_reduce_dropped_tensor, rank)

    def all_reduce_noncontiguous(device):
        t = base.to(device, copy=True).t()
        dist.all_reduce(t)
        return t
    _same(all_reduce_noncontiguous, rank)

    def broadcast(device):
        t = base.to(device, copy=True)
        dist.broadcast(t, src=1)
        return t
    _same(broadcast, rank)

    def reduce(device):
        t = base.to(device, copy=True)
        dist.reduce(t, dst=0, op=R.MAX)
        return t
    _same(reduce, rank)

    def all_gather(device):
        out = [torch.empty(3, 4, device=device) for _ in range(2)]
        dist.all_gather(out, base.to(device, copy=True))
        return out
    _same(all_gather, rank)

    def all_gather_into_tensor(device):
        out = torch.empty(6, 4, device=device)
        dist.all_gather_into_tensor(out, base.to(device, copy=True))
        return out
    _same(all_gather_into_tensor, rank)

    def reduce_scatter_tensor(device):
        out = torch.empty(2, 4, device=device, dtype=torch.float64)
        src = torch.arange(16, dtype=torch.float64).reshape(4, 4) + 10 * rank
        dist.reduce_scatter_tensor(out, src.to(device, copy=True), op=R.SUM)
        return out
    _same(reduce_scatter_tensor, rank)

    def all_to_all_single(device):
        src = torch.arange(5, dtype=torch.int32) + 100 * rank
        in_splits = [2, 3] if rank == 0 else [1, 4]
        out_splits = [2, 1] if rank == 0 else [3, 4]
        out = torch.empty(sum(out_splits), dtype=torch.int32, device=device)
        dist.all_to_all_single(out, src.to(device, copy=True), out_splits, in_splits)
        return out
    _same(all_to_all_single, rank)

    def all_to_all_single_even(device):
        out = torch.empty(4, 3, device=device)
        dist.all_to_all_single(out, base.reshape(4, 3).to(device, copy=True))
        return out
    _same(all_to_all_single_even, rank)

    def gather(device):
        t = base.to(device, copy=True)
        out = [torch.empty(3, 4, device=device) for _ in range(2)] if rank == 0 else None
        dist.gather(t, out, dst=0)
        return out if rank == 0 else [t]
    _same(gather, rank)

    def scatter(device):
        out = torch.empty(3, 4, device=device)
        chunks = [base.to(device, copy=True) + 1, base.to(device, copy=True) - 1] if rank == 0 else None
        dist.scatter(out, chunks, src=0)
        return out
    _same(scatter, rank)

    def send_recv(device):
        t = base.to(device, copy=True)
        got = torch.empty(3, 4, device=device)
        if rank == 0:
            dist.send(t, dst=1)
            dist.recv(got, src=1)
        else:
            dist.recv(got, src=0)
            dist.send(t + got, dst=0)
        return got

    _same(send_recv, rank)

    def isend_irecv(device):
        t = base.to(device, copy=True) * 3
        got = torch.empty(3, 4, device=device)
        works = [dist.isend(t, dst=1 - rank), dist.irecv(got, src=1 - rank)]
        for w in works:
            w.wait()
        return got
    _same(isend_irecv, rank)

    def wrong_device_count(device):  # all_gather with a wrong list length: gloo's check
        out = [torch.empty(3, 4, device=device)]
        dist.all_gather(out, base.to(device, copy=True))
        return out
    _same(wrong_device_count, rank)

    dist.barrier()
    dist.barrier(device_ids=None)


def _ddp(rank):
    import copy

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 16)
            self.b = torch.nn.Linear(16, 16)
            self.unused = torch.nn.Linear(16, 16)
            self.head = torch.nn.Linear(16, 3)

        def forward(self, x, use_unused=False):
            h = torch.relu(self.a(x))
            h = torch.tanh(self.b(h))
            if use_unused:
                h = self.unused(h)
            return self.head(h)

    torch.manual_seed(0)
    reference = Net()  # the single-process model: CPU, the full batch of both ranks
    steps, per_rank = 3, 4
    batches = [(torch.randn(WORLD * per_rank, 8), torch.randint(0, 3, (WORLD * per_rank,))) for _ in range(2 * steps)]
    loss_fn = torch.nn.CrossEntropyLoss()

    def train_reference(micro):
        model = copy.deepcopy(reference)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for step in range(steps):
            opt.zero_grad()
            for m in range(micro):
                x, y = batches[step * micro + m]
                (loss_fn(model(x), y) / micro).backward()
            opt.step()
        return model

    def train_ddp(micro, **kwargs):
        model = copy.deepcopy(reference).to("openreg")
        if not kwargs.get("find_unused_parameters"):
            del model.unused  # DDP without find_unused_parameters needs every parameter used
        ddp = DDP(model, **kwargs)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
        mine = slice(rank * per_rank, (rank + 1) * per_rank)
        for step in range(steps):
            opt.zero_grad()
            for m in range(micro):
                x, y = batches[step * micro + m]
                x, y = x[mine].to("openreg"), y[mine].to("openreg")
                if m < micro - 1:
                    with ddp.no_sync():  # gradients accumulate locally, reduced with the last one
                        (loss_fn(ddp(x), y) / micro).backward()
                else:
                    (loss_fn(ddp(x), y) / micro).backward()
            opt.step()
        return model

    configs = [
        (1, {}),
        (1, {"bucket_cap_mb": 0.0005}),  # a bucket per parameter or two: several allreduces
        (1, {"gradient_as_bucket_view": True, "bucket_cap_mb": 0.001}),
        (2, {}),  # no_sync
        (1, {"find_unused_parameters": True}),
    ]
    ref1, ref2 = train_reference(1), train_reference(2)
    for micro, kwargs in configs:
        model = train_ddp(micro, **kwargs)
        ref = ref1 if micro == 1 else ref2
        ref_params = dict(ref.named_parameters())
        for name, p in model.named_parameters():
            q = ref_params[name]
            torch.testing.assert_close(
                p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-5,
                msg=lambda m, name=name: f"rank {rank} DDP {micro} {kwargs} {name}: {m}",
            )
        if hasattr(model, "unused"):  # never used, so never reduced nor stepped
            torch.testing.assert_close(model.unused.weight.detach().cpu(), reference.unused.weight.detach())
            assert model.unused.weight.grad is None


def _mismatch(rank):
    import torch
    import torch.distributed as dist

    def shapes(device):
        t = torch.ones(4 + 4 * rank, device=device)
        dist.all_reduce(t)
        return t

    def dtypes(device):
        t = torch.ones(4, device=device, dtype=torch.float32 if rank == 0 else torch.float64)
        dist.all_reduce(t)
        return t

    for fn in (shapes, dtypes):
        raised = []
        for device in ("cpu", "openreg"):
            try:
                fn(device)
                raised.append(None)
            except RuntimeError as e:
                # The wrapper's check names the mismatch (not gloo, not openreg's own checks).
                raised.append("mismatch" if "Detected mismatch between collectives" in str(e) else str(e)[:300])
            # A failed collective leaves gloo's pairs unusable: a fresh group for each try.
            dist.destroy_process_group()
            _init(rank, os.environ["_OPENREG_DIST_STORE"] + f".{fn.__name__}.{device}", "gloo")
            # Every rank connected before any moves on: a rank that exits (after the last
            # try) while the other still connects the debug wrapper's helper group closes
            # the pairs under it ("Connection closed by peer", once in a CI run).
            dist.barrier()
        assert raised == ["mismatch", "mismatch"], f"rank {rank} {fn.__name__}: cpu {raised[0]}, openreg {raised[1]}"


def _init(rank, store_path, backend):
    import torch.distributed as dist

    dist.init_process_group(
        backend, init_method=f"file://{store_path}", rank=rank, world_size=WORLD, timeout=PG_TIMEOUT
    )
    if backend is None:
        import torch

        # Gloo for openreg only; the first collective on openreg tensors registers it for
        # the CPU too (the CPU reference of the checks needs it).
        assert torch_accelerator() == "openreg"
        t = torch.full((2,), rank + 1.0, device="openreg")
        dist.all_reduce(t)
        assert t.tolist() == [3.0, 3.0], t


def torch_accelerator():
    import torch

    return torch.accelerator.current_accelerator().type


def _rank_main(case, rank, store_dir):
    import torch  # noqa: F401 - autoloads openreg
    import torch.distributed as dist

    store = os.path.join(store_dir, "store")
    os.environ["_OPENREG_DIST_STORE"] = store
    backend = {"collectives_explicit": "cpu:gloo,openreg:gloo", "collectives_default": None}.get(case, "gloo")
    _init(rank, store, backend)
    {"ddp": _ddp, "mismatch": _mismatch}.get(case, _collectives)(rank)
    dist.destroy_process_group()
    print(f"side groups after the last collective: {len(sys.modules['openreg.distributed']._side_groups)}")
    print(f"{case} rank {rank} ok", flush=True)


def _report_side_groups_at_exit():
    """Registered before torch (and openreg) is imported, so it runs after openreg's own
    exit hooks (atexit runs last-in first-out) and before the interpreter finalises: says
    how many of openreg's agreement-check groups are still alive then (docs/design.md,
    "The side groups end before the interpreter does")."""
    import atexit

    def report():
        side_groups = sys.modules["openreg.distributed"]._side_groups
        print(f"side groups alive at exit: {len(side_groups)}", flush=True)

    atexit.register(report)


if __name__ == "__main__":
    _report_side_groups_at_exit()
    _rank_main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
