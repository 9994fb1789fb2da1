// Helpers shared by the host-layer tests: fixture paths, tensor descriptors over
// plain buffers, aten::add calls, and an independent reference add.
#pragma once

#include <openreg/engine.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#ifndef FIXTURE_DIR
#error "FIXTURE_DIR must be defined by the build (directory of the fixture engines)"
#endif
#ifndef FIXTURE_REF_DIR
#error "FIXTURE_REF_DIR must be defined by the build (directory of the fake aten_ref)"
#endif

namespace openreg_test {

inline std::string fixture_dir() { return FIXTURE_DIR; }
inline std::string fixture_ref_dir() { return FIXTURE_REF_DIR; }
// "good" -> <FIXTURE_DIR>/libopenreg_engine_fixture_good.so
inline std::string fixture_path(const std::string& name) {
  return fixture_dir() + "/libopenreg_engine_fixture_" + name + ".so";
}

constexpr openreg_dtype kFloat32{OPENREG_DTYPE_CODE_FLOAT, 32, 1};
constexpr openreg_dtype kFloat64{OPENREG_DTYPE_CODE_FLOAT, 64, 1};
constexpr openreg_dtype kInt64{OPENREG_DTYPE_CODE_INT, 64, 1};
constexpr openreg_dtype kInt32{OPENREG_DTYPE_CODE_INT, 32, 1};
constexpr openreg_dtype kBool{OPENREG_DTYPE_CODE_BOOL, 8, 1};

inline std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size());
  int64_t acc = 1;
  for (size_t k = sizes.size(); k-- > 0;) {
    s[k] = acc;
    acc *= sizes[k] > 0 ? sizes[k] : 1;
  }
  return s;
}

inline int64_t numel(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (auto s : sizes) n *= s;
  return n;
}

// A descriptor over caller-owned memory; owns its sizes/strides arrays.
class View {
 public:
  View(void* data, std::vector<int64_t> sizes, std::vector<int64_t> strides, openreg_dtype dtype,
       uint64_t byte_offset = 0, int32_t device_index = 0)
      : sizes_(std::move(sizes)), strides_(std::move(strides)) {
    t_.struct_size = sizeof(openreg_tensor);
    t_.ndim = static_cast<int32_t>(sizes_.size());
    t_.data = data;
    t_.byte_offset = byte_offset;
    t_.sizes = sizes_.empty() ? nullptr : sizes_.data();
    t_.strides = strides_.empty() ? nullptr : strides_.data();
    t_.dtype = dtype;
    t_.device_index = device_index;
  }
  View(const View&) = delete;
  View& operator=(const View&) = delete;

  const openreg_tensor* get() const { return &t_; }
  const openreg_tensor& desc() const { return t_; }
  const std::vector<int64_t>& sizes() const { return sizes_; }
  // Element offset (in elements, from data + byte_offset) of a multi-index.
  int64_t offset(const std::vector<int64_t>& idx) const {
    int64_t off = 0;
    for (size_t k = 0; k < idx.size(); ++k) off += idx[k] * strides_[k];
    return off;
  }
  template <typename T>
  T& at(const std::vector<int64_t>& idx) const {
    char* base = static_cast<char*>(t_.data) + t_.byte_offset;
    return *reinterpret_cast<T*>(base + offset(idx) * static_cast<int64_t>(sizeof(T)));
  }

 private:
  std::vector<int64_t> sizes_, strides_;
  openreg_tensor t_{};
};

// Calls fn(idx) for every multi-index of `sizes`, last dimension fastest.
template <typename Fn>
void for_each_index(const std::vector<int64_t>& sizes, Fn fn) {
  if (numel(sizes) == 0) return;
  std::vector<int64_t> idx(sizes.size(), 0);
  while (true) {
    fn(idx);
    size_t k = sizes.size();
    while (k > 0) {
      --k;
      if (++idx[k] < sizes[k]) break;
      idx[k] = 0;
      if (k == 0) return;
    }
    if (sizes.empty()) return;
  }
}

// Index into `in` for output index `out_idx` under right-aligned broadcasting.
inline std::vector<int64_t> broadcast_index(const std::vector<int64_t>& in_sizes,
                                            const std::vector<int64_t>& out_idx) {
  std::vector<int64_t> idx(in_sizes.size());
  size_t lead = out_idx.size() - in_sizes.size();
  for (size_t j = 0; j < in_sizes.size(); ++j) idx[j] = in_sizes[j] == 1 ? 0 : out_idx[j + lead];
  return idx;
}

inline openreg_value tensor_value(const openreg_tensor* t) {
  openreg_value v{};
  v.kind = OPENREG_VALUE_TENSOR;
  v.u.tensor = t;
  return v;
}
inline openreg_value int_scalar(int64_t i) {
  openreg_value v{};
  v.kind = OPENREG_VALUE_SCALAR;
  v.u.scalar.kind = OPENREG_SCALAR_INT;
  v.u.scalar.v.i = i;
  return v;
}
inline openreg_value double_scalar(double d) {
  openreg_value v{};
  v.kind = OPENREG_VALUE_SCALAR;
  v.u.scalar.kind = OPENREG_SCALAR_DOUBLE;
  v.u.scalar.v.d = d;
  return v;
}

// aten::add.Tensor(self, other, *, alpha) or aten::add.out(self, other, *, alpha, out),
// with call->outputs[0] = out.
struct AddCall {
  std::vector<openreg_value> args;
  openreg_tensor output{};
  openreg_call call{};

  AddCall(const openreg_tensor* self, const openreg_tensor* other, openreg_value alpha,
          const openreg_tensor* out, bool out_variant = false, int32_t op_index = -1) {
    args = {tensor_value(self), tensor_value(other), alpha};
    if (out_variant) args.push_back(tensor_value(out));
    output = *out;
    call.struct_size = sizeof(openreg_call);
    call.flags = 0;
    call.op_name = out_variant ? "aten::add.out" : "aten::add.Tensor";
    call.op_index = op_index >= 0 ? op_index : (out_variant ? 1 : 0);
    call.num_args = static_cast<int32_t>(args.size());
    call.args = args.data();
    call.num_outputs = 1;
    call.outputs = &output;
    call.alloc_output = nullptr;
    call.host_call_ctx = nullptr;
  }
  AddCall(const AddCall&) = delete;
  AddCall& operator=(const AddCall&) = delete;
};

}  // namespace openreg_test
