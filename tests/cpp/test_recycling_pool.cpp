// The pool of objects host threads take for queued work and the worker gives back
// (core/src/runtime/recycling_pool.h): objects are reused, none is lost or handed out
// twice, also with a producer and a consumer thread at once.
#include "recycling_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace openreg {
namespace {

// Each test its own type, so each its own pool.
struct Reused {
  int value = 0;
};

TEST(RecyclingPool, ReusesWhatOneThreadGaveBack) {
  auto& pool = RecyclingPool<Reused>::instance();
  Reused* a = pool.take();
  a->value = 7;
  pool.give_back(a);
  Reused* b = pool.take();
  EXPECT_EQ(a, b);          // from this thread's stash
  EXPECT_EQ(b->value, 7);   // as the last user left it
  pool.give_back(b);
}

struct Crossing {
  std::atomic<int> users{0};
};

// A host thread takes and fills, a worker thread gives back, as with queued ops (at most
// kInFlight queued, as the execution queue is bounded): no object is in two hands at
// once, and objects come back instead of new ones. A new one is made only when the
// taking thread's stash and the shared list are empty, so every object then is queued
// (kInFlight), in the giving thread's hand (1) or stash (kBatch - 1), or the new one.
TEST(RecyclingPool, TakenOnOneThreadGivenBackOnAnother) {
  auto& pool = RecyclingPool<Crossing>::instance();
  constexpr int kObjects = 20000;
  constexpr size_t kInFlight = 64;
  std::mutex m;
  std::condition_variable cv, room;
  std::deque<Crossing*> queued;
  bool done = false;
  std::thread worker([&] {
    for (;;) {
      std::unique_lock<std::mutex> lock(m);
      cv.wait(lock, [&] { return done || !queued.empty(); });
      if (queued.empty()) return;
      Crossing* c = queued.front();
      queued.pop_front();
      lock.unlock();
      room.notify_one();
      EXPECT_EQ(c->users.fetch_sub(1), 1);
      pool.give_back(c);
    }
  });
  std::set<Crossing*> seen;
  for (int i = 0; i < kObjects; ++i) {
    Crossing* c = pool.take();
    EXPECT_EQ(c->users.fetch_add(1), 0) << "an object handed out while still in use";
    seen.insert(c);
    {
      std::unique_lock<std::mutex> lock(m);
      room.wait(lock, [&] { return queued.size() < kInFlight; });
      queued.push_back(c);
    }
    cv.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(m);
    done = true;
  }
  cv.notify_one();
  worker.join();
  // Without reuse every take would be new: 20000 objects.
  EXPECT_LE(seen.size(), kInFlight + RecyclingPool<Crossing>::kBatch + 1);
}

struct Exiting {
  int value = 0;
};

// What a thread gave back but had not handed over goes to the shared list when the
// thread exits: the next take elsewhere finds it.
TEST(RecyclingPool, AnExitingThreadsStashIsKept) {
  auto& pool = RecyclingPool<Exiting>::instance();
  std::vector<Exiting*> made;
  for (int i = 0; i < 3; ++i) made.push_back(pool.take());
  std::thread giver([&] {
    for (Exiting* e : made) pool.give_back(e);  // fewer than a batch: kept in its stash
  });
  giver.join();
  std::set<Exiting*> got;
  for (int i = 0; i < 3; ++i) got.insert(pool.take());
  EXPECT_EQ(got, std::set<Exiting*>(made.begin(), made.end()));
}

}  // namespace
}  // namespace openreg
