"""Streams and events of ``torch.openreg``, shaped like ``torch.cuda``'s.

``Stream`` and ``Event`` subclass the device-generic ``torch.Stream`` and
``torch.Event``, which reach the openreg device guard (core/src/runtime/device_guard.cpp):
a stream is an ordered queue of device work, an event a recorded point in one.
The current stream is per thread and per device, as on CUDA.
"""

import threading
from typing import Any, Optional, Union

import torch

from . import _C

_DeviceLike = Union[torch.device, str, int, None]

# c10 numbers every device's default stream 0 (c10::Stream::DEFAULT's id).
_DEFAULT_STREAM_ID = 0


def _device_index(device: _DeviceLike) -> int:
    """Index of an openreg ``device`` (None or an index-less "openreg": the current one)."""
    from .device_module import _index  # imported here: device_module imports this module

    return _index(device)


def _check_openreg(obj: Any, what: str) -> None:
    device = getattr(obj, "device", None)
    if not isinstance(obj, (torch.Stream, torch.Event)) or getattr(device, "type", None) != "openreg":
        raise TypeError(f"expected an openreg {what}, got {obj!r}")


class Stream(torch.Stream):
    """An ordered queue of work on one openreg device.

    ``Stream(device=None, priority=0)`` makes a new stream on ``device`` (default: the
    current device). Work runs in enqueue order within a stream; streams are ordered
    against each other only through events (``wait_event``, ``wait_stream``).
    ``priority`` is accepted for CUDA compatibility; openreg streams have no priorities.
    """

    def __new__(cls, device: _DeviceLike = None, priority: int = 0, **kwargs: Any):
        if kwargs:  # stream_id / device_index / device_type: an existing stream
            if device is not None:
                raise TypeError("Stream: give either device or stream_id/device_index/device_type, not both")
            self = super().__new__(cls, priority=priority, **kwargs)
            _check_openreg(self, "stream")
            return self
        return super().__new__(cls, device=torch.device("openreg", _device_index(device)), priority=priority)

    def wait_event(self, event: torch.Event) -> None:
        """Work enqueued on this stream from now on runs after ``event``'s point."""
        _check_openreg(event, "event")
        event.wait(self)

    def wait_stream(self, stream: torch.Stream) -> None:
        """Work enqueued on this stream from now on runs after the work already on ``stream``."""
        _check_openreg(stream, "stream")
        if stream != self:
            event = Event()
            event.record(stream)
            self.wait_event(event)

    def record_event(self, event: Optional[torch.Event] = None) -> "Event":
        """Records ``event`` (a new ``Event`` when None) on this stream; returns it."""
        if event is None:
            event = Event()
        _check_openreg(event, "event")
        event.record(self)
        return event

    def query(self) -> bool:
        """True when all the work enqueued on this stream has run."""
        return super().query()

    def synchronize(self) -> None:
        """Waits for the work enqueued on this stream; raises its asynchronous error, if any."""
        super().synchronize()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, torch.Stream):
            return super().__eq__(other)
        return NotImplemented

    __hash__ = torch.Stream.__hash__  # defining __eq__ would otherwise drop it

    def __repr__(self) -> str:
        return f"<torch.openreg.Stream device={self.device} stream_id={self.stream_id}>"

    # ``with s:`` is ``with torch.openreg.stream(s):``. The contexts entered are kept per
    # thread, so one Stream object may be entered again, nested or on another thread.
    def __enter__(self) -> "Stream":
        ctx = StreamContext(self)
        ctx.__enter__()
        self.__dict__.setdefault("_contexts", {}).setdefault(threading.get_ident(), []).append(ctx)
        return self

    def __exit__(self, *exc: Any) -> None:
        contexts = self.__dict__["_contexts"]
        ident = threading.get_ident()
        contexts[ident].pop().__exit__(*exc)
        if not contexts[ident]:
            del contexts[ident]


class Event(torch.Event):
    """A point in an openreg stream: ``Event(enable_timing=False, blocking=False, interprocess=False)``.

    The event belongs to the device of the stream it is first recorded on.
    ``enable_timing`` lets ``elapsed_time`` measure between two events (the time is
    taken where the work runs). ``blocking`` is accepted: openreg's ``synchronize``
    always blocks the calling thread. ``interprocess`` is refused: openreg's queues
    live in one process, so its events cannot be shared with another.
    """

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        if interprocess:
            raise ValueError(
                "openreg events cannot be shared between processes (interprocess=True): the device's work "
                "queues live in this process; create an Event in each process instead"
            )
        self = super().__new__(cls, device="openreg", enable_timing=enable_timing, blocking=blocking)
        # torch.Event.elapsed_time accepts only an exact torch.Event as its argument, not a
        # subclass: a timing event keeps a plain twin, recorded with it, to measure with.
        self._timer = torch.Event(device="openreg", enable_timing=True) if enable_timing else None
        return self

    def record(self, stream: Optional[torch.Stream] = None) -> None:
        """Records the event on ``stream`` (default: the current stream of the current device)."""
        if stream is None:
            stream = current_stream()
        _check_openreg(stream, "stream")
        if self._timer is not None:
            self._timer.record(stream)  # first: work done up to this event means its twin is too
        super().record(stream)

    def wait(self, stream: Optional[torch.Stream] = None) -> None:
        """Work enqueued on ``stream`` (default: the current stream) from now on runs after this event."""
        if stream is None:
            stream = current_stream()
        _check_openreg(stream, "stream")
        super().wait(stream)

    def query(self) -> bool:
        """True when the work before the event's point has run (or it was never recorded)."""
        return super().query()

    def synchronize(self) -> None:
        """Waits until the work before the event's point has run; raises its device's asynchronous error."""
        super().synchronize()

    def elapsed_time(self, end_event: "Event") -> float:
        """Milliseconds from this event to ``end_event``: both created with ``enable_timing=True``,
        recorded, and completed (synchronize first), as on CUDA."""
        if not isinstance(end_event, Event):
            raise TypeError(f"expected a torch.openreg.Event, got {end_event!r}")
        if self._timer is None or end_event._timer is None:
            raise RuntimeError("openreg: elapsed_time needs two events created with enable_timing=True")
        return self._timer.elapsed_time(end_event._timer)

    def ipc_handle(self):
        raise RuntimeError("openreg events cannot be shared between processes: they have no IPC handle")

    @classmethod
    def from_ipc_handle(cls, device, handle):
        raise RuntimeError("openreg events cannot be shared between processes: they have no IPC handle")

    def __repr__(self) -> str:
        return f"<torch.openreg.Event device={self.device} event_id={self.event_id}>"


def _as_openreg_stream(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def current_stream(device: _DeviceLike = None) -> Stream:
    """The stream current on this thread for ``device`` (default: the current device)."""
    return _as_openreg_stream(torch.accelerator.current_stream(_device_index(device)))


def default_stream(device: _DeviceLike = None) -> Stream:
    """The default stream of ``device`` (default: the current device)."""
    proto = torch.accelerator.current_stream(_device_index(device))  # for the device type's number
    return Stream(stream_id=_DEFAULT_STREAM_ID, device_index=proto.device_index, device_type=proto.device_type)


def set_stream(stream: Optional[torch.Stream]) -> None:
    """Makes ``stream`` current on this thread for its device, and its device current,
    as ``torch.cuda.set_stream`` does. None does nothing."""
    if stream is None:
        return
    _check_openreg(stream, "stream")
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Context manager that makes ``stream`` current (and its device current) inside the
    block and restores both after it. ``stream=None`` makes it a no-op, as on CUDA."""

    def __init__(self, stream: Optional[torch.Stream]):
        if stream is not None:
            _check_openreg(stream, "stream")
        self.stream = stream
        self._prev_device = -1
        self._prev_streams: list = []

    def __enter__(self) -> Optional[torch.Stream]:
        if self.stream is None:
            return None
        self._prev_device = _C._current_device()
        target = self.stream.device_index
        # The previous stream of the device we leave current and of the stream's device.
        self._prev_streams = [torch.accelerator.current_stream(self._prev_device)]
        if target != self._prev_device:
            self._prev_streams.append(torch.accelerator.current_stream(target))
        torch.accelerator.set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc: Any) -> None:
        if self.stream is None:
            return
        for prev in reversed(self._prev_streams):
            torch.accelerator.set_stream(prev)
        _C._set_device(self._prev_device)


def stream(stream: Optional[torch.Stream]) -> StreamContext:
    """``with torch.openreg.stream(s):`` runs the block's device work on ``s``."""
    return StreamContext(stream)


def synchronize(device: _DeviceLike = None) -> None:
    """Waits until all the work queued on every stream of ``device`` (default: the current
    device) has run; raises the first asynchronous error of that work, if any."""
    torch.accelerator.synchronize(_device_index(device))
