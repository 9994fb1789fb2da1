"""What generated openreg code calls at run time."""

from .. import _C


def wait_for_device_work() -> None:
    """Waits until the worker has run every queued op (a generated kernel runs next)."""
    _C._wait_for_queue()
