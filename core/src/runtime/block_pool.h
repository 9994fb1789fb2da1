// The caching pool behind the device allocator: size classes, free lists, per-device
// statistics. Torch-free (only the C++ standard library), so it is unit-tested alone and
// under ThreadSanitizer; allocator.cpp adapts it to c10.
//
// A freed block goes to a free list of its size class and the next request of that
// class takes it back, pages and all; with none of its class cached, a request takes
// the smallest cached block of at most twice its class (shapes that change from step
// to step: a new sequence length each batch). Cached blocks count as reserved, not
// allocated; empty_cache() frees them, and a free that leaves more cached than the
// cache's limit (the larger of cache_floor and the peak of live bytes) gives blocks
// back, least recently used classes first, down to half the limit (sparing the
// class just freed). Thread-safe: one mutex guards everything. The pool knows
// nothing of queued work: a caller that may still have work reading freed blocks must
// wait for it before empty_cache() (allocator.cpp synchronises the execution queue).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
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
  static constexpr size_t kDefaultCacheFloor = size_t(256) << 20;  // 256 MiB

  // Gives a block of `device` back to the system (std::free when none is set).
  using GiveBack = std::function<void(void* ptr, int device)>;

  // caching false: a freed block leaves the pool at once (memory debugging), through
  // give_back: the allocator defers the system's free behind the queued work that
  // may still use the block.
  // cache_floor: the cached bytes a device may keep whatever its peak of live bytes.
  explicit BlockPool(bool caching = true, GiveBack give_back = nullptr, size_t cache_floor = kDefaultCacheFloor)
      : caching_(caching), give_back_(std::move(give_back)), cache_floor_(cache_floor) {}
  ~BlockPool();  // frees the cached blocks (live ones belong to their owners)
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A block of at least n > 0 bytes, 64-byte aligned, from the cache or the system
  // (its `block`: the size class it was made for, up to twice n's).
  // Returns ptr null when the system has no memory left (the cache is not emptied:
  // the caller decides whether that is safe, then calls empty_cache() and retries).
  // device: 0 <= device < kMaxDevices, else std::out_of_range.
  PoolBlock allocate(int device, size_t n);
  // Returns a block from allocate() to the cache (without caching: to give_back;
  // blocks the cache then gives back over its limit go there too).
  void free(const PoolBlock& b);
  // Frees every cached block of every device (std::free, whatever give_back is: the
  // caller knows no queued work uses them); returns the bytes given back.
  size_t empty_cache();

  PoolStats stats(int device) const;
  size_t cached_bytes(int device) const;  // reserved but not allocated
  void reset_accumulated(int device);     // the `allocated`/`freed` sums and num_device_*
  void reset_peak(int device);            // peaks down to the current values

 private:
  struct FreeList {
    std::vector<void*> blocks;
    uint64_t last_use = 0;  // the device's `uses` when a block of this class was last freed
  };
  struct Device {
    PoolStats stats;
    std::map<size_t, FreeList> free_lists;  // size class -> cached blocks (no empty lists)
    size_t cached_bytes = 0;
    uint64_t uses = 0;  // frees so far: the clock of last_use
  };
  static void check_device(int device);
  // Takes blocks off d's free lists, least recently used classes first and never of
  // class `spare` (the one just freed), until at most `keep` bytes stay cached;
  // appends them to *out and updates the statistics.
  static void take_for_give_back(Device& d, size_t keep, size_t spare, std::vector<void*>* out);
  void give_back(const std::vector<void*>& blocks, int device) const;

  const bool caching_;
  const GiveBack give_back_;
  const size_t cache_floor_;
  mutable std::mutex mutex_;
  Device devices_[kMaxDevices];
};

}  // namespace openreg
