"""What generated openreg code calls at run time."""

import torch

from .. import _C


def wait_for_device_work(device_index: int) -> None:
    """Called before each generated kernel (wrapper.py): waits until the worker has run
    every queued op, then raises the asynchronous error of ``device_index``'s queued work,
    if any, as a synchronisation point does; the kernel would read that work's outputs."""
    _C._wait_for_queue()
    torch.accelerator.synchronize(device_index)  # the queue is empty: raises, or returns
