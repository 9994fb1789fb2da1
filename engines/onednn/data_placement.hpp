// Where the data a call reads was written: by one thread (so it sits in one core's
// cache) or by several (spread over the cores' caches, each thread's part in its own).
//
// A matmul on two threads reading data one thread just wrote first moves half of it
// to the other core: a [512,128] multiply on one thread, then a Linear on two threads
// reading its output, took 16-19 us more than the two calls apart (torch CPU, which
// runs both on two threads: 0-5 us more). So a memory-bound call that reads data
// several threads wrote takes a second thread from kSpreadGrain elements (ATen's
// grain) instead of from two kMemGrain: in a transformer the elementwise ops between
// the matmuls then keep their data where the matmuls' threads wrote it and will read
// it. Data one thread wrote keeps the call on one thread below two kMemGrain, as
// before: a convolution network whose convolutions run on one thread gets no lone
// parallel regions (docs/design.md, "The host's threads").
#pragma once

#include "common.hpp"

namespace onednn_engine {

// ATen's grain: a memory-bound call reading spread data gets a thread per this many
// elements of its largest tensor.
constexpr double kSpreadGrain = 32768;

// The threads a call whose largest tensor has `largest` elements runs on, unless
// its kernel decides by its own measure (convolution and matmul: FLOPs).
int memory_bound_threads(const sdk::Call& call, int64_t largest);

// Around one call on this thread: notes the thread counts of the Threads scopes the
// kernel opens, and afterwards where the call's outputs were written.
class CallPlacement {
 public:
  explicit CallPlacement(int threads);  // the wrapper's count for the call
  ~CallPlacement();
  CallPlacement(const CallPlacement&) = delete;
  CallPlacement& operator=(const CallPlacement&) = delete;
  void done(const sdk::Call& call);  // the call succeeded: note its outputs

 private:
  int threads_;
  int outer_inner_max_;
};

// Called by every Threads scope: a kernel's own scope decides the call's threads.
void note_scope_threads(int n);

}  // namespace onednn_engine
