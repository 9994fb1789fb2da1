#pragma once

// Runs of queued tasks that are elementwise over aligned lists of tensors (the
// optimizer's _foreach_* ops), run a slice of elements at a time, each slice through
// every task of the run before the next slice.
//
// torch.optim's default (foreach) AdamW step is nine such ops over the parameter list,
// each a pass over memory: ResNet-18's 11M parameters took 36 ms a step behind a busy
// worker at one thread, 27 interleaved (the fused kernel 13). Interleaved, a slice's
// operands are still in cache when the next op reads them. The results are the same
// bits: every element goes through the same ops in the same order, as long as no
// memory is reached through two different (list position, element) pairs, which the
// worker checks first (spans_meet_elementwise). docs/design.md, "Optimizer steps
// interleaved". OPENREG_INTERLEAVE_FOREACH=0 runs every task whole; a number sets the
// elements of a slice.
//
// Torch-free, like the queue that uses it.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace openreg {

// Elements [begin, end) of the tensors at list position `position`.
struct Slice {
  int64_t position;
  int64_t begin;
  int64_t end;
};

// The memory one list item of a task reads or writes (contiguous, so one range).
struct TensorSpan {
  uintptr_t begin;
  uintptr_t end;  // one past the last byte
  int64_t position;
  int64_t element_size;
};

// What a task that can run sliced says about itself. Owned by the task's context,
// valid until the task is dropped.
struct SliceableWork {
  std::vector<int64_t> numel;     // elements of the tensors at each list position
  std::vector<TensorSpan> spans;  // every tensor the task reads or writes
  // Runs the task on `count` slices (may throw, as the task would).
  void (*run_slices)(void* ctx, const Slice* slices, size_t count) = nullptr;
};

// Whether tasks touching `spans` may run interleaved: any two spans that share memory
// are the same span (same range, same position, same element size). Sorts `spans`.
bool spans_meet_elementwise(std::vector<TensorSpan>& spans);

// The slices of lists with `numel` elements per position, in position order, grouped
// so that a group holds about `group_elements` elements (a larger tensor is cut into
// pieces of that size; small ones share a group).
std::vector<std::vector<Slice>> slice_groups(const std::vector<int64_t>& numel, int64_t group_elements);

// Elements per group from OPENREG_INTERLEAVE_FOREACH (0: no interleaving), read once.
int64_t interleave_group_elements();

}  // namespace openreg
