// Walking the tensors of a boxed call's arguments and results (IValues), for the
// router and the nested host path.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <optional>

namespace openreg {

// Rebuilds an argument with each defined tensor mapped through fn (tensors, tensor
// lists and optional-tensor lists; lists keep their type; other values as they are).
template <typename F>
c10::IValue map_tensors(const c10::IValue& v, F&& fn) {
  if (v.isTensor()) return v.toTensor().defined() ? c10::IValue(fn(v.toTensor())) : v;
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const auto& t : v.toTensorList()) out.push_back(fn(static_cast<at::Tensor>(t)));
    return out;
  }
  if (v.isList()) {
    auto in = v.toList();
    if (in.empty() || !(in.get(0).isTensor() || in.get(0).isNone())) return v;
    c10::List<std::optional<at::Tensor>> out;
    for (const auto& item : in) {
      c10::IValue e = item;
      if (e.isTensor() && e.toTensor().defined()) out.push_back(fn(e.toTensor()));
      else out.push_back(std::nullopt);
    }
    return out;
  }
  return v;
}

// Applies fn to every defined tensor in an argument (tensors and tensor lists).
template <typename F>
void for_each_tensor(const c10::IValue& v, F&& fn) {
  if (v.isTensor()) {
    if (v.toTensor().defined()) fn(v.toTensor());
  } else if (v.isTensorList() || v.isList()) {
    for (const auto& item : v.toListRef()) {
      if (item.isTensor() && item.toTensor().defined()) fn(item.toTensor());
    }
  }
}

// The argument schema return r writes to (in-place and out= ops), or -1.
inline int written_argument(const c10::FunctionSchema& schema, size_t r) {
  const auto* info = schema.returns()[r].alias_info();
  if (!info || !info->isWrite()) return -1;
  const auto& args = schema.arguments();
  int found = -1;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto* ai = args[i].alias_info();
    if (ai && ai->isWrite() && ai->beforeSets() == info->beforeSets()) found = static_cast<int>(i);
  }
  return found;
}

}  // namespace openreg
