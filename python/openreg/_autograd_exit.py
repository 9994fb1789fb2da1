"""A clean interpreter exit after a backward pass on the device.

PyTorch's autograd engine runs a device's backward nodes on a thread of its own
(one per device index). After the last node of a backward it wakes the caller
and only then drops its reference to the graph task. That task keeps a copy of
the caller's thread-local state, which holds a Python object
(``torch.autograd.graph`` stashes the ``contextvars`` context there). When the
script ends right after a backward, the caller can reach interpreter
finalization before the device thread has dropped its reference; the drop then
takes the GIL of a finalizing interpreter, Python ends the thread with
``pthread_exit``, the unwinding crosses a C++ destructor, and the process aborts
with "terminate called without an active exception" (seen about once in 75
runs of bench/engines.py on a loaded machine; any device with autograd device
threads has the same race).

:func:`drain_device_threads` runs at ``atexit``, which Python calls before
finalization starts: it runs one tiny backward on each device index, through the
C++ engine directly so that no Python object is stashed with it. A device
thread takes tasks in order, so once it has run this one it has finished the
previous backward and dropped its graph task while the interpreter could still
serve the GIL; the drain's own graph task holds no Python object (no stashed
context, no captured gradient).
"""

import atexit

import torch


def drain_device_threads() -> None:
    from . import _C

    if not _C._is_initialized():
        return  # the device was never used: no backward ran on it
    try:
        engine = torch.autograd.Variable._execution_engine
        for index in range(_C._device_count()):
            x = torch.zeros((), device=torch.device("openreg", index), requires_grad=True)
            y = x * 2.0
            # accumulate_grad=True and no `inputs`: the task captures no gradient
            # that Python could own (a returned gradient could be released by the
            # device thread later, which is the very race this avoids).
            engine.run_backward((y,), (torch.ones_like(y),), False, False, (), True, True)
    except Exception:
        pass  # an exit hook must never turn a clean exit into an error


def drain_queue() -> None:
    """Runs the device work still queued (streams: execution_queue.h) before the
    interpreter finalises: a queued op that ran during finalisation, and raised,
    aborted the process the same way."""
    from . import _C

    if _C._is_initialized():
        _C._wait_for_queue()


def install() -> None:
    atexit.register(drain_queue)  # atexit runs last-in first-out: after the drain below
    atexit.register(drain_device_threads)
