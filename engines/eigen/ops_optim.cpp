// The optimizer step as one call per parameter group: the SDK's fused Adam/AdamW/SGD
// and _foreach_ kernels (openreg/sdk/optim.hpp), for the dtypes they serve here.
#include <openreg/sdk/optim.hpp>

#include "eigen_engine.h"

namespace eigen_engine {

void register_optim_ops(sdk::EngineDef& e) {
  namespace optim = sdk::optim;
  const auto f32 = sdk::dtypes::float32, f64 = sdk::dtypes::float64, bf16 = sdk::dtypes::bfloat16;
  // dynamic_op: they return nothing, so calls whose outputs Meta cannot size
  // (_fused_sgd_ has no Meta kernel) are theirs too.
  for (auto& o : optim::fused_ops()) {
    if (o.bfloat16) e.dynamic_op(o.name, {f32, f64, bf16}, o.kernel);
    else e.dynamic_op(o.name, {f32, f64}, o.kernel);
  }
  for (auto& o : optim::foreach_ops()) e.op(o.name, {f32, f64, bf16}, o.kernel);
}

}  // namespace eigen_engine
