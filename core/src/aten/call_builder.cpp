#include "call_builder.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include "../bridge/torch_abi.h"
#include "../runtime/recycling_pool.h"
#include "../runtime/runtime.h"
#include "op_plan.h"

namespace openreg {

// The arrays of one call under construction. Capacity is reserved before any
// pointer into them is taken, so they never move while the call lives.
struct CallBuilder::Arena {
  std::vector<openreg_value> values;
  std::vector<openreg_tensor> tensors;
  std::vector<const openreg_tensor*> tensor_items;
  std::vector<int64_t> ints;
  std::vector<double> doubles;
  std::vector<openreg_tensor> outputs;
  // Only for a queued call, which runs after its tensors may have changed shape or
  // been freed: copies of their sizes and strides, of its strings, and the CPU
  // tensors it reads (device memory stays valid in queue order, execution_queue.h).
  bool queued = false;
  std::vector<int64_t> dims;
  std::vector<int64_t> out_dims;
  std::vector<std::string> strings;
  std::vector<at::Tensor> keep;

  void clear() {
    values.clear();
    tensors.clear();
    tensor_items.clear();
    ints.clear();
    doubles.clear();
    outputs.clear();
    dims.clear();
    out_dims.clear();
    strings.clear();
    keep.clear();
  }
};

namespace {

// One arena per nesting depth per thread: an engine call may build another call
// (a composite kernel running device ops) while the outer one is alive.
struct ArenaStack {
  std::vector<std::unique_ptr<CallBuilder::Arena>> arenas;
  size_t depth = 0;
};
thread_local ArenaStack t_arenas;

// Arenas of queued calls: taken by the calling thread, given back by the worker
// (recycling_pool.h: no lock or malloc per call).
using ArenaPool = RecyclingPool<CallBuilder::Arena>;

CallBuilder::Arena& acquire_arena(bool queued) {
  if (queued) {
    CallBuilder::Arena* a = ArenaPool::instance().take();
    a->clear();
    a->queued = true;
    return *a;
  }
  auto& s = t_arenas;
  if (s.depth == s.arenas.size()) s.arenas.push_back(std::make_unique<CallBuilder::Arena>());
  auto& a = *s.arenas[s.depth++];
  a.clear();
  return a;
}

// Sizes then strides of `t`, appended to `dims` (reserved beforehand: never moves).
const int64_t* copy_dims(const at::Tensor& t, std::vector<int64_t>& dims) {
  const size_t first = dims.size();
  dims.insert(dims.end(), t.sizes().begin(), t.sizes().end());
  dims.insert(dims.end(), t.strides().begin(), t.strides().end());
  return dims.data() + first;
}

openreg_tensor describe(const at::Tensor& t, std::vector<int64_t>* dims = nullptr) {
  openreg_tensor d{};
  d.struct_size = sizeof(openreg_tensor);
  d.ndim = static_cast<int32_t>(t.dim());
  d.data = t.numel() ? t.data_ptr() : nullptr;
  if (dims && d.ndim) {
    const int64_t* p = copy_dims(t, *dims);
    d.sizes = p;
    d.strides = p + d.ndim;
  } else {
    d.sizes = d.ndim ? t.sizes().data() : nullptr;
    d.strides = d.ndim ? t.strides().data() : nullptr;
  }
  TORCH_CHECK(bridge::to_abi_dtype(t.scalar_type(), &d.dtype), "openreg: dtype ", t.scalar_type(),
              " cannot be passed to engines");
  d.device_index = t.device().is_cpu() ? -1 : t.device().index();
  return d;
}

openreg_value scalar_value(const c10::Scalar& s) {
  openreg_value out{};
  out.kind = OPENREG_VALUE_SCALAR;
  if (s.isBoolean()) {
    out.u.scalar.kind = OPENREG_SCALAR_BOOL;
    out.u.scalar.v.i = s.toBool();
  } else if (s.isIntegral(false)) {
    out.u.scalar.kind = OPENREG_SCALAR_INT;
    out.u.scalar.v.i = s.toLong();
  } else if (s.isComplex()) {
    out.u.scalar.kind = OPENREG_SCALAR_COMPLEX;
    auto c = s.toComplexDouble();
    out.u.scalar.v.d = c.real();
    out.u.scalar.imag = c.imag();
  } else {
    out.u.scalar.kind = OPENREG_SCALAR_DOUBLE;
    out.u.scalar.v.d = s.toDouble();
  }
  return out;
}

// How many descriptors, ints and doubles the call needs (so the arena can reserve),
// and how many sizes and strides its tensors have.
void count_items(c10::ArrayRef<c10::IValue> args, size_t* tensors, size_t* numbers, size_t* dims) {
  for (const auto& v : args) {
    if (v.isTensor()) {
      ++*tensors;
      if (v.toTensor().defined()) *dims += 2 * v.toTensor().dim();
    } else if (v.isList()) {
      const auto list = v.toListRef();
      *tensors += list.size();
      *numbers += list.size();
      for (const auto& item : list) {
        if (item.isTensor() && item.toTensor().defined()) *dims += 2 * item.toTensor().dim();
      }
    } else if (v.isString()) {
      ++*numbers;
    }
  }
}

// The tensor a queued call reads in place of `t`. Device memory stays valid in queue
// order (execution_queue.h). CPU memory does not: the call keeps the tensor alive and,
// unless it is a wrapped Python number that nothing else can reach, reads a copy taken
// now, since the caller may change it before the call runs (an LR scheduler's tensor lr,
// a CPU index list), as CUDA copies CPU operands at the call.
const at::Tensor& held(CallBuilder::Arena& arena, const at::Tensor& t) {
  if (!arena.queued || t.device().is_privateuseone()) return t;
  arena.keep.push_back(t.unsafeGetTensorImpl()->is_wrapped_number() ? t : t.clone());
  return arena.keep.back();
}

}  // namespace

CallBuilder::CallBuilder(const OpPlan& plan, c10::ArrayRef<c10::IValue> args, c10::DeviceIndex device_index,
                         bool queued)
    : arena_(acquire_arena(queued)) {
  std::vector<int64_t>* dims = queued ? &arena_.dims : nullptr;
  try {
    size_t tensors = 0, numbers = 0, ndims = 0;
    count_items(args, &tensors, &numbers, &ndims);
    if (queued) {
      arena_.dims.reserve(ndims);
      arena_.strings.reserve(numbers);
      arena_.keep.reserve(tensors);  // held() returns references into it
    }
    arena_.tensors.reserve(tensors);
    arena_.tensor_items.reserve(tensors);
    arena_.ints.reserve(numbers);
    arena_.doubles.reserve(numbers);
    arena_.values.resize(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      const c10::IValue& v = args[i];
      openreg_value& out = arena_.values[i];
      out = openreg_value{};
      const ArgKind kind = plan.arg_kinds[i];
      if (v.isNone()) {
        if (kind == ArgKind::kGenerator) {
          out.kind = OPENREG_VALUE_GENERATOR;
          next_random_stream(std::nullopt, device_index, &out.u.generator.seed, &out.u.generator.offset);
        }
        continue;  // OPENREG_VALUE_NONE otherwise
      }
      switch (kind) {
        case ArgKind::kDtype:
          out.kind = OPENREG_VALUE_DTYPE;
          TORCH_CHECK(bridge::to_abi_dtype(static_cast<at::ScalarType>(v.toInt()), &out.u.dtype), "openreg: dtype ",
                      static_cast<at::ScalarType>(v.toInt()), " cannot be passed to engines");
          continue;
        case ArgKind::kLayout: out.kind = OPENREG_VALUE_LAYOUT; out.u.i = v.toInt(); continue;
        case ArgKind::kMemoryFormat: out.kind = OPENREG_VALUE_MEMORY_FORMAT; out.u.i = v.toInt(); continue;
        case ArgKind::kScalar: out = scalar_value(v.toScalar()); continue;
        case ArgKind::kGenerator:
          out.kind = OPENREG_VALUE_GENERATOR;
          next_random_stream(v.toGenerator(), device_index, &out.u.generator.seed, &out.u.generator.offset);
          continue;
        case ArgKind::kDevice: {
          out.kind = OPENREG_VALUE_DEVICE;
          auto d = v.toDevice();
          out.u.i = d.is_cpu() ? -1 : (d.has_index() ? d.index() : current_device());
          continue;
        }
        default: break;
      }
      // The rest is decided by the value itself (it agrees with the schema type).
      if (v.isTensor()) {
        const auto& t = v.toTensor();
        if (!t.defined()) continue;  // NONE
        arena_.tensors.push_back(describe(held(arena_, t), dims));
        out.kind = OPENREG_VALUE_TENSOR;
        out.u.tensor = &arena_.tensors.back();
      } else if (v.isList()) {
        auto list = v.toListRef();
        if (kind == ArgKind::kTensorList || v.isTensorList()) {
          const size_t first = arena_.tensor_items.size();
          for (const auto& item : list) {
            if (item.isTensor() && item.toTensor().defined()) {
              arena_.tensors.push_back(describe(held(arena_, item.toTensor()), dims));
              arena_.tensor_items.push_back(&arena_.tensors.back());
            } else {
              arena_.tensor_items.push_back(nullptr);
            }
          }
          out.kind = OPENREG_VALUE_TENSOR_LIST;
          out.u.tensors = {arena_.tensor_items.data() + first, int64_t(list.size())};
        } else if (kind == ArgKind::kDoubleList || v.isDoubleList()) {
          const size_t first = arena_.doubles.size();
          for (const auto& item : list) {  // float[], or Scalar[] of ints, bools and floats
            TORCH_CHECK(item.isDouble() || item.isInt() || item.isBool(), "openreg: ", plan.name, ": argument ", i,
                        " holds a ", item.tagKind(), " scalar, which the engine ABI cannot carry");
            arena_.doubles.push_back(item.isDouble() ? item.toDouble()
                                     : item.isInt()  ? static_cast<double>(item.toInt())
                                                     : static_cast<double>(item.toBool()));
          }
          out.kind = OPENREG_VALUE_DOUBLE_LIST;
          out.u.doubles = {arena_.doubles.data() + first, int64_t(list.size())};
        } else {
          // int[], SymInt[] (generic lists of ints) and bool[].
          const bool bools = kind == ArgKind::kBoolList || v.isBoolList();
          const size_t first = arena_.ints.size();
          for (const auto& item : list) {
            arena_.ints.push_back(bools ? int64_t(item.toBool()) : item.isInt() ? item.toInt()
                                                                                 : item.toSymInt().expect_int());
          }
          out.kind = bools ? OPENREG_VALUE_BOOL_LIST : OPENREG_VALUE_INT_LIST;
          out.u.ints = {arena_.ints.data() + first, int64_t(list.size())};
        }
      } else if (v.isInt() || v.isSymInt()) {
        out.kind = OPENREG_VALUE_INT;
        out.u.i = v.isInt() ? v.toInt() : v.toSymInt().expect_int();
      } else if (v.isDouble()) {
        out.kind = OPENREG_VALUE_DOUBLE;
        out.u.d = v.toDouble();
      } else if (v.isBool()) {
        out.kind = OPENREG_VALUE_BOOL;
        out.u.i = v.toBool();
      } else if (v.isString()) {
        // The string lives in the IValue, on the caller's stack, for an inline call;
        // a queued call keeps a copy.
        const std::string* str = &v.toStringRef();
        if (queued) {
          arena_.strings.push_back(*str);
          str = &arena_.strings.back();
        }
        const std::string& s = *str;
        out.kind = OPENREG_VALUE_STRING;
        out.u.str = {s.data(), int64_t(s.size())};
      } else {
        TORCH_CHECK(false, "openreg: argument ", i, " of ", plan.name, " (", v.tagKind(),
                    ") cannot be passed to engines");
      }
    }
  } catch (...) {
    release_arena();
    throw;
  }
  call_.struct_size = sizeof(openreg_call);
  call_.op_name = plan.name.c_str();
  call_.op_index = -1;
  call_.num_args = static_cast<int32_t>(arena_.values.size());
  call_.args = arena_.values.data();
}

void CallBuilder::release_arena() {
  if (!arena_.queued) {
    --t_arenas.depth;
  } else if (!handed_over_) {
    recycle_arena(&arena_);
  }
}

CallBuilder::~CallBuilder() { release_arena(); }

void recycle_arena(CallBuilder::Arena* arena) {
  arena->clear();  // drops the kept CPU tensors now, not when the arena is reused
  ArenaPool::instance().give_back(arena);
}

void CallBuilder::hand_over(QueuedCall* to) {
  TORCH_INTERNAL_ASSERT(arena_.queued && !handed_over_ && !to->arena);
  handed_over_ = true;
  to->arena = &arena_;
  to->call = call_;
}

void QueuedCall::reset() {
  if (arena) recycle_arena(arena);
  arena = nullptr;
  call = openreg_call{};
}

void CallBuilder::set_outputs(c10::ArrayRef<at::Tensor> outputs) {
  arena_.outputs.clear();
  std::vector<int64_t>* dims = nullptr;
  if (arena_.queued) {
    size_t n = 0;
    for (const auto& t : outputs) n += t.defined() ? 2 * t.dim() : 0;
    arena_.out_dims.clear();
    arena_.out_dims.reserve(n);
    dims = &arena_.out_dims;
  }
  for (const auto& t : outputs) {
    if (t.defined()) {
      arena_.outputs.push_back(describe(t, dims));
    } else {
      openreg_tensor absent{};
      absent.struct_size = sizeof(openreg_tensor);
      absent.ndim = -1;
      arena_.outputs.push_back(absent);
    }
  }
  call_.num_outputs = static_cast<int32_t>(arena_.outputs.size());
  call_.outputs = arena_.outputs.data();
}

void CallBuilder::set_dynamic_outputs(size_t count, c10::Device device) {
  dynamic_device_ = device;
  dynamic_.assign(count, at::Tensor());
  openreg_tensor unallocated{};
  unallocated.struct_size = sizeof(openreg_tensor);
  arena_.outputs.assign(count, unallocated);
  call_.num_outputs = static_cast<int32_t>(count);
  call_.outputs = arena_.outputs.data();
  call_.flags |= OPENREG_CALL_DYNAMIC_OUTPUTS;
  call_.alloc_output = &CallBuilder::alloc_output;
  call_.host_call_ctx = this;
}

openreg_status CallBuilder::alloc_output(const openreg_call* call, int32_t index, int32_t ndim,
                                         const int64_t* sizes, openreg_dtype dtype, openreg_tensor* out) {
  auto* self = static_cast<CallBuilder*>(call->host_call_ctx);
  if (index < 0 || index >= call->num_outputs || ndim < 0 || (ndim > 0 && !sizes) || !out) {
    set_thread_error(OPENREG_STATUS_INVALID_ARGUMENT, "alloc_output: bad index, ndim or pointer");
    return OPENREG_STATUS_INVALID_ARGUMENT;
  }
  const at::ScalarType st = bridge::to_scalar_type(dtype);
  if (st == at::ScalarType::Undefined) {
    set_thread_error(OPENREG_STATUS_INVALID_ARGUMENT, "alloc_output: unknown dtype");
    return OPENREG_STATUS_INVALID_ARGUMENT;
  }
  try {
    c10::DeviceGuard guard(self->dynamic_device_);
    at::Tensor t = at::detail::empty_generic(c10::IntArrayRef(sizes, ndim), device_allocator(),
                                       c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), st, std::nullopt);
    self->dynamic_[index] = t;
    *out = describe(t);
    self->arena_.outputs[index] = *out;
  } catch (const std::exception& e) {
    set_thread_error(OPENREG_STATUS_OUT_OF_MEMORY, e.what());
    return OPENREG_STATUS_OUT_OF_MEMORY;
  }
  return OPENREG_STATUS_OK;
}

}  // namespace openreg
