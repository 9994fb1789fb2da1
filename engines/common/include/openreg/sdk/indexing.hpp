// openreg engine SDK: gather and advanced indexing (x[idx0, :, idx2]), the same
// code in every engine. Like the kernels of tensor_ops.hpp they copy elements
// without looking at them, for any dtype and any strides; register them directly:
// e.op("aten::gather", dtypes, sdk::ops::gather). Indices are read and checked
// before the first write; an index out of range is declined, so the reference
// raises PyTorch's own error.
#pragma once

#include <openreg/sdk/call.hpp>
#include <openreg/sdk/strided.hpp>
#include <openreg/sdk/tensor_ops.hpp>

#include <array>
#include <vector>

namespace openreg {
namespace sdk {
namespace ops {

// gather(self, dim, index, *, sparse_grad=False) and gather.out: out (index's
// shape) takes self's element at the index's position with dim replaced by the
// index's value. int64 indices in [0, self.size(dim)); index sizes up to self's
// in the other dims, as ATen requires.
inline void gather(const Call& call) {
  const Tensor self = call.tensor(0), index = call.tensor(2), out = call.output(0);
  OPENREG_SDK_REQUIRE(same_dtype(out.dtype(), self.dtype()), call.op_name(), ": output of dtype ",
                      dtype_name(out.dtype()), ", self ", dtype_name(self.dtype()));
  OPENREG_SDK_REQUIRE(same_dtype(index.dtype(), dtypes::int64), call.op_name(), ": index of dtype ",
                      dtype_name(index.dtype()), " (ATen takes int64 only; left to the reference)");
  const int64_t nd = self.dim();
  OPENREG_SDK_REQUIRE(nd > 0 && index.dim() == nd, call.op_name(), ": self of ", nd, " dims, index of ", index.dim(),
                      " (left to the reference)");
  const int64_t dim = wrap_dim(call, call.int_arg(1), nd);
  for (int64_t d = 0; d < nd; ++d)
    OPENREG_SDK_REQUIRE(d == dim || index.size(d) <= self.size(d), call.op_name(), ": index size ", index.size(d),
                        " above self's ", self.size(d), " at dim ", d, " (left to the reference, which raises)");
  OPENREG_SDK_CHECK(detail::same_shape(out, index), call.op_name(), ": output ", out.describe(),
                    " is not the index's shape ", index.describe());
  if (index.numel() == 0) return;
  const Shape shape = shape_of(index);
  const int64_t bound = self.size(dim);
  bool in_range = true;
  for_each_row(call.host(), shape, std::array<Operand, 1>{operand(index, shape)},
               [&](const std::array<char*, 1>& p, const std::array<int64_t, 1>& s, int64_t n) {
                 bool ok = true;
                 for (int64_t i = 0; i < n; ++i) {
                   const int64_t v = *reinterpret_cast<const int64_t*>(p[0] + i * s[0]);
                   ok &= v >= 0 && v < bound;
                 }
                 if (!ok) in_range = false;  // only ever set to false: a benign race
               });
  OPENREG_SDK_REQUIRE(in_range, call.op_name(), ": an index out of range for size ", bound, " at dim ", dim,
                      " (left to the reference, which raises the error)");
  const int64_t es = self.element_size();
  // self walked over the index's shape, dim held at 0: the index's value moves along it.
  Operand from;
  from.base = self.bytes();
  for (int64_t d = 0; d < nd; ++d) from.byte_strides.push_back(d == dim ? 0 : self.stride(d) * es);
  const int64_t step = self.stride(dim) * es;
  dispatch_size(call, es, [&](auto zero) {
    using U = decltype(zero);
    for_each_row(call.host(), shape, std::array<Operand, 3>{operand(out, shape), operand(index, shape), from},
                 [step](const std::array<char*, 3>& p, const std::array<int64_t, 3>& s, int64_t n) {
                   for (int64_t i = 0; i < n; ++i) {
                     const int64_t v = *reinterpret_cast<const int64_t*>(p[1] + i * s[1]);
                     *reinterpret_cast<U*>(p[0] + i * s[0]) =
                         *reinterpret_cast<const U*>(p[2] + i * s[2] + v * step);
                   }
                 });
  });
}

// index.Tensor(self, indices) and index.Tensor_out: advanced indexing by int64 or
// int32 index tensors (negative values count from the end), None for a whole
// dim. The index tensors broadcast to one shape B; when they sit at adjacent
// dims, out is self's dims before them, B, then self's dims after them;
// otherwise B comes first, then every dim not indexed, in order (NumPy's rule).
// bool and uint8 masks are left to the next engine (their output size depends on
// the values).
inline void index(const Call& call) {
  const Tensor self = call.tensor(0), out = call.output(0);
  const std::vector<Tensor> indices = call.tensor_list(1);
  OPENREG_SDK_REQUIRE(same_dtype(out.dtype(), self.dtype()), call.op_name(), ": output of dtype ",
                      dtype_name(out.dtype()), ", self ", dtype_name(self.dtype()));
  const int64_t nd = self.dim();
  OPENREG_SDK_REQUIRE(static_cast<int64_t>(indices.size()) <= nd, call.op_name(), ": ", indices.size(),
                      " indices for ", nd, " dims (left to the reference, which raises the error)");
  // The indexed dims, and the broadcast shape B of their index tensors.
  std::vector<int64_t> indexed;
  Shape b_shape;
  for (size_t k = 0; k < indices.size(); ++k) {
    const Tensor& t = indices[k];
    if (!t.defined()) continue;
    OPENREG_SDK_REQUIRE(same_dtype(t.dtype(), dtypes::int64) || same_dtype(t.dtype(), dtypes::int32),
                        call.op_name(), ": an index of dtype ", dtype_name(t.dtype()),
                        " (bool and uint8 masks are left to the next engine)");
    if (indexed.empty()) b_shape = shape_of(t);
    else b_shape = broadcast_shapes(Span<int64_t>{b_shape.data(), static_cast<int64_t>(b_shape.size())}, t.sizes());
    indexed.push_back(static_cast<int64_t>(k));
  }
  OPENREG_SDK_REQUIRE(!indexed.empty(), call.op_name(), ": no index tensor (left to the reference)");
  const bool adjacent = indexed.back() - indexed.front() + 1 == static_cast<int64_t>(indexed.size());
  const int64_t nb = static_cast<int64_t>(b_shape.size());
  // out's dims: `lead` of self's dims before the indexed ones (adjacent only), then
  // B, then the other dims not indexed; self_dim[d] is self's dim for out's dim d
  // outside B.
  const int64_t lead = adjacent ? indexed.front() : 0;
  std::vector<int64_t> self_dim;
  for (int64_t d = 0; d < lead; ++d) self_dim.push_back(d);
  for (int64_t d = lead; d < nd; ++d)
    if (d >= static_cast<int64_t>(indices.size()) || !indices[static_cast<size_t>(d)].defined()) self_dim.push_back(d);
  Shape want;
  for (int64_t d = 0; d < lead; ++d) want.push_back(self.size(d));
  for (int64_t v : b_shape) want.push_back(v);
  for (size_t j = static_cast<size_t>(lead); j < self_dim.size(); ++j) want.push_back(self.size(self_dim[j]));
  OPENREG_SDK_CHECK(shape_of(out) == want, call.op_name(), ": output ", out.describe(), " does not fit indexing ",
                    self.describe());
  // Byte offset into self of each position of B: the indexed dims' share.
  const int64_t es = self.element_size(), b_numel = numel_of(b_shape);
  std::vector<int64_t> offset(static_cast<size_t>(b_numel), 0);
  Operand offsets;
  offsets.base = reinterpret_cast<char*>(offset.data());
  offsets.byte_strides.assign(static_cast<size_t>(nb), 0);
  for (int64_t d = nb - 1, stride = 8; d >= 0; stride *= b_shape[static_cast<size_t>(d)], --d)
    offsets.byte_strides[static_cast<size_t>(d)] = stride;
  for (int64_t k : indexed) {
    const Tensor& t = indices[static_cast<size_t>(k)];
    const int64_t size = self.size(k), step = self.stride(k) * es;
    bool in_range = true;
    auto add = [&](auto tag) {
      using I = decltype(tag);
      for_each_row(call.host(), b_shape, std::array<Operand, 2>{offsets, operand(t, b_shape)},
                   [&](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
                     bool ok = true;
                     for (int64_t i = 0; i < n; ++i) {
                       int64_t v = static_cast<int64_t>(*reinterpret_cast<const I*>(p[1] + i * s[1]));
                       v += v < 0 ? size : 0;
                       ok &= v >= 0 && v < size;
                       *reinterpret_cast<int64_t*>(p[0] + i * s[0]) += v * step;
                     }
                     if (!ok) in_range = false;  // only ever set to false: a benign race
                   });
    };
    if (same_dtype(t.dtype(), dtypes::int64)) add(int64_t{});
    else add(int32_t{});
    OPENREG_SDK_REQUIRE(in_range, call.op_name(), ": an index out of range for size ", size, " at dim ", k,
                        " (left to the reference, which raises the error)");
  }
  if (out.numel() == 0) return;
  // Over out's shape: self by the dims not indexed (0 across B), the offsets
  // across B (0 elsewhere).
  const Shape shape = shape_of(out);
  Operand from, across;
  from.base = self.bytes();
  across.base = offsets.base;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    const bool in_b = d >= lead && d < lead + nb;
    const int64_t sd = in_b ? -1 : self_dim[static_cast<size_t>(d < lead ? d : d - nb)];
    from.byte_strides.push_back(in_b ? 0 : self.stride(sd) * es);
    across.byte_strides.push_back(in_b ? offsets.byte_strides[static_cast<size_t>(d - lead)] : 0);
  }
  dispatch_size(call, es, [&](auto zero) {
    using U = decltype(zero);
    for_each_row(call.host(), shape, std::array<Operand, 3>{operand(out, shape), from, across},
                 [](const std::array<char*, 3>& p, const std::array<int64_t, 3>& s, int64_t n) {
                   for (int64_t i = 0; i < n; ++i)
                     *reinterpret_cast<U*>(p[0] + i * s[0]) = *reinterpret_cast<const U*>(
                         p[1] + i * s[1] + *reinterpret_cast<const int64_t*>(p[2] + i * s[2]));
                 });
  });
}

}  // namespace ops
}  // namespace sdk
}  // namespace openreg
