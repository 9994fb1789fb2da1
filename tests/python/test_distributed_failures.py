"""Failures of torch.distributed on openreg tensors (python/openreg/distributed.py): a
rank that dies or hangs, and ranks that disagree on a collective's shapes or dtypes.

Each test starts two ranks of this file (``python test_distributed_failures.py <case>
<rank> <store dir>``) on loopback and kills them after KILL_AFTER seconds, so nothing
can hang the suite. The process groups' timeout is PG_TIMEOUT: a collective that waits
for a lost peer must fail within it.
"""

import datetime
import os
import re
import signal
import sys
import time

import pytest
import ranks

WORLD = 2
PG_TIMEOUT = datetime.timedelta(seconds=5)
SLACK = 5  # seconds a failure may take beyond PG_TIMEOUT on a loaded machine
KILL_AFTER = 90  # seconds a pair of ranks may take, start-up included


def _start_ranks(case, tmp_path, env_extra=None):
    return ranks.start(__file__, lambda rank: (case, rank, tmp_path), WORLD, env_extra)


def _finish(procs, case, stop_after_first=False):
    return ranks.finish(procs, case, KILL_AFTER, stop_after_first)


# ------------------------------------------------------------------ rank failure


@pytest.mark.parametrize("failure", ["exit", "sigkill", "hang", "exit_at_start"])
def test_lost_rank_fails_collectives_within_timeout(tmp_path, failure):
    # Rank 1 takes part in a first round of collectives, then dies (os._exit, SIGKILL)
    # or sleeps forever; rank 0 then runs an all_reduce on CPU tensors, on openreg
    # tensors, and on openreg tensors without openreg's check, each on a group of its
    # own, and reports what each raised and when (see _lost_rank below).
    # exit_at_start: rank 1 exits before any collective, so openreg's side group is
    # still to be made (its rendezvous waits for rank 1 in the store).
    procs = _start_ranks(f"lost_{failure}", tmp_path)
    (code0, out0), (code1, out1) = _finish(procs, failure, stop_after_first=True)
    print(out0)  # what each all_reduce raised, and when (shown by pytest -s or -rA)
    assert code0 == 0, f"rank 0 failed (exit {code0}):\n{out0[-6000:]}\nrank 1:\n{out1[-2000:]}"
    assert f"lost_{failure} rank 0 ok" in out0, out0[-3000:]
    if failure.startswith("exit"):
        assert code1 == 3, (code1, out1[-2000:])
    elif failure == "sigkill":
        assert code1 == -signal.SIGKILL, (code1, out1[-2000:])


def test_lost_rank_fails_ddp_backward_with_the_checks_error(tmp_path):
    # DDP runs its gradient all_reduce from autograd's device thread: the check's error,
    # raised in Python there, must reach rank 0's backward() as that RuntimeError.
    procs = _start_ranks("ddp_backward", tmp_path)
    (code0, out0), (code1, out1) = _finish(procs, "ddp_backward", stop_after_first=True)
    assert code0 == 0, f"rank 0 failed (exit {code0}):\n{out0[-6000:]}\nrank 1:\n{out1[-2000:]}"
    assert "ddp_backward rank 0 ok" in out0, out0[-3000:]
    assert code1 == 3, (code1, out1[-2000:])


# ------------------------------------------------------------ mismatched collectives


def test_mismatch_raises_on_every_rank_and_group_survives(tmp_path):
    # Plain gloo: the rank that receives too much aborts (gloo::EnforceNotMet), on CPU
    # tensors too; openreg checks the fingerprints first (no TORCH_DISTRIBUTED_DEBUG).
    procs = _start_ranks("mismatch", tmp_path, {"TORCH_DISTRIBUTED_DEBUG": "OFF"})
    for rank, (code, out) in enumerate(_finish(procs, "mismatch")):
        assert code == 0, f"mismatch: rank {rank} failed (exit {code}):\n{out[-6000:]}"
        assert f"mismatch rank {rank} ok" in out, out[-3000:]


# ----------------------------------------------------------------------- ranks


def _init(rank, store_dir):
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"file://{os.path.join(store_dir, 'store')}", rank=rank, world_size=WORLD,
        timeout=PG_TIMEOUT,
    )


def _lost_rank(rank, failure):
    import torch
    import torch.distributed as dist

    # The default group for CPU tensors, and one group per openreg variant: a group whose
    # peer is lost stays broken, so each try needs a group that has not failed yet.
    sides = {"cpu": None, "openreg": dist.new_group(timeout=PG_TIMEOUT),
             "openreg unchecked": dist.new_group(timeout=PG_TIMEOUT)}
    if failure == "exit_at_start":
        # The first collective of the openreg group: the check's side group is not made yet.
        sides = {"openreg": sides["openreg"], "cpu": None}
        # new_group returns on a rank once its own connections are up; had rank 1 exited
        # then, rank 0 could still be in its handshake ("Connection closed by peer" from
        # new_group, CI once). The default group's barrier ends only when both ranks made
        # every group; it is no collective of the openreg group.
        dist.barrier()

    def all_reduce(side):
        device = "cpu" if side == "cpu" else "openreg"
        os.environ["OPENREG_DIST_CHECK"] = "0" if side.endswith("unchecked") else "1"
        t = torch.full((1 << 10,), rank + 1.0, device=device)
        dist.all_reduce(t, group=sides[side])
        return t

    if failure != "exit_at_start":
        for side in sides:  # every group (and openreg's side group) is connected and works
            assert all_reduce(side).cpu().eq(3.0).all()
        dist.barrier()
    if rank == 1:
        sys.stdout.flush()
        if failure.startswith("exit"):
            os._exit(3)
        if failure == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(3600)  # hang: the harness kills this rank once rank 0 is done

    bound = PG_TIMEOUT.total_seconds() + SLACK
    for side in sides:
        start = time.monotonic()
        with pytest.raises(RuntimeError) as info:
            all_reduce(side)
        took = time.monotonic() - start
        message = str(info.value)
        print(f"{failure}, {side}: {type(info.value).__name__} after {took:.1f}s: {message}", flush=True)
        assert took < bound, f"{side}: raised after {took:.1f}s, beyond the {bound}s allowed"
        if failure == "hang":  # the peer is alive: only the timeout can end the wait
            assert took > PG_TIMEOUT.total_seconds() - 1, f"{side}: raised after {took:.1f}s"
        if side == "openreg":
            # openreg's context, then gloo's own message.
            assert message.startswith("openreg: all_reduce on openreg tensors, rank 0 of process group"), message
            assert "timeout (5 s)" in message, message
            assert re.search(r"The exchange raised: .*(Timed out|Wait timeout|Connection|peer)", message, re.S), message
        else:  # gloo's message alone, as on CPU tensors (OPENREG_DIST_CHECK=0: no exchange)
            assert re.search(r"Timed out|Connection|peer", message) and "openreg" not in message, message
    print(f"lost_{failure} rank 0 ok", flush=True)
    os._exit(0)  # the groups are broken: skip their teardown


def _lost_in_ddp_backward(rank):
    import torch
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel

    # No buffers to broadcast: after the first steps (and DDP's bucket rebuild), the
    # backward's all_reduce is a step's only collective.
    model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to("openreg"),
                                    broadcast_buffers=False)
    for _ in range(2):
        model(torch.randn(4, 8, device="openreg")).sum().backward()
    if rank == 1:
        sys.stdout.flush()
        os._exit(3)
    start = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        model(torch.randn(4, 8, device="openreg")).sum().backward()
    took = time.monotonic() - start
    message = str(info.value)
    print(f"ddp backward: {type(info.value).__name__} after {took:.1f}s: {message}", flush=True)
    assert took < PG_TIMEOUT.total_seconds() + SLACK, f"raised after {took:.1f}s"
    assert message.startswith("openreg: all_reduce on openreg tensors, rank 0 of process group"), message
    print("ddp_backward rank 0 ok", flush=True)
    os._exit(0)  # the group is broken: skip its teardown


def _mismatch(rank):
    import torch
    import torch.distributed as dist

    def all_reduce_shapes():
        dist.all_reduce(torch.ones(4 + 4 * rank, device="openreg"))

    def all_reduce_dtypes():
        dist.all_reduce(torch.ones(4, device="openreg", dtype=torch.float32 if rank == 0 else torch.float64))

    def broadcast_roots():
        dist.broadcast(torch.ones(4, device="openreg"), src=rank)

    def all_gather_into_tensor_shapes():
        out = torch.empty(2 * (2 + rank), 3, device="openreg")
        dist.all_gather_into_tensor(out, torch.ones(2 + rank, 3, device="openreg"))

    def different_collectives():
        t = torch.ones(4, device="openreg")
        dist.all_reduce(t) if rank == 0 else dist.broadcast(t, src=0)

    def all_to_all_single_dtypes():
        dtype = torch.int32 if rank == 0 else torch.int64
        out = torch.empty(4, dtype=dtype, device="openreg")
        dist.all_to_all_single(out, torch.arange(4, dtype=dtype, device="openreg"))

    # What each rank's line of the error must say, by rank.
    cases = [
        (all_reduce_shapes, ["all_reduce(tensors=[float32[4]])", "all_reduce(tensors=[float32[8]])"]),
        (all_reduce_dtypes, ["all_reduce(tensors=[float32[4]])", "all_reduce(tensors=[float64[4]])"]),
        (broadcast_roots, ["broadcast(root=0, tensors=[float32[4]])", "broadcast(root=1, tensors=[float32[4]])"]),
        (all_gather_into_tensor_shapes,
         ["all_gather_into_tensor(input_tensor=float32[2, 3])", "all_gather_into_tensor(input_tensor=float32[3, 3])"]),
        (different_collectives, ["all_reduce(tensors=[float32[4]])", "broadcast(root=0, tensors=[float32[4]])"]),
        (all_to_all_single_dtypes,
         ["all_to_all_single(output=int32[*], input=int32[*])", "all_to_all_single(output=int64[*], input=int64[*])"]),
    ]
    for fn, lines in cases:
        with pytest.raises(RuntimeError) as info:
            fn()
        message = str(info.value)
        assert "called mismatched collectives on openreg tensors" in message, f"rank {rank} {fn.__name__}: {message}"
        for r, line in enumerate(lines):
            assert f"rank {r}: {line}\n" in message, f"rank {rank} {fn.__name__}: no {line!r} in {message}"
        # Nothing was sent: the same group still reduces, on openreg and CPU tensors
        # (checked against the values each rank put in).
        for device in ("openreg", "cpu"):
            t = torch.full((3,), rank + 1.0, device=device)
            dist.all_reduce(t)
            assert t.cpu().tolist() == [3.0] * 3, (fn.__name__, device, t)
    # A tensor whose shape legitimately differs per rank: all_to_all_single with
    # uneven splits (the same trailing dimensions) passes the check.
    src = torch.arange(5, dtype=torch.int32) + 100 * rank
    out = torch.empty(3 if rank == 0 else 7, dtype=torch.int32, device="openreg")
    dist.all_to_all_single(out, src.to("openreg"), [2, 1] if rank == 0 else [3, 4], [2, 3] if rank == 0 else [1, 4])
    expected = [0, 1, 100] if rank == 0 else [2, 3, 4, 101, 102, 103, 104]
    assert out.cpu().tolist() == expected, out


def _rank_main(case, rank, store_dir):
    import torch  # noqa: F401 - autoloads openreg
    import torch.distributed as dist

    _init(rank, store_dir)
    if case.startswith("lost_"):
        _lost_rank(rank, case.removeprefix("lost_"))
    elif case == "ddp_backward":
        _lost_in_ddp_backward(rank)
    else:
        _mismatch(rank)
    dist.destroy_process_group()
    print(f"{case} rank {rank} ok", flush=True)


if __name__ == "__main__":
    _rank_main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
