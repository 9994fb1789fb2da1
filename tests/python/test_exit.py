"""Interpreter exit right after a backward on the device (python/openreg/_autograd_exit.py).

The crash it prevents is a race (autograd's device thread drops the last graph
task after the caller has begun finalizing), so no single run shows it; these
tests check the two things the fix relies on: after the drain, no graph task of
the device still holds the caller's Python objects, and the hook is installed so
that a script ending right after a backward exits cleanly."""

import contextvars
import weakref

import torch


class _Probe:
    pass


def test_drain_releases_the_last_graph_task_and_what_it_holds(openreg):
    # torch.autograd stashes a copy of the caller's contextvars context in the
    # graph task; a ContextVar set to an object makes that copy observable.
    var = contextvars.ContextVar("openreg_exit_probe")
    probe = _Probe()
    alive = weakref.ref(probe)
    token = var.set(probe)
    try:
        x = torch.ones(64, device="openreg", requires_grad=True)
        (x * 3.0).sum().backward()
    finally:
        var.reset(token)
    del probe
    openreg._autograd_exit.drain_device_threads()
    assert alive() is None, "a graph task on the device still holds the caller's context after the drain"
    assert torch.equal(x.grad.cpu(), torch.full((64,), 3.0))  # the drain touched no user tensor


def test_script_ending_right_after_a_backward_exits_cleanly(run_python):
    code = (
        "import torch, openreg\n"
        "x = torch.randn(32, 32, device='openreg', requires_grad=True)\n"
        "for _ in range(3):\n"
        "    (x @ x).relu().sum().backward()\n"
        "print('done')\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "done" and "terminate" not in proc.stderr, proc.stderr
