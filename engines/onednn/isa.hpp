// What the CPU lets the engine serve, as oneDNN sees it: the effective ISA
// (the hardware's, capped by ONEDNN_MAX_CPU_ISA), read once.
//
// oneDNN 2.6 creates no bfloat16 primitive of any kind (not even its reference
// kernels) unless the ISA includes avx512_core (AVX-512 F/BW/VL/DQ):
// platform::has_data_type_support(bf16) is mayiuse(avx512_core). Below that,
// bfloat16 is served only by the engine's own loops (elementwise, binary,
// reductions, pointwise, pooling, losses); the ops that exist only as
// primitives are not advertised in bfloat16 (engine.cpp) and decline it.
#pragma once

#include "common.hpp"

namespace onednn_engine {

struct CpuCaps {
  dnnl::cpu_isa isa;
  bool avx512_core;  // AVX-512 F/BW/VL/DQ: bf16 primitives, the engine's own AVX-512 loops
  bool avx2;         // the engine's own AVX2 loops (loops.hpp)
  std::string name;  // "avx512_core_bf16", "avx2", ...
};
const CpuCaps& cpu_caps();

// The ISA the SDK's loops (optimizer steps, bias-gradient sums) are built for:
// cpu_caps()'s, so ONEDNN_MAX_CPU_ISA caps them too.
sdk::VectorIsa vector_isa();

// True if oneDNN can create primitives for this dtype on this CPU.
bool has_primitives(openreg_dtype d);

// Declines (UNSUPPORTED with the reason) a dtype oneDNN has no primitive for
// here; for the ops that have no loop of their own.
void require_primitives(const sdk::Call& call, openreg_dtype d);

}  // namespace onednn_engine
