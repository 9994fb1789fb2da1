#include "block_pool.h"

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace openreg {

size_t size_class_bytes(size_t n) {
  constexpr size_t kSmall = 512, kLarge = size_t(1) << 20;
  if (n <= kLarge) return (n + kSmall - 1) / kSmall * kSmall;
  size_t top = size_t(1) << (63 - __builtin_clzll(n));  // highest power of two <= n
  size_t step = top / 8;
  return (n + step - 1) / step * step;
}

void PoolStat::increase(size_t amount) {
  current += static_cast<int64_t>(amount);
  peak = std::max(peak, current);
  allocated += static_cast<int64_t>(amount);
}

void PoolStat::decrease(size_t amount) {
  current -= static_cast<int64_t>(amount);
  freed += static_cast<int64_t>(amount);
}

BlockPool::~BlockPool() { empty_cache(); }

void BlockPool::check_device(int device) {
  if (device < 0 || device >= kMaxDevices)
    throw std::out_of_range("openreg: BlockPool device " + std::to_string(device) + " out of range [0, " +
                            std::to_string(kMaxDevices) + ")");
}

PoolBlock BlockPool::allocate(int device, size_t n) {
  check_device(device);
  const size_t block = size_class_bytes(n);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Device& d = devices_[device];
    auto it = d.free_lists.find(block);
    if (it != d.free_lists.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      d.cached_bytes -= block;
      d.stats.allocated_bytes.increase(n);
      d.stats.allocation.increase(1);
      return {p, n, block, device};
    }
  }
  // A new block: malloc outside the lock (it may fault in pages or take a while).
  void* p = std::aligned_alloc(kAlignment, block);
  if (!p) return {nullptr, n, block, device};
  std::lock_guard<std::mutex> lock(mutex_);
  PoolStats& s = devices_[device].stats;
  s.allocated_bytes.increase(n);
  s.reserved_bytes.increase(block);
  s.allocation.increase(1);
  s.segment.increase(1);
  s.num_device_alloc++;
  return {p, n, block, device};
}

void BlockPool::free(const PoolBlock& b) {
  check_device(b.device);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Device& d = devices_[b.device];
    d.stats.allocated_bytes.decrease(b.bytes);
    d.stats.allocation.decrease(1);
    if (caching_) {
      d.free_lists[b.block].push_back(b.ptr);
      d.cached_bytes += b.block;
      return;
    }
    d.stats.reserved_bytes.decrease(b.block);
    d.stats.segment.decrease(1);
    d.stats.num_device_free++;
  }
  if (give_back_) {
    give_back_(b.ptr, b.device);
  } else {
    std::free(b.ptr);
  }
}

size_t BlockPool::empty_cache() {
  std::vector<void*> freed;
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Device& d : devices_) {
      for (auto& [block, ptrs] : d.free_lists) {
        for (void* p : ptrs) {
          freed.push_back(p);
          bytes += block;
          d.stats.reserved_bytes.decrease(block);
          d.stats.segment.decrease(1);
          d.stats.num_device_free++;
        }
      }
      d.free_lists.clear();
      d.cached_bytes = 0;
    }
  }
  for (void* p : freed) std::free(p);
  return bytes;
}

PoolStats BlockPool::stats(int device) const {
  check_device(device);
  std::lock_guard<std::mutex> lock(mutex_);
  return devices_[device].stats;
}

size_t BlockPool::cached_bytes(int device) const {
  check_device(device);
  std::lock_guard<std::mutex> lock(mutex_);
  return devices_[device].cached_bytes;
}

void BlockPool::reset_accumulated(int device) {
  check_device(device);
  std::lock_guard<std::mutex> lock(mutex_);
  PoolStats& s = devices_[device].stats;
  for (PoolStat* stat : {&s.allocated_bytes, &s.reserved_bytes, &s.allocation, &s.segment}) {
    stat->allocated = stat->freed = 0;
  }
  s.num_device_alloc = s.num_device_free = 0;
}

void BlockPool::reset_peak(int device) {
  check_device(device);
  std::lock_guard<std::mutex> lock(mutex_);
  PoolStats& s = devices_[device].stats;
  for (PoolStat* stat : {&s.allocated_bytes, &s.reserved_bytes, &s.allocation, &s.segment}) {
    stat->peak = stat->current;
  }
}

}  // namespace openreg
