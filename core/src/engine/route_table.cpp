// The route table: routing decisions per (operator, dtype), cached, with per-engine
// and reference-path call counters, the tuned table's preferences and route timing.
#include "engine_host.h"

namespace openreg {

Route* RouteTable::find_or_add(std::string key, const std::string& op, openreg_dtype dtype, bool has_dtype,
                               bool reference) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = routes_.find(key);
  if (it != routes_.end()) return it->second.get();

  auto r = std::make_unique<Route>();
  r->op = op;
  r->dtype = dtype;
  r->has_dtype = has_dtype;
  if (!reference) {
    for (Engine* e : registry_.chain()) {
      int32_t idx = e->find(op, dtype, has_dtype);
      if (idx != -1) r->candidates.push_back({e, idx});
    }
  }
  r->calls.reset(new std::atomic<uint64_t>[r->candidates.size() + 1]);
  for (size_t i = 0; i <= r->candidates.size(); ++i) r->calls[i] = 0;
  const size_t slots = r->candidates.size() * kSizeClasses;
  r->timed_ns.reset(new std::atomic<uint64_t>[slots + 1]);
  r->timed_calls.reset(new std::atomic<uint64_t>[slots + 1]);
  for (size_t i = 0; i <= slots; ++i) r->timed_ns[i] = r->timed_calls[i] = 0;
  if (const TunedRoutes* tuned = registry_.tuned_routes(); tuned && !reference) {
    auto it = tuned->prefer.find(key);
    if (it != tuned->prefer.end()) {
      for (int c = 0; c < kSizeClasses; ++c) {
        for (size_t i = 0; i < r->candidates.size(); ++i) {
          if (r->candidates[i].engine->name == it->second[static_cast<size_t>(c)]) {
            r->preferred[static_cast<size_t>(c)] = static_cast<int8_t>(i);
            r->tuned = r->tuned || i != 0;
          }
        }
      }
    }
  }
  if (verbosity() >= 1 && !reference) {
    std::string names;
    for (const auto& c : r->candidates) names += (names.empty() ? "" : ", then ") + c.engine->name;
    if (r->tuned) {
      names += " (tuned, first by size class:";
      for (int c = 0; c < kSizeClasses; ++c) {
        const int p = r->preferred[static_cast<size_t>(c)];
        names += std::string(" ") + (p < 0 ? "-" : r->candidates[static_cast<size_t>(p)].engine->name);
      }
      names += ")";
    }
    log_line(op + " (" + (has_dtype ? dtype_name(dtype) : "no tensor") + ") -> " +
             (names.empty() ? "no engine" : names));
  }
  Route* out = r.get();
  routes_.emplace(std::move(key), std::move(r));
  return out;
}

Route* RouteTable::route(const std::string& op, openreg_dtype dtype, bool has_dtype) {
  std::string key = op;
  key += '|';
  key += has_dtype ? dtype_name(dtype) : "-";
  return find_or_add(std::move(key), op, dtype, has_dtype, false);
}

Route* RouteTable::reference_route(const std::string& op) {
  return find_or_add(op + "|" + kReferencePathName, op, openreg_dtype{}, false, true);
}

std::unordered_map<std::string, std::unordered_map<std::string, uint64_t>> RouteTable::stats() {
  std::unordered_map<std::string, std::unordered_map<std::string, uint64_t>> out;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& kv : routes_) {
    const Route& r = *kv.second;
    for (size_t i = 0; i < r.candidates.size(); ++i) {
      uint64_t n = r.calls[i].load(std::memory_order_relaxed);
      if (n) out[r.op][r.candidates[i].engine->name] += n;
    }
    uint64_t n = r.reference_calls.load(std::memory_order_relaxed);
    if (n) out[r.op][kReferencePathName] += n;
  }
  return out;
}

void RouteTable::reset_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& kv : routes_) {
    for (size_t i = 0; i <= kv.second->candidates.size(); ++i) kv.second->calls[i] = 0;
    kv.second->reference_calls = 0;
  }
}

namespace {
std::atomic<bool> g_route_timing{false};
}  // namespace

bool route_timing_enabled() { return g_route_timing.load(std::memory_order_relaxed); }
void set_route_timing(bool on) { g_route_timing.store(on, std::memory_order_relaxed); }

std::vector<RouteTiming> RouteTable::timings() {
  std::vector<RouteTiming> out;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& kv : routes_) {
    const Route& r = *kv.second;
    for (size_t i = 0; i < r.candidates.size(); ++i) {
      for (int c = 0; c < kSizeClasses; ++c) {
        const size_t slot = i * kSizeClasses + static_cast<size_t>(c);
        const uint64_t n = r.timed_calls[slot].load(std::memory_order_relaxed);
        if (n == 0) continue;
        out.push_back({r.op, r.has_dtype ? dtype_name(r.dtype) : "-", r.candidates[i].engine->name, c, n,
                       r.timed_ns[slot].load(std::memory_order_relaxed)});
      }
    }
  }
  return out;
}

void RouteTable::reset_timings() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& kv : routes_) {
    const size_t slots = kv.second->candidates.size() * kSizeClasses;
    for (size_t i = 0; i <= slots; ++i) kv.second->timed_ns[i] = kv.second->timed_calls[i] = 0;
  }
}

std::string RouteTable::uncovered_message(const Route& route) {
  std::string asked;
  for (Engine* e : registry_.chain()) asked += (asked.empty() ? "" : ", ") + e->name;
  std::string msg = "openreg: no engine covers " + route.op + " for dtype " +
                    (route.has_dtype ? dtype_name(route.dtype) : std::string("(no tensor argument)")) +
                    " (engines asked: " + asked + ")";
  if (!registry_.config().fallback) {
    msg += ". Strict mode is on (OPENREG_FALLBACK=none): unset OPENREG_FALLBACK to run such ops "
           "on the reference engine aten_ref, or choose an engine that covers this op "
           "(see `python -m openreg info`)";
  } else {
    msg += ". Add an engine that covers it to OPENREG_ENGINE (see `python -m openreg info`)";
  }
  return msg;
}

}  // namespace openreg
