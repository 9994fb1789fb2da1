// Fixture engines written in C++ whose kernels throw. Compiled once per variant
// with exactly one FIXTURE_* definition (see CMakeLists.txt):
//
//   FIXTURE_THROWS          run() lets std::runtime_error("fixture: kernel exploded")
//                           escape straight across the C ABI (the misbehaviour under
//                           test: the host must survive it and report INTERNAL)
//   FIXTURE_THROWS_GUARDED  run() catches at the boundary and reports INTERNAL
//                           through host->set_error (what engines must do)
//   FIXTURE_THROWS_NON_STD  run() throws an int (not a std::exception)
//   FIXTURE_THROWS_IN_ENTRY the entry point itself throws
//   FIXTURE_THROWS_IN_INIT  init() throws
#include <openreg/engine.h>

#include <stdexcept>
#include <string>

namespace {

#if defined(FIXTURE_THROWS)
constexpr const char* kName = "fixture_throws";
#elif defined(FIXTURE_THROWS_GUARDED)
constexpr const char* kName = "fixture_throws_guarded";
#elif defined(FIXTURE_THROWS_NON_STD)
constexpr const char* kName = "fixture_throws_non_std";
#elif defined(FIXTURE_THROWS_IN_ENTRY)
constexpr const char* kName = "fixture_throws_in_entry";
#elif defined(FIXTURE_THROWS_IN_INIT)
constexpr const char* kName = "fixture_throws_in_init";
#else
#error "define exactly one FIXTURE_THROWS* macro"
#endif

const openreg_host* g_host = nullptr;

const openreg_dtype kFloat32 = {OPENREG_DTYPE_CODE_FLOAT, 32, 1};
const openreg_op_info kOps[] = {
    {sizeof(openreg_op_info), 1, "aten::add.Tensor", &kFloat32},
};

// The "kernel": it fails the way C++ code fails, by throwing.
[[noreturn]] void kernel(const openreg_call*) {
#if defined(FIXTURE_THROWS_NON_STD)
  throw 42;
#else
  throw std::runtime_error("fixture: kernel exploded");
#endif
}

openreg_status fx_init(void*, const openreg_host* host, int32_t) {
#if defined(FIXTURE_THROWS_IN_INIT)
  (void)host;
  throw std::runtime_error("fixture: init exploded");
#else
  g_host = host;
  return OPENREG_STATUS_OK;
#endif
}

void fx_release(void*) { g_host = nullptr; }

openreg_status fx_get_ops(void*, const openreg_op_info** ops, int32_t* count) {
  *ops = kOps;
  *count = 1;
  return OPENREG_STATUS_OK;
}

openreg_status fx_run(void*, const openreg_call* call) {
#if defined(FIXTURE_THROWS_GUARDED)
  try {
    kernel(call);
  } catch (const std::exception& e) {
    if (g_host) g_host->set_error(g_host->ctx, OPENREG_STATUS_INTERNAL, e.what());
    return OPENREG_STATUS_INTERNAL;
  } catch (...) {
    if (g_host) g_host->set_error(g_host->ctx, OPENREG_STATUS_INTERNAL, "fixture: unknown exception");
    return OPENREG_STATUS_INTERNAL;
  }
#else
  kernel(call);  // escapes across the C boundary on purpose
#endif
}

const openreg_engine kTable = {
    sizeof(openreg_engine),
    OPENREG_ABI_VERSION_MAJOR,
    OPENREG_ABI_VERSION_MINOR,
    OPENREG_ENGINE_FLAG_HOST_MEMORY,
    OPENREG_ENGINE_MAGIC,
    kName,
    "0.1.0 (throwing test fixture)",
    nullptr,
    fx_init,
    fx_release,
    fx_get_ops,
    fx_run,
    nullptr,
    nullptr,
};

}  // namespace

extern "C" OPENREG_ENGINE_EXPORT const openreg_engine* openreg_engine_entry(int32_t, int32_t) {
#if defined(FIXTURE_THROWS_IN_ENTRY)
  throw std::logic_error("fixture: entry exploded");
#else
  return &kTable;
#endif
}
