// The optimizer step as one call per parameter group: the SDK's fused Adam/AdamW/SGD
// and _foreach_ kernels (openreg/sdk/optim.hpp), compiled in this file (with
// -fno-math-errno, see CMakeLists.txt, so their loops vectorise), run for the ISA
// of the engine's own kernels (isa(): the CPU's, capped by OPENREG_EIGEN_ISA).
#include <openreg/sdk/optim.hpp>

#include <cstring>

#include "eigen_engine.h"

namespace eigen_engine {

sdk::VectorIsa sdk_vector_isa() {
  const char* name = isa().name;
  return std::strcmp(name, "avx512") == 0 ? sdk::VectorIsa::kAvx512
         : std::strcmp(name, "avx2") == 0 ? sdk::VectorIsa::kAvx2
                                          : sdk::VectorIsa::kBaseline;
}

void register_optim_ops(sdk::EngineDef& e) { sdk::optim::register_ops(e, sdk_vector_isa()); }

}  // namespace eigen_engine
