// openreg engine SDK: broadcasting and strided iteration.
//
// Tensors arrive with arbitrary strides (transposed, sliced, broadcast with stride
// 0, zero-size). for_each_row walks K operands that share one shape, merging
// dimensions that are contiguous in every operand, and calls a row function with
// the base pointers and inner byte strides of each 1-D row, so the innermost loop
// is a plain pointer walk the compiler can vectorise when the strides are the
// element sizes.
#pragma once

#include <openreg/sdk/call.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <type_traits>
#include <vector>

namespace openreg {
namespace sdk {

// Sizes or strides, one per dimension: a vector of int64_t that keeps up to 8 items
// in place, so the strided walks below allocate nothing for ordinary tensors. It
// has the std::vector operations shapes need (and converts to std::vector).
class Shape {
 public:
  Shape() = default;
  explicit Shape(size_t n, int64_t value = 0) { assign(n, value); }
  Shape(std::initializer_list<int64_t> items) { assign(items.begin(), items.end()); }
  template <class It, class = std::enable_if_t<!std::is_integral_v<It>>>
  Shape(It first, It last) {
    assign(first, last);
  }
  Shape(const std::vector<int64_t>& v) { assign(v.begin(), v.end()); }  // NOLINT: implicit, like a vector
  Shape(const Shape& o) { assign(o.begin(), o.end()); }
  Shape& operator=(const Shape& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  ~Shape() = default;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t* data() { return heap_ ? heap_.get() : inline_; }
  const int64_t* data() const { return heap_ ? heap_.get() : inline_; }
  int64_t* begin() { return data(); }
  int64_t* end() { return data() + size_; }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + size_; }
  int64_t& operator[](size_t i) { return data()[i]; }
  const int64_t& operator[](size_t i) const { return data()[i]; }
  int64_t& back() { return data()[size_ - 1]; }
  const int64_t& back() const { return data()[size_ - 1]; }
  operator std::vector<int64_t>() const { return std::vector<int64_t>(begin(), end()); }  // NOLINT
  bool operator==(const Shape& o) const { return size_ == o.size_ && std::equal(begin(), end(), o.begin()); }
  bool operator!=(const Shape& o) const { return !(*this == o); }

  void clear() { size_ = 0; }
  void reserve(size_t n) {
    if (n <= capacity()) return;
    std::unique_ptr<int64_t[]> grown(new int64_t[n]);
    std::copy(begin(), end(), grown.get());
    heap_ = std::move(grown);
    heap_capacity_ = n;
  }
  void resize(size_t n, int64_t value = 0) {
    reserve(n);
    for (size_t i = size_; i < n; ++i) data()[i] = value;
    size_ = n;
  }
  void assign(size_t n, int64_t value) {
    clear();
    resize(n, value);
  }
  template <class It, class = std::enable_if_t<!std::is_integral_v<It>>>
  void assign(It first, It last) {
    clear();
    reserve(static_cast<size_t>(std::distance(first, last)));
    for (; first != last; ++first) data()[size_++] = static_cast<int64_t>(*first);
  }
  void push_back(int64_t v) {
    if (size_ == capacity()) reserve(2 * capacity());
    data()[size_++] = v;
  }
  void pop_back() { --size_; }

 private:
  static constexpr size_t kInline = 8;
  size_t capacity() const { return heap_ ? heap_capacity_ : kInline; }
  int64_t inline_[kInline] = {};
  std::unique_ptr<int64_t[]> heap_;
  size_t heap_capacity_ = 0;
  size_t size_ = 0;
};

// NumPy/PyTorch broadcasting of two shapes; INVALID_ARGUMENT when incompatible.
inline Shape broadcast_shapes(Span<int64_t> a, Span<int64_t> b) {
  int64_t n = std::max(a.size(), b.size());
  Shape out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    OPENREG_SDK_CHECK(da == db || da == 1 || db == 1, "shapes cannot be broadcast: size ", da, " vs ", db,
                      " at dimension ", i);
    out[static_cast<size_t>(i)] = da == 1 ? db : da;
  }
  return out;
}

// One operand of an iteration: element 0's address and a byte stride per dimension
// of the iteration shape.
struct Operand {
  char* base = nullptr;
  Shape byte_strides;
};

// `t` seen with `shape` (right-aligned): broadcast dimensions get stride 0.
inline Operand operand(const Tensor& t, const Shape& shape) {
  Operand op;
  op.base = t.bytes();
  const int64_t n = static_cast<int64_t>(shape.size()), lead = n - t.dim();
  OPENREG_SDK_CHECK(lead >= 0, "a ", t.dim(), "-d tensor cannot be broadcast to ", n, " dimensions");
  op.byte_strides.assign(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < t.dim(); ++i) {
    int64_t s = t.size(i), want = shape[static_cast<size_t>(lead + i)];
    OPENREG_SDK_CHECK(s == want || s == 1, "size ", s, " cannot be broadcast to ", want, " at dimension ", lead + i);
    op.byte_strides[static_cast<size_t>(lead + i)] = s == 1 ? 0 : t.stride(i) * t.element_size();
  }
  return op;
}

inline Shape shape_of(const Tensor& t) { return Shape(t.sizes().begin(), t.sizes().end()); }
inline int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

namespace detail {
// Drops size-1 dimensions and merges neighbours that are contiguous in every
// operand. Keeps at least one dimension.
template <size_t K>
void coalesce(Shape& shape, std::array<Operand, K>& ops) {
  Shape s;
  std::array<Shape, K> st;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !s.empty();
    for (size_t k = 0; merge && k < K; ++k) merge = st[k].back() == ops[k].byte_strides[d] * shape[d];
    if (merge) {
      s.back() *= shape[d];
      for (size_t k = 0; k < K; ++k) st[k].back() = ops[k].byte_strides[d];
    } else {
      s.push_back(shape[d]);
      for (size_t k = 0; k < K; ++k) st[k].push_back(ops[k].byte_strides[d]);
    }
  }
  if (s.empty()) {
    s.push_back(1);
    for (size_t k = 0; k < K; ++k) st[k].push_back(0);
  }
  shape = s;
  for (size_t k = 0; k < K; ++k) ops[k].byte_strides = st[k];
}

template <size_t K, class RowFn>
void rows(const Shape& shape, const std::array<Operand, K>& ops, int64_t row_begin, int64_t row_end, RowFn& fn) {
  const size_t nd = shape.size();
  const int64_t inner = shape[nd - 1];
  std::array<int64_t, K> inner_stride;
  for (size_t k = 0; k < K; ++k) inner_stride[k] = ops[k].byte_strides[nd - 1];
  // Multi-index of the first row, then odometer increments.
  Shape index(nd > 1 ? nd - 1 : 0, 0);
  int64_t r = row_begin;
  for (size_t d = index.size(); d-- > 0;) {
    index[d] = r % shape[d];
    r /= shape[d];
  }
  std::array<char*, K> ptr;
  for (size_t k = 0; k < K; ++k) {
    ptr[k] = ops[k].base;
    for (size_t d = 0; d < index.size(); ++d) ptr[k] += index[d] * ops[k].byte_strides[d];
  }
  if (index.empty()) {  // one dimension: one row
    if (row_begin < row_end) fn(ptr, inner_stride, inner);
    return;
  }
  // The rows along the last outer dimension in a plain loop (its strides in locals), the
  // odometer only between runs of them: rows of a few elements (a strided [8, 4, 64, 16]
  // half of a rotary embedding's heads) spent as long in the odometer as in the row.
  const size_t last = index.size() - 1;
  const int64_t run_len = shape[last];
  std::array<int64_t, K> run_stride;
  for (size_t k = 0; k < K; ++k) run_stride[k] = ops[k].byte_strides[last];
  int64_t row = row_begin;
  while (row < row_end) {
    const int64_t n = std::min(run_len - index[last], row_end - row);
    for (int64_t j = 0; j < n; ++j) {
      fn(ptr, inner_stride, inner);
      for (size_t k = 0; k < K; ++k) ptr[k] += run_stride[k];
    }
    row += n;
    if (row >= row_end) break;
    // Back to the run's start, then the outer dimensions' odometer step.
    for (size_t k = 0; k < K; ++k) ptr[k] -= run_len * run_stride[k];
    index[last] = 0;
    for (size_t d = last; d-- > 0;) {
      for (size_t k = 0; k < K; ++k) ptr[k] += ops[k].byte_strides[d];
      if (++index[d] < shape[d]) break;
      for (size_t k = 0; k < K; ++k) ptr[k] -= shape[d] * ops[k].byte_strides[d];
      index[d] = 0;
    }
  }
}
}  // namespace detail

// Minimum number of elements worth a parallel loop (ATen uses the same grain).
constexpr int64_t kParallelGrain = 32768;

// Calls fn(std::array<char*, K> ptrs, std::array<int64_t, K> byte_strides, int64_t n)
// once per 1-D row of `shape`; rows are spread over the host's threads when the
// tensor is large (fn must then be safe to call concurrently on disjoint rows).
template <size_t K, class RowFn>
void for_each_row(const Host& host, Shape shape, std::array<Operand, K> ops, RowFn&& fn) {
  const int64_t total = numel_of(shape);
  if (total == 0) return;
  detail::coalesce(shape, ops);
  const int64_t inner = shape.back();
  const int64_t nrows = total / inner;
  if (total < kParallelGrain || nrows == 1) {
    // One row per chunk would not help a single long row: split it instead.
    if (nrows == 1 && total >= kParallelGrain) {
      host.parallel_for(0, inner, kParallelGrain, [&](int64_t b, int64_t e) {
        std::array<char*, K> p;
        std::array<int64_t, K> st;
        for (size_t k = 0; k < K; ++k) {
          st[k] = ops[k].byte_strides.back();
          p[k] = ops[k].base + b * st[k];
        }
        fn(p, st, e - b);
      });
      return;
    }
    detail::rows(shape, ops, 0, nrows, fn);
    return;
  }
  const int64_t grain_rows = std::max<int64_t>(1, kParallelGrain / inner);
  host.parallel_for(0, nrows, grain_rows, [&](int64_t b, int64_t e) { detail::rows(shape, ops, b, e, fn); });
}

// out[i] = f(a[i]) over out's shape (a broadcast to it), converting through the
// element types: unary_map<float>(host, out, a, [](float x) { return x > 0 ? x : 0; }).
template <class T, class F>
void unary_map(const Host& host, const Tensor& out, const Tensor& a, F f) {
  Shape shape = shape_of(out);
  std::array<Operand, 2> ops{operand(out, shape), operand(a, shape)};
  for_each_row(host, shape, ops, [&](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
    char* o = p[0];
    const char* x = p[1];
    for (int64_t i = 0; i < n; ++i, o += s[0], x += s[1])
      *reinterpret_cast<T*>(o) = static_cast<T>(f(*reinterpret_cast<const T*>(x)));
  });
}

// out[i] = f(a[i], b[i]) with a and b broadcast to out's shape.
template <class T, class F>
void binary_map(const Host& host, const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  Shape shape = shape_of(out);
  std::array<Operand, 3> ops{operand(out, shape), operand(a, shape), operand(b, shape)};
  for_each_row(host, shape, ops, [&](const std::array<char*, 3>& p, const std::array<int64_t, 3>& s, int64_t n) {
    char* o = p[0];
    const char* x = p[1];
    const char* y = p[2];
    for (int64_t i = 0; i < n; ++i, o += s[0], x += s[1], y += s[2])
      *reinterpret_cast<T*>(o) = static_cast<T>(f(*reinterpret_cast<const T*>(x), *reinterpret_cast<const T*>(y)));
  });
}

// out[i] = cond[i] ? a[i] : b[i] (torch.where's loop) over operands that share
// `shape` ({out, cond, a, b}, cond of bool), for elements stored as U: pick U by
// element size (uint32_t for float32 and int32 alike), the bytes are copied as they are.
template <class U>
void select_rows(const Host& host, const Shape& shape, const std::array<Operand, 4>& ops) {
  constexpr int64_t es = sizeof(U);
  for_each_row(host, shape, ops, [](const std::array<char*, 4>& p, const std::array<int64_t, 4>& s, int64_t n) {
    if (s[0] == es && s[1] == 1 && s[2] == es && s[3] == es) {  // dense rows: vectorisable
      U* o = reinterpret_cast<U*>(p[0]);
      const bool* c = reinterpret_cast<const bool*>(p[1]);
      const U* x = reinterpret_cast<const U*>(p[2]);
      const U* y = reinterpret_cast<const U*>(p[3]);
      for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? x[i] : y[i];
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<U*>(p[0] + i * s[0]) = *reinterpret_cast<const bool*>(p[1] + i * s[1])
                                                   ? *reinterpret_cast<const U*>(p[2] + i * s[2])
                                                   : *reinterpret_cast<const U*>(p[3] + i * s[3]);
  });
}

}  // namespace sdk
}  // namespace openreg
