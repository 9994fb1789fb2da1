// Device memory (host memory, 64-byte aligned, per-device statistics, cached) and
// the pinned host allocator: c10's face of block_pool.h, which holds the caching
// (size classes, free lists, statistics; see there and docs/design.md, "Memory").
//
// Why cache: without it every large output is fresh memory from malloc, whose pages
// fault in on first touch (backward runs on autograd's device thread, whose malloc
// arena hands memory back to the system eagerly): on a 2-layer nn.TransformerEncoder
// step that was a third of the device's time. A failed malloc empties the cache and
// tries again. OPENREG_NO_MEMORY_CACHING=1 turns caching off (like
// PYTORCH_NO_CUDA_MEMORY_CACHING), for memory debugging.
//
// Queued work (execution_queue.h) may still read a block the host has freed into the
// cache: reuse is safe (later work runs after it), giving the block back to the system
// is not, so whatever empties the cache first waits for the queue.
#include "runtime.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <sys/sysinfo.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_set>

#include "block_pool.h"
#include "execution_queue.h"
#include "profiler.h"

namespace openreg {

namespace {

constexpr size_t kAlignment = BlockPool::kAlignment;

bool caching_enabled() {
  const char* v = std::getenv("OPENREG_NO_MEMORY_CACHING");
  return !(v && *v && std::string(v) != "0");
}

// Tasks hold raw pointers: a block the host frees may still be used by work queued
// before the free. Without caching it goes back to the system on the queue, behind that
// work (a stream-ordered free, as cudaFreeAsync); launch blocking queues no work. Its
// own stream, whose tasks never fail, so they are never skipped.
constexpr int64_t kFreeStream = std::numeric_limits<int64_t>::min();

void give_back_after_queued_work(void* ptr, int device) {
  if (launch_blocking()) {
    std::free(ptr);
    return;
  }
  execution_queue().enqueue(device, kFreeStream, [ptr] { std::free(ptr); }, TaskOrigin{"free"});
}

// The process's pool, made at first use (OPENREG_NO_MEMORY_CACHING is read then) and
// never destroyed: a tensor released by another library's static destructor at exit
// must still find it.
BlockPool& pool() {
  static BlockPool* p = new BlockPool(caching_enabled(), give_back_after_queued_work);
  return *p;
}

// Waits for every queued task, so no task still reads a cached block; a pending
// asynchronous error is raised as every synchronisation point raises it. False on the
// worker thread itself, where the running task may still read one.
bool drain_queued_work() {
  if (execution_queue().on_worker_thread()) return false;
  synchronize_all_devices();  // execution_queue().synchronize_all(), errors mapped for Python
  return true;
}

void copy_stat(const PoolStat& src, c10::CachingAllocator::Stat& dst) {
  dst.current = src.current;
  dst.peak = src.peak;
  dst.allocated = src.allocated;
  dst.freed = src.freed;
}

class OpenRegAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    check_not_in_bad_fork();
    c10::DeviceIndex dev = current_device();
    if (n == 0) return {nullptr, nullptr, &noop, c10::Device(kDevice, dev)};
    PoolBlock b = pool().allocate(dev, n);
    if (!b.ptr && drain_queued_work()) {  // memory held by the cache may be what is missing
      pool().empty_cache();
      b = pool().allocate(dev, n);
    }
    TORCH_CHECK_WITH(OutOfMemoryError, b.ptr != nullptr, "openreg: out of memory allocating ", n,
                     " bytes on openreg:", int(dev), " (", pool().stats(dev).allocated_bytes.current,
                     " bytes already allocated). Free tensors or use smaller batches");
    profiling::report_memory(b.ptr, static_cast<int64_t>(n), c10::Device(kDevice, dev));
    return {b.ptr, new PoolBlock(b), &release, c10::Device(kDevice, dev)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dst, const void* src, std::size_t count) const override {
    if (count) std::memcpy(dst, src, count);
  }

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {
    drain_queued_work();
    pool().empty_cache();
  }
  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex dev) override {
    check_device_index(dev);
    PoolStats s = pool().stats(dev);
    c10::CachingDeviceAllocator::DeviceStats d;
    copy_stat(s.allocated_bytes, d.allocated_bytes[0]);
    copy_stat(s.reserved_bytes, d.reserved_bytes[0]);
    copy_stat(s.allocation, d.allocation[0]);
    copy_stat(s.segment, d.segment[0]);
    d.num_device_alloc = s.num_device_alloc;
    d.num_device_free = s.num_device_free;
    return d;
  }
  void resetAccumulatedStats(c10::DeviceIndex dev) override {
    check_device_index(dev);
    pool().reset_accumulated(dev);
  }
  void resetPeakStats(c10::DeviceIndex dev) override {
    check_device_index(dev);
    pool().reset_peak(dev);
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex) override {
    struct sysinfo si;
    if (sysinfo(&si) != 0) return {0, 0};
    return {size_t(si.freeram) * si.mem_unit, size_t(si.totalram) * si.mem_unit};
  }

 private:
  static void noop(void*) {}
  static void release(void* ctx) {
    auto* b = static_cast<PoolBlock*>(ctx);
    pool().free(*b);
    profiling::report_memory(b->ptr, -static_cast<int64_t>(b->bytes), c10::Device(kDevice, b->device));
    delete b;
  }
};

OpenRegAllocator g_allocator;

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

// Pinned memory is ordinary host memory here; we only remember which pointers
// came from this allocator so is_pinned() answers truthfully.
class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    void* p = n ? std::aligned_alloc(kAlignment, (n + kAlignment - 1) / kAlignment * kAlignment) : nullptr;
    TORCH_CHECK_WITH(OutOfMemoryError, n == 0 || p, "openreg: out of pinned memory allocating ", n, " bytes");
    if (p) {
      std::lock_guard<std::mutex> lock(mutex_);
      ptrs_.insert(p);
    }
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dst, const void* src, std::size_t count) const override {
    if (count) std::memcpy(dst, src, count);
  }
  bool contains(const void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    return ptrs_.count(const_cast<void*>(p)) != 0;
  }

 private:
  static void release(void* p);
  std::mutex mutex_;
  std::unordered_set<void*> ptrs_;
};

PinnedAllocator g_pinned;

void PinnedAllocator::release(void* p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> lock(g_pinned.mutex_);
    g_pinned.ptrs_.erase(p);
  }
  std::free(p);
}

}  // namespace

c10::Allocator* device_allocator() { return &g_allocator; }
c10::Allocator* pinned_allocator() { return &g_pinned; }
bool is_pinned_ptr(const void* ptr) { return ptr && g_pinned.contains(ptr); }

MemoryStats memory_stats(c10::DeviceIndex index) {
  auto s = g_allocator.getDeviceStats(index);
  MemoryStats m;
  m.allocated = s.allocated_bytes[0].current;
  m.allocated_peak = s.allocated_bytes[0].peak;
  m.reserved = s.reserved_bytes[0].current;
  m.reserved_peak = s.reserved_bytes[0].peak;
  m.num_allocs = s.num_device_alloc;
  m.num_frees = s.num_device_free;
  return m;
}


void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes) {
  TORCH_CHECK(storage.resizable(), "openreg: trying to resize a storage that is not resizable");
  auto* impl = storage.unsafeGetStorageImpl();
  size_t old_bytes = impl->nbytes();
  if (old_bytes == new_bytes) return;
  c10::DeviceGuard guard(storage.device());
  c10::DataPtr fresh = g_allocator.allocate(new_bytes);
  size_t common = std::min(old_bytes, new_bytes);
  if (common && impl->data()) {
    // Queued work may still write the old contents: the copy is queued behind it. The
    // old block, freed below, is only reused (or given back) by tasks queued after it.
    void* dst = fresh.get();
    const void* src = impl->data();
    enqueue_work(storage.device().index(), [dst, src, common] { std::memcpy(dst, src, common); }, "resize_");
  }
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(new_bytes);
}

}  // namespace openreg
