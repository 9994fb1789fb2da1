// Building an operator's plan from its schema, once, and finding it again cheaply.
#include "op_plan.h"

#include "boxed_args.h"
#include "foreach_slices.h"

#include <mutex>
#include <unordered_map>

namespace openreg {

namespace {

bool is_tensor_type(const c10::TypePtr& t) {
  return t->kind() == c10::TypeKind::TensorType ||
         (t->kind() == c10::TypeKind::OptionalType &&
          t->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType);
}

c10::TypePtr unwrap_optional(c10::TypePtr t) {
  if (auto opt = t->castRaw<c10::OptionalType>()) return opt->getElementType();
  return t;
}

ArgKind kind_of(const c10::Argument& arg) {
  auto type = unwrap_optional(arg.real_type());
  switch (type->kind()) {
    case c10::TypeKind::TensorType: return ArgKind::kTensor;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType: return ArgKind::kInt;
    case c10::TypeKind::FloatType: return ArgKind::kDouble;
    case c10::TypeKind::BoolType: return ArgKind::kBool;
    case c10::TypeKind::NumberType: return ArgKind::kScalar;
    case c10::TypeKind::StringType: return ArgKind::kString;
    case c10::TypeKind::ScalarTypeType: return ArgKind::kDtype;
    case c10::TypeKind::LayoutType: return ArgKind::kLayout;
    case c10::TypeKind::MemoryFormatType: return ArgKind::kMemoryFormat;
    case c10::TypeKind::DeviceObjType: return ArgKind::kDevice;
    case c10::TypeKind::GeneratorType: return ArgKind::kGenerator;
    case c10::TypeKind::ListType: {
      auto elem = unwrap_optional(type->castRaw<c10::ListType>()->getElementType());
      switch (elem->kind()) {
        case c10::TypeKind::TensorType: return ArgKind::kTensorList;
        case c10::TypeKind::IntType:
        case c10::TypeKind::SymIntType: return ArgKind::kIntList;
        case c10::TypeKind::FloatType:
        case c10::TypeKind::NumberType: return ArgKind::kDoubleList;  // Scalar[] (_foreach_*.ScalarList)
        case c10::TypeKind::BoolType: return ArgKind::kBoolList;
        default: return ArgKind::kOther;
      }
    }
    default: return ArgKind::kOther;
  }
}

// Ops whose CPU kernel (the reference, whose backward the device also runs) shapes
// some outputs differently from the Meta kernel, so the kernel sizes them, and may
// leave an optional output undefined:
//  - CPU's _embedding_bag leaves offset2bag empty on its sum-mode fast path (its
//    backward then rebuilds it) and sizes bag_size by the number of bags, where Meta
//    sizes both as CUDA does; a Meta-sized, zero-filled offset2bag sent every
//    gradient to bag 0;
//  - _native_multi_head_attention returns no attention weights (None) when they are
//    not asked for; Meta returns an empty tensor, which nn.MultiheadAttention would
//    hand to the user;
constexpr const char* kKernelSizedOps[] = {"aten::_embedding_bag", "aten::_embedding_bag_forward_only",
                                           "aten::_native_multi_head_attention"};
// Ops whose calls are kernel-sized when a bool argument is true:
//  - mkldnn_rnn_layer with train=True: its workspace (the record its backward reads)
//    is empty by Meta; its size is the serving engine's (CPU's: oneDNN's, 28672 bytes
//    for a tiny layer), and a Meta-sized one would drop it. Without train the
//    workspace is empty on every engine, and Meta's sizes spare the call the wait
//    for the queue a kernel-sized call needs (LSTM inference: 0.84x -> 0.93x of
//    torch CPU's time when every call waited).
constexpr std::pair<const char*, const char*> kKernelSizedIf[] = {{"aten::mkldnn_rnn_layer", "train"}};

std::unique_ptr<OpPlan> make_plan(const c10::FunctionSchema& schema) {
  auto plan = std::make_unique<OpPlan>();
  plan->name = schema.name();
  if (!schema.overload_name().empty()) plan->name += "." + schema.overload_name();
  for (const char* op : kKernelSizedOps) plan->kernel_sized = plan->kernel_sized || plan->name == op;
  for (const auto& [op, flag] : kKernelSizedIf) {
    if (plan->name != op) continue;
    const auto index = schema.argumentIndexWithName(flag);
    TORCH_INTERNAL_ASSERT(index.has_value(), op, " has no argument ", flag);
    plan->kernel_sized_if = static_cast<int>(*index);
  }
  plan->device_rule = device_rule_for(schema);
  plan->cpp_meta = cpp_meta_kernel(plan->name);
  plan->foreach_elementwise = ForeachSlices::elementwise_op(plan->name.c_str());
  const bool value_shaped = schema.name() == "aten::arange" || schema.name() == "aten::range";
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    ArgKind kind = kind_of(args[i]);
    plan->arg_kinds.push_back(kind);
    if (kind == ArgKind::kTensor || kind == ArgKind::kTensorList) plan->tensor_args.push_back(static_cast<int>(i));
    // Scalar[] (the _foreach_ ScalarList overloads: bias corrections that change every
    // optimizer step) counts as numbers too.
    const auto& type = args[i].type();
    const bool scalar_list = type->kind() == c10::TypeKind::ListType &&
                             type->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::NumberType;
    plan->number_arg.push_back(!value_shaped && (kind == ArgKind::kScalar || scalar_list));
    const auto* info = args[i].alias_info();
    if (info && info->isWrite() &&
        (kind == ArgKind::kTensor || (kind == ArgKind::kTensorList && plan->device_rule.foreach_lists))) {
      plan->written_args.push_back(static_cast<int>(i));
    }
  }
  for (size_t ri = 0; ri < schema.returns().size(); ++ri) {
    const auto& r = schema.returns()[ri];
    const int alias = written_argument(schema, ri);
    const auto* info = r.alias_info();
    auto refuse = [&](const std::string& why) {
      plan->reference_only = true;
      plan->reference_reason = why;
    };
    if (info && !info->isWrite()) refuse("returns a view");
    const bool list = r.type()->kind() == c10::TypeKind::ListType &&
                      is_tensor_type(r.type()->castRaw<c10::ListType>()->getElementType());
    // An int return (SymInt max_q of the fused attention ops) comes from the Meta kernel.
    const bool int_return = r.type()->kind() == c10::TypeKind::IntType || r.type()->kind() == c10::TypeKind::SymIntType;
    if (!is_tensor_type(r.type()) && !list && !int_return) refuse("returns a " + r.type()->str());
    if (alias < 0 && info && info->isWrite()) refuse("mutates a list argument");
    plan->return_alias.push_back(alias);
  }
  return plan;
}

std::mutex g_plans_mutex;
std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpPlan>> g_plans;

}  // namespace

OpPlan& plan_for(const c10::OperatorHandle& op) {
  // Each thread remembers the plans it has used: no lock after the first call.
  thread_local std::unordered_map<const c10::FunctionSchema*, OpPlan*> seen;
  const auto* key = &op.schema();
  auto hit = seen.find(key);
  if (hit != seen.end()) return *hit->second;
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  auto& slot = g_plans[key];
  if (!slot) slot = make_plan(op.schema());
  seen.emplace(key, slot.get());
  return *slot;
}

bool sized_by_kernel(const OpPlan& plan, c10::ArrayRef<c10::IValue> args) {
  if (plan.kernel_sized) return true;
  return plan.kernel_sized_if >= 0 && args[plan.kernel_sized_if].isBool() && args[plan.kernel_sized_if].toBool();
}

}  // namespace openreg
