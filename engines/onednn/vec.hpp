// GCC vector types for the engine's own register-level kernels (the fused
// attention's rows, the LSTM inference loop, the reductions' row sums), one per build width: V4 for the
// baseline (SSE2) build, V8 for AVX2, V16 for AVX-512. Each per-ISA function uses
// its own width: a 16-float vector in the AVX2 build was split through the stack
// (the attention's softmax rows took 3x their AVX-512 time).
//
// The helpers take and return vectors wider than the baseline ABI's; they are
// always inlined into the per-ISA functions (target attributes), so no call passes
// one: GCC's note about such calls (-Wpsabi; a pragma does not silence it) is
// turned off for the engine in CMakeLists.txt.
// Arithmetic beyond loads and stores belongs in the per-ISA function itself: a
// helper without the target attribute is lowered for the baseline ISA first (a
// broadcast in one became 16 single-lane moves in the AVX-512 build).
#pragma once

#include <cstdint>
#include <cstring>

namespace onednn_engine::vec {

#define OPENREG_ALWAYS_INLINE __attribute__((always_inline)) inline
#define OPENREG_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define OPENREG_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

typedef float V4 __attribute__((vector_size(16)));
typedef float V8 __attribute__((vector_size(32)));
typedef float V16 __attribute__((vector_size(64)));
// int32 lanes of the same widths: what a comparison of two float vectors gives, and
// integer payloads selected with them (indices, exponent bits).
typedef int32_t VI4 __attribute__((vector_size(16)));
typedef int32_t VI8 __attribute__((vector_size(32)));
typedef int32_t VI16 __attribute__((vector_size(64)));

template <class V>
constexpr int64_t kLanes = static_cast<int64_t>(sizeof(V) / sizeof(float));

// Unaligned load and store (memcpy compiles to one vector move).
template <class V>
OPENREG_ALWAYS_INLINE V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
OPENREG_ALWAYS_INLINE void store(float* p, V v) {
  std::memcpy(p, &v, sizeof v);
}

}  // namespace onednn_engine::vec
