// Runs of sliceable tasks on the execution queue (core/src/runtime/interleaved_runs.h):
// which runs interleave, that they give the results of running each task whole, and
// the span check that keeps tasks meeting other than element by element whole.
#include "execution_queue.h"
#include "interleaved_runs.h"

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

namespace openreg {
namespace {

TaskOrigin origin(const char* what) { return TaskOrigin{what, nullptr, 0}; }

TensorSpan span(uintptr_t begin, uintptr_t end, int64_t position, int64_t element_size = 4) {
  return {begin, end, position, element_size};
}

TEST(InterleavedRuns, SpansMeetOnlyAsTheSameSpan) {
  std::vector<TensorSpan> same{span(0, 400, 0), span(400, 800, 1), span(0, 400, 0), span(1000, 1100, 2)};
  EXPECT_TRUE(spans_meet_elementwise(same));
  std::vector<TensorSpan> shifted{span(0, 400, 0), span(200, 600, 0)};
  EXPECT_FALSE(spans_meet_elementwise(shifted));
  std::vector<TensorSpan> inside{span(0, 400, 0), span(100, 200, 0)};
  EXPECT_FALSE(spans_meet_elementwise(inside));
  std::vector<TensorSpan> other_position{span(0, 400, 0), span(0, 400, 1)};
  EXPECT_FALSE(spans_meet_elementwise(other_position));
  std::vector<TensorSpan> other_element_size{span(0, 400, 0, 4), span(0, 400, 0, 2)};
  EXPECT_FALSE(spans_meet_elementwise(other_element_size));
  std::vector<TensorSpan> empty_inside{span(0, 400, 0), span(100, 100, 3)};
  EXPECT_TRUE(spans_meet_elementwise(empty_inside));
}

TEST(InterleavedRuns, GroupsCoverEveryElementOnceInOrder) {
  const std::vector<int64_t> numel{3, 10, 0, 5};
  const auto groups = slice_groups(numel, 4);
  std::vector<std::pair<int64_t, int64_t>> seen;  // (position, element)
  for (const auto& g : groups) {
    int64_t in_group = 0;
    for (const Slice& s : g) {
      in_group += s.end - s.begin;
      for (int64_t e = s.begin; e < s.end; ++e) seen.emplace_back(s.position, e);
    }
    EXPECT_LE(in_group, 4);
  }
  std::vector<std::pair<int64_t, int64_t>> expected;
  for (int64_t p = 0; p < 4; ++p)
    for (int64_t e = 0; e < numel[p]; ++e) expected.emplace_back(p, e);
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(groups.size(), 5u);  // 18 elements, 4 a group
  EXPECT_TRUE(slice_groups(numel, 0).empty());
}

// A task over lists of float arrays: x = x * mul + add, element by element, where x is
// `lists[0]` and, with two lists, add comes from lists[1] (x = x * mul + y).
struct FakeOp {
  FakeOp(std::string name, std::vector<std::vector<float*>> lists, std::vector<int64_t> numel, float mul, float add,
         std::vector<std::string>* log)
      : name(std::move(name)), lists(std::move(lists)), numel(std::move(numel)), mul(mul), add(add), log(log) {}
  std::string name;
  std::vector<std::vector<float*>> lists;  // [list][position]
  std::vector<int64_t> numel;
  float mul = 1, add = 0;
  std::vector<std::string>* log = nullptr;
  int throw_on_call = -1;  // run_slices throws on this call (0-based)
  int calls = 0;
  SliceableWork work;

  void apply(int64_t p, int64_t begin, int64_t end) {
    float* x = lists[0][p];
    for (int64_t e = begin; e < end; ++e) x[e] = x[e] * mul + (lists.size() > 1 ? lists[1][p][e] : add);
  }
  static void run(void* self) {
    auto* op = static_cast<FakeOp*>(self);
    op->log->push_back(op->name + " whole");
    for (size_t p = 0; p < op->numel.size(); ++p) op->apply(p, 0, op->numel[p]);
  }
  static void run_slices(void* self, const Slice* slices, size_t count) {
    auto* op = static_cast<FakeOp*>(self);
    if (op->calls++ == op->throw_on_call) throw std::runtime_error("slice failed");
    op->log->push_back(op->name + " slices from " + std::to_string(slices[0].position) + ":" +
                       std::to_string(slices[0].begin));
    for (size_t i = 0; i < count; ++i) op->apply(slices[i].position, slices[i].begin, slices[i].end);
  }
  static void drop(void*) {}
  RawWork raw() {
    work.numel = numel;
    work.spans.clear();
    for (const auto& list : lists) {
      for (size_t p = 0; p < list.size(); ++p) {
        const auto b = reinterpret_cast<uintptr_t>(list[p]);
        work.spans.push_back({b, b + static_cast<uintptr_t>(numel[p] * sizeof(float)), static_cast<int64_t>(p), 4});
      }
    }
    work.run_slices = &FakeOp::run_slices;
    return RawWork{&FakeOp::run, &FakeOp::drop, this, &work};
  }
};

// Holds the worker until opened, so that the tasks after it are all queued when it
// reaches them.
struct HeldWorker {
  std::promise<void> gate;
  explicit HeldWorker(ExecutionQueue& q) {
    auto f = gate.get_future().share();
    q.enqueue(0, 0, [f] { f.wait(); }, origin("hold"));
  }
  void release() { gate.set_value(); }
};

// Queues `ops` (stream 0) behind a held worker, so that they reach it together, then
// lets it go and waits for them.
void run_queued_together(std::initializer_list<FakeOp*> ops) {
  ExecutionQueue q;
  HeldWorker held(q);
  for (FakeOp* op : ops) q.enqueue(0, 0, op->raw(), origin(op->name.c_str()));
  held.release();
  q.synchronize_all();
}

constexpr int64_t kBig = 300000;  // more than two slice groups of the default 131072

std::vector<float> ramp(int64_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(InterleavedRuns, TasksOverTheSameListsRunSliceBySliceWithTheResultsOfWholeTasks) {
  auto a = ramp(kBig, 0), b = ramp(7, 3), g = ramp(kBig, 1), h = ramp(7, 2);
  auto expect_a = a, expect_b = b;
  for (int64_t e = 0; e < kBig; ++e) expect_a[e] = (expect_a[e] * 0.5f + 2) * 3 + g[e];
  for (int64_t e = 0; e < 7; ++e) expect_b[e] = (expect_b[e] * 0.5f + 2) * 3 + h[e];
  std::vector<std::string> log;
  FakeOp first{"first", {{a.data(), b.data()}}, {kBig, 7}, 0.5f, 2, &log};
  FakeOp second{"second", {{a.data(), b.data()}, {g.data(), h.data()}}, {kBig, 7}, 3, 0, &log};
  run_queued_together({&first, &second});
  EXPECT_EQ(a, expect_a);
  EXPECT_EQ(b, expect_b);
  const std::vector<std::string> order{"first slices from 0:0",      "second slices from 0:0",
                                       "first slices from 0:131072", "second slices from 0:131072",
                                       "first slices from 0:262144", "second slices from 0:262144"};
  EXPECT_EQ(log, order);
}

TEST(InterleavedRuns, TasksMeetingOtherThanElementByElementRunWhole) {
  // second's list starts where first's is half done: sliced, second would read
  // elements first has not written yet.
  std::vector<float> x = ramp(2 * kBig, 0);
  auto expect = x;
  for (int64_t e = 0; e < kBig; ++e) expect[e] = expect[e] * 2;
  for (int64_t e = kBig / 2; e < kBig / 2 + kBig; ++e) expect[e] = expect[e] + 1;
  std::vector<std::string> log;
  FakeOp first{"first", {{x.data()}}, {kBig}, 2, 0, &log};
  FakeOp second{"second", {{x.data() + kBig / 2}}, {kBig}, 1, 1, &log};
  run_queued_together({&first, &second});
  EXPECT_EQ(x, expect);
  EXPECT_EQ(log, (std::vector<std::string>{"first whole", "second whole"}));
}

TEST(InterleavedRuns, OtherSizesOtherStreamsAndMarkersEndARun) {
  auto a = ramp(10, 0), b = ramp(11, 0);
  std::vector<std::string> log;
  FakeOp on_a{"a", {{a.data()}}, {10}, 2, 0, &log};
  FakeOp on_b{"b", {{b.data()}}, {11}, 2, 0, &log};
  FakeOp on_a_stream1{"a1", {{a.data()}}, {10}, 2, 0, &log};
  FakeOp on_a_again{"a2", {{a.data()}}, {10}, 2, 0, &log};
  ExecutionQueue q;
  HeldWorker held(q);
  q.enqueue(0, 0, on_a.raw(), origin("a"));
  q.enqueue(0, 0, on_b.raw(), origin("b"));
  q.enqueue(0, 1, on_a_stream1.raw(), origin("a1"));
  auto marker = std::make_shared<QueueMarker>();
  q.record(marker, 0, 1);
  q.enqueue(0, 1, on_a_again.raw(), origin("a2"));
  held.release();
  q.synchronize_all();
  EXPECT_EQ(log, (std::vector<std::string>{"a whole", "b whole", "a1 whole", "a2 whole"}));
}

TEST(InterleavedRuns, AFailingSliceIsReportedAsItsTasksError) {
  auto a = ramp(kBig, 0);
  std::vector<std::string> log;
  FakeOp first{"first", {{a.data()}}, {kBig}, 2, 0, &log};
  FakeOp second{"second", {{a.data()}}, {kBig}, 2, 0, &log};
  second.throw_on_call = 1;  // its second group
  ExecutionQueue q;
  HeldWorker held(q);
  q.enqueue(0, 0, first.raw(), origin("aten::_foreach_mul_.Scalar"));
  q.enqueue(0, 0, second.raw(), origin("aten::_foreach_add_.Scalar"));
  held.release();
  try {
    q.synchronize_all();
    FAIL() << "no error reported";
  } catch (const AsyncError& e) {
    EXPECT_NE(std::string(e.what()).find("aten::_foreach_add_.Scalar"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("slice failed"), std::string::npos) << e.what();
  }
  EXPECT_EQ(log, (std::vector<std::string>{"first slices from 0:0", "second slices from 0:0",
                                           "first slices from 0:131072"}));
}

}  // namespace
}  // namespace openreg
