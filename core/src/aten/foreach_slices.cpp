#include "foreach_slices.h"

#include <cstring>
#include <string>
#include <unordered_set>

namespace openreg {

namespace {

// _foreach_ families whose every output element is computed from the same element of
// each input list (and numbers): aten::_foreach_<family>[_][.overload].
bool elementwise_family(const char* op_name) {
  static const std::unordered_set<std::string> families{
      "add",   "sub",  "mul",     "div",   "maximum", "minimum", "clamp_min", "clamp_max",
      "lerp",  "addcmul", "addcdiv", "sqrt", "rsqrt",  "neg",   "abs",     "exp",
      "log",   "reciprocal", "sign", "sigmoid", "zero", "copy"};
  constexpr const char kPrefix[] = "aten::_foreach_";
  if (std::strncmp(op_name, kPrefix, sizeof(kPrefix) - 1) != 0) return false;
  std::string family(op_name + sizeof(kPrefix) - 1);
  family = family.substr(0, family.find('.'));
  if (!family.empty() && family.back() == '_') family.pop_back();
  return families.count(family) > 0;
}

int64_t element_size(const openreg_tensor& t) { return t.dtype.bits / 8; }

int64_t numel_of(const openreg_tensor& t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t.ndim; ++d) n *= t.sizes[d];
  return n;
}

bool contiguous(const openreg_tensor& t) {
  int64_t expected = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    if (t.sizes[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.sizes[d];
  }
  return true;
}

TensorSpan span_of(const openreg_tensor& t, int64_t position) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(t.data) + t.byte_offset;
  return {begin, begin + static_cast<uintptr_t>(numel_of(t) * element_size(t)), position, element_size(t)};
}

const int64_t kUnitStride = 1;

}  // namespace

bool ForeachSlices::elementwise_op(const char* op_name) { return elementwise_family(op_name); }

std::unique_ptr<ForeachSlices> ForeachSlices::of(const openreg_call& call) {
  if (call.flags != 0 || !call.op_name || !elementwise_family(call.op_name)) return nullptr;
  std::unique_ptr<ForeachSlices> s(new ForeachSlices(call));
  int64_t n = -1;
  // A list item is usable at position p when it is a contiguous device tensor of the
  // position's size, the same element size as the other lists' (slices count elements).
  auto take = [&](const openreg_tensor* t, int64_t p) {
    if (!t || t->device_index < 0 || t->ndim < 0 || !contiguous(*t) || element_size(*t) <= 0) return false;
    const int64_t numel = numel_of(*t);
    if (static_cast<int64_t>(s->work_.numel.size()) <= p) s->work_.numel.push_back(numel);
    else if (s->work_.numel[p] != numel) return false;
    s->work_.spans.push_back(span_of(*t, p));
    return true;
  };
  for (int32_t a = 0; a < call.num_args; ++a) {
    const openreg_value& v = call.args[a];
    switch (v.kind) {
      case OPENREG_VALUE_TENSOR_LIST:
        if (n >= 0 && v.u.tensors.count != n) return nullptr;
        n = v.u.tensors.count;
        for (int64_t p = 0; p < n; ++p) {
          if (!take(v.u.tensors.items[p], p)) return nullptr;
        }
        break;
      case OPENREG_VALUE_DOUBLE_LIST:
      case OPENREG_VALUE_NONE:
      case OPENREG_VALUE_INT:
      case OPENREG_VALUE_DOUBLE:
      case OPENREG_VALUE_BOOL:
      case OPENREG_VALUE_SCALAR:
        break;
      default:
        return nullptr;  // a single tensor (read by every position), int lists, ...
    }
  }
  if (n <= 0) return nullptr;
  for (int32_t a = 0; a < call.num_args; ++a) {
    if (call.args[a].kind == OPENREG_VALUE_DOUBLE_LIST && call.args[a].u.doubles.count != n) return nullptr;
  }
  if (call.num_outputs != 0 && call.num_outputs != n) return nullptr;
  for (int32_t o = 0; o < call.num_outputs; ++o) {
    if (!take(&call.outputs[o], o)) return nullptr;
  }
  return s;
}

openreg_call& ForeachSlices::sliced(const Slice* slices, size_t count) {
  lengths_.resize(count);
  for (size_t i = 0; i < count; ++i) lengths_[i] = slices[i].end - slices[i].begin;
  auto piece = [&](const openreg_tensor& t, const Slice& s, size_t i) {
    openreg_tensor c = t;
    c.ndim = 1;
    c.sizes = &lengths_[i];
    c.strides = &kUnitStride;
    c.byte_offset = t.byte_offset + static_cast<uint64_t>(s.begin * element_size(t));
    return c;
  };
  // Fill every array before taking pointers into it.
  pieces_.clear();
  doubles_.clear();
  for (int32_t a = 0; a < call_.num_args; ++a) {
    const openreg_value& v = call_.args[a];
    if (v.kind == OPENREG_VALUE_TENSOR_LIST) {
      for (size_t i = 0; i < count; ++i) pieces_.push_back(piece(*v.u.tensors.items[slices[i].position], slices[i], i));
    } else if (v.kind == OPENREG_VALUE_DOUBLE_LIST) {
      for (size_t i = 0; i < count; ++i) doubles_.push_back(v.u.doubles.items[slices[i].position]);
    }
  }
  items_.resize(pieces_.size());
  for (size_t k = 0; k < pieces_.size(); ++k) items_[k] = &pieces_[k];
  values_.assign(call_.args, call_.args + call_.num_args);
  size_t next_piece = 0, next_double = 0;
  for (auto& v : values_) {
    if (v.kind == OPENREG_VALUE_TENSOR_LIST) {
      v.u.tensors.items = items_.data() + next_piece;
      v.u.tensors.count = static_cast<int64_t>(count);
      next_piece += count;
    } else if (v.kind == OPENREG_VALUE_DOUBLE_LIST) {
      v.u.doubles.items = doubles_.data() + next_double;
      v.u.doubles.count = static_cast<int64_t>(count);
      next_double += count;
    }
  }
  outputs_.clear();
  if (call_.num_outputs != 0) {
    for (size_t i = 0; i < count; ++i) outputs_.push_back(piece(call_.outputs[slices[i].position], slices[i], i));
  }
  sub_ = call_;
  sub_.args = values_.data();
  sub_.num_outputs = static_cast<int32_t>(outputs_.size());
  sub_.outputs = outputs_.empty() ? nullptr : outputs_.data();
  return sub_;
}

}  // namespace openreg
