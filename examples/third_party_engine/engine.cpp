// my_engine: a third-party openreg engine written against the installed SDK only.
// The op table below is the whole contract: what the engine advertises, for which
// dtypes, and which kernel serves it. Everything else falls back to aten_ref.
#include "ops.h"

namespace sdk = openreg::sdk;

extern "C" OPENREG_ENGINE_EXPORT const openreg_engine* openreg_engine_entry(int32_t, int32_t) {
  static sdk::EngineDef engine = [] {
    const auto f32 = sdk::dtypes::float32, f64 = sdk::dtypes::float64;
    sdk::EngineDef e("my_engine", "0.1.0");
    e.op("aten::add.Tensor", {f32, f64}, my_engine::add);
    e.op("aten::add_.Tensor", {f32, f64}, my_engine::add);  // same kernel: output 0 is self
    e.op("aten::mul.Tensor", {f32, f64}, my_engine::mul);
    e.op("aten::relu", {f32, f64}, my_engine::relu);
    e.op("aten::mm", {f32}, my_engine::mm, my_engine::check_mm);
    return e;
  }();
  return engine.table();
}
