// Indexing and joining: index_select (which embedding becomes), cat, where.self
// (and where.self_out).
// oneDNN has no primitive for them; they move elements without arithmetic, so
// one loop per element size serves every dtype (bits are copied as they are).
// Contiguous rows are copied with memcpy; any other layout takes the SDK's
// strided walk. Every check that can decline runs before the first write.
#include <openreg/sdk/tensor_ops.hpp>

#include <cstring>

#include "ops.h"

namespace onednn_engine {

namespace {

using sdk::ops::copy_strided;
using sdk::ops::dispatch_size;
using sdk::ops::wrap_dim;

// An operand over `t`'s own shape with dim `skip` left out (sizes and byte strides),
// starting at element `at` along that dim.
struct Slice {
  sdk::Shape shape;
  sdk::Operand op;
};
Slice slice_without(const sdk::Tensor& t, int64_t skip, int64_t at) {
  Slice s;
  const int64_t es = t.element_size();
  s.op.base = t.bytes() + (t.dim() ? at * t.stride(skip) * es : 0);
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (d == skip) continue;
    s.shape.push_back(t.size(d));
    s.op.byte_strides.push_back(t.stride(d) * es);
  }
  return s;
}

int64_t span_numel(const sdk::Tensor& t, int64_t begin, int64_t end) {
  int64_t n = 1;
  for (int64_t d = begin; d < end; ++d) n *= t.size(d);
  return n;
}

// The index's values as int64 (int32 widened), each checked to lie in [0, bound).
// Reads a 0-dim or 1-d index of any stride. False if one is out of range.
template <class I>
bool read_index(const sdk::Tensor& index, int64_t bound, int64_t* out) {
  const int64_t count = index.numel(), stride = index.dim() ? index.stride(0) : 1;
  const I* p = index.data<I>();
  for (int64_t k = 0; k < count; ++k) {
    const int64_t v = static_cast<int64_t>(p[k * stride]);
    if (v < 0 || v >= bound) return false;
    out[k] = v;
  }
  return true;
}

}  // namespace

// index_select(self, dim, index) -> out: int64 or int32 index of at most one dim.
// Negative or out-of-range indices are left to the reference (PyTorch raises).
void index_select(const sdk::Call& call) {
  const sdk::Tensor self = call.tensor(0), index = call.tensor(2), out = call.output(0);
  require_dtype(call, self.dtype(), {out});
  OPENREG_SDK_REQUIRE(index.dim() <= 1, call.op_name(), ": index of ", index.dim(), " dims");
  const bool i64 = sdk::same_dtype(index.dtype(), sdk::dtypes::int64);
  OPENREG_SDK_REQUIRE(i64 || sdk::same_dtype(index.dtype(), sdk::dtypes::int32), call.op_name(),
                      ": index of dtype ", sdk::dtype_name(index.dtype()));
  const int64_t nd = self.dim(), dim = wrap_dim(call, call.int_arg(1), nd);
  const int64_t count = index.numel(), bound = nd ? self.size(dim) : 1;
  OPENREG_SDK_CHECK(out.dim() == nd && (nd == 0 ? count == 1 : out.size(dim) == count), call.op_name(),
                    ": output ", out.describe(), " does not fit ", count, " indices of ", self.describe());
  for (int64_t d = 0; d < nd; ++d)
    OPENREG_SDK_CHECK(d == dim || out.size(d) == self.size(d), call.op_name(), ": output ", out.describe(),
                      " does not fit ", self.describe());
  Buffers buffers;
  int64_t* idx = static_cast<int64_t*>(buffers.alloc(static_cast<size_t>(std::max<int64_t>(count, 1)) * 8));
  const bool in_range = i64 ? read_index<int64_t>(index, bound, idx) : read_index<int32_t>(index, bound, idx);
  OPENREG_SDK_REQUIRE(in_range, call.op_name(), ": an index out of range (left to the reference, which raises the error)");
  if (out.numel() == 0) return;
  if (self.is_contiguous() && out.is_contiguous()) {
    // Rows of `inner` elements: out row (o, k) is self row (o, idx[k]).
    const int64_t outer = nd ? span_numel(self, 0, dim) : 1, inner = nd ? span_numel(self, dim + 1, nd) : 1;
    const size_t row = static_cast<size_t>(inner * self.element_size());
    const char* src = self.bytes();
    char* dst = out.bytes();
    host().parallel_for(0, outer * count, std::max<int64_t>(1, sdk::kParallelGrain / std::max<int64_t>(inner, 1)),
                        [&](int64_t b, int64_t e) {
                          for (int64_t r = b; r < e; ++r) {
                            const int64_t o = r / count, k = r - o * count;
                            std::memcpy(dst + r * row, src + (o * bound + idx[k]) * row, row);
                          }
                        });
    return;
  }
  // Any strides: one strided copy of the slice at idx[k] per index.
  dispatch_size(call, self.element_size(), [&](auto zero) {
    using U = decltype(zero);
    for (int64_t k = 0; k < count; ++k) {
      const Slice to = slice_without(out, dim, k), from = slice_without(self, dim, idx[k]);
      copy_strided<U>(host(), to.shape, to.op, from.op);
    }
  });
}

// cat: the SDK's strided kernel (shared with the eigen engine).
void cat(const sdk::Call& call) { sdk::ops::cat(call); }

// where.self(condition, self, other) -> out: bool condition; self and other of
// out's dtype, or 0-dim of another (a Python number: read as a value of out's
// dtype); all broadcast to out.
void where(const sdk::Call& call) {
  const sdk::Tensor cond = call.tensor(0), a = call.tensor(1), b = call.tensor(2), out = call.output(0);
  OPENREG_SDK_REQUIRE(sdk::same_dtype(cond.dtype(), sdk::dtypes::bool_), call.op_name(), ": condition of dtype ",
                      sdk::dtype_name(cond.dtype()));
  const sdk::Shape shape = sdk::shape_of(out);
  // A 0-dim operand of another dtype: its value converted into `storage`, seen
  // with stride 0 everywhere.
  alignas(8) unsigned char scalar_a[8], scalar_b[8];
  auto value_operand = [&](const sdk::Tensor& t, unsigned char* storage, const char* what) {
    if (sdk::same_dtype(t.dtype(), out.dtype())) return sdk::operand(t, shape);
    OPENREG_SDK_REQUIRE(t.dim() == 0, call.op_name(), ": ", what, " has dtype ", sdk::dtype_name(t.dtype()),
                        ", the output ", sdk::dtype_name(out.dtype()), " (mixed dtypes are left to the next engine)");
    const double v = t.item();
    sdk::dispatch<float, double, sdk::bfloat16, sdk::float16, int64_t, int32_t, bool>(
        out.dtype(), "where", [&](auto tag) {
          using T = typename decltype(tag)::type;
          const T x = static_cast<T>(v);
          std::memcpy(storage, &x, sizeof(T));
        });
    sdk::Operand op;
    op.base = reinterpret_cast<char*>(storage);
    op.byte_strides.assign(shape.size(), 0);
    return op;
  };
  const sdk::Operand x = value_operand(a, scalar_a, "self"), y = value_operand(b, scalar_b, "other");
  const sdk::Operand c = sdk::operand(cond, shape), o = sdk::operand(out, shape);
  dispatch_size(call, out.element_size(), [&](auto zero) {
    sdk::select_rows<decltype(zero)>(host(), shape, std::array<sdk::Operand, 4>{o, c, x, y});
  });
}

}  // namespace onednn_engine
