// Loading and validating one engine library, and calling into it safely.
#include "engine_host.h"

#include <openreg/dtype_name.h>

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace openreg {


namespace {

thread_local openreg_status t_status = OPENREG_STATUS_OK;
thread_local std::string t_message;

void host_set_error(void*, openreg_status status, const char* message) {
  set_thread_error(status, message);
}

void host_log(void*, int32_t level, const char* message) {
  if (level <= OPENREG_LOG_WARNING || verbosity() >= (level == OPENREG_LOG_INFO ? 1 : 2)) {
    log_line(message ? message : "(null)");
  }
}

void* host_scratch_alloc(void*, uint64_t bytes) {
  if (bytes > SIZE_MAX - 63) return nullptr;
  size_t rounded = static_cast<size_t>((bytes + 63) / 64 * 64);
  return std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
}

void host_scratch_free(void*, void* ptr) { std::free(ptr); }

void serial_parallel_for(void*, int64_t begin, int64_t end, int64_t, openreg_parallel_fn fn,
                         void* user) {
  if (begin < end) fn(user, begin, end);
}

int32_t serial_num_threads(void*) { return 1; }

std::string describe_version(int32_t major, int32_t minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

}  // namespace

void set_thread_error(openreg_status status, const char* message) {
  t_status = status;
  t_message = message ? message : "";
}

std::string take_thread_error() {
  std::string out;
  out.swap(t_message);
  t_status = OPENREG_STATUS_OK;
  return out;
}

int verbosity() {
  static const int level = [] {
    const char* v = std::getenv("OPENREG_VERBOSE");
    return v ? std::atoi(v) : 0;
  }();
  return level;
}

void log_line(const std::string& line) { std::fprintf(stderr, "openreg: %s\n", line.c_str()); }

openreg_host make_host_services() {
  openreg_host host{};
  host.struct_size = sizeof(openreg_host);
  host.abi_major = OPENREG_ABI_VERSION_MAJOR;
  host.abi_minor = OPENREG_ABI_VERSION_MINOR;
  host.ctx = nullptr;
  host.set_error = host_set_error;
  host.log = host_log;
  host.scratch_alloc = host_scratch_alloc;
  host.scratch_free = host_scratch_free;
  host.parallel_for = serial_parallel_for;
  host.get_num_threads = serial_num_threads;
  return host;
}

const char* status_name(openreg_status status) {
  switch (status) {
    case OPENREG_STATUS_OK: return "OK";
    case OPENREG_STATUS_UNSUPPORTED: return "UNSUPPORTED";
    case OPENREG_STATUS_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case OPENREG_STATUS_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
    case OPENREG_STATUS_INTERNAL: return "INTERNAL";
    case OPENREG_STATUS_NOT_INITIALIZED: return "NOT_INITIALIZED";
    case OPENREG_STATUS_INDEX_ERROR: return "INDEX_ERROR";
    case OPENREG_STATUS_TYPE_ERROR: return "TYPE_ERROR";
    case OPENREG_STATUS_VALUE_ERROR: return "VALUE_ERROR";
    case OPENREG_STATUS_NOT_IMPLEMENTED: return "NOT_IMPLEMENTED";
    case OPENREG_STATUS_LINALG_ERROR: return "LINALG_ERROR";
    default: return "UNKNOWN_STATUS";
  }
}

// The ABI side's spelling, which the SDK uses too: one spelling, host and engines.
std::string dtype_name(openreg_dtype dtype) {
  char buf[OPENREG_DTYPE_NAME_MAX];
  openreg_dtype_format(dtype, buf, sizeof buf);
  return buf;
}

decltype(openreg_engine::supports) Engine::supports_fn() const {
  if (table_size < offsetof(openreg_engine, supports) + sizeof(void*)) return nullptr;
  return table->supports;
}

decltype(openreg_engine::get_proc_address) Engine::get_proc_address_fn() const {
  if (table_size < offsetof(openreg_engine, get_proc_address) + sizeof(void*)) return nullptr;
  return table->get_proc_address;
}

int32_t Engine::find(const std::string& op, openreg_dtype dtype, bool has_dtype) const {
  auto it = ops.find(op);
  if (it == ops.end()) return any_op() ? -2 : -1;
  const OpEntry& entry = it->second;
  if (entry.dtypes.empty() || !has_dtype) return entry.index;
  for (const auto& d : entry.dtypes) {
    if (d == dtype) return entry.index;
  }
  return any_op() ? -2 : -1;
}

std::unique_ptr<Engine> load_engine(const std::string& path, const openreg_host* host) {
  auto fail = [&](const std::string& why, const std::string& remedy) -> EngineError {
    return EngineError("openreg: cannot use engine library '" + path + "': " + why + ". " + remedy);
  };
  const std::string rebuild =
      "Rebuild the engine against openreg's engine.h (ABI " +
      describe_version(OPENREG_ABI_VERSION_MAJOR, OPENREG_ABI_VERSION_MINOR) +
      "), or choose another engine with OPENREG_ENGINE";

  install_crash_handler();
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = dlerror();
    throw fail(std::string("dlopen failed: ") + (err ? err : "unknown error"),
               "Check that the path names an engine library (libopenreg_engine_<name>.so) "
               "built for this machine");
  }
  // Never dlclose: an engine may have registered thread-locals or atexit hooks.
  auto entry = reinterpret_cast<openreg_engine_entry_fn>(dlsym(handle, OPENREG_ENGINE_ENTRY_SYMBOL));
  if (!entry) {
    throw fail("it does not export the entry symbol '" OPENREG_ENGINE_ENTRY_SYMBOL
               "', so it is not an openreg engine",
               "Point OPENREG_ENGINE at an engine library, or export the entry with "
               "OPENREG_ENGINE_EXPORT");
  }
  const openreg_engine* table = nullptr;
  try {
    table = entry(OPENREG_ABI_VERSION_MAJOR, OPENREG_ABI_VERSION_MINOR);
  } catch (...) {
    throw fail("its entry point threw an exception", "Engines must catch everything at the boundary");
  }
  if (!table) throw fail("its entry point returned no engine table", rebuild);

  // struct_size and magic come first so we can read them from any version.
  if (table->struct_size < OPENREG_ENGINE_MIN_STRUCT_SIZE) {
    std::ostringstream why;
    why << "its engine table is too small (struct_size " << table->struct_size << ", at least "
        << OPENREG_ENGINE_MIN_STRUCT_SIZE << " needed)";
    throw fail(why.str(), rebuild);
  }
  if (table->magic != OPENREG_ENGINE_MAGIC) {
    std::ostringstream why;
    why << "wrong magic number 0x" << std::hex << table->magic << " (expected 0x"
        << OPENREG_ENGINE_MAGIC << ")";
    throw fail(why.str(), rebuild);
  }
  if (table->abi_major != OPENREG_ABI_VERSION_MAJOR) {
    throw fail("it was built for engine ABI " + describe_version(table->abi_major, table->abi_minor) +
                   " but this openreg speaks ABI " +
                   describe_version(OPENREG_ABI_VERSION_MAJOR, OPENREG_ABI_VERSION_MINOR) +
                   " (major versions must match)",
               rebuild);
  }
  const char* missing = nullptr;
  if (!table->init) missing = "init";
  else if (!table->release) missing = "release";
  else if (!table->get_ops) missing = "get_ops";
  else if (!table->run) missing = "run";
  if (missing) throw fail(std::string("required function '") + missing + "' is NULL", rebuild);
  if (!table->name || !*table->name) throw fail("the engine table has no name", rebuild);
  if (!(table->flags & OPENREG_ENGINE_FLAG_HOST_MEMORY)) {
    throw fail("it does not declare OPENREG_ENGINE_FLAG_HOST_MEMORY; this openreg keeps device "
               "memory in host memory and cannot drive engines with their own memory yet",
               "Use an engine that works on host-accessible memory");
  }

  auto engine = std::make_unique<Engine>();
  engine->name = table->name;
  engine->version = table->version ? table->version : "";
  engine->path = path;
  engine->table = table;
  engine->table_size = table->struct_size;
  engine->negotiated_minor = std::min<int32_t>(table->abi_minor, OPENREG_ABI_VERSION_MINOR);

  take_thread_error();
  openreg_status st;
  try {
    EngineCallMark mark(*engine, nullptr, EngineCallMark::kInit);
    st = table->init(table->ctx, host, engine->negotiated_minor);
  } catch (...) {
    st = OPENREG_STATUS_INTERNAL;
    set_thread_error(st, "init threw an exception (engines must not throw across the ABI)");
  }
  if (st != OPENREG_STATUS_OK) {
    std::string msg = take_thread_error();
    throw fail(std::string("init failed with ") + status_name(st) + (msg.empty() ? "" : ": " + msg),
               "See the engine's documentation; choose another engine with OPENREG_ENGINE");
  }

  const openreg_op_info* ops = nullptr;
  int32_t count = 0;
  try {
    EngineCallMark mark(*engine, nullptr, EngineCallMark::kInit);
    st = table->get_ops(table->ctx, &ops, &count);
  } catch (...) {
    st = OPENREG_STATUS_INTERNAL;
  }
  if (st != OPENREG_STATUS_OK || count < 0 || (count > 0 && !ops)) {
    std::string msg = take_thread_error();
    throw fail("get_ops failed (" + std::string(status_name(st)) + (msg.empty() ? "" : ": " + msg) + ")",
               rebuild);
  }
  // Entries are read with the engine's op_info struct_size as stride guard.
  const uint32_t stride = count > 0 ? ops[0].struct_size : 0;
  for (int32_t i = 0; i < count; ++i) {
    const openreg_op_info& info = *reinterpret_cast<const openreg_op_info*>(
        reinterpret_cast<const char*>(ops) + size_t(i) * stride);
    if (info.struct_size < sizeof(openreg_op_info) || info.struct_size != stride || !info.name) {
      throw fail("op table entry " + std::to_string(i) + " is malformed", rebuild);
    }
    OpEntry e;
    e.name = info.name;
    e.index = i;
    if (info.num_dtypes > 0 && info.dtypes) e.dtypes.assign(info.dtypes, info.dtypes + info.num_dtypes);
    engine->ops.emplace(e.name, std::move(e));
  }
  return engine;
}

namespace {

openreg_status guarded(const Engine& engine, const openreg_call& call, std::string* message,
                       decltype(openreg_engine::run) fn, EngineCallMark::Kind kind) {
  take_thread_error();
  openreg_status st;
  try {
    EngineCallMark mark(engine, &call, kind);
    st = fn(engine.table->ctx, &call);
  } catch (const std::exception& e) {
    st = OPENREG_STATUS_INTERNAL;
    set_thread_error(st, (std::string("engine threw an exception across the ABI: ") + e.what()).c_str());
  } catch (...) {
    st = OPENREG_STATUS_INTERNAL;
    set_thread_error(st, "engine threw an exception across the ABI");
  }
  if (st != OPENREG_STATUS_OK) {
    *message = take_thread_error();
    if (message->empty()) *message = std::string("engine returned ") + status_name(st) + " with no message";
  }
  return st;
}

}  // namespace

openreg_status invoke_run(const Engine& engine, const openreg_call& call, std::string* message) {
  return guarded(engine, call, message, engine.table->run, EngineCallMark::kRun);
}

openreg_status invoke_supports(const Engine& engine, const openreg_call& call, std::string* message) {
  auto fn = engine.supports_fn();
  if (!fn) return OPENREG_STATUS_OK;
  return guarded(engine, call, message, fn, EngineCallMark::kSupports);
}

}  // namespace openreg
