// The host side of the engine ABI: loading and validating engine libraries,
// resolving OPENREG_ENGINE into a chain, the route table and its counters.
// Deliberately free of torch headers, so it is unit-tested on its own (tests/cpp).
#pragma once

#include <openreg/engine.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace openreg {

// Every failure of this layer: the message names what was wrong and the remedy.
struct EngineError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ------------------------------------------------------------ host services

// Thread-local error sink behind openreg_host::set_error.
void set_thread_error(openreg_status status, const char* message);
// Returns the message of the current thread's last set_error and clears it.
std::string take_thread_error();

int verbosity();  // OPENREG_VERBOSE, read once
void log_line(const std::string& line);  // to stderr, prefixed "openreg: "

// The services table given to engines. parallel_for and get_num_threads are
// serial defaults here; the device runtime installs ATen's pool.
openreg_host make_host_services();

// ----------------------------------------------------------------- engines

const char* status_name(openreg_status status);
std::string dtype_name(openreg_dtype dtype);  // "float32", "int64", "bool", ...
inline bool operator==(openreg_dtype a, openreg_dtype b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

struct OpEntry {
  std::string name;
  std::vector<openreg_dtype> dtypes;  // empty: any dtype
  int32_t index;                      // position in the engine's table
};

// A loaded, validated and initialised engine. Never unloaded.
struct Engine {
  std::string name;
  std::string version;
  std::string path;
  const openreg_engine* table = nullptr;
  uint32_t table_size = 0;       // the engine's struct_size
  int32_t negotiated_minor = 0;
  std::unordered_map<std::string, OpEntry> ops;

  bool any_op() const { return table->flags & OPENREG_ENGINE_FLAG_ANY_OP; }
  // Optional table fields, present only when the engine's struct is long enough.
  decltype(openreg_engine::supports) supports_fn() const;
  decltype(openreg_engine::get_proc_address) get_proc_address_fn() const;
  // Index into the op table if this engine advertises `op` for `dtype`, or -1;
  // -2 when the op is not in the table but the engine takes any op.
  int32_t find(const std::string& op, openreg_dtype dtype, bool has_dtype) const;
};

// dlopen(RTLD_NOW|RTLD_LOCAL), handshake, validation, init, op table. Throws
// EngineError naming the path, the reason and the remedy; never aborts.
std::unique_ptr<Engine> load_engine(const std::string& path, const openreg_host* host);

// Calls engine->run (or supports) catching anything that escapes the engine.
// On a status other than OK, *message holds the engine's explanation.
openreg_status invoke_run(const Engine& engine, const openreg_call& call, std::string* message);
openreg_status invoke_supports(const Engine& engine, const openreg_call& call, std::string* message);

// --------------------------------------------------------- crash attribution
// (crash_handler.cpp) A fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT)
// during an engine call prints one line to stderr naming the engine, the op and
// its inputs; then the previously installed handler runs (faulthandler's Python
// traceback), or the default action: the process dies as it would have.

// Installs the handler once per process; load_engine calls it.
void install_crash_handler();

struct CallSlot;

// Publishes "this thread is in this engine call" for the handler while alive.
// Cheap enough for every call: a thread-local load and two stores.
class EngineCallMark {
 public:
  enum Kind { kRun, kSupports, kInit };
  EngineCallMark(const Engine& engine, const openreg_call* call, Kind kind);  // call: NULL for kInit
  ~EngineCallMark();
  EngineCallMark(const EngineCallMark&) = delete;
  EngineCallMark& operator=(const EngineCallMark&) = delete;

  const Engine* const engine;
  const openreg_call* const call;
  const Kind kind;

 private:
  CallSlot* slot_;
  const EngineCallMark* previous_;  // an engine call made inside another
};

struct CrashContext {
  int signal = 0;
  long crash_tid = 0;  // the thread the signal hit
  long call_tid = 0;   // the thread running the call (another one: "outside any engine call")
  bool has_fault_address = false;
  uintptr_t fault_address = 0;
};
// "SIGSEGV", "SIGABRT", ...; NULL for a signal without a name here.
const char* signal_name(int signal);

// The handler's line for `mark` into buf (cap >= 8; cut with "..." when longer),
// newline- and NUL-terminated; returns its length without the NUL. Async-signal-safe.
size_t format_crash_line(char* buf, size_t cap, const CrashContext& where, const EngineCallMark& mark);

// ------------------------------------------------------------- tuned routes

// A call's size class: elements of the tensor it is routed by. A tuned routing
// table (`python -m openreg tune`) names the fastest engine per (op, dtype, size
// class) on one machine, and may name another for one shape of that tensor (its
// sizes), where the workloads showed that shape to differ from its class.
constexpr int kSizeClasses = 4;
constexpr int64_t kSizeClassBounds[kSizeClasses - 1] = {4096, 65536, 1048576};  // exclusive upper bounds
inline int size_class(int64_t numel) {
  int c = 0;
  while (c < kSizeClasses - 1 && numel >= kSizeClassBounds[c]) ++c;
  return c;
}

// The sizes of the tensor a call is routed by, hashed (FNV-1a over the rank and sizes).
inline uint64_t shape_key(const int64_t* sizes, size_t ndim) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int b = 0; b < 8; ++b, v >>= 8) h = (h ^ (v & 0xff)) * 1099511628211ull;
  };
  mix(ndim);
  for (size_t i = 0; i < ndim; ++i) mix(static_cast<uint64_t>(sizes[i]));
  return h;
}

// Engines rank differently with one thread and with several, so a table holds one set
// of choices per thread setting: calls made with one thread (torch.get_num_threads())
// follow the first, calls made with more the second.
constexpr int kThreadSettings = 2;
inline int thread_setting(int threads) { return threads > 1 ? 1 : 0; }

struct TunedRoutes {
  std::vector<std::string> chain;  // the engines measured, in the order they are tried by default
  struct Choices {
    // "op|dtype" -> the engine to try first, per size class ("": the chain's order)
    std::unordered_map<std::string, std::array<std::string, kSizeClasses>> prefer;
    // "op|dtype" -> (sizes, engine to try first) for single shapes, ahead of their class
    std::unordered_map<std::string, std::vector<std::pair<std::vector<int64_t>, std::string>>> shapes;
  };
  std::array<Choices, kThreadSettings> by_threads;  // [thread_setting(threads)]
};

// ------------------------------------------------------------------ registry

struct EngineFile {
  std::string name;  // from libopenreg_engine_<name>.so
  std::string path;
};

// Resolves OPENREG_ENGINE / OPENREG_ENGINE_PATH / OPENREG_FALLBACK into a chain of
// loaded engines. One per process (the device runtime's), separate ones in tests.
class Registry {
 public:
  struct Config {
    std::string spec = "auto";              // OPENREG_ENGINE
    std::vector<std::string> search_dirs;   // OPENREG_ENGINE_PATH, then built-in dirs
    bool fallback = true;                   // OPENREG_FALLBACK != none
  };
  // Reads the environment; builtin_dir is where the package installs engines.
  static Config config_from_env(const std::string& builtin_dir);

  Registry(Config config, openreg_host host);
  // Loads the chain once; later calls return it. Throws EngineError (and keeps
  // throwing the same error on later calls).
  const std::vector<Engine*>& chain();
  std::vector<EngineFile> discover() const;  // engine files in the search dirs
  const Config& config() const { return config_; }
  const openreg_host* host() const { return &host_; }
  // Name -> path, or "" when no such engine file exists.
  std::string find_engine_file(const std::string& name) const;
  // A tuned routing table for the `auto` chain: its engines become the chain and
  // its preferences order each route's candidates. Only before the chain loads
  // (returns false after, or when OPENREG_ENGINE is not `auto`).
  bool set_tuned_routes(TunedRoutes tuned);
  // The table in use (the chain is `auto` and one was set), else NULL.
  const TunedRoutes* tuned_routes() const { return tuned_.chain.empty() ? nullptr : &tuned_; }

 private:
  Engine* load(const std::string& path);
  std::string available_list() const;

  Config config_;
  openreg_host host_;
  std::mutex mutex_;
  bool loaded_ = false;
  TunedRoutes tuned_;
  std::string error_;
  std::vector<std::unique_ptr<Engine>> engines_;
  std::vector<Engine*> chain_;
};

// -------------------------------------------------------------- route table

// Which engines may serve one (operator, dtype), in order, with call counters.
struct Route {
  struct Candidate {
    Engine* engine;
    int32_t op_index;  // -2: not in the table (ANY_OP engine)
  };
  std::string op;
  openreg_dtype dtype{};
  bool has_dtype = false;
  std::vector<Candidate> candidates;
  std::unique_ptr<std::atomic<uint64_t>[]> calls;  // per candidate
  std::atomic<uint64_t> reference_calls{0};        // calls run on the host's reference path
  uint64_t key_hash = 0;                           // of "op|dtype": the route's pin group
  // From the tuned routing table, per thread setting: the candidate to try first per
  // size class (-1: the chain's order) and per single shape (few: a linear search);
  // tuned: the table moves some call away from candidate 0.
  struct ShapePreference {
    uint64_t shape;
    int8_t candidate;
  };
  struct Preferences {
    std::array<int8_t, kSizeClasses> by_class{-1, -1, -1, -1};
    std::vector<ShapePreference> by_shape;
  };
  std::array<Preferences, kThreadSettings> preferred;
  bool tuned = false;
  // The table moves some call of this route and is followed (tuned_routes_followed()).
  bool follows_table() const;
  // The candidate index of `engine`, -1 when it does not serve this route.
  int candidate_of(const Engine* engine) const;
  // The candidate a call of this thread setting, size class and shape is offered to first.
  int first_candidate(int threads, int size_cls, uint64_t shape) const {
    const Preferences& p = preferred[static_cast<size_t>(threads)];
    for (const auto& s : p.by_shape)
      if (s.shape == shape) return s.candidate;
    return std::max<int>(0, p.by_class[static_cast<size_t>(size_cls)]);
  }

  // While route timing is on (tuning): time spent in engine calls and their number,
  // per shape of the routed-by tensor and candidate.
  struct ShapeTiming {
    std::vector<int64_t> sizes;
    std::vector<uint64_t> ns, calls;  // per candidate
  };
  std::mutex timing_mutex;
  std::unordered_map<uint64_t, ShapeTiming> timed;
  // Registers a shape (on the calling thread, before the call may be queued) ...
  void note_shape(uint64_t shape, const int64_t* sizes, size_t ndim);
  // ... and adds one engine call's time to it.
  void add_timing(uint64_t shape, size_t candidate, uint64_t ns);
};

// Route timing (off by default): route_call measures each engine call into the
// route's timed_* counters. `python -m openreg tune` turns it on.
bool route_timing_enabled();
void set_route_timing(bool on);

// Whether tuned routes are followed (on by default). Off, every route offers its
// calls in the chain's order, as if no table had been set: bench/tuned_ab.py turns
// it off and on between rounds to compare the two in one process.
bool tuned_routes_followed();
void set_tuned_routes_followed(bool on);

// The pinned engine (NULL by default): the routes of one pin group (a route's group:
// a hash of its op and dtype, modulo `groups`; every route when groups is 1) offer
// their calls to it first, ahead of the tuned table, then in the chain's order.
// `python -m openreg tune` pins the engines group by group, step by step, to time
// each engine's calls in one process while most other calls run where they would
// anyway: an op costs more next to ops of another engine than among its own.
void pin_engine(const Engine* engine, int group, int groups);
// The engine pinned for this route's calls, or NULL.
const Engine* pinned_engine(const Route& route);

struct RouteTiming {
  std::string op, dtype, engine;
  std::vector<int64_t> sizes;  // of the tensor the calls were routed by
  int size_class;
  uint64_t calls, ns;
};

// The name calls on the host's reference path are counted under in stats().
constexpr const char* kReferencePathName = "host_ref";

// The routing decisions of one registry, built on first use, and the one source of
// call counts: per engine, and on the host's reference path.
class RouteTable {
 public:
  explicit RouteTable(Registry& registry) : registry_(registry) {}
  // The cached decision for (op, dtype); built (and logged at OPENREG_VERBOSE>=1)
  // on first use. Never NULL. candidates is empty when no engine covers the op.
  Route* route(const std::string& op, openreg_dtype dtype, bool has_dtype);
  // The route that counts `op`'s calls on the reference path (no candidates).
  Route* reference_route(const std::string& op);
  // op -> engine (or kReferencePathName) -> calls, over every route.
  std::unordered_map<std::string, std::unordered_map<std::string, uint64_t>> stats();
  void reset_stats();
  // The engine-call timings gathered while route timing is on, and their reset.
  std::vector<RouteTiming> timings();
  void reset_timings();
  // The error text for a route with no candidate (strict mode, or no fallback).
  std::string uncovered_message(const Route& route);

 private:
  Route* find_or_add(std::string key, const std::string& op, openreg_dtype dtype, bool has_dtype, bool reference);

  Registry& registry_;
  std::mutex mutex_;
  std::unordered_map<std::string, std::unique_ptr<Route>> routes_;
};

}  // namespace openreg
