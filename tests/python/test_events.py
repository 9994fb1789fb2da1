"""Events of torch.openreg (torch.cuda.Event's API): record, query, synchronize,
wait across streams, elapsed_time, the enable_timing flag and the refused
interprocess flag. Values are checked against the same computation on CPU; times
only coarsely."""

import time

import pytest
import torch
from queued_work import SIZE, STEPS, launch_blocking as _launch_blocking, slow as _slow, make_input as _input  # noqa: F401


def test_event_is_a_torch_event(openreg):
    e = torch.openreg.Event()
    assert isinstance(e, torch.Event)
    assert e.device.type == "openreg"


def test_unrecorded_event_is_complete(openreg):
    e = torch.openreg.Event()
    assert e.query() is True
    e.synchronize()  # returns at once
    e.wait()  # waiting on a never-recorded event is a no-op, as on CUDA


@pytest.mark.parametrize("kwargs", [dict(interprocess=True), dict(enable_timing=True, interprocess=True)])
def test_interprocess_is_refused(openreg, kwargs):
    with pytest.raises(ValueError, match="between processes"):
        torch.openreg.Event(**kwargs)


def test_ipc_handle_is_refused(openreg):
    with pytest.raises(RuntimeError, match="between processes"):
        torch.openreg.Event().ipc_handle()


def test_blocking_event_works(openreg, assert_close_cpu):
    a_cpu = _input(5)
    out = _slow(a_cpu.to("openreg"), 2)
    e = torch.openreg.Event(blocking=True)
    e.record()
    e.synchronize()
    assert e.query()
    assert_close_cpu(out, _slow(a_cpu, 2), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("index", [0, 1])
def test_record_query_synchronize(openreg, index, assert_close_cpu):
    a_cpu = _input()
    with torch.openreg.device(index):
        out = _slow(a_cpu.to("openreg"))
        e = torch.openreg.Event()
        e.record()
    assert e.device == torch.device("openreg", index), "an event belongs to the device it was recorded on"
    assert e.query() is _launch_blocking(), "the work before the event should still be queued"
    e.synchronize()
    assert e.query() is True
    assert_close_cpu(out, _slow(a_cpu), atol=1e-4, rtol=1e-4)


def test_record_on_a_given_stream(openreg, assert_close_cpu):
    a_cpu = _input(1)
    s = torch.openreg.Stream("openreg:1")
    a = a_cpu.to("openreg:1")
    s.wait_stream(torch.openreg.current_stream(1))
    with torch.openreg.stream(s):
        out = _slow(a)
    e = torch.openreg.Event()
    e.record(s)
    assert e.device == torch.device("openreg", 1)
    e.synchronize()
    assert s.query(), "the event was recorded after all of s's work"
    assert_close_cpu(out, _slow(a_cpu), atol=1e-4, rtol=1e-4)


def test_stream_record_event_returns_an_openreg_event(openreg):
    s = torch.openreg.Stream()
    e = s.record_event()
    assert type(e) is torch.openreg.Event
    mine = torch.openreg.Event()
    assert s.record_event(mine) is mine
    mine.synchronize()


def test_rerecording_moves_the_event(openreg):
    s = torch.openreg.Stream()
    a = _input(2).to("openreg")
    e = torch.openreg.Event()
    e.record(s)
    e.synchronize()
    with torch.openreg.stream(s):
        out = _slow(a)
    e.record(s)
    assert e.query() is _launch_blocking(), "the second record is after the new work"
    e.synchronize()
    assert e.query()
    del out


def test_record_on_another_device_than_the_first_raises(openreg):
    e = torch.openreg.Event()
    e.record(torch.openreg.Stream("openreg:1"))
    with pytest.raises(RuntimeError, match="device"):
        e.record(torch.openreg.Stream("openreg:0"))


def test_record_on_a_cpu_stream_raises(openreg):
    with pytest.raises(TypeError):
        torch.openreg.Event().record(torch.Stream(device="cpu"))


@pytest.mark.parametrize("index", [0, 1])
def test_wait_orders_another_stream(openreg, index, assert_close_cpu):
    a_cpu = _input(3)
    producer, consumer = torch.openreg.Stream(device=index), torch.openreg.Stream(device=index)
    a = a_cpu.to(f"openreg:{index}")
    producer.wait_stream(torch.openreg.current_stream(index))
    with torch.openreg.stream(producer):
        x = _slow(a)
    e = torch.openreg.Event()
    e.record(producer)
    e.wait(consumer)
    with torch.openreg.stream(consumer):
        x.mul_(3)  # in place: before the producer ran, this would give another result
        done = torch.openreg.Event()
        done.record()
    done.wait()  # the current (default) stream waits for the consumer
    assert_close_cpu(x, _slow(a_cpu) * 3, atol=1e-4, rtol=1e-4)


# ------------------------------------------------------------------ timing


@pytest.fixture
def warm(openreg):
    """The work timed below, run once first: a process's first device ops pay one-time
    costs on the calling thread (the first Python Meta kernel imports torch._dynamo,
    ~1.5 s here), which would dwarf a single matmul when a test runs first in its
    process (alone, or under pytest-xdist)."""
    _slow(_input(8).to("openreg"), 1)
    torch.openreg.synchronize()


def test_elapsed_time_is_positive_and_near_wall_time(warm, assert_close_cpu):
    a_cpu = _input(4)
    a = a_cpu.to("openreg")
    torch.openreg.synchronize()
    start, end = torch.openreg.Event(enable_timing=True), torch.openreg.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    out = _slow(a, 12)
    end.record()
    end.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3
    ms = start.elapsed_time(end)
    assert isinstance(ms, float)
    assert 0 < ms <= wall_ms * 1.05 + 1.0, f"device time {ms} ms vs wall time {wall_ms} ms"
    assert ms >= wall_ms / 20, f"device time {ms} ms is far below the wall time {wall_ms} ms of the work"
    assert_close_cpu(out, _slow(a_cpu, 12), atol=1e-4, rtol=1e-4)


def test_elapsed_time_grows_with_the_work(warm):
    a = _input(6).to("openreg")
    times = []
    for steps in (1, 16):
        start, end = torch.openreg.Event(enable_timing=True), torch.openreg.Event(enable_timing=True)
        start.record()
        _slow(a, steps)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    assert times[1] > times[0] * 2, f"16 matmuls timed {times[1]} ms, 1 timed {times[0]} ms"


def test_elapsed_time_between_streams(openreg):
    s1, s2 = torch.openreg.Stream(), torch.openreg.Stream()
    start, end = torch.openreg.Event(enable_timing=True), torch.openreg.Event(enable_timing=True)
    start.record(s1)
    with torch.openreg.stream(s2):
        s2.wait_event(start)
        _slow(_input(7).to("openreg"), 2)
        end.record()
    end.synchronize()
    assert start.elapsed_time(end) > 0


def test_elapsed_time_needs_enable_timing(openreg):
    timed, untimed = torch.openreg.Event(enable_timing=True), torch.openreg.Event()
    timed.record()
    untimed.record()
    torch.openreg.synchronize()
    with pytest.raises(RuntimeError, match="enable_timing"):
        timed.elapsed_time(untimed)
    with pytest.raises(RuntimeError, match="enable_timing"):
        untimed.elapsed_time(timed)


def test_elapsed_time_needs_recorded_events(openreg):
    start, end = torch.openreg.Event(enable_timing=True), torch.openreg.Event(enable_timing=True)
    start.record()
    start.synchronize()
    with pytest.raises((RuntimeError, ValueError), match="recorded"):
        start.elapsed_time(end)
