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
    // Its own class, or the smallest cached one up to twice its size.
    auto it = d.free_lists.lower_bound(block);
    if (it != d.free_lists.end() && it->first <= 2 * block) {
      const size_t taken = it->first;
      void* p = it->second.blocks.back();
      it->second.blocks.pop_back();
      if (it->second.blocks.empty()) d.free_lists.erase(it);
      d.cached_bytes -= taken;
      d.stats.allocated_bytes.increase(n);
      d.stats.allocation.increase(1);
      return {p, n, taken, device};
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

void BlockPool::take_for_give_back(Device& d, size_t keep, size_t spare, std::vector<void*>* out) {
  std::vector<std::pair<uint64_t, size_t>> by_age;  // (last_use, class)
  for (const auto& [block, list] : d.free_lists) {
    if (block != spare) by_age.emplace_back(list.last_use, block);
  }
  std::sort(by_age.begin(), by_age.end());
  for (const auto& [age, block] : by_age) {
    if (d.cached_bytes <= keep) break;
    FreeList& list = d.free_lists[block];
    while (!list.blocks.empty() && d.cached_bytes > keep) {
      out->push_back(list.blocks.back());
      list.blocks.pop_back();
      d.cached_bytes -= block;
      d.stats.reserved_bytes.decrease(block);
      d.stats.segment.decrease(1);
      d.stats.num_device_free++;
    }
    if (list.blocks.empty()) d.free_lists.erase(block);
  }
}

void BlockPool::give_back(const std::vector<void*>& blocks, int device) const {
  for (void* p : blocks) {
    if (give_back_) {
      give_back_(p, device);
    } else {
      std::free(p);
    }
  }
}

void BlockPool::free(const PoolBlock& b) {
  check_device(b.device);
  std::vector<void*> over_limit;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Device& d = devices_[b.device];
    d.stats.allocated_bytes.decrease(b.bytes);
    d.stats.allocation.decrease(1);
    if (caching_) {
      FreeList& list = d.free_lists[b.block];
      list.blocks.push_back(b.ptr);
      list.last_use = ++d.uses;
      d.cached_bytes += b.block;
      const size_t limit = std::max(cache_floor_, static_cast<size_t>(d.stats.allocated_bytes.peak));
      if (d.cached_bytes <= limit) return;
      take_for_give_back(d, limit / 2, b.block, &over_limit);
    } else {
      d.stats.reserved_bytes.decrease(b.block);
      d.stats.segment.decrease(1);
      d.stats.num_device_free++;
      over_limit.push_back(b.ptr);
    }
  }
  give_back(over_limit, b.device);
}

size_t BlockPool::empty_cache() {
  std::vector<void*> freed;
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Device& d : devices_) {
      for (auto& [block, list] : d.free_lists) {
        for (void* p : list.blocks) {
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
