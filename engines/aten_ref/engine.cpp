// aten_ref: the reference engine. Runs any ATen op by name through PyTorch's
// dispatcher on CPU tensors that alias the device memory. It is the fallback of
// every other engine and the specification they are tested against.
// This file: the engine table and the error boundary; run_call.cpp runs a call.
#include <openreg/engine.h>

#include <c10/util/Exception.h>
#include <torch/version.h>

#include <string>

#include "run_call.h"

namespace {

const openreg_host* g_host = nullptr;
int32_t g_minor = 0;  // the negotiated ABI minor

openreg_status report(openreg_status status, const char* message) {
  if (g_host) g_host->set_error(g_host->ctx, status, message);
  return status;
}

// The status of a c10 error: its kind, so that the host raises the Python class
// CPU raises, when the host knows the kinds (ABI 1.1).
openreg_status status_of(const c10::Error& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e)) return OPENREG_STATUS_OUT_OF_MEMORY;
  if (g_minor >= 1) {
    if (dynamic_cast<const c10::IndexError*>(&e)) return OPENREG_STATUS_INDEX_ERROR;
    if (dynamic_cast<const c10::TypeError*>(&e)) return OPENREG_STATUS_TYPE_ERROR;
    if (dynamic_cast<const c10::ValueError*>(&e)) return OPENREG_STATUS_VALUE_ERROR;
    if (dynamic_cast<const c10::NotImplementedError*>(&e)) return OPENREG_STATUS_NOT_IMPLEMENTED;
    if (dynamic_cast<const c10::LinAlgError*>(&e)) return OPENREG_STATUS_LINALG_ERROR;
  }
  return OPENREG_STATUS_INVALID_ARGUMENT;
}

openreg_status engine_init(void*, const openreg_host* host, int32_t negotiated_minor) {
  g_host = host;
  g_minor = negotiated_minor;
  return OPENREG_STATUS_OK;
}

void engine_release(void*) { g_host = nullptr; }

openreg_status engine_get_ops(void*, const openreg_op_info** ops, int32_t* count) {
  *ops = nullptr;  // every op: OPENREG_ENGINE_FLAG_ANY_OP
  *count = 0;
  return OPENREG_STATUS_OK;
}

openreg_status engine_run(void*, const openreg_call* call) {
  try {
    aten_ref::run_call(*call);
    return OPENREG_STATUS_OK;
  } catch (const c10::Error& e) {
    return report(status_of(e), e.what_without_backtrace());
  } catch (const std::exception& e) {
    return report(OPENREG_STATUS_INTERNAL, e.what());
  } catch (...) {
    return report(OPENREG_STATUS_INTERNAL, "aten_ref: unknown exception");
  }
}

const std::string& version_string() {
  static const std::string v = std::string("1.0.0 (PyTorch ") + TORCH_VERSION + ")";
  return v;
}

}  // namespace

extern "C" OPENREG_ENGINE_EXPORT const openreg_engine* openreg_engine_entry(int32_t host_major, int32_t) {
  static openreg_engine table = [] {
    openreg_engine t{};
    t.struct_size = sizeof(openreg_engine);
    t.abi_major = OPENREG_ABI_VERSION_MAJOR;
    t.abi_minor = OPENREG_ABI_VERSION_MINOR;
    t.flags = OPENREG_ENGINE_FLAG_HOST_MEMORY | OPENREG_ENGINE_FLAG_ANY_OP | OPENREG_ENGINE_FLAG_CONCURRENT_RUN;
    t.magic = OPENREG_ENGINE_MAGIC;
    t.name = "aten_ref";
    t.version = version_string().c_str();
    t.ctx = nullptr;
    t.init = engine_init;
    t.release = engine_release;
    t.get_ops = engine_get_ops;
    t.run = engine_run;
    t.supports = nullptr;
    t.get_proc_address = nullptr;
    return t;
  }();
  (void)host_major;  // the host checks the major; we answer with ours
  return &table;
}
