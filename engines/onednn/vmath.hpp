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

inline float exp(float x) {
  // exp(x) = 2^n * exp(r), n = round(x / ln 2), |r| <= ln 2 / 2, ln 2 split in
  // two parts so that n * ln 2 is exact in the first.
  // Selects, not fmin/fmax or early returns: the loop must stay branch-free.
  float xc = x < -104.0f ? -104.0f : x;
  xc = xc > 89.0f ? 89.0f : xc;
  // Round to nearest by the 1.5 * 2^23 trick (nearbyint is a call without SSE4.1).
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  // 2^n as two factors 2^a * 2^b, each a normal float, so results that are
  // subnormal (n down to -150) lose no more than their own precision.
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t a = ni / 2, b = ni - a;
  float y = e * bits_to_float(static_cast<uint32_t>(a + 127) << 23) * bits_to_float(static_cast<uint32_t>(b + 127) << 23);
  y = x > 88.7228391f ? std::numeric_limits<float>::infinity() : y;
  y = x < -103.972084f ? 0.0f : y;
  return x != x ? x : y;
}

}  // namespace onednn_engine::vmath
