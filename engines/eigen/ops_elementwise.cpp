// Elementwise kernels: binary ops with broadcasting and alpha, unary ops and
// their backward ops, the optimizer's ternary ops and fill/zero/clone/copy (the
// _foreach_ lists are the SDK's: ops_optim.cpp). Contiguous rows of float/double
// go through vectorised Eigen array expressions; everything else through the
// SDK's strided row walk.
#include <cmath>
#include <cstring>
#include <limits>

#include "eigen_engine.h"

namespace eigen_engine {

namespace {

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double k1OverSqrt2Pi = 0.39894228040143267794;

bool is_scalar_operand(const Tensor& t) { return t.dim() == 0; }

// ---------------------------------------------------------------- binary
// maximum/minimum on Eigen arrays with NaN propagated (vectorised selects: the
// scalar forms' branches, mispredicted on random data, took 1.6x torch CPU's time).
template <class C>
using MaxNaN = Eigen::internal::scalar_max_op<C, C, Eigen::PropagateNaN>;
template <class C>
using MinNaN = Eigen::internal::scalar_min_op<C, C, Eigen::PropagateNaN>;

template <class T>
void binary_t(const sdk::Host& host, Binary kind, const Tensor& out, const Tensor& a, const Tensor* b, double bval,
              double alpha) {
  using C = C_t<T>;
  if (b == nullptr) {  // scalar other
    // As CPU's kernels take a Python number: add and sub round it (and alpha) to T
    // first, mul and div compute with it in C unrounded (ATen's opmath scalar).
    const C y = kind == B_MUL || kind == B_DIV ? static_cast<C>(bval) : scalar_as<T>(bval);
    const std::array<Tensor, 1> in{a};
    switch (kind) {
      case B_ADD:
      case B_SUB: {
        const C k = scalar_as<T>(kind == B_ADD ? alpha : -alpha) * y;
        emap<T, 1>(host, out, in, [k](C x) { return x + k; }, [k](const auto& x) { return x + k; });
        break;
      }
      case B_MUL: emap<T, 1>(host, out, in, [y](C x) { return x * y; }, [y](const auto& x) { return x * y; }); break;
      case B_DIV: emap<T, 1>(host, out, in, [y](C x) { return x / y; }, [y](const auto& x) { return x / y; }); break;
      case B_MAX:
        emap<T, 1>(host, out, in, [y](C x) { return x != x ? x : (y != y ? y : (x > y ? x : y)); },
                   [y](const auto& x) { return x.binaryExpr(decltype(x.eval())::Constant(x.size(), y), MaxNaN<C>()); });
        break;
      case B_MIN:
        emap<T, 1>(host, out, in, [y](C x) { return x != x ? x : (y != y ? y : (x < y ? x : y)); },
                   [y](const auto& x) { return x.binaryExpr(decltype(x.eval())::Constant(x.size(), y), MinNaN<C>()); });
        break;
    }
    return;
  }
  const std::array<Tensor, 2> in{a, *b};
  switch (kind) {
    case B_ADD:
    case B_SUB: {
      const C k = scalar_as<T>(kind == B_ADD ? alpha : -alpha);
      if (k == C(1))
        emap<T, 2>(host, out, in, [](C x, C y) { return x + y; }, [](const auto& x, const auto& y) { return x + y; });
      else
        emap<T, 2>(host, out, in, [k](C x, C y) { return x + k * y; },
                   [k](const auto& x, const auto& y) { return x + k * y; });
      break;
    }
    case B_MUL:
      emap<T, 2>(host, out, in, [](C x, C y) { return x * y; }, [](const auto& x, const auto& y) { return x * y; });
      break;
    case B_DIV:
      emap<T, 2>(host, out, in, [](C x, C y) { return x / y; }, [](const auto& x, const auto& y) { return x / y; });
      break;
    case B_MAX:
      emap<T, 2>(host, out, in, [](C x, C y) { return x != x ? x : (y != y ? y : (x > y ? x : y)); },
                 [](const auto& x, const auto& y) { return x.binaryExpr(y, MaxNaN<C>()); });
      break;
    case B_MIN:
      emap<T, 2>(host, out, in, [](C x, C y) { return x != x ? x : (y != y ? y : (x < y ? x : y)); },
                 [](const auto& x, const auto& y) { return x.binaryExpr(y, MinNaN<C>()); });
      break;
  }
}

// ---------------------------------------------------------------- unary
struct UnaryParams {
  double p0 = 0, p1 = 0;
  bool has_min = false, has_max = false;
  bool tanh_approx = false;
};

template <class C>
C sigmoid1(C x) {
  return C(1) / (C(1) + std::exp(-x));
}

template <class T>
void unary_t(const sdk::Host& host, Unary kind, const Tensor& out, const Tensor& a, const UnaryParams& p) {
  using C = C_t<T>;
  const std::array<Tensor, 1> in{a};
  auto run = [&](auto f) { emap<T, 1>(host, out, in, f); };
  auto runv = [&](auto f, auto v) { emap<T, 1>(host, out, in, f, v); };
  switch (kind) {
    case U_NEG: runv([](C x) { return -x; }, [](const auto& x) { return -x; }); break;
    case U_ABS: runv([](C x) { return std::abs(x); }, [](const auto& x) { return x.abs(); }); break;
    case U_EXP:  // 0 below Eigen's exp's clamp (isa_kernels.h): exp(-inf) is 0
      runv([](C x) { return std::exp(x); }, [](const auto& x) {
        const C clamp = std::is_same_v<C, float> ? C(kExpClampF32) : C(kExpClampF64);
        return (x < clamp).select(C(0), x.exp());
      });
      break;
    case U_LOG: runv([](C x) { return std::log(x); }, [](const auto& x) { return x.log(); }); break;
    case U_SQRT: runv([](C x) { return std::sqrt(x); }, [](const auto& x) { return x.sqrt(); }); break;
    case U_RSQRT:
      runv([](C x) { return C(1) / std::sqrt(x); }, [](const auto& x) { return x.sqrt().inverse(); });
      break;
    case U_RELU:
      runv([](C x) { return x > C(0) || x != x ? x : C(0); },
           [](const auto& x) { return (x < C(0)).select(C(0), x); });
      break;
    case U_SIGMOID:
      runv([](C x) { return sigmoid1(x); }, [](const auto& x) { return (C(1) + (-x).exp()).inverse(); });
      break;
    case U_TANH:
      // |x| < 0.01: x - x^3/3 (error ~x^5); else 1 - 2 / (exp(2x) + 1) (absolute error ~1 ulp of 1).
      runv([](C x) { return std::tanh(x); },
           [](const auto& x) {
             return (x.abs() < C(0.01)).select(x * (C(1) - x * x * C(1.0 / 3.0)),
                                               C(1) - C(2) / ((C(2) * x).exp() + C(1)));
           });
      break;
    case U_GELU:
      if (p.tanh_approx)
        run([](C x) {
          const C inner = C(kSqrt2OverPi) * (x + C(0.044715) * x * x * x);
          return C(0.5) * x * (C(1) + std::tanh(inner));
        });
      else
        run([](C x) { return C(0.5) * x * (C(1) + std::erf(x * C(kSqrt1_2))); });
      break;
    case U_SIN: run([](C x) { return std::sin(x); }); break;
    case U_COS: run([](C x) { return std::cos(x); }); break;
    case U_LOG2: run([](C x) { return std::log2(x); }); break;
    case U_LOG1P: run([](C x) { return std::log1p(x); }); break;
    case U_EXPM1: run([](C x) { return std::expm1(x); }); break;
    case U_ERF: run([](C x) { return std::erf(x); }); break;
    case U_RECIPROCAL: run([](C x) { return C(1) / x; }); break;
    case U_FLOOR: runv([](C x) { return std::floor(x); }, [](const auto& x) { return x.floor(); }); break;
    case U_CEIL: runv([](C x) { return std::ceil(x); }, [](const auto& x) { return x.ceil(); }); break;
    case U_ROUND: runv([](C x) { return std::nearbyint(x); }, [](const auto& x) { return x.rint(); }); break;
    case U_TRUNC: run([](C x) { return std::trunc(x); }); break;
    case U_SILU:
      runv([](C x) { return x / (C(1) + std::exp(-x)); }, [](const auto& x) { return x / (C(1) + (-x).exp()); });
      break;
    case U_LEAKY_RELU: {
      const C k = static_cast<C>(p.p0);
      // x * (x <= 0 ? k : 1): a select between constants, branch-free; NaN stays NaN.
      run([k](C x) { return x * (x <= C(0) ? k : C(1)); });
      break;
    }
    case U_HARDTANH:
    case U_CLAMP: {
      const C lo = static_cast<C>(p.p0), hi = static_cast<C>(p.p1);
      const bool has_lo = p.has_min, has_hi = p.has_max;
      const C vlo = has_lo ? lo : -std::numeric_limits<C>::infinity();
      const C vhi = has_hi ? hi : std::numeric_limits<C>::infinity();
      if ((has_lo && lo != lo) || (has_hi && hi != hi)) {  // a NaN bound: every output is NaN (as ATen)
        run([](C) { return std::numeric_limits<C>::quiet_NaN(); });
        break;
      }
      // NaN compares false both ways and stays NaN; min wins when lo > hi (as ATen).
      runv(
          [=](C x) {
            if (x != x) return x;
            if (has_lo && x < lo) x = lo;
            if (has_hi && x > hi) x = hi;
            return x;
          },
          [=](const auto& x) {
            const auto lo_clamped = (x < vlo).select(vlo, x);
            return (lo_clamped > vhi).select(vhi, lo_clamped);
          });
      break;
    }
    case U_POW: {
      // The exponents ATen computes with multiplications, roots and reciprocals
      // (its pow_tensor_scalar_optimized_kernel), the same way; std::pow otherwise.
      const C e = static_cast<C>(p.p0);
      if (e == C(2)) runv([](C x) { return x * x; }, [](const auto& x) { return x * x; });
      else if (e == C(3)) runv([](C x) { return x * x * x; }, [](const auto& x) { return x * x * x; });
      else if (e == C(0.5)) runv([](C x) { return std::sqrt(x); }, [](const auto& x) { return x.sqrt(); });
      else if (e == C(-0.5))
        runv([](C x) { return C(1) / std::sqrt(x); }, [](const auto& x) { return x.sqrt().inverse(); });
      else if (e == C(-1)) runv([](C x) { return C(1) / x; }, [](const auto& x) { return x.inverse(); });
      else if (e == C(-2)) runv([](C x) { return C(1) / (x * x); }, [](const auto& x) { return (x * x).inverse(); });
      else if (e == C(1)) runv([](C x) { return x; }, [](const auto& x) { return x; });
      else run([e](C x) { return std::pow(x, e); });
      break;
    }
  }
}

// ---------------------------------------------------------------- ternary
template <class T>
void ternary_t(const sdk::Host& host, Ternary kind, const Tensor& out, const Tensor& a, const Tensor& b,
               const Tensor* c, double value) {
  using C = C_t<T>;
  const C v = static_cast<C>(value);
  switch (kind) {
    case T_ADDCMUL:
      emap<T, 3>(host, out, {a, b, *c}, [v](C x, C y, C z) { return x + v * y * z; },
                 [v](const auto& x, const auto& y, const auto& z) { return x + v * y * z; });
      break;
    case T_ADDCDIV:
      emap<T, 3>(host, out, {a, b, *c}, [v](C x, C y, C z) { return x + v * (y / z); },
                 [v](const auto& x, const auto& y, const auto& z) { return x + v * (y / z); });
      break;
    case T_LERP:
      if (c) {
        emap<T, 3>(host, out, {a, b, *c}, [](C x, C y, C w) {
          return std::abs(w) < C(0.5) ? x + w * (y - x) : y - (y - x) * (C(1) - w);
        });
      } else if (std::abs(v) < C(0.5)) {
        emap<T, 2>(host, out, {a, b}, [v](C x, C y) { return x + v * (y - x); },
                   [v](const auto& x, const auto& y) { return x + v * (y - x); });
      } else {
        const C w1 = C(1) - v;
        emap<T, 2>(host, out, {a, b}, [w1](C x, C y) { return y - (y - x) * w1; },
                   [w1](const auto& x, const auto& y) { return y - (y - x) * w1; });
      }
      break;
  }
}

template <class T>
void fill_t(const sdk::Host& host, const Tensor& out, double value, const int64_t* exact_int = nullptr) {
  T v = static_cast<T>(value);
  if constexpr (std::is_integral_v<T>) {
    if (exact_int) v = static_cast<T>(*exact_int);  // integers beyond 2^53 stay exact
  }
  sdk::Shape shape = sdk::shape_of(out);
  std::array<sdk::Operand, 1> ops{sdk::operand(out, shape)};
  sdk::for_each_row(host, shape, ops, [&](const std::array<char*, 1>& p, const std::array<int64_t, 1>& s, int64_t n) {
    if (s[0] == sizeof(T)) {
      T* o = reinterpret_cast<T*>(p[0]);
      std::fill(o, o + n, v);
    } else {
      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
    }
  });
}

// out (T) = src (S), src broadcast to out.
template <class T, class S>
void convert_t(const sdk::Host& host, const Tensor& out, const Tensor& src) {
  sdk::Shape shape = sdk::shape_of(out);
  std::array<sdk::Operand, 2> ops{sdk::operand(out, shape), sdk::operand(src, shape)};
  sdk::for_each_row(host, shape, ops, [&](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
    if constexpr (std::is_same_v<T, S>) {
      if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
        std::memcpy(p[0], p[1], static_cast<size_t>(n) * sizeof(T));
        return;
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      const S x = *reinterpret_cast<const S*>(p[1] + i * s[1]);
      if constexpr (std::is_same_v<T, S>) *reinterpret_cast<T*>(p[0] + i * s[0]) = x;
      else *reinterpret_cast<T*>(p[0] + i * s[0]) = static_cast<T>(static_cast<C_t<S>>(x));
    }
  });
}

}  // namespace

// add/sub(self, other, alpha), mul/div/maximum/minimum(self, other); .Tensor,
// .Scalar, in-place, out= forms.
// add/sub/mul also serve float16 and int64 and int32 (the optimizers' step counters).
template <class Fn>
void dispatch_binary(Binary kind, openreg_dtype d, Fn&& fn) {
  if (kind == B_ADD || kind == B_SUB || kind == B_MUL)
    sdk::dispatch<float, double, sdk::bfloat16, sdk::float16, int64_t, int32_t>(d, "binary", std::forward<Fn>(fn));
  else
    dispatch_ew(d, "binary", std::forward<Fn>(fn));
}

void binary(const Call& call, Binary kind) {
  Tensor out = call.output(0), a = call.tensor(0);
  const bool has_alpha = kind == B_ADD || kind == B_SUB;
  double alpha = 1.0;
  if (has_alpha && call.num_args() > 2 && call.kind(2) != OPENREG_VALUE_TENSOR) alpha = call.scalar_or(2, 1.0);
  std::optional<Tensor> b;
  double bval = 0;
  if (call.kind(1) == OPENREG_VALUE_TENSOR) {
    Tensor t = call.tensor(1);
    if (is_scalar_operand(t) && !(is_scalar_operand(a) && !same_dtype(a, out))) {
      bval = t.item();
    } else {
      b = t;
    }
  } else {
    bval = call.scalar(1);
  }
  // The numbers travel below as doubles, which round integers beyond 2^53: integer
  // arithmetic with such a number is left to the next engine.
  if (out.dtype().code == OPENREG_DTYPE_CODE_INT) {
    auto exact = [](std::optional<int64_t> v) { return !v || (*v >= -(int64_t(1) << 53) && *v <= (int64_t(1) << 53)); };
    const bool other_number = !b, self_number = is_scalar_operand(a) && !same_dtype(a, out);
    const bool alpha_number = has_alpha && call.num_args() > 2 && call.kind(2) != OPENREG_VALUE_TENSOR;
    OPENREG_SDK_REQUIRE(
        (!other_number || exact(call.kind(1) == OPENREG_VALUE_TENSOR ? call.tensor(1).item_int() : call.int_scalar(1))) &&
            (!alpha_number || exact(call.int_scalar(2))) && (!self_number || exact(a.item_int())),
        call.op_name(), ": an integer number beyond 2^53 (left to the next engine)");
  }
  // A 0-dim self of another dtype (a Python number or CPU scalar first, as in
  // torch.mul(2.0, x, out=y)): the tensor operand is `other`.
  if (b && is_scalar_operand(a) && !same_dtype(a, out)) {
    const double av = a.item();
    Tensor y = *b;
    require_dtype(call, out, y, "other");
    dispatch_binary(kind, out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = C_t<T>;
      const C s = scalar_as<T>(av);
      const C k = scalar_as<T>(alpha);
      const std::array<Tensor, 1> in{y};
      const sdk::Host& h = call.host();
      switch (kind) {
        case B_ADD: emap<T, 1>(h, out, in, [s, k](C v) { return s + k * v; }); break;
        case B_SUB: emap<T, 1>(h, out, in, [s, k](C v) { return s - k * v; }); break;
        case B_MUL: emap<T, 1>(h, out, in, [s](C v) { return s * v; }); break;
        case B_DIV: emap<T, 1>(h, out, in, [s](C v) { return s / v; }); break;
        case B_MAX: emap<T, 1>(h, out, in, [s](C v) { return s != s ? s : (v != v ? v : (s > v ? s : v)); }); break;
        case B_MIN: emap<T, 1>(h, out, in, [s](C v) { return s != s ? s : (v != v ? v : (s < v ? s : v)); }); break;
      }
    });
    return;
  }
  require_dtype(call, out, a, "self");
  if (b) require_dtype(call, out, *b, "other");
  // Contiguous float32 without broadcasting: the ISA kernel (the portable loops
  // are built for the baseline ISA).
  const int64_t n = out.numel();
  if (sdk::same_dtype(out.dtype(), sdk::dtypes::float32) && out.is_contiguous() && a.is_contiguous() &&
      a.numel() == n && (!b || (b->is_contiguous() && b->numel() == n))) {
    const int k = kind == B_MUL   ? ISA_MUL
                  : kind == B_DIV ? ISA_DIV
                  : kind == B_MAX ? ISA_MAX
                  : kind == B_MIN ? ISA_MIN
                                  : ISA_ADD;
    const float al = static_cast<float>(kind == B_SUB ? -alpha : alpha), bs = static_cast<float>(bval);
    const float* pa = a.data<float>();
    const float* pb = b ? b->data<float>() : nullptr;
    float* po = out.data<float>();
    const auto kernel = isa().binary_f32;
    call.host().parallel_for(0, n, sdk::kParallelGrain, [&](int64_t s, int64_t e) {
      kernel(k, pa + s, pb ? pb + s : nullptr, bs, al, po + s, e - s);
    });
    return;
  }
  dispatch_binary(kind, out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    binary_t<T>(call.host(), kind, out, a, b ? &*b : nullptr, bval, alpha);
  });
}

namespace {
// out and a float32, contiguous, of one size: the per-ISA kernels' operands.
bool dense_f32_pair(const Tensor& out, const Tensor& a) {
  return sdk::same_dtype(out.dtype(), sdk::dtypes::float32) && sdk::same_dtype(a.dtype(), sdk::dtypes::float32) &&
         a.is_contiguous() && out.is_contiguous() && a.numel() == out.numel();
}
}  // namespace

bool isa_unary_f32(const Call& call, const Tensor& out, const Tensor& a, int isa_kind, float p0, float p1) {
  if (!dense_f32_pair(out, a)) return false;
  const float* x = a.data<float>();
  float* y = out.data<float>();
  // A quarter of the memory-bound grain for the transcendental ones: they cost
  // tens of cycles per element.
  const bool cheap = isa_kind == ISA_LEAKY_RELU || isa_kind == ISA_CLAMP || isa_kind == ISA_RSQRT ||
                     isa_kind == ISA_FLOOR || isa_kind == ISA_CEIL || isa_kind == ISA_ROUND ||
                     isa_kind == ISA_RECIPROCAL || isa_kind == ISA_SIGN;
  const int64_t grain = cheap ? sdk::kParallelGrain : sdk::kParallelGrain / 4;
  const auto kernel = isa().unary_f32;
  call.host().parallel_for(0, out.numel(), grain,
                           [&](int64_t b, int64_t e) { kernel(isa_kind, x + b, y + b, e - b, p0, p1); });
  return true;
}

void unary(const Call& call, Unary kind) {
  Tensor out = call.output(0), a = call.tensor(0);
  require_dtype(call, out, a, "self");
  UnaryParams p;
  switch (kind) {
    case U_GELU: {
      std::string_view mode = call.num_args() > 1 ? str_arg(call, 1) : std::string_view("none");
      OPENREG_SDK_REQUIRE(mode == "none" || mode == "tanh", "gelu: approximate=", std::string(mode));
      p.tanh_approx = mode == "tanh";
      break;
    }
    case U_LEAKY_RELU: p.p0 = call.scalar_or(1, 0.01); break;
    case U_HARDTANH:
      p.p0 = call.scalar_or(1, -1.0);
      p.p1 = call.scalar_or(2, 1.0);
      p.has_min = p.has_max = true;
      break;
    case U_CLAMP:
      OPENREG_SDK_REQUIRE(call.is_none(1) || call.kind(1) != OPENREG_VALUE_TENSOR, "clamp: tensor bounds");
      OPENREG_SDK_REQUIRE(call.is_none(2) || call.kind(2) != OPENREG_VALUE_TENSOR, "clamp: tensor bounds");
      p.has_min = !call.is_none(1);
      p.has_max = call.num_args() > 2 && !call.is_none(2);
      if (p.has_min) p.p0 = call.scalar(1);
      if (p.has_max) p.p1 = call.scalar(2);
      break;
    case U_POW: p.p0 = call.scalar(1); break;
    default: break;
  }
  // Contiguous float32: the ISA kernels (the portable loops are built for the
  // baseline ISA, and libm's functions are a call per element). A NaN bound of
  // clamp makes every element NaN: the portable loop below.
  const bool nan_bound = (p.has_min && p.p0 != p.p0) || (p.has_max && p.p1 != p.p1);
  const int isa_kind = kind == U_EXP            ? ISA_EXP
                       : kind == U_TANH         ? ISA_TANH
                       : kind == U_SIGMOID      ? ISA_SIGMOID
                       : kind == U_SILU         ? ISA_SILU
                       : kind == U_ERF          ? ISA_ERF
                       : kind == U_EXPM1        ? ISA_EXPM1
                       : kind == U_LOG1P        ? ISA_LOG1P
                       : kind == U_LOG          ? ISA_LOG
                       : kind == U_SIN          ? ISA_SIN
                       : kind == U_COS          ? ISA_COS
                       : kind == U_RSQRT        ? ISA_RSQRT
                       : kind == U_FLOOR        ? ISA_FLOOR
                       : kind == U_CEIL         ? ISA_CEIL
                       : kind == U_ROUND        ? ISA_ROUND
                       : kind == U_RECIPROCAL   ? ISA_RECIPROCAL
                       : kind == U_LOG2         ? ISA_LOG2
                       : kind == U_LEAKY_RELU   ? ISA_LEAKY_RELU
                       : (kind == U_CLAMP || kind == U_HARDTANH) && !nan_bound ? ISA_CLAMP
                                                                               : -1;
  if (kind == U_GELU && dense_f32_pair(out, a)) {
    const float* x = a.data<float>();
    float* y = out.data<float>();
    const auto kernel = isa().gelu_f32;
    call.host().parallel_for(0, out.numel(), sdk::kParallelGrain / 4,
                             [&](int64_t b, int64_t e) { kernel(x + b, y + b, e - b, p.tanh_approx); });
    return;
  }
  if (isa_kind >= 0) {
    constexpr float kInf = std::numeric_limits<float>::infinity();
    const float p0 = isa_kind == ISA_CLAMP ? (p.has_min ? static_cast<float>(p.p0) : -kInf) : static_cast<float>(p.p0);
    const float p1 = p.has_max ? static_cast<float>(p.p1) : kInf;
    if (isa_unary_f32(call, out, a, isa_kind, p0, p1)) return;
  }
  if (kind == U_NEG || kind == U_ABS || kind == U_RELU) {
    sdk::dispatch<float, double, sdk::bfloat16, int64_t, int32_t>(out.dtype(), "unary", [&](auto tag) {
      using T = typename decltype(tag)::type;
      unary_t<T>(call.host(), kind, out, a, p);
    });
    return;
  }
  dispatch_ew(out.dtype(), "unary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    unary_t<T>(call.host(), kind, out, a, p);
  });
  // Eigen's vectorised float64 log (the dense walk's) treats a subnormal x as the
  // smallest normal double: those elements again through libm (float32: the ISA
  // kernel's log_of_subnormals).
  if (kind == U_LOG && sdk::same_dtype(out.dtype(), sdk::dtypes::float64) && a.is_contiguous() &&
      out.is_contiguous() && sdk::same_dtype(a.dtype(), sdk::dtypes::float64)) {
    const double* x = a.data<double>();
    double* y = out.data<double>();
    for (int64_t i = 0; i < out.numel(); ++i)
      if (x[i] > 0.0 && x[i] < std::numeric_limits<double>::min()) y[i] = std::log(x[i]);
  }
}

// threshold_backward(grad, self, threshold), sigmoid/tanh_backward(grad, output),
// gelu_backward(grad, self, approximate), silu_backward(grad, self)
void activation_backward(const Call& call, ActBackward kind) {
  Tensor out = call.output(0), g = call.tensor(0), x = call.tensor(1);
  require_dtype(call, out, g, "grad");
  require_dtype(call, out, x, "input");
  bool tanh_approx = false;
  double thr = 0;
  if (kind == A_GELU) {
    std::string_view mode = call.num_args() > 2 ? str_arg(call, 2) : std::string_view("none");
    OPENREG_SDK_REQUIRE(mode == "none" || mode == "tanh", "gelu_backward: approximate=", std::string(mode));
    tanh_approx = mode == "tanh";
  }
  if (kind == A_THRESHOLD) thr = call.scalar(2);
  if ((kind == A_GELU || kind == A_SILU) && sdk::same_dtype(out.dtype(), sdk::dtypes::float32) && g.is_contiguous() &&
      x.is_contiguous() && out.is_contiguous() && g.numel() == out.numel() && x.numel() == out.numel()) {
    // Contiguous float32: the ISA kernels, as unary() does (libm's erf, exp and tanh
    // are a call per element: gelu's backward of 262K floats took 4.1 ms, torch CPU 0.4).
    const int k = kind == A_SILU ? ISA_SILU_BACKWARD : tanh_approx ? ISA_GELU_TANH_BACKWARD : ISA_GELU_ERF_BACKWARD;
    const float* gp = g.data<float>();
    const float* xp = x.data<float>();
    float* op = out.data<float>();
    const auto kernel = isa().activation_backward_f32;
    call.host().parallel_for(0, out.numel(), sdk::kParallelGrain / 4,
                             [&](int64_t b, int64_t e) { kernel(k, gp + b, xp + b, op + b, e - b); });
    return;
  }
  dispatch_ew(out.dtype(), "activation_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = C_t<T>;
    const std::array<Tensor, 2> in{g, x};
    const sdk::Host& h = call.host();
    switch (kind) {
      case A_THRESHOLD: {
        const C t = static_cast<C>(thr);
        // A plain scalar loop: both operands are loaded unconditionally, so the
        // compiler emits a branch-free select (Eigen's select branches per element).
        emap<T, 2>(h, out, in, [t](C gr, C v) { return v <= t ? C(0) : gr; });
        break;
      }
      case A_SIGMOID:
        emap<T, 2>(h, out, in, [](C gr, C y) { return gr * (C(1) - y) * y; },
                   [](const auto& gr, const auto& y) { return gr * (C(1) - y) * y; });
        break;
      case A_TANH:
        emap<T, 2>(h, out, in, [](C gr, C y) { return gr * (C(1) - y * y); },
                   [](const auto& gr, const auto& y) { return gr * (C(1) - y * y); });
        break;
      case A_GELU:
        if (tanh_approx) {
          emap<T, 2>(h, out, in, [](C gr, C v) {
            const C kBeta = C(kSqrt2OverPi), kKappa = C(0.044715);
            const C x_sq = v * v, x_cube = x_sq * v;
            const C inner = kBeta * (v + kKappa * x_cube);
            const C th = std::tanh(inner);
            const C left = C(0.5) * v, right = C(1) + th;
            const C left_d = C(0.5) * right;
            const C right_d = left * (C(1) - th * th) * kBeta * (C(1) + C(3) * kKappa * x_sq);
            return gr * (left_d + right_d);
          });
        } else {
          emap<T, 2>(h, out, in, [](C gr, C v) {
            const C cdf = C(0.5) * (C(1) + std::erf(v * C(kSqrt1_2)));
            const C pdf = std::exp(C(-0.5) * v * v) * C(k1OverSqrt2Pi);
            return gr * (cdf + v * pdf);
          });
        }
        break;
      case A_SILU:
        emap<T, 2>(h, out, in, [](C gr, C v) {
          const C s = sigmoid1(v);
          return gr * s * (C(1) + v * (C(1) - s));
        });
        break;
    }
  });
}

// addcmul/addcdiv(self, t1, t2, value), lerp.Scalar(self, end, weight),
// lerp.Tensor(self, end, weight)
void ternary(const Call& call, Ternary kind) {
  Tensor out = call.output(0), a = call.tensor(0), b = call.tensor(1);
  require_dtype(call, out, a, "self");
  require_dtype(call, out, b, "second operand");
  std::optional<Tensor> c;
  double value = 1.0;
  if (kind == T_LERP) {
    if (call.kind(2) == OPENREG_VALUE_TENSOR) c = call.tensor(2);
    else value = call.scalar(2);
  } else {
    c = call.tensor(2);
    value = call.scalar_or(3, 1.0);
  }
  if (c) require_dtype(call, out, *c, "third operand");
  dispatch_ew(out.dtype(), "ternary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ternary_t<T>(call.host(), kind, out, a, b, c ? &*c : nullptr, value);
  });
}

void fill(const Call& call) {
  Tensor out = call.output(0);
  double v;
  int64_t iv = 0;
  const int64_t* exact = nullptr;
  if (call.kind(1) == OPENREG_VALUE_TENSOR) {
    Tensor t = call.tensor(1);
    v = t.item();
    if (sdk::same_dtype(t.dtype(), sdk::dtypes::int64)) {
      iv = *t.data<int64_t>();
      exact = &iv;
    }
  } else {
    v = call.scalar(1);
    const openreg_value& a = call.arg(1);
    if (a.kind == OPENREG_VALUE_INT) {
      iv = a.u.i;
      exact = &iv;
    } else if (a.kind == OPENREG_VALUE_SCALAR && a.u.scalar.kind == OPENREG_SCALAR_INT) {
      iv = a.u.scalar.v.i;
      exact = &iv;
    }
  }
  sdk::dispatch<float, double, sdk::bfloat16, int64_t, int32_t, bool>(out.dtype(), "fill_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_t<T>(call.host(), out, v, exact);
  });
}

void zero(const Call& call) {
  Tensor out = call.output(0);
  sdk::dispatch<float, double, sdk::bfloat16, int64_t, int32_t, bool>(out.dtype(), "zero_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_t<T>(call.host(), out, 0.0);
  });
}

void clone(const Call& call) {
  Tensor out = call.output(0), a = call.tensor(0);
  require_dtype(call, out, a, "self");
  sdk::dispatch<float, double, sdk::bfloat16, int64_t, int32_t, bool>(out.dtype(), "clone", [&](auto tag) {
    using T = typename decltype(tag)::type;
    convert_t<T, T>(call.host(), out, a);
  });
}

// copy_(self, src, non_blocking): src of float32/float64/bfloat16 into self.
void copy(const Call& call) {
  Tensor out = call.output(0), src = call.tensor(1);
  sdk::dispatch<float, double, sdk::bfloat16>(out.dtype(), "copy_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    sdk::dispatch<float, double, sdk::bfloat16>(src.dtype(), "copy_ source", [&](auto stag) {
      using S = typename decltype(stag)::type;
      convert_t<T, S>(call.host(), out, src);
    });
  });
}

}  // namespace eigen_engine
