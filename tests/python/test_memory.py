"""The caching allocator (core/src/runtime/allocator.cpp) and its statistics through torch.openreg.*."""

import gc

import pytest
import torch

MiB = 1 << 20


def _alloc_1mib(device="openreg"):
    # torch.empty only allocates: no kernel, no temporaries.
    return torch.empty(MiB, dtype=torch.uint8, device=device)


@pytest.fixture
def mem(openreg):
    torch.ones(1, device="openreg")  # make sure the device is initialised
    torch.openreg.synchronize()
    gc.collect()
    return torch.openreg


def test_memory_allocated_grows_and_returns(mem):
    start = mem.memory_allocated()
    assert isinstance(start, int) and start >= 0
    t = _alloc_1mib()
    assert mem.memory_allocated() >= start + MiB
    assert mem.memory_allocated(0) == mem.memory_allocated()
    del t
    assert mem.memory_allocated() == start


def test_memory_allocated_device_index_arg(mem):
    start0 = mem.memory_allocated(0)
    start1 = mem.memory_allocated(1)
    t = _alloc_1mib("openreg:1")
    assert mem.memory_allocated(1) >= start1 + MiB
    assert mem.memory_allocated(0) == start0, "allocating on openreg:1 changed openreg:0's count"
    assert mem.memory_allocated() == start0  # current device is 0
    del t
    assert mem.memory_allocated(1) == start1
    assert mem.memory_allocated(0) == start0


def test_memory_allocated_follows_current_device(mem):
    start1 = mem.memory_allocated(1)
    with mem.device(1):
        t = _alloc_1mib()
        assert t.device == torch.device("openreg", 1)
        assert mem.memory_allocated() == mem.memory_allocated(1)
        assert mem.memory_allocated() >= start1 + MiB
    del t
    assert mem.memory_allocated(1) == start1


def test_max_memory_allocated_and_reset(mem):
    mem.reset_peak_memory_stats()
    start = mem.memory_allocated()
    assert mem.max_memory_allocated() == start
    t = _alloc_1mib()
    del t
    assert mem.memory_allocated() == start
    assert mem.max_memory_allocated() >= start + MiB
    # the peak is sticky until reset
    u = torch.empty(16, device="openreg")
    del u
    assert mem.max_memory_allocated() >= start + MiB
    mem.reset_peak_memory_stats()
    assert mem.max_memory_allocated() == mem.memory_allocated() == start


def test_memory_reserved(mem):
    t = _alloc_1mib()
    assert mem.memory_reserved() >= mem.memory_allocated() >= MiB
    del t
    assert mem.memory_reserved() >= mem.memory_allocated()


def test_memory_stats(mem):
    t = _alloc_1mib()
    stats = mem.memory_stats()
    assert isinstance(stats, dict)
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current"):
        assert key in stats, f"memory_stats() lacks {key!r}"
    assert stats["allocated_bytes.all.current"] == mem.memory_allocated()
    assert stats["allocated_bytes.all.peak"] == mem.max_memory_allocated()
    assert stats["reserved_bytes.all.current"] == mem.memory_reserved()
    assert stats["allocated_bytes.all.peak"] >= stats["allocated_bytes.all.current"] >= MiB
    del t


def test_empty_cache(mem):
    before_alloc = mem.memory_allocated()
    t = _alloc_1mib()
    del t
    reserved_before = mem.memory_reserved()
    assert mem.empty_cache() is None
    assert mem.memory_reserved() <= reserved_before
    assert mem.memory_reserved() >= mem.memory_allocated()
    assert mem.memory_allocated() == before_alloc
    # the device still works after the cache was emptied
    x = torch.arange(5, dtype=torch.float32)
    torch.testing.assert_close((x.to("openreg") * 2).cpu(), x * 2, atol=0, rtol=0)


def test_live_tensor_survives_empty_cache(mem):
    x = torch.arange(MiB // 4, dtype=torch.float32)
    d = x.to("openreg")
    mem.empty_cache()
    assert mem.memory_allocated() >= x.numel() * x.element_size()
    assert torch.equal(d.cpu(), x)


def test_torch_accelerator_memory_allocated(mem):
    accel = getattr(torch, "accelerator", None)
    if accel is None or not hasattr(accel, "memory_allocated"):
        pytest.skip("torch.accelerator.memory_allocated is not available in this torch build")
    current = accel.current_accelerator()
    if current is None or current.type != "openreg":
        pytest.skip(f"torch.accelerator.current_accelerator() is {current}, not openreg")
    start = accel.memory_allocated()
    assert start == mem.memory_allocated()
    t = _alloc_1mib()
    assert accel.memory_allocated() >= start + MiB
    assert accel.memory_allocated() == mem.memory_allocated()
    del t
    assert accel.memory_allocated() == start


def test_freed_block_is_cached_and_reused_until_empty_cache(mem):
    mem.empty_cache()
    base_reserved, base_alloc = mem.memory_reserved(), mem.memory_allocated()
    t = torch.empty(3 * MiB + 5, dtype=torch.uint8, device="openreg")
    ptr = t.data_ptr()
    reserved = mem.memory_reserved()
    assert reserved - base_reserved >= 3 * MiB + 5
    assert reserved - base_reserved <= (3 * MiB + 5) * 9 // 8 + 512  # size classes waste at most 1/8
    del t
    assert mem.memory_allocated() == base_alloc
    assert mem.memory_reserved() == reserved  # kept for reuse, as CUDA's allocator does
    u = torch.empty(3 * MiB + 1000, dtype=torch.uint8, device="openreg")  # same size class (3.25 MiB)
    assert u.data_ptr() == ptr and mem.memory_reserved() == reserved
    del u
    mem.empty_cache()
    assert mem.memory_reserved() == base_reserved


def test_caching_can_be_turned_off(run_python):
    code = (
        "import torch, openreg\n"
        "torch.ones(1, device='openreg')\n"
        "r0 = torch.openreg.memory_reserved()\n"
        "t = torch.empty(1 << 22, dtype=torch.uint8, device='openreg')\n"
        "del t\n"
        "print(torch.openreg.memory_reserved() - r0)\n"
    )
    off = run_python(code, env_extra={"OPENREG_NO_MEMORY_CACHING": "1"})
    on = run_python(code, env_extra={"OPENREG_NO_MEMORY_CACHING": None})
    assert off.returncode == 0 and on.returncode == 0, off.stderr + on.stderr
    assert int(off.stdout.split()[-1]) == 0
    assert int(on.stdout.split()[-1]) == 1 << 22


# ------------------------------------------------- the rest of torch.cuda's memory API


def test_memory_stats_has_torch_cuda_keys(mem):
    """The keys torch.cuda.memory_stats documents for its "all" pool, counting as the
    allocator does: one more allocation and segment for a fresh 1 MiB block."""
    before = mem.memory_stats()
    t = _alloc_1mib()
    stats = mem.memory_stats()
    for key in ("allocation", "segment", "active", "active_bytes", "allocated_bytes", "reserved_bytes"):
        for kind in ("current", "peak", "allocated", "freed"):
            assert f"{key}.all.{kind}" in stats, f"memory_stats() lacks {key}.all.{kind}"
    assert stats["allocation.all.current"] == before["allocation.all.current"] + 1
    assert stats["allocated_bytes.all.allocated"] >= before["allocated_bytes.all.allocated"] + MiB
    del t


def test_mem_get_info_is_the_hosts_memory(mem):
    import os

    free, total = mem.mem_get_info()
    page = os.sysconf("SC_PAGE_SIZE")
    assert total == os.sysconf("SC_PHYS_PAGES") * page
    assert 0 < free <= total
    assert mem.mem_get_info(1)[1] == total


def test_memory_summary_shows_the_figures(mem):
    t = _alloc_1mib()
    text = mem.memory_summary()
    assert text.startswith("openreg:0 memory summary")
    row = next(line for line in text.splitlines() if line.startswith("Allocated memory"))
    current = mem.memory_allocated() / MiB
    assert f"{current:.2f} MiB" in row, row
    assert "Active memory" not in mem.memory_summary(abbreviated=True)
    del t


def test_out_of_memory_error_is_torchs(mem):
    assert mem.OutOfMemoryError is torch.OutOfMemoryError
    with pytest.raises(mem.OutOfMemoryError, match="out of memory"):
        torch.empty(1 << 50, dtype=torch.uint8, device="openreg")


def test_device_of(mem):
    assert mem.current_device() == 0
    with mem.device_of(torch.empty(1, device="openreg:1")):
        assert mem.current_device() == 1
    with mem.device_of(torch.empty(1)):  # a CPU tensor: no change
        assert mem.current_device() == 0
    assert mem.current_device() == 0
