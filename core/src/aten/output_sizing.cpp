#include "output_sizing.h"

#include "../runtime/runtime.h"
#include "boxed_args.h"
#include "op_plan.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/MemoryFormat.h>

#include <cstring>

namespace openreg {

namespace {

// Appends the signature the Meta kernel sees to a reused buffer (no allocation
// once it has grown): everything about the arguments that can change the outputs'
// metadata. Device tensors reach the Meta kernel as fresh empty_strided Meta
// tensors (dtype, sizes, strides); other tensors as they are, so a 0-dim one adds
// its value (unless it is a wrapped Python number, whose dtype alone matters), and
// a larger one makes the call uncacheable.
class SignatureWriter {
 public:
  explicit SignatureWriter(std::string* out) : out_(out) { out_->clear(); }
  template <typename T>
  void put(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out_->append(b, sizeof(T));
  }
  void put_ints(c10::IntArrayRef v) {
    put<int64_t>(static_cast<int64_t>(v.size()));
    out_->append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
  }
  void put_bytes(const std::string& s) {
    put<int64_t>(static_cast<int64_t>(s.size()));
    out_->append(s);
  }

  // False when the tensor makes the call uncacheable.
  bool tensor(const at::Tensor& t) {
    if (!t.defined()) {
      put<char>('u');
      return true;
    }
    if (t.layout() != c10::kStrided || t.is_conj() || t.is_neg()) return false;
    put<char>('t');
    put<int8_t>(static_cast<int8_t>(t.scalar_type()));
    if (t.device().type() == kDevice) {
      put<char>('d');
      put_ints(t.sizes());
      put_ints(t.strides());
      return true;
    }
    if (t.dim() != 0) return false;
    put<int8_t>(static_cast<int8_t>(t.device().type()));
    if (t.unsafeGetTensorImpl()->is_wrapped_number()) {
      put<char>('w');
      return true;
    }
    if (t.device().type() != c10::DeviceType::CPU) return false;
    put<char>('v');
    uint64_t bits = 0;
    std::memcpy(&bits, t.const_data_ptr(), std::min<size_t>(t.element_size(), sizeof(bits)));
    put(bits);
    return true;
  }

 private:
  std::string* out_;
};

bool signature_key(const OpPlan& plan, c10::ArrayRef<c10::IValue> args, std::string* key) {
  SignatureWriter w(key);
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = args[i];
    if (v.isNone()) {
      w.put<char>('N');
    } else if (v.isTensor()) {
      if (!w.tensor(v.toTensor())) return false;
    } else if (plan.number_arg[i] && (v.isInt() || v.isDouble() || v.isBool() || v.isComplexDouble())) {
      w.put<char>(v.isInt() ? 'I' : v.isDouble() ? 'F' : v.isBool() ? 'B' : 'C');
    } else if (plan.number_arg[i] && v.isList()) {  // Scalar[]: the kinds, not the values
      w.put<char>('[');
      for (const auto& item : v.toListRef()) {
        if (!(item.isInt() || item.isDouble() || item.isBool() || item.isComplexDouble())) return false;
        w.put<char>(item.isInt() ? 'I' : item.isDouble() ? 'F' : item.isBool() ? 'B' : 'C');
      }
      w.put<char>(']');
    } else if (v.isInt()) {
      w.put<char>('i');
      w.put(v.toInt());
    } else if (v.isDouble()) {
      w.put<char>('f');
      w.put(v.toDouble());
    } else if (v.isBool()) {
      w.put<char>('b');
      w.put(v.toBool());
    } else if (v.isComplexDouble()) {
      w.put<char>('c');
      w.put(v.toComplexDouble());
    } else if (v.isString()) {
      w.put<char>('s');
      w.put_bytes(v.toStringRef());
    } else if (v.isGenerator()) {
      w.put<char>('g');
    } else if (v.isDevice()) {
      w.put<char>('D');
    } else if (v.isList()) {
      // int[], float[], bool[], Tensor[], Tensor?[] and SymInt[] lists.
      w.put<char>('[');
      for (const auto& item : v.toListRef()) {
        if (item.isNone()) {
          w.put<char>('N');
        } else if (item.isTensor()) {
          if (!w.tensor(item.toTensor())) return false;
        } else if (item.isInt()) {
          w.put<char>('i');
          w.put(item.toInt());
        } else if (item.isDouble()) {
          w.put<char>('f');
          w.put(item.toDouble());
        } else if (item.isBool()) {
          w.put<char>('b');
          w.put(item.toBool());
        } else {
          return false;
        }
      }
      w.put<char>(']');
    } else {
      return false;
    }
  }
  return true;
}

OutputGeometry geometry_of(const at::Tensor& m) {
  OutputGeometry o;
  o.sizes.assign(m.sizes().begin(), m.sizes().end());
  o.strides.assign(m.strides().begin(), m.strides().end());
  o.dtype = m.scalar_type();
  return o;
}

// Convolutions give channels-last results (output, grad_input, grad_weight) when
// the input or the weight is channels-last, as CPU's and CUDA's kernels do; their
// Meta kernels, not knowing the backend, leave them contiguous. So a model moved to
// channels_last keeps that layout from layer to layer, as on CPU.
c10::MemoryFormat conv_result_format(const OpPlan& plan, c10::ArrayRef<c10::IValue> args) {
  int input = -1;
  if (plan.name == "aten::convolution") input = 0;
  if (plan.name == "aten::convolution_backward") input = 1;
  if (input < 0) return c10::MemoryFormat::Contiguous;
  for (int i : {input, input + 1}) {  // the input, then the weight
    const c10::MemoryFormat f = args[i].toTensor().suggest_memory_format();
    if (f != c10::MemoryFormat::Contiguous) return f;
  }
  return c10::MemoryFormat::Contiguous;
}

void apply_memory_format(c10::MemoryFormat format, OutputGeometry& o) {
  if (format == c10::MemoryFormat::ChannelsLast && o.sizes.size() == 4) {
    const auto st = c10::get_channels_last_strides_2d(o.sizes);
    o.strides.assign(st.begin(), st.end());
  } else if (format == c10::MemoryFormat::ChannelsLast3d && o.sizes.size() == 5) {
    const auto st = c10::get_channels_last_strides_3d(o.sizes);
    o.strides.assign(st.begin(), st.end());
  }
}

// Runs the Meta kernel on Meta twins of the device tensors. Throws when the op
// has no Meta kernel or its shapes depend on the data.
std::shared_ptr<const OutputPlan> run_meta(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                                           const OpPlan& plan) {
  torch::jit::Stack meta;
  meta.reserve(args.size());
  for (const auto& a : args) {
    if (a.isGenerator()) {
      meta.emplace_back();
    } else if (a.isDevice()) {
      meta.emplace_back(c10::Device(c10::kMeta));
    } else {
      // Device tensors become Meta twins; so do 0-dim CPU tensors (not wrapped Python
      // numbers), which CUDA kernels take as scalars but some Meta kernels refuse as
      // "on another device" (masked_fill's value). Their values stay in the signature.
      meta.push_back(map_tensors(a, [](const at::Tensor& t) {
        const bool cpu_scalar = t.dim() == 0 && t.device().is_cpu() && !t.unsafeGetTensorImpl()->is_wrapped_number();
        if (t.device().type() != kDevice && !cpu_scalar) return t;
        return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
      }));
    }
  }
  if (plan.cpp_meta) {
    plan.cpp_meta->call(op, &meta);
  } else {
    op.callBoxed(&meta);
  }
  auto result = std::make_shared<OutputPlan>();
  for (size_t r = 0; r < plan.return_alias.size(); ++r) {
    const c10::IValue& m = meta[r];
    ReturnGeometry rg;
    if (plan.return_alias[r] >= 0) {
      rg.kind = ReturnGeometry::kWritten;
      rg.tensors.push_back(geometry_of(m.toTensor()));
    } else if (m.isTensor()) {
      rg.kind = m.toTensor().defined() ? ReturnGeometry::kTensor : ReturnGeometry::kUndefined;
      if (m.toTensor().defined()) rg.tensors.push_back(geometry_of(m.toTensor()));
    } else if (m.isNone()) {
      rg.kind = ReturnGeometry::kNone;
    } else if (m.isInt()) {
      rg.kind = ReturnGeometry::kInt;
      rg.value = m.toInt();
    } else {
      rg.kind = ReturnGeometry::kList;
      for (const auto& item : m.toTensorList()) rg.tensors.push_back(geometry_of(item));
    }
    result->returns.push_back(std::move(rg));
  }
  const c10::MemoryFormat format = conv_result_format(plan, args);
  if (format != c10::MemoryFormat::Contiguous) {
    for (ReturnGeometry& rg : result->returns)
      if (rg.kind == ReturnGeometry::kTensor) apply_memory_format(format, rg.tensors[0]);
  }
  return result;
}

// A random fill's: self, as it is. (Their Meta kernels are Python, torch._refs, and
// check less than check_random_fill, which runs CPU's.)
std::shared_ptr<const OutputPlan> self_plan(c10::ArrayRef<c10::IValue> args) {
  auto result = std::make_shared<OutputPlan>();
  ReturnGeometry rg;
  rg.kind = ReturnGeometry::kWritten;
  rg.tensors.push_back(geometry_of(args[0].toTensor()));
  result->returns.push_back(std::move(rg));
  return result;
}

std::shared_ptr<const OutputPlan> dynamic_plan() {
  static const auto kDynamic = [] {
    auto d = std::make_shared<OutputPlan>();
    d->dynamic = true;
    return std::shared_ptr<const OutputPlan>(d);
  }();
  return kDynamic;
}

// Each op keeps at most this many signatures (cleared when full: a bound, not an LRU).
constexpr size_t kMaxSignatures = 4096;

}  // namespace

std::shared_ptr<const OutputPlan> output_plan(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                                              OpPlan& plan) {
  if (sized_by_kernel(plan, args)) return dynamic_plan();
  thread_local std::string key;
  const bool cacheable = signature_key(plan, args, &key);
  OutputCache& cache = plan.outputs;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.by_signature.find(key);
    if (it != cache.by_signature.end()) return it->second;
  }
  // A copy: the Meta kernel may run other ops, and the thread's key buffer with them.
  const std::string miss_key = cacheable ? key : std::string();
  std::shared_ptr<const OutputPlan> result;
  try {
    result = plan.device_rule.random_fill ? self_plan(args) : run_meta(op, args, plan);
  } catch (const c10::NotImplementedError&) {
    result = dynamic_plan();  // no Meta kernel
  } catch (const std::exception& e) {
    // An op that writes out= arguments cannot be sized by its engine: the Meta
    // kernel's error (arange's "step must be nonzero") is the user's answer. So is
    // an error ATen's C++ Meta kernel checked (a c10::Error), which CPU's kernel
    // checks too ("The size of tensor a (3) must match ..."); not one of a Python
    // kernel it called (a boolean index's nonzero: the shapes depend on the data).
    if (plan.cpp_meta && dynamic_cast<const c10::Error*>(&e)) throw;
    for (int a : plan.return_alias) {
      if (a >= 0) throw;
    }
    result = dynamic_plan();
  }
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache.mutex);
    if (cache.by_signature.size() >= kMaxSignatures) cache.by_signature.clear();
    cache.by_signature.emplace(miss_key, result);
  }
  return result;
}

void allocate_outputs(const OutputPlan& m, c10::ArrayRef<c10::IValue> args, const OpPlan& plan,
                      c10::Device device, c10::SmallVectorImpl<c10::IValue>* returns,
                      c10::SmallVectorImpl<at::Tensor>* flat) {
  // The device allocator directly (the caller holds a guard for `device`): no
  // dispatcher round trip per output.
  auto alloc = [&](const OutputGeometry& o) {
    return at::Tensor(at::detail::empty_strided_generic(o.sizes, o.strides, device_allocator(),
                                             c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), o.dtype));
  };
  for (size_t r = 0; r < m.returns.size(); ++r) {
    const ReturnGeometry& rg = m.returns[r];
    switch (rg.kind) {
      case ReturnGeometry::kWritten: {
        const at::Tensor& real = args[plan.return_alias[r]].toTensor();
        c10::IntArrayRef sizes(rg.tensors[0].sizes);
        if (real.sizes() != sizes) real.resize_(sizes);
        returns->push_back(args[plan.return_alias[r]]);
        flat->push_back(real);
        break;
      }
      case ReturnGeometry::kTensor: {
        auto t = alloc(rg.tensors[0]);
        returns->emplace_back(t);
        flat->push_back(std::move(t));
        break;
      }
      case ReturnGeometry::kNone:
        returns->emplace_back();
        flat->emplace_back();
        break;
      case ReturnGeometry::kInt:  // no output for engines: an absent slot keeps the numbering
        returns->emplace_back(rg.value);
        flat->emplace_back();
        break;
      case ReturnGeometry::kUndefined:  // a Tensor return left out (output_mask)
        returns->emplace_back(at::Tensor());
        flat->emplace_back();
        break;
      case ReturnGeometry::kList: {
        c10::List<at::Tensor> list;
        for (const auto& o : rg.tensors) {
          auto t = alloc(o);
          list.push_back(t);
          flat->push_back(std::move(t));
        }
        returns->emplace_back(std::move(list));
        break;
      }
    }
  }
}

}  // namespace openreg
