// Elementwise kernels. sdk::binary_map broadcasts both inputs to the output's
// shape and walks any strides, so one lambda per op covers transposed, sliced,
// broadcast and zero-size tensors.
#include "ops.h"

namespace my_engine {

namespace {
// Inputs of another dtype than the output (int + float promotes in PyTorch) are
// declined: the host then routes the call to the next engine.
void require_same_dtype(const sdk::Call& call, const sdk::Tensor& out, const sdk::Tensor& in) {
  OPENREG_SDK_REQUIRE(sdk::same_dtype(out.dtype(), in.dtype()), call.op_name(), ": mixed dtypes (",
                      sdk::dtype_name(in.dtype()), " into ", sdk::dtype_name(out.dtype()), ")");
}

// A Python number as `other` arrives as a 0-dim tensor of its own dtype (a
// "wrapped number" that does not take part in type promotion): read it once.
bool is_scalar_operand(const sdk::Tensor& t) { return t.dim() == 0; }
}  // namespace

// Serves add_.Tensor as well: for the in-place op the host passes self as output 0.
void add(const sdk::Call& call) {
  sdk::Tensor a = call.tensor(0), b = call.tensor(1), out = call.output(0);
  require_same_dtype(call, out, a);
  if (!is_scalar_operand(b)) require_same_dtype(call, out, b);
  const double alpha = call.scalar_or(2, 1.0);
  sdk::dispatch<float, double>(out.dtype(), "add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (is_scalar_operand(b)) {
      const T k = static_cast<T>(alpha * b.item());
      sdk::unary_map<T>(call.host(), out, a, [k](T x) { return x + k; });
    } else {
      const T k = static_cast<T>(alpha);
      sdk::binary_map<T>(call.host(), out, a, b, [k](T x, T y) { return x + k * y; });
    }
  });
}

void mul(const sdk::Call& call) {
  sdk::Tensor a = call.tensor(0), b = call.tensor(1), out = call.output(0);
  require_same_dtype(call, out, a);
  if (!is_scalar_operand(b)) require_same_dtype(call, out, b);
  sdk::dispatch<float, double>(out.dtype(), "mul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (is_scalar_operand(b)) {
      const T k = static_cast<T>(b.item());
      sdk::unary_map<T>(call.host(), out, a, [k](T x) { return x * k; });
    } else {
      sdk::binary_map<T>(call.host(), out, a, b, [](T x, T y) { return x * y; });
    }
  });
}

void relu(const sdk::Call& call) {
  sdk::Tensor a = call.tensor(0), out = call.output(0);
  sdk::dispatch<float, double>(out.dtype(), "relu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // x > 0 ? x : 0 keeps NaN as NaN, like PyTorch.
    sdk::unary_map<T>(call.host(), out, a, [](T x) { return x > T(0) || x != x ? x : T(0); });
  });
}

}  // namespace my_engine
