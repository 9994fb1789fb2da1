// A float32 exp the compiler can vectorise: libm's expf is a call per
// element (silu of 8x64x344 took 16x torch CPU's time as a scalar loop), while
// this branch-free form inlines into the dense loops of loops.hpp and runs 8 or
// 16 lanes wide. Cephes' expf polynomial: within 1 ulp of the true value over
// [-110, 110] (measured against double exp), as ATen's vectorised Sleef exp;
// NaN, overflow and subnormal results as std::exp gives them.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace onednn_engine::vmath {

inline float bits_to_float(uint32_t i) {
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
}

// exp(r) for the reduced argument r = x - n ln 2 (|r| <= ln 2 / 2), n = round(x / ln 2),
// of x already clamped to [-104, 89]; the caller scales by 2^n.
inline float exp_reduced(float xc, float& n) {
  // ln 2 split in two parts so that n * ln 2 is exact in the first.
  // Round to nearest by the 1.5 * 2^23 trick (nearbyint is a call without SSE4.1).
  n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}

inline float exp(float x) {
  // Selects, not fmin/fmax or early returns: the loop must stay branch-free.
  float xc = x < -104.0f ? -104.0f : x;
  xc = xc > 89.0f ? 89.0f : xc;
  float n;
  const float e = exp_reduced(xc, n);
  // 2^n as two factors 2^a * 2^b, each a normal float, so results that are
  // subnormal (n down to -150) lose no more than their own precision.
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t a = ni / 2, b = ni - a;
  float y = e * bits_to_float(static_cast<uint32_t>(a + 127) << 23) * bits_to_float(static_cast<uint32_t>(b + 127) << 23);
  y = x > 88.7228391f ? std::numeric_limits<float>::infinity() : y;
  y = x < -103.972084f ? 0.0f : y;
  return x != x ? x : y;
}

// exp for x <= 0 where results below the smallest normal float may be 0: one
// scaling by 2^n, no overflow or subnormal handling (262K floats on AVX-512: 62 us
// against exp's 109). NaN gives NaN.
inline float exp_nonpositive(float x) {
  float n;
  const float e = exp_reduced(x < -87.0f ? -87.0f : x, n);
  const float y = e * bits_to_float(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  return x < -87.0f ? 0.0f : y;
}

// erfc(z) for z >= 0 as t * P(t) * exp(-z^2), t = 1 / (1 + p z), P of degree 4
// (the form of Abramowitz and Stegun's 7.1.26; p and P fitted by fit_erfc.py):
// one division and one exp, no branch, so the loops vectorise it. Absolute error
// under 3.5e-7 (as an error of erf = 1 - erfc; measured against double erfc over
// z in [0, 12]): the accuracy of ATen's vectorised erf. z = inf gives 0, NaN NaN.
inline float erfc_nonneg(float z) {
  const float t = 1.0f / (1.0f + 0.468f * z);
  float p = -0.22058666f;
  p = p * t + 0.7491731f;
  p = p * t - 0.18115617f;
  p = p * t + 0.40818271f;
  p = p * t + 0.24438691f;
  return t * p * exp_nonpositive(-z * z);
}

// tanh: x P(x^2) / Q(x^2) with P(0) = Q(0) = 1, fitted by fit_tanh.py on [0, 9]
// (relative error under 3.8e-7, 6.3 ulp, in float32 without FMA; 3.3e-7 with); |x| is clamped
// to 9 first (tanh(9) rounds to 1) and the result to [-1, 1], so that 1 - tanh^2 (the
// backward) never turns negative. Selects only, no branches: the loops vectorise it.
// NaN stays NaN, -0 stays -0. One division and eight multiply-adds: until 2026-11-29
// an odd polynomial below |x| = 0.625 and 1 - 2 / (e^2|x| + 1) above, both computed
// (1.3 ulp), took 517 us for 262K floats against 215 now (one AVX2 thread; torch CPU
// 880-970, eigen 121).
inline float tanh(float x) {
  const float xc = x > 9.0f ? 9.0f : (x < -9.0f ? -9.0f : x);
  const float z = xc * xc;
  const float p = (((1.34196281e-8f * z + 2.06611221e-5f) * z + 3.49898753e-3f) * z + 1.33839726e-1f) * z + 1.0f;
  const float q = (((7.80465029e-7f * z + 3.29102448e-4f) * z + 2.58901734e-2f) * z + 4.67172951e-1f) * z + 1.0f;
  const float r = xc * p / q;
  return r > 1.0f ? 1.0f : (r < -1.0f ? -1.0f : r);
}

// log: x = 2^e (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)), log(1 + f) as
// f - f^2/2 + f^3 P(f), P of degree 7 fitted by fit_log.py, and e ln 2 added in two
// parts (the exact ln 2 split of exp_reduced). Within 0.86 ulp (0.85 with the AVX2
// loop's fused multiply-adds, measured through the device) over the normal and
// subnormal floats (measured against double log), so log(1) is exactly 0 and values
// near 1 keep their relative accuracy: oneDNN 2.6's AVX2 log primitive gave
// log(1) = -1.4e-6. Subnormal x is scaled by 2^23 first; 0 gives -inf, negative x
// NaN, inf inf, NaN NaN. Selects only, no branches: the loops vectorise it.
inline float log(float x) {
  const bool tiny = x < 1.17549435e-38f;  // below the smallest normal float
  const float xs = tiny ? x * 8388608.0f : x;
  uint32_t bits;
  std::memcpy(&bits, &xs, sizeof bits);
  int32_t e = static_cast<int32_t>(bits >> 23) - (tiny ? 150 : 127);
  float m = bits_to_float((bits & 0x7fffffu) | 0x3f800000u);  // in [1, 2)
  const bool big = m > 1.41421356f;
  m = big ? m * 0.5f : m;
  e += big ? 1 : 0;
  const float f = m - 1.0f;
  float p = -7.63452798e-2f;
  p = p * f + 1.27616540e-1f;
  p = p * f - 1.31602064e-1f;
  p = p * f + 1.42017499e-1f;
  p = p * f - 1.66233540e-1f;
  p = p * f + 2.00012267e-1f;
  p = p * f - 2.50008225e-1f;
  p = p * f + 3.33333313e-1f;
  const float ef = static_cast<float>(e);
  const float ff = f * f;
  float y = ((ff * f * p - ef * 2.12194440e-4f) - 0.5f * ff + f) + ef * 0.693359375f;
  y = x == 0.0f ? -std::numeric_limits<float>::infinity() : y;
  y = x == std::numeric_limits<float>::infinity() ? x : y;
  return x < 0.0f || x != x ? std::numeric_limits<float>::quiet_NaN() : y;
}

// sin and cos after Cephes' sinf/cosf: x reduced by multiples of pi/4 (pi/4 in
// three parts, exact products up to |x| = kTrigMax), then the sine or cosine
// polynomial on [-pi/4, pi/4], both computed and one selected (no branches).
// Past kTrigMax, and for infinities and NaN, the result is meaningless: callers
// recompute those elements with std::sin/std::cos.
constexpr float kTrigMax = 8192.0f;

inline float trig(float x, bool cosine) {
  const float ax = std::fabs(x);
  int32_t j = static_cast<int32_t>(ax * 1.27323954473516f);  // 4 / pi
  j += j & 1;                                                 // to an even octant
  const float y = static_cast<float>(j);
  const float z = ((ax - y * 0.78515625f) - y * 2.4187564849853515625e-4f) - y * 3.77489497744594108e-8f;
  const float zz = z * z;
  const float c = 1.0f - 0.5f * zz + zz * zz * ((2.443315711809948e-5f * zz - 1.388731625493765e-3f) * zz +
                                              4.166664568298827e-2f);
  const float sp = z + z * zz * ((-1.9515295891e-4f * zz + 8.3321608736e-3f) * zz - 1.6666654611e-1f);
  const int32_t q = (j >> 1) & 3;  // quadrant: 0..3 of the reduced angle
  bool neg;
  float r;
  if (cosine) {
    r = (q & 1) ? sp : c;
    neg = q == 1 || q == 2;
  } else {
    r = (q & 1) ? c : sp;
    uint32_t bits;  // the sign bit, so that sin(-0) is -0
    std::memcpy(&bits, &x, sizeof bits);
    neg = (q >= 2) != (bits >> 31 != 0);
  }
  return neg ? -r : r;
}

}  // namespace onednn_engine::vmath
