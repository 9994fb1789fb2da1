// The oneDNN engine: op table, init (dnnl engine, version, threads) and release.
#include <omp.h>

#include <cstdio>
#include <cstdlib>

#include "ops.h"

namespace onednn_engine {

namespace {
dnnl::engine* g_engine = nullptr;
sdk::Host g_host;

std::string dnnl_version_string() {
  const dnnl_version_t* v = dnnl_version();
  return sdk::str(v->major, ".", v->minor, ".", v->patch, v->hash && std::string(v->hash) != "N/A" ? std::string(" ") + v->hash : "",
                  " (cpu runtime ", v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB" : "other", ")");
}

// A kernel wrapper turning oneDNN's exceptions into a decline (primitive
// creation failures: "no implementation") with the message.
sdk::Kernel guarded(sdk::Kernel k) {
  return [k](const sdk::Call& call) {
    try {
      k(call);
    } catch (const dnnl::error& e) {
      sdk::fail(OPENREG_STATUS_INTERNAL, sdk::str(call.op_name(), ": oneDNN error: ", e.what()));
    }
  };
}
}  // namespace

dnnl::engine& cpu() { return *g_engine; }
const sdk::Host& host() { return g_host; }

}  // namespace onednn_engine

namespace oe = onednn_engine;
namespace sdk = openreg::sdk;

extern "C" OPENREG_ENGINE_EXPORT const openreg_engine* openreg_engine_entry(int32_t, int32_t) {
  static sdk::EngineDef engine = [] {
    const auto f32 = sdk::dtypes::float32, bf16 = sdk::dtypes::bfloat16;
    sdk::EngineDef e("onednn", "0.1.0 (oneDNN " + oe::dnnl_version_string() + ")");
    auto op = [&](const char* name, sdk::Kernel k, sdk::SupportsCheck check) {
      e.op(name, {f32, bf16}, oe::guarded(std::move(k)), std::move(check));
    };
    // matmul
    op("aten::mm", oe::mm, oe::check_matmul);
    op("aten::mm.out", oe::mm, oe::check_matmul);
    op("aten::addmm", oe::addmm, oe::check_matmul);
    op("aten::addmm.out", oe::addmm, oe::check_matmul);
    op("aten::addmm_", oe::addmm, oe::check_matmul);
    op("aten::bmm", oe::bmm, oe::check_matmul);
    op("aten::bmm.out", oe::bmm, oe::check_matmul);
    op("aten::baddbmm", oe::baddbmm, oe::check_matmul);
    op("aten::baddbmm.out", oe::baddbmm, oe::check_matmul);
    op("aten::baddbmm_", oe::baddbmm, oe::check_matmul);
    // convolution
    op("aten::convolution", oe::convolution, oe::check_convolution);
    op("aten::convolution_backward", oe::convolution_backward, oe::check_convolution_backward);
    e.on_init([](const sdk::Host& h) {
      oe::g_host = h;
      oe::g_engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
      oe::align_threads();
      h.log(OPENREG_LOG_INFO, "onednn engine: oneDNN " + oe::dnnl_version_string() + ", " +
                                  std::to_string(h.num_threads()) + " threads (OpenMP max " +
                                  std::to_string(omp_get_max_threads()) + ")");
    });
    e.on_release([] {
      auto& c = oe::Cache::get();
      const std::string msg = sdk::str("onednn engine: primitive cache ", c.size(), " entries, ", c.hits(), " hits, ",
                                       c.misses(), " misses");
      oe::g_host.log(OPENREG_LOG_INFO, msg);
      if (const char* v = std::getenv("OPENREG_ONEDNN_CACHE_STATS"); v && *v && *v != '0')
        std::fprintf(stderr, "%s\n", msg.c_str());
    });
    return e;
  }();
  return engine.table();
}
