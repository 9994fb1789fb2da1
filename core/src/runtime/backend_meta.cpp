// openreg's c10::BackendMeta (backend_meta.h): tags, the keys under "openreg."
// PyTorch's API gives backends (a string -> bool map per tensor, the same map
// torch.save writes next to a tensor and torch.load hands back).
#include "backend_meta.h"

#include "runtime.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <c10/core/TensorImpl.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>

#include <map>
#include <string>
#include <string_view>
#include <unordered_map>

namespace openreg {

namespace {

constexpr std::string_view kTagPrefix = "openreg.";

// Immutable once attached: setting tags attaches a new object, so tensors that
// share one (shallow copies) never see each other's later changes.
struct TagMeta final : c10::BackendMeta {
  explicit TagMeta(std::map<std::string, bool> t) : tags(std::move(t)) {}
  c10::intrusive_ptr<c10::BackendMeta> clone(const c10::intrusive_ptr<c10::BackendMeta>& ptr) const override {
    return ptr;
  }
  const std::map<std::string, bool> tags;  // only true values are kept
};

// Functionalization wraps each tensor (FunctionalTensorWrapper) and swaps the
// wrapped value on every mutation: the tags live on the wrapper once set there,
// else are read through to the value it wraps.
const TagMeta* tags_of(const at::Tensor& t) {
  if (!t.defined()) return nullptr;
  if (auto* meta = dynamic_cast<const TagMeta*>(t.unsafeGetTensorImpl()->get_backend_meta())) return meta;
  if (at::functionalization::impl::isFunctionalTensor(t)) {
    return tags_of(at::functionalization::impl::unsafeGetFunctionalWrapper(t)->value());
  }
  return nullptr;
}

void attach(const at::Tensor& t, std::map<std::string, bool> tags) {
  t.unsafeGetTensorImpl()->set_backend_meta(
      tags.empty() ? nullptr : c10::make_intrusive<TagMeta>(std::move(tags)));
}

// torch._C._get_tensor_metadata and torch.save: the tags into the map.
void serialize(const at::Tensor& t, std::unordered_map<std::string, bool>& metadata) {
  if (const TagMeta* meta = tags_of(t)) {
    for (const auto& [key, value] : meta->tags) metadata[key] = value;
  }
}

// torch._C._set_tensor_metadata and torch.load: "openreg." keys set (true) or
// clear (false) a tag; other keys are PyTorch's or another backend's, not ours.
void deserialize(const at::Tensor& t, std::unordered_map<std::string, bool>& metadata) {
  std::map<std::string, bool> tags;
  if (const TagMeta* meta = tags_of(t)) tags = meta->tags;
  bool changed = false;
  for (const auto& [key, value] : metadata) {
    if (key.size() <= kTagPrefix.size() || key.compare(0, kTagPrefix.size(), kTagPrefix) != 0) continue;
    changed = true;
    if (value) tags[key] = true;
    else tags.erase(key);
  }
  if (changed) attach(t, std::move(tags));
}

[[maybe_unused]] const bool registered = [] {
  torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1, &serialize, &deserialize);
  return true;
}();

}  // namespace

void copy_backend_meta(const at::Tensor& src, const at::Tensor& dst) {
  if (src.device().type() != kDevice || dst.device().type() != kDevice) return;
  const TagMeta* meta = tags_of(src);
  if (!meta || meta == tags_of(dst)) return;
  dst.unsafeGetTensorImpl()->set_backend_meta(c10::make_intrusive<TagMeta>(meta->tags));
}

}  // namespace openreg
