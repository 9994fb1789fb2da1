#pragma once

// Objects that host threads take for queued work and the worker gives back when the work
// is done (a queued call's arrays, its task), reused instead of new and delete.
//
// Taken on one thread and freed on another, each queued op's allocations went through
// malloc's arena lock from both threads at once: the worker's frees and the host's
// mallocs met on it (futex waits and wakes on both sides of a loop of small device ops),
// and a mutex-guarded free list met the same way once per op. Here each thread keeps a
// stash of its own; the shared list is locked once per kBatch objects: a host thread
// whose stash is empty takes the whole shared list, and a thread that gives back hands
// its stash over when it holds kBatch. At most kBatch - 1 objects per giving thread wait
// in its stash; a thread's stash goes to the shared list when the thread exits.
// Objects are never freed (like the device's cached blocks, they serve the next ops).

#include <cstddef>
#include <mutex>
#include <utility>
#include <vector>

namespace openreg {

template <class T>
class RecyclingPool {
 public:
  static constexpr size_t kBatch = 32;

  // An object to fill (as the last user left it, or new).
  T* take() {
    std::vector<T*>& mine = stash().objects;
    if (mine.empty()) {
      std::lock_guard<std::mutex> lock(mutex_);
      mine.swap(shared_);
    }
    if (mine.empty()) return new T();
    T* t = mine.back();
    mine.pop_back();
    return t;
  }

  // `t` is no longer used (the caller has reset what it should not keep alive).
  void give_back(T* t) {
    std::vector<T*>& mine = stash().objects;
    mine.push_back(t);
    if (mine.size() >= kBatch) hand_over(mine);
  }

  // The process's pool of T: never destroyed, so that a thread exiting late (or a
  // static destructor) still finds it.
  static RecyclingPool& instance() {
    static RecyclingPool* pool = new RecyclingPool();
    return *pool;
  }

 private:
  struct Stash {
    std::vector<T*> objects;
    ~Stash() {
      if (!objects.empty()) instance().hand_over(objects);
    }
  };
  static Stash& stash() {
    thread_local Stash s;
    return s;
  }

  void hand_over(std::vector<T*>& objects) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shared_.empty()) {
      shared_.swap(objects);
    } else {
      shared_.insert(shared_.end(), objects.begin(), objects.end());
      objects.clear();
    }
  }

  std::mutex mutex_;
  std::vector<T*> shared_;
};

}  // namespace openreg
