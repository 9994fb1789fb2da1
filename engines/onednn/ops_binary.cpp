// add/sub (with alpha), mul, div, maximum, minimum with broadcasting, in the
// functional, in-place and out= forms. Large tensor-tensor add/sub/mul/div of one
// shape (in float32: above 1M elements) go to oneDNN's binary primitive (alpha as a
// src1 scale); Python numbers (0-dim wrapped scalars), smaller tensors, broadcast
// or expanded operands, maximum/minimum (NaN must propagate, as in ATen) and
// bfloat16 on CPUs without oneDNN bf16 primitives (isa.hpp) run plain loops.
#include <cmath>
#include <type_traits>

#include "ops.h"

namespace onednn_engine {

namespace {

enum class Bin { Add, Sub, Mul, Div, Max, Min };

Bin bin_of(const std::string& name) {
  if (name == "add") return Bin::Add;
  if (name == "sub") return Bin::Sub;
  if (name == "mul") return Bin::Mul;
  if (name == "div") return Bin::Div;
  if (name == "maximum") return Bin::Max;
  if (name == "minimum") return Bin::Min;
  sdk::fail(OPENREG_STATUS_INTERNAL, "onednn: unknown binary op " + name);
}

bool has_alpha(Bin b) { return b == Bin::Add || b == Bin::Sub; }

// A 0-dim `other` of another dtype (a Python number) is read as a scalar.
bool scalar_other(const sdk::Tensor& out, const sdk::Tensor& other) {
  return other.dim() == 0 && (!sdk::same_dtype(other.dtype(), out.dtype()) || other.device_index() < 0);
}

bool loop_only_dtype(openreg_dtype d) {
  return sdk::same_dtype(d, sdk::dtypes::float64) || sdk::same_dtype(d, sdk::dtypes::int64);
}

// Declines what the loops and primitives below do not serve (before any write).
void check(const sdk::Call& call, Bin op, const sdk::Tensor& a, const sdk::Tensor& b, const sdk::Tensor& out) {
  if (sdk::same_dtype(out.dtype(), sdk::dtypes::int64))
    OPENREG_SDK_REQUIRE(op != Bin::Div, call.op_name(), ": integer division is not served");
  if (!loop_only_dtype(out.dtype())) dnnl_dt(out.dtype(), call.op_name().data());
  if (!scalar_other(out, a)) require_dtype(call, out.dtype(), {a});
  OPENREG_SDK_REQUIRE(!(scalar_other(out, a) && scalar_other(out, b)), call.op_name(), ": two scalar operands");
  if (!scalar_other(out, b)) require_dtype(call, out.dtype(), {b});
  OPENREG_SDK_REQUIRE(b.dim() > 0 || b.numel() == 1, call.op_name(), ": bad other");
}

struct BinEntry {
  bool ref = false;  // oneDNN has only its reference kernel for these layouts
  dnnl::binary::primitive_desc pd;
  dnnl::binary prim;
};

// The primitive only for operands of the output's shape: oneDNN 2.6 runs a broadcast
// src1 ([64, 64] into [8, 4, 64, 64]) on its reference implementation, about 1000x
// slower than the loops (11.6 ms against ATen's 11 us, measured).
// And in float32 only above 1M elements: up to there the vectorised loops were as
// fast or faster (add, 1 thread: 65K 9.1 us against 11.8, 512K 68-73 against 76-78;
// 2 threads: 262K 20 against 30, 1M 75 against 83-86; torch CPU 10, 68, 20, 76-84),
// above it the primitive (4M, 1 thread: 1.59-1.64 ms against 1.82-1.86).
constexpr int64_t kFloatLoopMax = int64_t{1} << 20;

bool primitive_ok(const sdk::Tensor& a, const sdk::Tensor& b, const sdk::Tensor& out) {
  if (out.numel() < kSmall || !has_primitives(out.dtype()) || a.dim() != out.dim() || b.dim() != out.dim())
    return false;
  if (is_f32(out.dtype()) && out.numel() <= kFloatLoopMax) return false;
  for (int64_t i = 0; i < out.dim(); ++i)
    if (a.size(i) != out.size(i) || b.size(i) != out.size(i)) return false;
  return !has_zero_stride(a) && !has_zero_stride(b) && !has_zero_stride(out);
}

// Returns false (nothing written) when oneDNN would run its reference kernel:
// operands of different layouts (the rotary embedding's q * cos + rotate_half(q)
// * sin on transposed [8, 4, 64, 32] views took 13.6 ms there, 0.05 ms on torch CPU).
bool binary_prim(Bin op, const sdk::Tensor& a, const sdk::Tensor& b, const sdk::Tensor& out, float alpha) {
  const int64_t rank = out.dim();
  memory::dims bd(static_cast<size_t>(rank), 1), bs(static_cast<size_t>(rank), 1);
  for (int64_t i = 0; i < b.dim(); ++i) {
    bd[static_cast<size_t>(rank - b.dim() + i)] = b.size(i);
    bs[static_cast<size_t>(rank - b.dim() + i)] = b.size(i) == 1 ? 1 : b.stride(i);
  }
  const memory::desc amd = md_of(a), bmd = md_of(b, bd, bs), omd = md_of(out);
  Key k("binary");
  k.add(static_cast<int64_t>(op)).add(static_cast<double>(alpha)).add(a).add(bd).add(bs).add(out);
  auto e = cached<BinEntry>(k, [&] {
    const dnnl::algorithm alg = op == Bin::Add   ? dnnl::algorithm::binary_add
                                : op == Bin::Sub ? dnnl::algorithm::binary_sub
                                : op == Bin::Mul ? dnnl::algorithm::binary_mul
                                                 : dnnl::algorithm::binary_div;
    dnnl::primitive_attr attr = base_attr();
    if (alpha != 1.0f) attr.set_scales(DNNL_ARG_SRC_1, 0, {alpha});
    dnnl::binary::desc d(alg, amd, bmd, omd);
    dnnl::binary::primitive_desc pd(d, attr, cpu());
    return BinEntry{std::string(pd.impl_info_str()).rfind("ref", 0) == 0, pd, dnnl::binary(pd)};
  });
  if (e->ref) return false;
  execute(e->prim, e->pd,
          {{DNNL_ARG_SRC_0, make_mem(a, amd)}, {DNNL_ARG_SRC_1, make_mem(b, bmd)}, {DNNL_ARG_DST, make_mem(out, omd)}});
  return true;
}

// maximum/minimum with NaN propagated (x + y is NaN when either is), written as
// selects of comparisons that are all evaluated (`|`, not `||`), so the loops
// vectorise them without a branch: with `||` and `x > y ? x : y` as branches,
// random data mispredicted them and torch.maximum of 262K floats took 1.7 ms
// (torch CPU 78 us).
template <class C>
inline C max_propagating(C x, C y) {
  const C m = x > y ? x : y;
  return ((x != x) | (y != y)) ? x + y : m;
}
template <class C>
inline C min_propagating(C x, C y) {
  const C m = x < y ? x : y;
  return ((x != x) | (y != y)) ? x + y : m;
}

template <class C>
inline C apply(Bin op, C x, C y) {
  switch (op) {
    case Bin::Add: return x + y;
    case Bin::Sub: return x - y;
    case Bin::Mul: return x * y;
    case Bin::Div: return x / y;
    case Bin::Max: return max_propagating(x, y);
    case Bin::Min: return min_propagating(x, y);
  }
  return C(0);
}

}  // namespace

sdk::Kernel binary(const char* name) {
  const Bin op = bin_of(name);
  return [op](const sdk::Call& call) {
    sdk::Tensor a = call.tensor(0), b = call.tensor(1), out = call.output(0);
    check(call, op, a, b, out);
    const double alpha = has_alpha(op) ? call.scalar_or(2, 1.0) : 1.0;
    // int64 operands take numbers exactly (a double rounds them beyond 2^53).
    auto int_alpha = [&] { return call.is_none(2) ? int64_t(1) : call.int_scalar(2).value_or(1); };
    auto int_item = [](const sdk::Tensor& t) { return t.item_int().value_or(static_cast<int64_t>(t.item())); };
    if (out.numel() == 0) return;
    if (op != Bin::Max && op != Bin::Min && !loop_only_dtype(out.dtype()) && !scalar_other(out, b) &&
        !scalar_other(out, a) &&
        primitive_ok(a, b, out)) {
      const float f = static_cast<float>(op == Bin::Sub || op == Bin::Add ? alpha : 1.0);
      if (binary_prim(op, a, b, out, f)) return;
    }
    sdk::dispatch<float, sdk::bfloat16, double, int64_t>(out.dtype(), "binary", [&](auto tag) {
      using T = typename decltype(tag)::type;
      // Compute type: float for the 16-bit floats, the type itself otherwise.
      using C = std::conditional_t<std::is_same_v<T, sdk::bfloat16>, float, T>;
      // A number and alpha rounded to T first, as CPU's kernels take them, but for
      // mul and div by a number `other`, which compute with it unrounded (ATen's
      // opmath scalar): bfloat16 results then have CPU's bits.
      const auto as_t = [](double v) { return static_cast<C>(static_cast<T>(v)); };
      if (scalar_other(out, a)) {  // a 0-dim self of another dtype (ATen: no promotion)
        C s, k;
        if constexpr (std::is_same_v<C, int64_t>) {
          s = int_item(a);
          k = has_alpha(op) ? (op == Bin::Sub ? -int_alpha() : int_alpha()) : 1;
        } else {
          s = as_t(a.item());
          k = as_t(has_alpha(op) ? (op == Bin::Sub ? -alpha : alpha) : 1.0);
        }
        map1<T>(out, b, [op, s, k](T y) {
          return has_alpha(op) ? s + k * static_cast<C>(y) : apply<C>(op, s, static_cast<C>(y));
        });
        return;
      }
      if (scalar_other(out, b)) {
        C k;
        if constexpr (std::is_same_v<C, int64_t>) {
          const int64_t s = int_item(b);
          const int64_t al = int_alpha();
          k = has_alpha(op) ? (op == Bin::Sub ? -al * s : al * s) : s;
        } else {
          const double s = b.item();
          k = has_alpha(op) ? as_t(op == Bin::Sub ? -alpha : alpha) * as_t(s) : static_cast<C>(s);
        }
        const Bin eff = has_alpha(op) ? Bin::Add : op;
        switch (eff) {  // one loop per op: the operation inlines and vectorises
          case Bin::Add: map1<T>(out, a, [k](T x) { return static_cast<C>(x) + k; }); break;
          case Bin::Mul: map1<T>(out, a, [k](T x) { return static_cast<C>(x) * k; }); break;
          case Bin::Div: map1<T>(out, a, [k](T x) { return static_cast<C>(x) / k; }); break;
          case Bin::Max: map1<T>(out, a, [k](T x) { return max_propagating(static_cast<C>(x), k); }); break;
          case Bin::Min: map1<T>(out, a, [k](T x) { return min_propagating(static_cast<C>(x), k); }); break;
          default: map1<T>(out, a, [eff, k](T x) { return apply<C>(eff, static_cast<C>(x), k); });
        }
        return;
      }
      if (has_alpha(op) && alpha != 1.0) {
        C k;
        if constexpr (std::is_same_v<C, int64_t>) k = op == Bin::Sub ? -int_alpha() : int_alpha();
        else k = as_t(op == Bin::Sub ? -alpha : alpha);
        map2<T>(out, a, b, [k](T x, T y) { return static_cast<C>(x) + k * static_cast<C>(y); });
        return;
      }
      switch (op) {  // one loop per op: the operation inlines and vectorises
        case Bin::Add: map2<T>(out, a, b, [](T x, T y) { return static_cast<C>(x) + static_cast<C>(y); }); break;
        case Bin::Sub: map2<T>(out, a, b, [](T x, T y) { return static_cast<C>(x) - static_cast<C>(y); }); break;
        case Bin::Mul: map2<T>(out, a, b, [](T x, T y) { return static_cast<C>(x) * static_cast<C>(y); }); break;
        case Bin::Div: map2<T>(out, a, b, [](T x, T y) { return static_cast<C>(x) / static_cast<C>(y); }); break;
        case Bin::Max:
          map2<T>(out, a, b, [](T x, T y) { return max_propagating(static_cast<C>(x), static_cast<C>(y)); });
          break;
        case Bin::Min:
          map2<T>(out, a, b, [](T x, T y) { return min_propagating(static_cast<C>(x), static_cast<C>(y)); });
          break;
        default: map2<T>(out, a, b, [op](T x, T y) { return apply<C>(op, static_cast<C>(x), static_cast<C>(y)); });
      }
    });
  };
}

}  // namespace onednn_engine
