// openreg engine SDK: dtype constants, names, bfloat16/float16 storage types, and
// dispatch from a runtime openreg_dtype to a C++ type.
#pragma once

#include <openreg/dtype_name.h>
#include <openreg/engine.h>
#include <openreg/sdk/status.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace openreg {
namespace sdk {

namespace dtypes {
constexpr openreg_dtype float16{OPENREG_DTYPE_CODE_FLOAT, 16, 1};
constexpr openreg_dtype float32{OPENREG_DTYPE_CODE_FLOAT, 32, 1};
constexpr openreg_dtype float64{OPENREG_DTYPE_CODE_FLOAT, 64, 1};
constexpr openreg_dtype bfloat16{OPENREG_DTYPE_CODE_BFLOAT, 16, 1};
constexpr openreg_dtype int8{OPENREG_DTYPE_CODE_INT, 8, 1};
constexpr openreg_dtype int16{OPENREG_DTYPE_CODE_INT, 16, 1};
constexpr openreg_dtype int32{OPENREG_DTYPE_CODE_INT, 32, 1};
constexpr openreg_dtype int64{OPENREG_DTYPE_CODE_INT, 64, 1};
constexpr openreg_dtype uint8{OPENREG_DTYPE_CODE_UINT, 8, 1};
constexpr openreg_dtype bool_{OPENREG_DTYPE_CODE_BOOL, 8, 1};
}  // namespace dtypes

constexpr bool same_dtype(openreg_dtype a, openreg_dtype b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

// PyTorch's spelling: "float32", "bfloat16", "int64", "bool"; lanes other than 1
// as "float32x4"; an unknown code as "code<N>_<bits>". The one spelling of
// openreg/dtype_name.h, which the host's messages use too.
inline std::string dtype_name(openreg_dtype d) {
  char buf[OPENREG_DTYPE_NAME_MAX];
  openreg_dtype_format(d, buf, sizeof buf);
  return buf;
}

// Storage types for the 16-bit floats: arithmetic goes through float.
struct bfloat16 {
  uint16_t bits;
  bfloat16() = default;
  bfloat16(float f) : bits(from_float(f)) {}  // NOLINT: implicit, like a float
  operator float() const {                   // NOLINT
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  static uint16_t from_float(float f) {  // round to nearest even, NaN stays NaN
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
};

struct float16 {
  uint16_t bits;
  float16() = default;
  float16(float f) : bits(from_float(f)) {}  // NOLINT
  operator float() const {                  // NOLINT
    uint32_t sign = (bits & 0x8000u) << 16, exp = (bits >> 10) & 0x1fu, man = bits & 0x3ffu, u;
    if (exp == 0x1f) {
      u = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
      u = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
      u = sign;
    } else {  // subnormal half: normalise
      int e = -1;
      do { ++e; man <<= 1; } while ((man & 0x400u) == 0);
      u = sign | ((112u - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  static uint16_t from_float(float f) {  // round to nearest even
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    uint32_t sign = (u >> 16) & 0x8000u;
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
    if (u >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
    if (u < 0x38800000u) {  // subnormal or zero in half
      if (u < 0x33000000u) return static_cast<uint16_t>(sign);
      uint32_t man = (u & 0x7fffffu) | 0x800000u;
      uint32_t shift = 126u - (u >> 23);  // in [14, 24]
      uint32_t value = man >> shift;
      uint32_t rem = man & ((1u << shift) - 1u), mid = 1u << (shift - 1u);
      if (rem > mid || (rem == mid && (value & 1u))) ++value;
      return static_cast<uint16_t>(sign | value);
    }
    uint32_t value = ((u >> 13) - (112u << 10));
    uint32_t rem = u & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (value & 1u))) ++value;
    return static_cast<uint16_t>(sign | value);
  }
};

// Any element type as double (the 16-bit floats through float).
template <class T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>) {
    return static_cast<double>(static_cast<float>(v));
  } else {
    return static_cast<double>(v);
  }
}

template <class T> struct type_tag { using type = T; };

// The C++ type of a dtype, for the dispatchers below.
template <class T> constexpr openreg_dtype dtype_of();
template <> constexpr openreg_dtype dtype_of<float>() { return dtypes::float32; }
template <> constexpr openreg_dtype dtype_of<double>() { return dtypes::float64; }
template <> constexpr openreg_dtype dtype_of<bfloat16>() { return dtypes::bfloat16; }
template <> constexpr openreg_dtype dtype_of<float16>() { return dtypes::float16; }
template <> constexpr openreg_dtype dtype_of<int8_t>() { return dtypes::int8; }
template <> constexpr openreg_dtype dtype_of<int16_t>() { return dtypes::int16; }
template <> constexpr openreg_dtype dtype_of<int32_t>() { return dtypes::int32; }
template <> constexpr openreg_dtype dtype_of<int64_t>() { return dtypes::int64; }
template <> constexpr openreg_dtype dtype_of<uint8_t>() { return dtypes::uint8; }
template <> constexpr openreg_dtype dtype_of<bool>() { return dtypes::bool_; }

// dispatch<Ts...>(dtype, f): calls f(type_tag<T>{}) for the T among Ts whose
// dtype matches; UNSUPPORTED (naming the dtype and `what`) when none does.
//   sdk::dispatch<float, double>(t.dtype(), "relu", [&](auto tag) {
//     using T = typename decltype(tag)::type; ... });
template <class... Ts, class F>
decltype(auto) dispatch(openreg_dtype dtype, const char* what, F&& f) {
  using R = decltype(f(type_tag<float>{}));
  if constexpr (std::is_void_v<R>) {
    bool done = ((same_dtype(dtype, dtype_of<Ts>()) ? (f(type_tag<Ts>{}), true) : false) || ...);
    if (!done) unsupported(str(what, ": dtype ", dtype_name(dtype), " is not supported by this engine"));
  } else {
    R result{};
    bool done = ((same_dtype(dtype, dtype_of<Ts>()) ? (result = f(type_tag<Ts>{}), true) : false) || ...);
    if (!done) unsupported(str(what, ": dtype ", dtype_name(dtype), " is not supported by this engine"));
    return result;
  }
}

// The usual sets.
template <class F> decltype(auto) dispatch_floating(openreg_dtype d, const char* what, F&& f) {
  return dispatch<float, double>(d, what, std::forward<F>(f));
}
template <class F> decltype(auto) dispatch_all(openreg_dtype d, const char* what, F&& f) {
  return dispatch<float, double, bfloat16, float16, int64_t, int32_t, int16_t, int8_t, uint8_t, bool>(
      d, what, std::forward<F>(f));
}

}  // namespace sdk
}  // namespace openreg
