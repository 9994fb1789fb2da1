// The optimizer step as one call per parameter group: the SDK's fused Adam/AdamW/SGD
// and _foreach_ kernels (openreg/sdk/optim.hpp), compiled in this file. Plain loops,
// no oneDNN primitive, so bfloat16 is served on any CPU; built for the widest vector
// ISA oneDNN may use here (ONEDNN_MAX_CPU_ISA caps both).
#include <openreg/sdk/optim.hpp>

#include "isa.hpp"
#include "ops.h"

namespace onednn_engine {

void register_optim_ops(sdk::EngineDef& e) { sdk::optim::register_ops(e, vector_isa()); }

}  // namespace onednn_engine
