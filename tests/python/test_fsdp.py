"""FSDP2 (``fully_shard``) and torch.distributed.checkpoint on openreg over gloo.

Two ranks of this file (``python test_fsdp.py <rank> <dir>``) run every case in turn
on one machine, rendezvous through a FileStore and are waited for with a limit, as in
test_distributed.py (one pair for all cases: a rank's start-up, torch and FSDP2 imports
and gloo, costs more than its training). Each test checks its case's outcome.
References: single-process CPU training on the concatenated batch (float32), the same
FSDP2 run on CPU tensors (mixed precision), the gathered parameters (checkpoints; also
read back in this single, non-distributed process).
"""

import datetime
import os
import sys
import warnings

import pytest
import ranks as rank_harness  # (the fixture below is named `ranks`)

WORLD = 2
CASES = ("train", "mixed", "checkpoint")
RANK_TIMEOUT = 150  # seconds the pair of ranks may take for all cases, start-up included
PG_TIMEOUT = datetime.timedelta(seconds=30)  # a collective that waits for a lost peer
STEPS, PER_RANK = 3, 4
D_IN, D, HIDDEN, D_OUT = 6, 12, 20, 3  # the head's 3 rows: FSDP2 pads its shards (2 and 1 rows)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Runs the pair once: (directory, [output of rank 0, of rank 1])."""
    tmp = tmp_path_factory.mktemp("fsdp")
    procs = rank_harness.start(__file__, lambda rank: (rank, tmp), WORLD)
    return tmp, [out for _, out in rank_harness.finish(procs, "fsdp", RANK_TIMEOUT)]


def _check_case(ranks, case):
    _, outputs = ranks
    for rank, out in enumerate(outputs):
        # A rank stops at its first failing case (the other then fails at PG_TIMEOUT).
        assert f"{case} rank {rank} ok" in out, f"{case}: rank {rank} did not pass it:\n{out[-6000:]}"


def test_fsdp2_matches_single_process(ranks):
    _check_case(ranks, "train")


def test_fsdp2_mixed_precision_matches_cpu(ranks):
    _check_case(ranks, "mixed")


def test_checkpoint_save_on_openreg_load_on_cpu_and_back(ranks):
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    _check_case(ranks, "checkpoint")  # saved, reloaded into a fresh FSDP2 model, compared
    tmp_path = ranks[0]
    # This process is a plain single process: no process group, a CPU model.
    gathered = torch.load(tmp_path / "gathered.pt")
    for ckpt in ("ckpt", "ckpt_async", "ckpt_staged"):
        model = _model()
        state = {"model": model.state_dict()}
        with warnings.catch_warnings():  # "... assuming the intent is to load in a single process": it is
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load(state, checkpoint_id=str(tmp_path / ckpt), no_dist=True)
            # The whole checkpoint, optimizer included, as one torch.save file.
            dcp_to_torch_save(str(tmp_path / ckpt), str(tmp_path / f"{ckpt}.pt"))
        model.load_state_dict(state["model"])
        assert sorted(state["model"]) == sorted(gathered["params"])
        for name, p in model.named_parameters():
            assert p.device.type == "cpu"
            torch.testing.assert_close(
                p.detach(), gathered["params"][name], rtol=0, atol=0, msg=lambda m, n=name: f"{ckpt} {n}: {m}"
            )
        optim = torch.load(tmp_path / f"{ckpt}.pt")["optim"]["state"]
        assert sorted(optim) == sorted(gathered["optim"])
        for name, states in gathered["optim"].items():
            for key, value in states.items():
                got = optim[name][key]
                assert got.device.type == "cpu", (ckpt, name, key, got.device)
                torch.testing.assert_close(
                    got, value, rtol=0, atol=0, msg=lambda m, n=name, k=key: f"{ckpt} {n} {k}: {m}"
                )


@pytest.mark.parametrize("weight_dtype", ["bfloat16", "float32"])
def test_bf16_layer_norm_backward(weight_dtype):
    """What FSDP2's bf16 policy runs (bf16 weights; float32 weights is autocast's mixed
    case): the device keeps the saved statistics in float32, as CUDA does, and aten_ref's
    CPU backward wanted them in bf16 ("expected scalar type BFloat16 but found Float"), on
    chains where aten_ref runs it (OPENREG_ENGINE=aten_ref or eigen). Against float64; the
    bound is the CPU's own bf16 error (measured <= 1.3e-2 of the largest value) with room."""
    import torch

    torch.manual_seed(0)
    x, g = torch.randn(64, 12), torch.randn(64, 12)
    w, b = 1 + 0.1 * torch.randn(12), 0.1 * torch.randn(12)

    def run(device, dtype, param_dtype):
        leaves = [
            t.to(device, d, copy=True).requires_grad_() for t, d in ((x, dtype), (w, param_dtype), (b, param_dtype))
        ]
        y = torch.nn.functional.layer_norm(leaves[0], (12,), leaves[1], leaves[2], 1e-5)
        y.backward(g.to(device, dtype))
        return [t.detach().cpu().double() for t in [y] + [leaf.grad for leaf in leaves]]

    want = run("cpu", torch.float64, torch.float64)
    got = run("openreg", torch.bfloat16, getattr(torch, weight_dtype))
    for name, a, e in zip(("out", "grad input", "grad weight", "grad bias"), got, want):
        torch.testing.assert_close(a, e, rtol=0, atol=2**-5 * e.abs().max().item(), msg=lambda m, n=name: f"{n}: {m}")


# ----------------------------------------------------------------------- model


def _model():
    """A small transformer-ish stack (pre-norm MLP blocks with residuals), float32, CPU,
    the same initial weights in every process."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(D)
            self.up = nn.Linear(D, HIDDEN)
            self.down = nn.Linear(HIDDEN, D)

        def forward(self, x):
            return x + self.down(nn.functional.gelu(self.up(self.norm(x))))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Linear(D_IN, D)
            self.blocks = nn.ModuleList([Block(), Block()])
            self.norm = nn.LayerNorm(D)
            self.head = nn.Linear(D, D_OUT)

        def forward(self, x):
            h = self.embed(x)
            for block in self.blocks:
                h = block(h)
            return self.head(self.norm(h))

    torch.manual_seed(0)
    return Net()


def _batches():
    """STEPS batches of WORLD * PER_RANK samples (rank r takes rows r*PER_RANK...)."""
    import torch

    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(WORLD * PER_RANK, D_IN, generator=g), torch.randint(0, D_OUT, (WORLD * PER_RANK,), generator=g))
        for _ in range(STEPS)
    ]


def _optimizer(params):
    import torch

    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01)  # foreach step on DTensors


def _shard(model, mesh, **kwargs):
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block, mesh=mesh, **kwargs)
    fully_shard(model, mesh=mesh, **kwargs)
    return model


def _train(model, opt, rank, device, steps=STEPS, batches=None, micro=1):
    """Steps on this rank's share of each batch; FSDP2 averages the gradients over ranks,
    so the ranks together take the steps of one process on the whole batch. With micro > 1
    the share is split in micro-batches whose gradients accumulate unreduced
    (set_requires_gradient_sync(False)) until the last one: the same step again."""
    import torch

    loss_fn = torch.nn.CrossEntropyLoss()
    mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK) if rank is not None else slice(None)
    for x, y in (batches or _batches())[:steps]:
        opt.zero_grad()
        xs, ys = x[mine].chunk(micro), y[mine].chunk(micro)
        for m in range(micro):
            if micro > 1:
                model.set_requires_gradient_sync(m == micro - 1)
            (loss_fn(model(xs[m].to(device)), ys[m].to(device)) / micro).backward()
        opt.step()
    return model


def _full_params(model):
    """Every parameter gathered from the ranks (DTensor.full_tensor: an all-gather), on the CPU."""
    return {name: p.full_tensor().detach().cpu() for name, p in model.named_parameters()}


def _full(t):
    """A DTensor gathered from the ranks (or a plain tensor: AdamW's step), on the CPU."""
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().cpu()


def _check_sharded(model, rank, device="openreg"):
    from torch.distributed.tensor import DTensor

    for name, p in model.named_parameters():
        assert isinstance(p, DTensor), f"rank {rank} {name} is not sharded: {type(p)}"
        assert p.to_local().device.type == device, f"rank {rank} {name} on {p.to_local().device}"


def _assert_params(got, want, rank, what, tol):
    import torch

    assert sorted(got) == sorted(want), what
    for name in want:
        torch.testing.assert_close(
            got[name], want[name], rtol=tol, atol=tol, msg=lambda m, n=name: f"rank {rank} {what} {n}: {m}"
        )


# ----------------------------------------------------------------------- ranks


def _case_train(rank, mesh, tmp):
    """float32 FSDP2 on openreg equals single-process CPU training on the whole batch."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy

    model0 = _model()
    reference = _train(model0, _optimizer(model0.parameters()), None, "cpu")
    want = {n: p.detach() for n, p in reference.named_parameters()}
    # HSDP: replicated over the 2 ranks, sharded over 1; gradients are all-reduced.
    hsdp = init_device_mesh("openreg", (WORLD, 1), mesh_dim_names=("replicate", "shard"))
    configs = [
        (mesh, {"reshard_after_forward": True}, 1),
        (mesh, {"reshard_after_forward": False}, 1),
        (mesh, {}, 2),  # two micro-batches, gradients reduced with the second
        # Sharded parameters, gradients and optimizer step on the CPU; FSDP2 copies each
        # shard to the device for the all-gather and the gradient back.
        (mesh, {"offload_policy": CPUOffloadPolicy()}, 1),
        (hsdp, {}, 1),
    ]
    for m, kwargs, micro in configs:
        offload = "offload_policy" in kwargs
        model = _shard(_model() if offload else _model().to("openreg"), m, **kwargs)
        _check_sharded(model, rank, "cpu" if offload else "openreg")
        _train(model, _optimizer(model.parameters()), rank, "openreg", micro=micro)
        _check_sharded(model, rank, "cpu" if offload else "openreg")
        what = f"mesh {tuple(m.shape)} {kwargs} micro={micro}"
        _assert_params(_full_params(model), want, rank, what, 1e-5)


def _case_mixed(rank, mesh, tmp):
    """bf16 parameters for compute, float32 reduce-scatter, float32 sharded master weights:
    on openreg against the same FSDP2 run on CPU tensors (the same gloo, the same casts,
    only the device's kernels differ)."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    cpu_mesh = init_device_mesh("cpu", (WORLD,))
    initial = {n: p.detach() for n, p in _model().named_parameters()}
    seen = []  # (device, dtype) of the weights a Linear computes with, and of the gradients

    def check_compute_dtype(module, args):
        seen.append((module.weight.device.type, module.weight.dtype, args[0].dtype))

    results = {}
    for device, m in (("cpu", cpu_mesh), ("openreg", mesh)):
        model = _shard(_model().to(device), m, mp_policy=policy)
        model.blocks[1].up.register_forward_pre_hook(check_compute_dtype)
        # SGD, not Adam: its update is proportional to the gradient, so a rounding
        # difference of a gradient stays as small in the weights (Adam's first step is
        # lr * sign(gradient): a near-zero gradient rounded across zero moves by 2 lr).
        _train(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), rank, device)
        grads = {p.grad.to_local().dtype for p in model.parameters()}
        assert grads == {torch.float32}, f"rank {rank} {device}: sharded gradients {grads}"
        results[device] = _full_params(model)
    assert set(seen) == {("cpu", torch.bfloat16, torch.bfloat16), ("openreg", torch.bfloat16, torch.bfloat16)}, seen
    # The engines' bf16 kernels may round otherwise than the CPU's (accumulation order,
    # float32 accumulators: onednn's bf16 layer norm is closer to float64 than the CPU's),
    # so a gradient may differ by a bf16 ulp or so (2**-8 of its size). The weights' change
    # over the steps is a sum of lr-scaled gradients, so it differs by about as much
    # relative to its own size: measured at most 0.0054 of the change (eigen, onednn; 0 on
    # aten_ref, the CPU's kernels). Allow 2**-5 (8 ulps). A float32 run would be within
    # that too (it differs from bf16 by the same rounding), hence the dtype checks above.
    for name, want in results["cpu"].items():
        got = results["openreg"][name]
        change = (want - initial[name]).abs().max().item()
        err = (got - want).abs().max().item()
        assert err <= 2**-5 * change, f"rank {rank} {name}: openreg differs from cpu by {err}, the change is {change}"


def _case_checkpoint(rank, mesh, tmp):
    """dcp.save of the sharded state (model and optimizer), dcp.load into a fresh FSDP2
    model: equal parameters and optimizer state, and the next step equal too. Also
    dcp.async_save of the same state, staged by the caller and in the background."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    ckpt = os.path.join(tmp, "ckpt")
    batches = _batches()
    model = _shard(_model().to("openreg"), mesh)
    opt = _optimizer(model.parameters())
    _train(model, opt, rank, "openreg", steps=STEPS - 1, batches=batches)
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=ckpt)
    gathered = {
        "params": _full_params(model),
        "optim": {name: {k: _full(v) for k, v in opt.state[p].items()} for name, p in model.named_parameters()},
    }
    if rank == 0:
        torch.save(gathered, os.path.join(tmp, "gathered.pt"))  # read by the single-process check
    # The same state saved in the background (read back by the single-process check) while
    # this rank goes on below, training the model it snapshots. A group of its own for each
    # upload thread: their collectives would otherwise interleave with the training's, or
    # each other's, in another order on each rank (so it is on CPU tensors too).
    msd, osd = get_state_dict(model, opt)
    groups = [dist.new_group(backend="gloo", timeout=PG_TIMEOUT) for _ in range(2)]  # one per upload thread
    pending = [dcp.async_save({"model": msd, "optim": osd}, checkpoint_id=ckpt + "_async", process_group=groups[0])]
    # Staged in a background thread too: non-blocking copies on a torch.Stream() of the
    # device; the state may change once staging_completion is done.
    with warnings.catch_warnings():  # torch pins staging memory on CUDA only, and says so
        warnings.filterwarnings("ignore", message="Ignoring pin_memory flag")
        stager = DefaultStager(StagingOptions(use_async_staging=True, use_non_blocking_copy=True))
    response = dcp.async_save(
        {"model": msd, "optim": osd}, checkpoint_id=ckpt + "_staged", process_group=groups[1], async_stager=stager
    )
    response.staging_completion.result()
    pending.append(response.upload_completion)

    torch.manual_seed(123)  # a different start, so a missed tensor shows
    fresh = _shard(_model().to("openreg"), mesh)
    for p in fresh.parameters():
        torch.nn.init.normal_(p)
    fresh_opt = _optimizer(fresh.parameters())
    msd, osd = get_state_dict(fresh, fresh_opt)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=ckpt)
    set_state_dict(fresh, fresh_opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    _check_sharded(fresh, rank)
    _assert_params(_full_params(fresh), gathered["params"], rank, "reloaded", 0)
    for name, p in fresh.named_parameters():
        st = fresh_opt.state[p]
        assert sorted(st) == sorted(gathered["optim"][name]), (name, sorted(st))
        for k, want in gathered["optim"][name].items():
            torch.testing.assert_close(_full(st[k]), want, rtol=0, atol=0, msg=lambda m, n=name, k=k: f"{n} {k}: {m}")
    # The last step from the reloaded state is the original's last step.
    _train(model, opt, rank, "openreg", steps=STEPS, batches=batches[STEPS - 1:])
    _train(fresh, fresh_opt, rank, "openreg", steps=STEPS, batches=batches[STEPS - 1:])
    _assert_params(_full_params(fresh), _full_params(model), rank, "step after reload", 0)
    for upload in pending:
        upload.result()
    stager.close()
    dist.barrier()


def _rank_main(rank, tmp):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    torch.openreg.set_device(rank % torch.openreg.device_count())  # before the mesh, as on CUDA
    dist.init_process_group(
        "gloo", init_method=f"file://{os.path.join(tmp, 'store')}", rank=rank, world_size=WORLD, timeout=PG_TIMEOUT
    )
    mesh = init_device_mesh("openreg", (WORLD,))
    cases = {"train": _case_train, "mixed": _case_mixed, "checkpoint": _case_checkpoint}
    for case in CASES:
        cases[case](rank, mesh, tmp)
        print(f"{case} rank {rank} ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    _rank_main(int(sys.argv[1]), sys.argv[2])
