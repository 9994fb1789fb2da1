// Indexing and joining: index_select (which embedding becomes), cat, where.self.
// They move elements without arithmetic, so one kernel per element size serves
// every dtype (bits are copied as they are). Threads only past sdk::kParallelGrain
// elements, as ATen's.
#include <openreg/sdk/tensor_ops.hpp>

#include <algorithm>
#include <cstring>

#include "eigen_engine.h"

namespace eigen_engine {

using sdk::ops::wrap_dim;

namespace {

// The unsigned integer of an element size: what a select copies.
template <class Fn>
void dispatch_size(int64_t element_size, const char* what, Fn&& fn) {
  switch (element_size) {
    case 1: fn(uint8_t{}); break;
    case 2: fn(uint16_t{}); break;
    case 4: fn(uint32_t{}); break;
    case 8: fn(uint64_t{}); break;
    default: sdk::unsupported(sdk::str(what, ": element size ", element_size));
  }
}

// Product of sizes[begin, end).
int64_t span_numel(const Tensor& t, int64_t begin, int64_t end) {
  int64_t n = 1;
  for (int64_t d = begin; d < end; ++d) n *= t.size(d);
  return n;
}

template <class I>
bool indices_in_range(const I* idx, int64_t count, int64_t bound) {
  for (int64_t k = 0; k < count; ++k)
    if (idx[k] < 0 || idx[k] >= bound) return false;
  return true;
}

}  // namespace

// index_select(self, dim, index): contiguous self and out, int64 or int32 index.
// Indices out of range (PyTorch raises IndexError) and negative ones are left to
// the reference, checked before anything is written.
void index_select(const Call& call) {
  Tensor self = call.tensor(0), index = call.tensor(2), out = call.output(0);
  require_dtype(call, self, out, "out");
  OPENREG_SDK_REQUIRE(index.dim() <= 1, call.op_name(), ": index of ", index.dim(), " dims");
  OPENREG_SDK_REQUIRE(self.is_contiguous() && out.is_contiguous() && index.is_contiguous(), call.op_name(),
                      ": strided tensors");
  const bool i64 = sdk::same_dtype(index.dtype(), sdk::dtypes::int64);
  OPENREG_SDK_REQUIRE(i64 || sdk::same_dtype(index.dtype(), sdk::dtypes::int32), call.op_name(), ": index of dtype ",
                      sdk::dtype_name(index.dtype()));
  const int64_t nd = self.dim(), dim = wrap_dim(call, call.int_arg(1), nd);
  const int64_t count = index.numel();
  const int64_t outer = nd ? span_numel(self, 0, dim) : 1, bound = nd ? self.size(dim) : 1;
  const int64_t inner = nd ? span_numel(self, dim + 1, nd) : 1;
  OPENREG_SDK_CHECK(out.numel() == outer * count * inner, call.op_name(), ": output ", out.describe(),
                    " does not hold ", outer, " x ", count, " x ", inner, " elements");
  const bool ok = i64 ? indices_in_range(index.data<int64_t>(), count, bound)
                      : indices_in_range(index.data<int32_t>(), count, bound);
  OPENREG_SDK_REQUIRE(ok, call.op_name(), ": an index out of range (left to the reference, which raises the error)");
  if (out.numel() == 0) return;
  const size_t row = static_cast<size_t>(inner * self.element_size());
  const char* src = self.bytes();
  char* dst = out.bytes();
  auto copy_rows = [&](const auto* idx) {
    call.host().parallel_for(0, outer * count, std::max<int64_t>(1, sdk::kParallelGrain / std::max<int64_t>(inner, 1)),
                             [&](int64_t b, int64_t e) {
                               for (int64_t r = b; r < e; ++r) {
                                 const int64_t o = r / count, k = r % count;
                                 std::memcpy(dst + r * row, src + (o * bound + idx[k]) * row, row);
                               }
                             });
  };
  if (i64) copy_rows(index.data<int64_t>());
  else copy_rows(index.data<int32_t>());
}

// cat(tensors, dim): tensors of out's dtype; contiguous ones here, strided ones
// by the SDK's kernel. 1-d empty tensors are skipped, as ATen does (the legacy
// "empty" placeholder).
void cat(const Call& call) {
  std::vector<Tensor> ts = call.tensor_list(0);
  Tensor out = call.output(0);
  // Strided tensors (slices of a fused projection, transposes): the SDK's strided kernel.
  bool dense = out.is_contiguous();
  for (const Tensor& t : ts) dense = dense && (!t.defined() || t.is_contiguous());
  if (!dense) return sdk::ops::cat(call);
  const int64_t nd = out.dim();
  OPENREG_SDK_REQUIRE(nd > 0, call.op_name(), ": 0-dim output");
  const int64_t dim = wrap_dim(call, call.int_arg(1), nd);
  std::vector<Tensor> parts;
  parts.reserve(ts.size());
  int64_t along = 0;
  for (const Tensor& t : ts) {
    OPENREG_SDK_REQUIRE(t.defined(), call.op_name(), ": an undefined tensor in the list");
    if (t.dim() == 1 && t.size(0) == 0) continue;
    require_dtype(call, out, t, "a tensor of the list");
    OPENREG_SDK_CHECK(t.dim() == nd, call.op_name(), ": tensors of ", t.dim(), " and ", nd, " dims");
    for (int64_t d = 0; d < nd; ++d)
      OPENREG_SDK_CHECK(d == dim || t.size(d) == out.size(d), call.op_name(), ": size ", t.size(d), " at dim ", d,
                        ", expected ", out.size(d));
    along += t.size(dim);
    parts.push_back(t);
  }
  OPENREG_SDK_CHECK(along == out.size(dim), call.op_name(), ": the tensors make ", along, " along dim ", dim,
                    ", the output has ", out.size(dim));
  if (out.numel() == 0) return;
  const int64_t outer = span_numel(out, 0, dim), inner = span_numel(out, dim + 1, nd) * out.element_size();
  const int64_t out_row = out.size(dim) * inner;
  char* dst = out.bytes();
  // One (outer index, part) pair per task: a memcpy of that part's slab.
  const int64_t tasks = outer * static_cast<int64_t>(parts.size());
  const int64_t per_task = out.numel() / std::max<int64_t>(tasks, 1);
  std::vector<int64_t> offset(parts.size());
  for (size_t p = 0, at = 0; p < parts.size(); ++p) {
    offset[p] = static_cast<int64_t>(at);
    at += static_cast<size_t>(parts[p].size(dim) * inner);
  }
  call.host().parallel_for(0, tasks, std::max<int64_t>(1, sdk::kParallelGrain / std::max<int64_t>(per_task, 1)),
                           [&](int64_t b, int64_t e) {
                             for (int64_t task = b; task < e; ++task) {
                               const int64_t o = task / static_cast<int64_t>(parts.size());
                               const size_t p = static_cast<size_t>(task % static_cast<int64_t>(parts.size()));
                               const int64_t slab = parts[p].size(dim) * inner;
                               std::memcpy(dst + o * out_row + offset[p], parts[p].bytes() + o * slab,
                                           static_cast<size_t>(slab));
                             }
                           });
}

// where.self(condition, self, other): bool condition, self and other of out's dtype
// (a 0-dim operand of another dtype, such as a Python number, is read as a scalar
// of out's dtype), all broadcast to out.
void where(const Call& call) {
  Tensor cond = call.tensor(0), a = call.tensor(1), b = call.tensor(2), out = call.output(0);
  OPENREG_SDK_REQUIRE(sdk::same_dtype(cond.dtype(), sdk::dtypes::bool_), call.op_name(), ": condition of dtype ",
                      sdk::dtype_name(cond.dtype()));
  // A 0-dim operand of another dtype becomes a one-element local tensor of out's dtype.
  alignas(8) unsigned char scalar_a[8], scalar_b[8];
  std::optional<LocalTensor> la, lb;
  auto as_out_dtype = [&](const Tensor& t, unsigned char* storage, std::optional<LocalTensor>& local,
                          const char* what) -> Tensor {
    if (same_dtype(t, out)) return t;
    OPENREG_SDK_REQUIRE(t.dim() == 0, call.op_name(), ": ", what, " has dtype ", sdk::dtype_name(t.dtype()),
                        ", expected ", sdk::dtype_name(out.dtype()), " (mixed dtypes are left to the next engine)");
    const double v = t.item();
    sdk::dispatch<float, double, sdk::bfloat16, sdk::float16, int64_t, int32_t, bool>(
        out.dtype(), "where", [&](auto tag) {
          using T = typename decltype(tag)::type;
          const T x = static_cast<T>(v);
          std::memcpy(storage, &x, sizeof(T));
        });
    local.emplace(storage, out.dtype(), std::initializer_list<int64_t>{});
    return local->view();
  };
  const Tensor x = as_out_dtype(a, scalar_a, la, "self");
  const Tensor y = as_out_dtype(b, scalar_b, lb, "other");
  sdk::Shape shape = sdk::shape_of(out);
  std::array<sdk::Operand, 4> ops{sdk::operand(out, shape), sdk::operand(cond, shape), sdk::operand(x, shape),
                                  sdk::operand(y, shape)};
  dispatch_size(out.element_size(), "where", [&](auto zero) {
    sdk::select_rows<decltype(zero)>(call.host(), shape, ops);
  });
}

}  // namespace eigen_engine
