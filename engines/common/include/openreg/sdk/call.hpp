// openreg engine SDK: typed, checked access to one call's arguments and outputs,
// and a C++ face for the host services (parallel_for with lambdas, scratch).
#pragma once

#include <openreg/engine.h>
#include <openreg/sdk/dtype.hpp>
#include <openreg/sdk/status.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace openreg {
namespace sdk {

// A light read-only span (C++17 has no std::span).
template <class T>
struct Span {
  const T* ptr = nullptr;
  int64_t count = 0;
  const T* begin() const { return ptr; }
  const T* end() const { return ptr + count; }
  int64_t size() const { return count; }
  bool empty() const { return count == 0; }
  const T& operator[](int64_t i) const { return ptr[i]; }
  std::vector<T> vec() const { return std::vector<T>(begin(), end()); }
};

// A borrowed openreg_tensor: valid for the call only.
class Tensor {
 public:
  explicit Tensor(const openreg_tensor* t) : t_(t) {}
  const openreg_tensor* raw() const { return t_; }
  bool defined() const { return t_ && t_->ndim >= 0; }  // ndim == -1: an absent output
  int64_t dim() const { return t_->ndim; }
  Span<int64_t> sizes() const { return {t_->sizes, t_->ndim}; }
  Span<int64_t> strides() const { return {t_->strides, t_->ndim}; }
  int64_t size(int64_t d) const { return t_->sizes[wrap(d)]; }
  int64_t stride(int64_t d) const { return t_->strides[wrap(d)]; }
  openreg_dtype dtype() const { return t_->dtype; }
  int64_t element_size() const { return t_->dtype.bits / 8; }
  int32_t device_index() const { return t_->device_index; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t i = 0; i < t_->ndim; ++i) n *= t_->sizes[i];
    return n;
  }
  // Row-major dense (sizes-1 dims and empty tensors count as contiguous, as in ATen).
  bool is_contiguous() const {
    int64_t expected = 1;
    for (int64_t i = t_->ndim - 1; i >= 0; --i) {
      if (t_->sizes[i] == 0) return true;
      if (t_->sizes[i] != 1 && t_->strides[i] != expected) return false;
      expected *= t_->sizes[i];
    }
    return true;
  }
  // Address of element 0, as bytes or as T (checked against the dtype).
  char* bytes() const { return static_cast<char*>(t_->data) + t_->byte_offset; }
  template <class T>
  T* data() const {
    OPENREG_SDK_CHECK(same_dtype(t_->dtype, dtype_of<T>()), "tensor has dtype ", dtype_name(t_->dtype),
                      ", the kernel reads it as ", dtype_name(dtype_of<T>()));
    return reinterpret_cast<T*>(bytes());
  }
  // The value of a one-element tensor, as double, whatever its dtype. Python numbers
  // reach engines as 0-dim CPU tensors of dtype float64/int64 (PyTorch's "wrapped
  // numbers", which do not take part in type promotion): read them with this.
  double item() const {
    OPENREG_SDK_CHECK(numel() == 1, "item(): tensor has ", numel(), " elements, not 1");
    return dispatch_all(t_->dtype, "item", [&](auto tag) {
      using T = typename decltype(tag)::type;
      return to_double(*reinterpret_cast<const T*>(bytes()));
    });
  }
  // The value of a one-element integer or bool tensor, exactly (item() rounds int64
  // values beyond 2^53); nothing for floating dtypes.
  std::optional<int64_t> item_int() const {
    OPENREG_SDK_CHECK(numel() == 1, "item_int(): tensor has ", numel(), " elements, not 1");
    const uint8_t code = t_->dtype.code;
    if (code != OPENREG_DTYPE_CODE_INT && code != OPENREG_DTYPE_CODE_UINT && code != OPENREG_DTYPE_CODE_BOOL)
      return std::nullopt;
    return dispatch<int64_t, int32_t, int16_t, int8_t, uint8_t, bool>(t_->dtype, "item_int", [&](auto tag) {
      using T = typename decltype(tag)::type;
      return static_cast<int64_t>(*reinterpret_cast<const T*>(bytes()));
    });
  }
  std::string describe() const {  // "float32[5, 7] strides [7, 1]"
    std::string s = dtype_name(t_->dtype) + "[";
    for (int64_t i = 0; i < t_->ndim; ++i) s += (i ? ", " : "") + std::to_string(t_->sizes[i]);
    s += "] strides [";
    for (int64_t i = 0; i < t_->ndim; ++i) s += (i ? ", " : "") + std::to_string(t_->strides[i]);
    return s + "]";
  }

 private:
  int64_t wrap(int64_t d) const {
    int64_t n = t_->ndim;
    if (d < 0) d += n;
    OPENREG_SDK_CHECK(d >= 0 && d < n, "dimension ", d, " out of range for a ", n, "-d tensor");
    return d;
  }
  const openreg_tensor* t_;
};

// The host services, with lambdas instead of C callbacks. Valid from init() to release().
class Host {
 public:
  explicit Host(const openreg_host* h = nullptr) : h_(h) {}
  const openreg_host* raw() const { return h_; }

  void log(int32_t level, const std::string& message) const {
    if (h_) h_->log(h_->ctx, level, message.c_str());
  }
  int num_threads() const { return h_ ? h_->get_num_threads(h_->ctx) : 1; }

  // Runs body(begin, end) over [begin, end) on the host's thread pool, in chunks of
  // at least `grain`. The first exception a chunk throws is rethrown here.
  template <class Body>
  void parallel_for(int64_t begin, int64_t end, int64_t grain, Body&& body) const {
    if (begin >= end) return;
    if (!h_ || end - begin <= grain) {
      body(begin, end);
      return;
    }
    struct State {
      Body* body;
      std::exception_ptr error;
      std::mutex mutex;
    } state{&body, nullptr, {}};
    h_->parallel_for(
        h_->ctx, begin, end, grain,
        [](void* user, int64_t b, int64_t e) {
          auto* s = static_cast<State*>(user);
          try {
            (*s->body)(b, e);
          } catch (...) {
            std::lock_guard<std::mutex> lock(s->mutex);
            if (!s->error) s->error = std::current_exception();
          }
        },
        &state);
    if (state.error) std::rethrow_exception(state.error);
  }

  // Scratch memory (64-byte aligned), released when the Scratch goes out of scope.
  class Scratch {
   public:
    Scratch(const openreg_host* h, uint64_t bytes) : h_(h) {
      ptr_ = bytes ? h_->scratch_alloc(h_->ctx, bytes) : nullptr;
      if (bytes && !ptr_) fail(OPENREG_STATUS_OUT_OF_MEMORY, str("scratch allocation of ", bytes, " bytes failed"));
    }
    ~Scratch() { if (ptr_) h_->scratch_free(h_->ctx, ptr_); }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    template <class T> T* as() const { return static_cast<T*>(ptr_); }

   private:
    const openreg_host* h_;
    void* ptr_;
  };
  Scratch scratch(uint64_t bytes) const { return Scratch(h_, bytes); }

 private:
  const openreg_host* h_;
};

// One call, with checked access to arguments (schema order) and outputs. Every
// accessor throws INVALID_ARGUMENT naming the op and the argument when the kind
// is wrong, so a kernel never reads a union member that is not there.
class Call {
 public:
  Call(const openreg_call* call, Host host) : c_(call), host_(host) {}
  const openreg_call* raw() const { return c_; }
  const Host& host() const { return host_; }
  std::string_view op_name() const { return c_->op_name; }
  int num_args() const { return c_->num_args; }
  int num_outputs() const { return c_->num_outputs; }
  bool dynamic_outputs() const { return c_->flags & OPENREG_CALL_DYNAMIC_OUTPUTS; }

  const openreg_value& arg(int i) const {
    OPENREG_SDK_CHECK(i >= 0 && i < c_->num_args, c_->op_name, ": argument ", i, " requested, the call has ",
                      c_->num_args);
    return c_->args[i];
  }
  int32_t kind(int i) const { return arg(i).kind; }
  bool is_none(int i) const { return i >= c_->num_args || arg(i).kind == OPENREG_VALUE_NONE; }

  Tensor tensor(int i) const { return Tensor(expect(i, OPENREG_VALUE_TENSOR, "a tensor").u.tensor); }
  std::optional<Tensor> optional_tensor(int i) const {
    if (is_none(i)) return std::nullopt;
    return tensor(i);
  }
  std::vector<Tensor> tensor_list(int i) const {  // NULL items (Tensor?[]) come back undefined
    const auto& v = expect(i, OPENREG_VALUE_TENSOR_LIST, "a tensor list");
    std::vector<Tensor> out;
    out.reserve(static_cast<size_t>(v.u.tensors.count));
    for (int64_t k = 0; k < v.u.tensors.count; ++k) out.emplace_back(v.u.tensors.items[k]);
    return out;
  }
  int64_t int_arg(int i) const { return expect(i, OPENREG_VALUE_INT, "an int").u.i; }
  std::optional<int64_t> optional_int(int i) const {
    if (is_none(i)) return std::nullopt;
    return int_arg(i);
  }
  bool bool_arg(int i) const { return expect(i, OPENREG_VALUE_BOOL, "a bool").u.i != 0; }
  double double_arg(int i) const {
    const auto& v = arg(i);
    if (v.kind == OPENREG_VALUE_INT) return static_cast<double>(v.u.i);
    return expect(i, OPENREG_VALUE_DOUBLE, "a float").u.d;
  }
  std::optional<double> optional_double(int i) const {
    if (is_none(i)) return std::nullopt;
    return double_arg(i);
  }
  Span<int64_t> int_list(int i) const {  // also accepts a single int (ATen's int[1] shorthand)
    const auto& v = arg(i);
    if (v.kind == OPENREG_VALUE_INT) return {&v.u.i, 1};
    const auto& l = expect(i, OPENREG_VALUE_INT_LIST, "an int list");
    return {l.u.ints.items, l.u.ints.count};
  }
  Span<int64_t> bool_list(int i) const {  // each item 0 or 1
    const auto& l = expect(i, OPENREG_VALUE_BOOL_LIST, "a bool list");
    return {l.u.ints.items, l.u.ints.count};
  }
  // A Scalar (or a plain int/float/bool argument) as double.
  double scalar(int i) const {
    const auto& v = arg(i);
    switch (v.kind) {
      case OPENREG_VALUE_INT:
      case OPENREG_VALUE_BOOL: return static_cast<double>(v.u.i);
      case OPENREG_VALUE_DOUBLE: return v.u.d;
      case OPENREG_VALUE_SCALAR:
        switch (v.u.scalar.kind) {
          case OPENREG_SCALAR_INT:
          case OPENREG_SCALAR_BOOL: return static_cast<double>(v.u.scalar.v.i);
          case OPENREG_SCALAR_DOUBLE: return v.u.scalar.v.d;
          default: unsupported(str(c_->op_name, ": argument ", i, " is a complex scalar"));
        }
    }
    fail(OPENREG_STATUS_INVALID_ARGUMENT, str(c_->op_name, ": argument ", i, " should be a scalar, got kind ", v.kind));
  }
  // A Scalar (or a plain int/bool argument) that is an integer, exactly (scalar()
  // rounds int64 values beyond 2^53); nothing for a floating-point or complex one.
  std::optional<int64_t> int_scalar(int i) const {
    const auto& v = arg(i);
    if (v.kind == OPENREG_VALUE_INT || v.kind == OPENREG_VALUE_BOOL) return v.u.i;
    if (v.kind == OPENREG_VALUE_SCALAR &&
        (v.u.scalar.kind == OPENREG_SCALAR_INT || v.u.scalar.kind == OPENREG_SCALAR_BOOL))
      return v.u.scalar.v.i;
    return std::nullopt;
  }
  // A Scalar that may be absent (NONE), with its default.
  double scalar_or(int i, double fallback) const { return is_none(i) ? fallback : scalar(i); }

  Tensor output(int i) const {
    OPENREG_SDK_CHECK(i >= 0 && i < c_->num_outputs, c_->op_name, ": output ", i, " requested, the call has ",
                      c_->num_outputs);
    return Tensor(&c_->outputs[i]);
  }

 private:
  const openreg_value& expect(int i, int32_t kind, const char* what) const {
    const auto& v = arg(i);
    OPENREG_SDK_CHECK(v.kind == kind, c_->op_name, ": argument ", i, " should be ", what, ", got value kind ",
                      v.kind);
    return v;
  }
  const openreg_call* c_;
  Host host_;
};

}  // namespace sdk
}  // namespace openreg
