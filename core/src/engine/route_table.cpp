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
  r->key_hash = std::hash<std::string>{}(key);
  if (!reference) {
    for (Engine* e : registry_.chain()) {
      int32_t idx = e->find(op, dtype, has_dtype);
      if (idx != -1) r->candidates.push_back({e, idx});
    }
  }
  r->calls.reset(new std::atomic<uint64_t>[r->candidates.size() + 1]);
  for (size_t i = 0; i <= r->candidates.size(); ++i) r->calls[i] = 0;
  if (const TunedRoutes* tuned = registry_.tuned_routes(); tuned && !reference) {
    auto index_of = [&r](const std::string& engine) -> int {
      for (size_t i = 0; i < r->candidates.size(); ++i)
        if (r->candidates[i].engine->name == engine) return static_cast<int>(i);
      return -1;
    };
    for (int t = 0; t < kThreadSettings; ++t) {
      const TunedRoutes::Choices& choices = tuned->by_threads[static_cast<size_t>(t)];
      Route::Preferences& prefer = r->preferred[static_cast<size_t>(t)];
      auto it = choices.prefer.find(key);
      if (it != choices.prefer.end()) {
        for (int c = 0; c < kSizeClasses; ++c) {
          const int i = index_of(it->second[static_cast<size_t>(c)]);
          if (i < 0) continue;
          prefer.by_class[static_cast<size_t>(c)] = static_cast<int8_t>(i);
          r->tuned = r->tuned || i != 0;
        }
      }
      auto shapes = choices.shapes.find(key);
      if (shapes != choices.shapes.end()) {
        for (const auto& [sizes, engine] : shapes->second) {
          const int i = index_of(engine);
          if (i < 0) continue;
          prefer.by_shape.push_back({shape_key(sizes.data(), sizes.size()), static_cast<int8_t>(i)});
          r->tuned = true;
        }
      }
    }
  }
  if (verbosity() >= 1 && !reference) {
    std::string names;
    for (const auto& c : r->candidates) names += (names.empty() ? "" : ", then ") + c.engine->name;
    if (r->tuned) {
      names += " (tuned, first by size class";
      for (int t = 0; t < kThreadSettings; ++t) {
        const Route::Preferences& p = r->preferred[static_cast<size_t>(t)];
        names += t == 0 ? ", one thread:" : "; more threads:";
        for (int c = 0; c < kSizeClasses; ++c) {
          const int i = p.by_class[static_cast<size_t>(c)];
          names += std::string(" ") + (i < 0 ? "-" : r->candidates[static_cast<size_t>(i)].engine->name);
        }
        if (!p.by_shape.empty()) names += " and " + std::to_string(p.by_shape.size()) + " shape(s)";
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
std::atomic<bool> g_tuned_routes_followed{true};
std::atomic<const Engine*> g_pinned_engine{nullptr};
std::atomic<int> g_pin_group{0}, g_pin_groups{1};
}  // namespace

bool route_timing_enabled() { return g_route_timing.load(std::memory_order_relaxed); }
void set_route_timing(bool on) { g_route_timing.store(on, std::memory_order_relaxed); }
bool tuned_routes_followed() { return g_tuned_routes_followed.load(std::memory_order_relaxed); }
void set_tuned_routes_followed(bool on) { g_tuned_routes_followed.store(on, std::memory_order_relaxed); }
bool Route::follows_table() const { return tuned && tuned_routes_followed(); }
void pin_engine(const Engine* engine, int group, int groups) {
  g_pinned_engine.store(nullptr, std::memory_order_relaxed);
  g_pin_groups.store(std::max(1, groups), std::memory_order_relaxed);
  g_pin_group.store(group, std::memory_order_relaxed);
  g_pinned_engine.store(engine, std::memory_order_relaxed);
}
const Engine* pinned_engine(const Route& route) {
  const Engine* e = g_pinned_engine.load(std::memory_order_relaxed);
  if (!e) return nullptr;
  const int groups = g_pin_groups.load(std::memory_order_relaxed);
  return static_cast<int>(route.key_hash % static_cast<uint64_t>(groups)) == g_pin_group.load(std::memory_order_relaxed)
             ? e
             : nullptr;
}

int Route::candidate_of(const Engine* engine) const {
  for (size_t i = 0; i < candidates.size(); ++i)
    if (candidates[i].engine == engine) return static_cast<int>(i);
  return -1;
}

void Route::note_shape(uint64_t shape, const int64_t* sizes, size_t ndim) {
  std::lock_guard<std::mutex> lock(timing_mutex);
  ShapeTiming& t = timed[shape];
  if (t.ns.empty()) {
    t.sizes.assign(sizes, sizes + ndim);
    t.ns.assign(candidates.size(), 0);
    t.calls.assign(candidates.size(), 0);
  }
}

void Route::add_timing(uint64_t shape, size_t candidate, uint64_t ns) {
  std::lock_guard<std::mutex> lock(timing_mutex);
  auto it = timed.find(shape);
  if (it == timed.end() || candidate >= it->second.ns.size()) return;  // reset since it was noted
  it->second.ns[candidate] += ns;
  it->second.calls[candidate] += 1;
}

std::vector<RouteTiming> RouteTable::timings() {
  std::vector<RouteTiming> out;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& kv : routes_) {
    Route& r = *kv.second;
    std::lock_guard<std::mutex> timing_lock(r.timing_mutex);
    for (const auto& [shape, t] : r.timed) {
      int64_t numel = 1;
      for (int64_t s : t.sizes) numel *= s;
      for (size_t i = 0; i < t.ns.size(); ++i) {
        if (t.calls[i] == 0) continue;
        out.push_back({r.op, r.has_dtype ? dtype_name(r.dtype) : "-", r.candidates[i].engine->name, t.sizes,
                       size_class(numel), t.calls[i], t.ns[i]});
      }
    }
  }
  return out;
}

void RouteTable::reset_timings() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& kv : routes_) {
    std::lock_guard<std::mutex> timing_lock(kv.second->timing_mutex);
    for (auto& [shape, t] : kv.second->timed) {
      std::fill(t.ns.begin(), t.ns.end(), 0);
      std::fill(t.calls.begin(), t.calls.end(), 0);
    }
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
