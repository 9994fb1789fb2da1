"""Tensor.record_stream and the allocator's reuse of blocks that queued work still
uses: a block the host frees while a stream's queued work reads or writes it must not
be handed to other work in a way that changes either result (CUDA's stream-ordered
caching allocator; docs/design.md, "Streams and the queue"). The memory statistics
stay exact once the work ran. Values are checked against CPU."""

import gc

import pytest
import torch
from queued_work import SIZE, STEPS, slow as _slow, make_input as _input  # noqa: F401

NBYTES = SIZE * SIZE * 4  # one float32 SIZE x SIZE block


@pytest.fixture
def mem(openreg):
    torch.ones(1, device="openreg")  # the device is initialised
    torch.openreg.synchronize()
    gc.collect()
    return torch.openreg


# ------------------------------------------------------------ record_stream


@pytest.mark.parametrize("kind", ["openreg", "generic"])
def test_record_stream_is_accepted(mem, kind):
    s = torch.openreg.Stream() if kind == "openreg" else torch.Stream(device="openreg")
    t = torch.ones(8, device="openreg")
    assert t.record_stream(s) is None
    assert t.cpu().tolist() == [1.0] * 8


def _read_on_side_stream_then_free_and_reuse(record_stream):
    """A slow read of `a` on a side stream; the host frees `a` at once; tensors of the
    same size are allocated and written on the default stream (the cache would hand
    them `a`'s block first). Returns (side result, CPU reference, the new tensors)."""
    a_cpu = _input(1)
    ref = _slow(a_cpu)
    a = a_cpu.to("openreg")
    side = torch.openreg.Stream()
    side.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(side):
        out = _slow(a)
    if record_stream:
        a.record_stream(side)
    del a
    fresh = [torch.empty(SIZE, SIZE, device="openreg").fill_(float(i)) for i in range(3)]
    return out, ref, fresh


@pytest.mark.parametrize(
    "record_stream", [False, True]
)
def test_block_freed_while_a_side_stream_reads_it(mem, record_stream, assert_close_cpu):
    out, ref, fresh = _read_on_side_stream_then_free_and_reuse(record_stream)
    torch.openreg.synchronize()
    assert_close_cpu(out, ref, atol=1e-4, rtol=1e-4)
    for i, t in enumerate(fresh):
        assert_close_cpu(t, torch.full((SIZE, SIZE), float(i)), atol=0, rtol=0)


def test_block_freed_while_queued_work_still_writes_it(mem, assert_close_cpu):
    # `out`'s block is freed by the host before the work writing it ran; a tensor
    # written on another stream in the meantime must keep its own values.
    a_cpu = _input(2)
    ref = _slow(a_cpu)
    side = torch.openreg.Stream()
    a = a_cpu.to("openreg")
    side.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(side):
        out = _slow(a)
        check = out[::97, ::89].clone()  # a queued read of out, kept
    del out
    other = torch.openreg.Stream()
    with torch.openreg.stream(other):
        fresh = [torch.full((SIZE, SIZE), 5.0 + i, device="openreg") for i in range(3)]
    torch.openreg.synchronize()
    for i, t in enumerate(fresh):
        assert_close_cpu(t, torch.full((SIZE, SIZE), 5.0 + i), atol=0, rtol=0)
    assert_close_cpu(check, ref[::97, ::89].clone(), atol=1e-4, rtol=1e-4)


def test_freed_input_reused_on_the_same_stream(mem, assert_close_cpu):
    a_cpu = _input(3)
    ref = _slow(a_cpu) + 1
    a = a_cpu.to("openreg")
    out = _slow(a)
    del a
    b = torch.zeros(SIZE, SIZE, device="openreg")  # likely a's block
    b.add_(out).add_(1)
    assert_close_cpu(b, ref, atol=1e-4, rtol=1e-4)


# -------------------------------------------------------------- statistics


def test_memory_stats_after_queued_work(mem):
    mem.reset_peak_memory_stats()
    start = mem.memory_allocated()
    assert mem.max_memory_allocated() == start
    out, _, fresh = _read_on_side_stream_then_free_and_reuse(record_stream=False)
    live = out.nbytes + sum(t.nbytes for t in fresh)
    # As with CUDA's allocator, a block stops counting when the host frees it, though
    # queued work may still use it (its reuse is ordered after that work).
    assert mem.memory_allocated() == start + live, "the host-freed blocks still count"
    torch.openreg.synchronize()
    gc.collect()
    assert mem.memory_allocated() == start + live, "only the live tensors count once the work ran"
    # out, the weights and the 3 new tensors, at least, were alive together.
    assert mem.max_memory_allocated() >= start + 5 * NBYTES
    assert mem.memory_reserved() >= mem.memory_allocated()
    assert mem.max_memory_reserved() >= mem.max_memory_allocated()
    del out, fresh
    torch.openreg.synchronize()
    gc.collect()
    assert mem.memory_allocated() == start
    reserved = mem.memory_reserved()
    mem.empty_cache()
    assert start <= mem.memory_reserved() <= reserved


def test_memory_stats_per_device_with_queued_work(mem):
    start0, start1 = mem.memory_allocated(0), mem.memory_allocated(1)
    a = _input(4).to("openreg:1")
    with torch.openreg.stream(torch.openreg.Stream("openreg:1")):
        out = _slow(a)
    del a
    torch.openreg.synchronize(1)
    gc.collect()
    assert mem.memory_allocated(0) == start0, "work on openreg:1 changed openreg:0's count"
    assert mem.memory_allocated(1) == start1 + out.nbytes
    del out
    assert mem.memory_allocated(1) == start1
