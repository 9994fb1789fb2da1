// Device memory (host memory, 64-byte aligned, per-device statistics, cached) and
// the pinned host allocator.
//
// Caching: a freed block goes to a free list of its size class and the next
// request of that class takes it back, pages and all. Without it every large
// output is fresh memory from malloc, whose pages fault in on first touch
// (backward runs on autograd's device thread, whose malloc arena hands memory
// back to the system eagerly): on a 2-layer nn.TransformerEncoder step that was
// a third of the device's time. Size classes waste at most 1/8 of a block.
// Cached blocks count as reserved, not allocated; empty_cache() frees them, and
// a failed malloc empties the cache and tries again. OPENREG_NO_MEMORY_CACHING=1
// turns caching off (like PYTORCH_NO_CUDA_MEMORY_CACHING), for memory debugging.
#include "runtime.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <sys/sysinfo.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace openreg {

namespace {

constexpr size_t kAlignment = 64;
constexpr c10::DeviceIndex kMaxDevices = 64;

struct Block {
  void* ptr;
  size_t bytes;  // asked for
  size_t block;  // reserved: its size class
  c10::DeviceIndex device;
};

// The block size serving a request of n bytes: multiples of 512 bytes up to
// 1 MiB, then eight classes per power of two.
size_t size_class_bytes(size_t n) {
  constexpr size_t kSmall = 512, kLarge = size_t(1) << 20;
  if (n <= kLarge) return (n + kSmall - 1) / kSmall * kSmall;
  size_t top = size_t(1) << (63 - __builtin_clzll(n));  // highest power of two <= n
  size_t step = top / 8;
  return (n + step - 1) / step * step;
}

bool caching_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("OPENREG_NO_MEMORY_CACHING");
    return !(v && *v && std::string(v) != "0");
  }();
  return on;
}

class OpenRegAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    c10::DeviceIndex dev = current_device();
    if (n == 0) return {nullptr, nullptr, &noop, c10::Device(kDevice, dev)};
    const size_t block = size_class_bytes(n);
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& s = stats_[dev];
      auto it = cache_[dev].find(block);
      if (it != cache_[dev].end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        cached_bytes_[dev] -= block;
      }
      if (p) {
        s.allocated_bytes[0].increase(n);
        s.allocation[0].increase(1);
        return {p, new Block{p, n, block, dev}, &release, c10::Device(kDevice, dev)};
      }
    }
    p = std::aligned_alloc(kAlignment, block);
    if (!p) {  // memory held by the cache may be what is missing
      emptyCache(c10::MempoolId_t{0, 0});
      p = std::aligned_alloc(kAlignment, block);
    }
    TORCH_CHECK_WITH(OutOfMemoryError, p != nullptr, "openreg: out of memory allocating ", n,
                     " bytes on openreg:", int(dev), " (", memory_allocated(dev),
                     " bytes already allocated). Free tensors or use smaller batches");
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& s = stats_[dev];
      s.allocated_bytes[0].increase(n);
      s.reserved_bytes[0].increase(block);
      s.allocation[0].increase(1);
      s.segment[0].increase(1);
      s.num_device_alloc++;
    }
    return {p, new Block{p, n, block, dev}, &release, c10::Device(kDevice, dev)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dst, const void* src, std::size_t count) const override {
    if (count) std::memcpy(dst, src, count);
  }

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {
    std::vector<void*> freed;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (c10::DeviceIndex dev = 0; dev < kMaxDevices; ++dev) {
        auto& s = stats_[dev];
        for (auto& [block, ptrs] : cache_[dev]) {
          for (void* p : ptrs) {
            freed.push_back(p);
            s.reserved_bytes[0].decrease(block);
            s.segment[0].decrease(1);
            s.num_device_free++;
          }
        }
        cache_[dev].clear();
        cached_bytes_[dev] = 0;
      }
    }
    for (void* p : freed) std::free(p);
  }
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

  // Back to the cache; false when the block is to be freed instead.
  bool on_free(const Block& b) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& s = stats_[b.device];
    s.allocated_bytes[0].decrease(b.bytes);
    s.allocation[0].decrease(1);
    if (caching_enabled()) {
      cache_[b.device][b.block].push_back(b.ptr);
      cached_bytes_[b.device] += b.block;
      return true;
    }
    s.reserved_bytes[0].decrease(b.block);
    s.segment[0].decrease(1);
    s.num_device_free++;
    return false;
  }

 private:
  static void noop(void*) {}
  static void release(void* ctx);

  std::mutex mutex_;
  c10::CachingDeviceAllocator::DeviceStats stats_[kMaxDevices];
  // Free blocks per device: block size -> pointers.
  std::unordered_map<size_t, std::vector<void*>> cache_[kMaxDevices];
  size_t cached_bytes_[kMaxDevices] = {};
};

OpenRegAllocator g_allocator;

void OpenRegAllocator::release(void* ctx) {
  auto* b = static_cast<Block*>(ctx);
  if (!g_allocator.on_free(*b)) {
    // Queued work may still use the block (the host frees as soon as Python lets go):
    // it goes back to the system after that work, in queue order.
    void* p = b->ptr;
    if (run_inline() || !is_initialized()) std::free(p);
    else enqueue_work(b->device, [p] { std::free(p); }, "free (OPENREG_NO_MEMORY_CACHING)");
  }
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
void empty_cache() { g_allocator.emptyCache(c10::MempoolId_t{0, 0}); }
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
