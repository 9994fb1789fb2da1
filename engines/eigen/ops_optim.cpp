// The optimizer step as one call per parameter group: the SDK's fused Adam/AdamW/SGD
// and _foreach_ kernels (openreg/sdk/optim.hpp), compiled in this file (with
// -fno-math-errno, see CMakeLists.txt, so their loops vectorise).
#include <openreg/sdk/optim.hpp>

#include "eigen_engine.h"

namespace eigen_engine {

void register_optim_ops(sdk::EngineDef& e) { sdk::optim::register_ops(e); }

}  // namespace eigen_engine
