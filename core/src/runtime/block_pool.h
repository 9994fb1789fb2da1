// The caching pool behind the device allocator: size classes, free lists, per-device
// statistics. Torch-free (only the C++ standard library), so it is unit-tested alone and
// under ThreadSanitizer; allocator.cpp adapts it to c10.
//
// A freed block goes to a free list of its size class and the next request of that
// class takes it back, pages and all. Cached blocks count as reserved, not allocated;
// empty_cache() frees them. Thread-safe: one mutex guards everything. The pool knows
// nothing of queued work: a caller that may still have work reading freed blocks must
// wait for it before empty_cache() (allocator.cpp synchronises the execution queue).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace openreg {

// The block size serving a request of n bytes: multiples of 512 bytes up to 1 MiB,
// then eight classes per power of two, so at most 1/8 of a block is wasted.
size_t size_class_bytes(size_t n);

// One statistic, with the semantics of c10::CachingAllocator::Stat.
struct PoolStat {
  int64_t current = 0;
  int64_t peak = 0;       // highest `current` since the last reset_peak
  int64_t allocated = 0;  // sum of increases since the last reset_accumulated
  int64_t freed = 0;      // sum of decreases since the last reset_accumulated
  void increase(size_t amount);
  void decrease(size_t amount);
};

// A device's statistics; the names follow torch.cuda.memory_stats.
struct PoolStats {
  PoolStat allocated_bytes;  // bytes asked for by live allocations
  PoolStat reserved_bytes;   // bytes of blocks held from the system (live or cached)
  PoolStat allocation;       // live allocations
  PoolStat segment;          // blocks held from the system
  int64_t num_device_alloc = 0;  // blocks taken from the system
  int64_t num_device_free = 0;   // blocks given back to the system
};

// A live allocation: what free() needs back.
struct PoolBlock {
  void* ptr = nullptr;  // null: out of memory
  size_t bytes = 0;     // asked for
  size_t block = 0;     // reserved: its size class
  int device = 0;
};

class BlockPool {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr int kMaxDevices = 64;

  // Gives a block of `device` back to the system (std::free when none is set).
  using GiveBack = std::function<void(void* ptr, int device)>;

  // caching false: a freed block leaves the pool at once (memory debugging), through
  // give_back: the allocator defers the system's free behind the queued work that
  // may still use the block.
  explicit BlockPool(bool caching = true, GiveBack give_back = nullptr)
      : caching_(caching), give_back_(std::move(give_back)) {}
  ~BlockPool();  // frees the cached blocks (live ones belong to their owners)
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A block of at least n > 0 bytes, 64-byte aligned, from the cache or the system.
  // Returns ptr null when the system has no memory left (the cache is not emptied:
  // the caller decides whether that is safe, then calls empty_cache() and retries).
  // device: 0 <= device < kMaxDevices, else std::out_of_range.
  PoolBlock allocate(int device, size_t n);
  // Returns a block from allocate() to the cache (without caching: to give_back).
  void free(const PoolBlock& b);
  // Frees every cached block of every device (std::free, whatever give_back is: the
  // caller knows no queued work uses them); returns the bytes given back.
  size_t empty_cache();

  PoolStats stats(int device) const;
  size_t cached_bytes(int device) const;  // reserved but not allocated
  void reset_accumulated(int device);     // the `allocated`/`freed` sums and num_device_*
  void reset_peak(int device);            // peaks down to the current values

 private:
  struct Device {
    PoolStats stats;
    std::unordered_map<size_t, std::vector<void*>> free_lists;  // size class -> blocks
    size_t cached_bytes = 0;
  };
  static void check_device(int device);

  const bool caching_;
  const GiveBack give_back_;
  mutable std::mutex mutex_;
  Device devices_[kMaxDevices];
};

}  // namespace openreg
