"""Streams of torch.openreg (torch.cuda's API): creation, the current and default
stream per thread and per device, the stream context, ordering between streams
(wait_stream, wait_event) and query/synchronize of queued work. Results are checked
against the same computation on CPU."""

import threading

import pytest
import torch
from queued_work import SIZE, STEPS, launch_blocking as _launch_blocking, slow as _slow, make_input as _input  # noqa: F401

DEVICES = [0, 1]


# ---------------------------------------------------------------- creation


def test_stream_is_a_torch_stream_on_the_current_device(openreg):
    s = torch.openreg.Stream()
    assert isinstance(s, torch.Stream)
    assert s.device == torch.device("openreg", torch.openreg.current_device())
    assert s != torch.openreg.default_stream()
    assert s != torch.openreg.Stream(), "two new streams must be distinct"


@pytest.mark.parametrize("spec", ["openreg:1", torch.device("openreg", 1), 1])
def test_stream_on_another_device(openreg, spec):
    s = torch.openreg.Stream(device=spec)
    assert s.device == torch.device("openreg", 1)
    assert torch.openreg.current_device() == 0, "making a stream must not change the current device"


def test_stream_priority_is_accepted(openreg):
    assert torch.openreg.Stream(priority=-1).device.type == "openreg"


@pytest.mark.parametrize("spec", ["cpu", 64])
def test_stream_on_a_bad_device_raises(openreg, spec):
    with pytest.raises((ValueError, RuntimeError)):
        torch.openreg.Stream(device=spec)


def test_stream_from_the_id_of_a_cpu_stream_raises(openreg):
    cpu = torch.Stream(device="cpu")
    with pytest.raises(TypeError, match="openreg"):
        torch.openreg.Stream(stream_id=cpu.stream_id, device_index=cpu.device_index, device_type=cpu.device_type)


def test_generic_torch_stream_equals_openreg_stream(openreg):
    s = torch.Stream(device="openreg")
    same = torch.openreg.Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)
    assert same == s and s == same
    assert hash(same) == hash(s)
    assert len({same, s, torch.openreg.current_stream()}) == 2


# ------------------------------------------------- current / default / set


@pytest.mark.parametrize("index", DEVICES)
def test_current_stream_starts_as_default_stream(openreg, index):
    cur = torch.openreg.current_stream(index)
    assert type(cur) is torch.openreg.Stream
    assert cur == torch.openreg.default_stream(index)
    assert cur.device == torch.device("openreg", index)
    assert hash(cur) == hash(torch.openreg.default_stream(index))


def test_default_streams_of_devices_differ(openreg):
    assert torch.openreg.default_stream(0) != torch.openreg.default_stream(1)
    assert torch.openreg.default_stream() == torch.openreg.default_stream("openreg:0")


def test_set_stream(openreg):
    s = torch.openreg.Stream()
    try:
        torch.openreg.set_stream(s)
        assert torch.openreg.current_stream() == s
        assert torch.openreg.current_stream(1) == torch.openreg.default_stream(1)
    finally:
        torch.openreg.set_stream(torch.openreg.default_stream())
    assert torch.openreg.current_stream() == torch.openreg.default_stream()
    torch.openreg.set_stream(None)  # a no-op, as on CUDA
    assert torch.openreg.current_stream() == torch.openreg.default_stream()


def test_set_stream_of_another_device_makes_it_current(openreg):
    # As torch.cuda.set_stream: the stream's device becomes the current device.
    s1 = torch.openreg.Stream("openreg:1")
    try:
        torch.openreg.set_stream(s1)
        assert torch.openreg.current_device() == 1
        assert torch.openreg.current_stream() == s1
        assert torch.openreg.current_stream(0) == torch.openreg.default_stream(0)
    finally:
        torch.openreg.set_stream(torch.openreg.default_stream(1))
        torch.openreg.set_device(0)


# ---------------------------------------------------------- stream context


def test_stream_context_nests_and_restores(openreg):
    s1, s2 = torch.openreg.Stream(), torch.openreg.Stream()
    default = torch.openreg.default_stream()
    with torch.openreg.stream(s1) as entered:
        assert entered == s1
        assert torch.openreg.current_stream() == s1
        with torch.openreg.stream(s2):
            assert torch.openreg.current_stream() == s2
            with torch.openreg.stream(None):  # no-op, as on CUDA
                assert torch.openreg.current_stream() == s2
        assert torch.openreg.current_stream() == s1
    assert torch.openreg.current_stream() == default


def test_with_stream_object_nests_and_restores(openreg):
    s = torch.openreg.Stream()
    with s:
        assert torch.openreg.current_stream() == s
        with s:
            assert torch.openreg.current_stream() == s
        assert torch.openreg.current_stream() == s
    assert torch.openreg.current_stream() == torch.openreg.default_stream()


def test_generic_torch_stream_context(openreg):
    s = torch.Stream(device="openreg")
    with torch.openreg.stream(s):
        assert torch.openreg.current_stream() == s
    with s:
        assert torch.openreg.current_stream() == s
    assert torch.openreg.current_stream() == torch.openreg.default_stream()


def test_stream_context_restores_on_exception(openreg):
    s = torch.openreg.Stream()
    with pytest.raises(KeyError):
        with torch.openreg.stream(s):
            raise KeyError("inside")
    assert torch.openreg.current_stream() == torch.openreg.default_stream()


def test_stream_context_of_another_device(openreg):
    s1 = torch.openreg.Stream("openreg:1")
    with torch.openreg.stream(s1):
        assert torch.openreg.current_device() == 1
        assert torch.openreg.current_stream() == s1
        x = torch.ones(4, device="openreg") * 3
    assert x.device == torch.device("openreg", 1)
    assert torch.openreg.current_device() == 0
    assert torch.openreg.current_stream(0) == torch.openreg.default_stream(0)
    assert torch.openreg.current_stream(1) == torch.openreg.default_stream(1)
    assert x.cpu().tolist() == [3.0] * 4


def test_current_stream_is_per_thread(openreg):
    s = torch.openreg.Stream()
    seen = {}
    entered, release = threading.Event(), threading.Event()

    def other_thread():
        seen["before"] = torch.openreg.current_stream()
        t = torch.openreg.Stream()
        with torch.openreg.stream(t):
            seen["own"] = (torch.openreg.current_stream(), t)
            entered.set()
            release.wait(10)

    with torch.openreg.stream(s):
        th = threading.Thread(target=other_thread)
        th.start()
        assert entered.wait(10)
        assert torch.openreg.current_stream() == s, "another thread's stream context leaked into this one"
        release.set()
        th.join(10)
    assert seen["before"] == torch.openreg.default_stream(), "a new thread must start on the default stream"
    assert seen["own"][0] == seen["own"][1]


# -------------------------------------------------- queued work and order


@pytest.mark.parametrize("index", DEVICES)
def test_query_false_while_work_is_queued_then_true(openreg, index, assert_close_cpu):
    a_cpu = _input()
    s = torch.openreg.Stream(device=index)
    a = a_cpu.to(f"openreg:{index}")
    s.wait_stream(torch.openreg.current_stream(index))
    with torch.openreg.stream(s):
        out = _slow(a)
    idle = torch.openreg.Stream(device=index)
    assert idle.query(), "a stream with no work is always complete"
    assert s.query() is _launch_blocking(), "the work should still be queued right after enqueuing it"
    s.synchronize()
    assert s.query() is True
    assert_close_cpu(out, _slow(a_cpu), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("index", DEVICES)
def test_default_stream_query_and_synchronize(openreg, index, assert_close_cpu):
    a_cpu = _input(1)
    with torch.openreg.device(index):
        out = _slow(a_cpu.to("openreg"))
        cur = torch.openreg.current_stream()
        assert cur.query() is _launch_blocking()
        cur.synchronize()
        assert cur.query() is True
    assert out.device == torch.device("openreg", index)
    assert_close_cpu(out, _slow(a_cpu), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("index", DEVICES)
def test_wait_stream_orders_consumer_after_producer(openreg, index, assert_close_cpu):
    a_cpu = _input(2)
    producer, consumer = torch.openreg.Stream(device=index), torch.openreg.Stream(device=index)
    a = a_cpu.to(f"openreg:{index}")
    producer.wait_stream(torch.openreg.current_stream(index))
    with torch.openreg.stream(producer):
        x = _slow(a)
    consumer.wait_stream(producer)
    with torch.openreg.stream(consumer):
        y = x * 2 + 1
    consumer.synchronize()
    assert_close_cpu(y, _slow(a_cpu) * 2 + 1, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("index", DEVICES)
def test_wait_event_orders_consumer_after_producer(openreg, index, assert_close_cpu):
    a_cpu = _input(3)
    producer, consumer = torch.openreg.Stream(device=index), torch.openreg.Stream(device=index)
    a = a_cpu.to(f"openreg:{index}")
    producer.wait_stream(torch.openreg.current_stream(index))
    with torch.openreg.stream(producer):
        x = _slow(a)
        done = producer.record_event()
    assert isinstance(done, torch.openreg.Event)
    consumer.wait_event(done)
    with torch.openreg.stream(consumer):
        x.sub_(1)  # in place: had it run before the producer, the result would differ
    torch.openreg.current_stream(index).wait_stream(consumer)
    assert_close_cpu(x, _slow(a_cpu) - 1, atol=1e-4, rtol=1e-4)


def test_producer_on_one_device_consumer_on_another(openreg, assert_close_cpu):
    a_cpu = _input(4)
    s0, s1 = torch.openreg.Stream("openreg:0"), torch.openreg.Stream("openreg:1")
    with torch.openreg.stream(s0):
        x = _slow(a_cpu.to("openreg:0"))
    s1.wait_stream(s0)
    with torch.openreg.stream(s1):
        y = x.to("openreg:1") + 1
    s1.synchronize()
    assert y.device == torch.device("openreg", 1)
    assert_close_cpu(y, _slow(a_cpu) + 1, atol=1e-4, rtol=1e-4)


def test_wait_stream_on_itself_is_a_no_op(openreg):
    s = torch.openreg.Stream()
    s.wait_stream(s)
    s.synchronize()
    assert s.query()


def test_wait_stream_refuses_a_cpu_stream(openreg):
    with pytest.raises(TypeError):
        torch.openreg.Stream().wait_stream(torch.Stream(device="cpu"))
