// Device memory (host memory, 64-byte aligned, per-device statistics) and the
// pinned host allocator. No caching: freed memory goes straight back.
#include "runtime.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <sys/sysinfo.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_set>

namespace openreg {

namespace {

constexpr size_t kAlignment = 64;
constexpr c10::DeviceIndex kMaxDevices = 64;

struct Block {
  void* ptr;
  size_t bytes;
  c10::DeviceIndex device;
};

class OpenRegAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    c10::DeviceIndex dev = current_device();
    if (n == 0) return {nullptr, nullptr, &noop, c10::Device(kDevice, dev)};
    size_t rounded = (n + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded);
    TORCH_CHECK_WITH(OutOfMemoryError, p != nullptr, "openreg: out of memory allocating ", n,
                     " bytes on openreg:", int(dev), " (", memory_allocated(dev),
                     " bytes already allocated). Free tensors or use smaller batches");
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& s = stats_[dev];
      s.allocated_bytes[0].increase(n);
      s.reserved_bytes[0].increase(rounded);
      s.allocation[0].increase(1);
      s.segment[0].increase(1);
      s.num_device_alloc++;
    }
    return {p, new Block{p, n, dev}, &release, c10::Device(kDevice, dev)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dst, const void* src, std::size_t count) const override {
    if (count) std::memcpy(dst, src, count);
  }

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}
  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex dev) override {
    check_device_index(dev);
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_[dev];
  }
  void resetAccumulatedStats(c10::DeviceIndex dev) override {
    check_device_index(dev);
    std::lock_guard<std::mutex> lock(mutex_);
    auto& s = stats_[dev];
    for (auto* a : {&s.allocated_bytes, &s.reserved_bytes, &s.allocation, &s.segment}) {
      for (auto& stat : *a) stat.reset_accumulated();
    }
    s.num_device_alloc = s.num_device_free = 0;
  }
  void resetPeakStats(c10::DeviceIndex dev) override {
    check_device_index(dev);
    std::lock_guard<std::mutex> lock(mutex_);
    auto& s = stats_[dev];
    for (auto* a : {&s.allocated_bytes, &s.reserved_bytes, &s.allocation, &s.segment}) {
      for (auto& stat : *a) stat.reset_peak();
    }
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex) override {
    struct sysinfo si;
    if (sysinfo(&si) != 0) return {0, 0};
    return {size_t(si.freeram) * si.mem_unit, size_t(si.totalram) * si.mem_unit};
  }

  int64_t memory_allocated(c10::DeviceIndex dev) {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_[dev].allocated_bytes[0].current;
  }

  void on_free(const Block& b) {
    size_t rounded = (b.bytes + kAlignment - 1) / kAlignment * kAlignment;
    std::lock_guard<std::mutex> lock(mutex_);
    auto& s = stats_[b.device];
    s.allocated_bytes[0].decrease(b.bytes);
    s.reserved_bytes[0].decrease(rounded);
    s.allocation[0].decrease(1);
    s.segment[0].decrease(1);
    s.num_device_free++;
  }

 private:
  static void noop(void*) {}
  static void release(void* ctx);

  std::mutex mutex_;
  c10::CachingDeviceAllocator::DeviceStats stats_[kMaxDevices];
};

OpenRegAllocator g_allocator;

void OpenRegAllocator::release(void* ctx) {
  auto* b = static_cast<Block*>(ctx);
  g_allocator.on_free(*b);
  std::free(b->ptr);
  delete b;
}

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

void reset_peak_memory_stats(c10::DeviceIndex index) { g_allocator.resetPeakStats(index); }
void reset_accumulated_memory_stats(c10::DeviceIndex index) { g_allocator.resetAccumulatedStats(index); }

void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes) {
  TORCH_CHECK(storage.resizable(), "openreg: trying to resize a storage that is not resizable");
  auto* impl = storage.unsafeGetStorageImpl();
  size_t old_bytes = impl->nbytes();
  if (old_bytes == new_bytes) return;
  c10::DeviceGuard guard(storage.device());
  c10::DataPtr fresh = g_allocator.allocate(new_bytes);
  size_t common = std::min(old_bytes, new_bytes);
  if (common && impl->data()) std::memcpy(fresh.get(), impl->data(), common);
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(new_bytes);
}

}  // namespace openreg
