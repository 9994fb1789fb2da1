// openreg engine SDK: running a loop built for the CPU's vector instructions.
//
// An engine is built for the compiler's default x86-64 target, SSE2: 4 floats an
// instruction, no FMA. A loop written to vectorise can run from a clone built for
// AVX2+FMA (8 floats) or AVX-512 (16): run_vectorised(isa, loop) calls `loop()` from
// the clone of `isa`, and the loop, marked OPENREG_SDK_ROW_LAMBDA (with the
// lambdas it calls, and functions marked OPENREG_SDK_ROW_INLINE), inlines into the
// clone and compiles for its target. run_vectorised keeps the baseline's rounding:
// no multiply and add fused into one FMA (GCC would contract `x + s * y`), so a loop
// that follows ATen's per-element arithmetic still gives CPU's results (the example's
// training losses drifted past 1e-4 of CPU's in 9 Adam steps with contraction);
// run_vectorised_fma lets the compiler fuse them (the RNN cells' polynomials). The engine says how far it may go (its own
// ISA cap: ONEDNN_MAX_CPU_ISA, OPENREG_EIGEN_ISA); cpu_vector_isa() is what the CPU has.
#pragma once

#include <cstdint>

namespace openreg {
namespace sdk {

enum class VectorIsa { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define OPENREG_SDK_ROW_INLINE inline __attribute__((always_inline))
#define OPENREG_SDK_ROW_LAMBDA __attribute__((always_inline))
#define OPENREG_SDK_VECTOR_CLONES 1
#else
#define OPENREG_SDK_ROW_INLINE inline
#define OPENREG_SDK_ROW_LAMBDA
#endif

// The widest of the ISAs above this CPU runs (read once): AVX-512 needs F, BW, VL
// and DQ (oneDNN's avx512_core), AVX2 needs FMA too.
inline VectorIsa cpu_vector_isa() {
#ifdef OPENREG_SDK_VECTOR_CLONES
  static const VectorIsa isa = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma"))
      return VectorIsa::kAvx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return VectorIsa::kAvx2;
    return VectorIsa::kBaseline;
  }();
  return isa;
#else
  return VectorIsa::kBaseline;
#endif
}

// The ISA run_vectorised(isa, ...) builds for: `isa`, or the CPU's widest if that is
// narrower (a kernel that picks its vector width per ISA asks this first).
inline VectorIsa usable_vector_isa(VectorIsa isa) {
  const VectorIsa cpu = cpu_vector_isa();
  return static_cast<int>(isa) < static_cast<int>(cpu) ? isa : cpu;
}

namespace detail {
#ifdef OPENREG_SDK_VECTOR_CLONES
#define OPENREG_SDK_AVX2 "avx2,fma"
#define OPENREG_SDK_AVX512 "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"
#if defined(__GNUC__) && !defined(__clang__)
#define OPENREG_SDK_NO_CONTRACT , optimize("fp-contract=off")
#else
#define OPENREG_SDK_NO_CONTRACT
#endif
template <class F>
__attribute__((target(OPENREG_SDK_AVX2) OPENREG_SDK_NO_CONTRACT)) void run_avx2(const F& loop) {
  loop();
}
template <class F>
__attribute__((target(OPENREG_SDK_AVX512) OPENREG_SDK_NO_CONTRACT)) void run_avx512(const F& loop) {
  loop();
}
template <class F>
__attribute__((target(OPENREG_SDK_AVX2))) void run_avx2_fma(const F& loop) {
  loop();
}
template <class F>
__attribute__((target(OPENREG_SDK_AVX512))) void run_avx512_fma(const F& loop) {
  loop();
}
#endif

// loop() from the clone of `isa`, or of the widest ISA the CPU has if that is narrower.
template <bool kFma, class F>
void run_widest(VectorIsa isa, const F& loop) {
#ifdef OPENREG_SDK_VECTOR_CLONES
  const VectorIsa use = usable_vector_isa(isa);
  if (use == VectorIsa::kAvx512) {
    if constexpr (kFma) return run_avx512_fma(loop);
    else return run_avx512(loop);
  }
  if (use == VectorIsa::kAvx2) {
    if constexpr (kFma) return run_avx2_fma(loop);
    else return run_avx2(loop);
  }
#endif
  loop();
}
}  // namespace detail

// loop() built for `isa` (capped by the CPU), every multiply and add rounded on its
// own, as in the baseline build.
template <class F>
void run_vectorised(VectorIsa isa, const F& loop) {
  detail::run_widest<false>(isa, loop);
}

// The same, multiplies and adds free to fuse into FMAs.
template <class F>
void run_vectorised_fma(VectorIsa isa, const F& loop) {
  detail::run_widest<true>(isa, loop);
}

}  // namespace sdk
}  // namespace openreg
