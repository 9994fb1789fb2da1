// data_placement.hpp: a short, per-thread log of the byte ranges calls wrote and
// with how many threads; the newest entry covering an input's first byte decides.
#include "data_placement.hpp"

#include <algorithm>
#include <array>

namespace onednn_engine {

namespace {

struct Written {
  const char* begin = nullptr;
  const char* end = nullptr;
  bool spread = false;
};

// The last kEntries outputs written on this thread. Older ones are forgotten (their
// data has likely left the caches since); a block freed and written again by code
// that does not pass here (a host copy) can leave a stale entry, which only costs
// or saves a thread: placement never decides what a call computes.
constexpr size_t kEntries = 64;
thread_local std::array<Written, kEntries> t_log;
thread_local size_t t_next = 0;
// The largest Threads scope opened inside the current call; 0: none.
thread_local int t_inner_max = 0;

bool spread_at(const char* p) {
  for (size_t k = 0; k < kEntries; ++k) {
    const Written& w = t_log[(t_next + kEntries - 1 - k) % kEntries];
    if (w.begin == nullptr) return false;  // the log is not full yet
    if (p >= w.begin && p < w.end) return w.spread;
  }
  return false;
}

bool reads_spread_data(const sdk::Call& call) {
  const openreg_call* c = call.raw();
  for (int i = 0; i < c->num_args; ++i) {
    if (c->args[i].kind != OPENREG_VALUE_TENSOR) continue;
    const sdk::Tensor t(c->args[i].u.tensor);
    if (t.numel() >= static_cast<int64_t>(kSpreadGrain) && spread_at(t.bytes())) return true;
  }
  return false;
}

}  // namespace

int memory_bound_threads(const sdk::Call& call, int64_t largest) {
  const int n = threads_for(static_cast<double>(largest), kMemGrain);
  if (n > 1 || static_cast<double>(largest) < 2 * kSpreadGrain || !reads_spread_data(call)) return n;
  return threads_for(static_cast<double>(largest), kSpreadGrain);
}

void note_scope_threads(int n) { t_inner_max = std::max(t_inner_max, n); }

CallPlacement::CallPlacement(int threads) : threads_(threads), outer_inner_max_(t_inner_max) { t_inner_max = 0; }

CallPlacement::~CallPlacement() { t_inner_max = outer_inner_max_; }

void CallPlacement::done(const sdk::Call& call) {
  const bool spread = (t_inner_max > 0 ? t_inner_max : threads_) > 1;
  const openreg_call* c = call.raw();
  for (int i = 0; i < c->num_outputs; ++i) {
    if (c->outputs[i].ndim < 0) continue;
    const sdk::Tensor t(&c->outputs[i]);
    const int64_t n = t.numel();
    if (n == 0) continue;
    // The bytes from the lowest element to one past the highest.
    int64_t lo = 0, hi = 0;
    for (int64_t d = 0; d < t.dim(); ++d) {
      const int64_t reach = (t.size(d) - 1) * t.stride(d);
      (reach < 0 ? lo : hi) += reach;
    }
    t_log[t_next] = Written{t.bytes() + lo * t.element_size(), t.bytes() + (hi + 1) * t.element_size(), spread};
    t_next = (t_next + 1) % kEntries;
  }
}

}  // namespace onednn_engine
