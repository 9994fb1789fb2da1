#include "op_entry.h"

#include <c10/util/Exception.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace aten_ref {
namespace {

c10::TypePtr unwrap_optional(const c10::TypePtr& t) {
  if (auto opt = t->castRaw<c10::OptionalType>()) return opt->getElementType();
  return t;
}

ArgDecode decode_of(const c10::Argument& arg) {
  if (auto list = unwrap_optional(arg.real_type())->castRaw<c10::ListType>()) {
    if (list->getElementType()->kind() == c10::TypeKind::OptionalType) return ArgDecode::kOptionalTensorList;
  }
  return ArgDecode::kPlain;
}

// Returns fresh tensors, writes no argument, draws no random numbers (an out=
// kernel could draw them in another order than the functional one).
bool is_functional(const c10::FunctionSchema& s) {
  if (s.returns().empty() || s.is_vararg() || s.is_varret()) return false;
  for (const auto& r : s.returns()) {
    if (r.alias_info() || r.real_type()->kind() != c10::TypeKind::TensorType) return false;
  }
  for (const auto& a : s.arguments()) {
    if (a.alias_info() || unwrap_optional(a.real_type())->kind() == c10::TypeKind::GeneratorType) return false;
  }
  return true;
}

// o is f's out= form: f's arguments (same names, types, kwarg-only-ness), then
// one kwarg-only Tensor(a!) per return, returned.
bool is_out_form_of(const c10::FunctionSchema& f, const c10::FunctionSchema& o) {
  const size_t n = f.arguments().size(), m = f.returns().size();
  if (o.arguments().size() != n + m || o.returns().size() != m) return false;
  for (size_t i = 0; i < n; ++i) {
    const auto &a = f.arguments()[i], &b = o.arguments()[i];
    if (a.name() != b.name() || a.kwarg_only() != b.kwarg_only() || b.alias_info() ||
        !(*a.real_type() == *b.real_type())) {
      return false;
    }
  }
  for (size_t j = 0; j < m; ++j) {
    const auto& out = o.arguments()[n + j];
    const auto& ret = o.returns()[j];
    if (!out.kwarg_only() || out.real_type()->kind() != c10::TypeKind::TensorType || !out.alias_info() ||
        !out.alias_info()->isWrite() || !ret.alias_info() || !(*ret.alias_info() == *out.alias_info())) {
      return false;
    }
  }
  return true;
}

// Overloads with a CPU kernel of their own, by op name ("aten::add"). An out=
// overload whose kernel is registered elsewhere (CompositeExplicitAutograd's
// generated ones) computes then copies: no better than compute-and-store.
const std::unordered_map<std::string, std::vector<c10::OperatorName>>& cpu_overloads() {
  static const auto* index = [] {
    auto* m = new std::unordered_map<std::string, std::vector<c10::OperatorName>>();
    for (auto& name : c10::Dispatcher::singleton().getAllOpNamesForDispatchKey(c10::DispatchKey::CPU)) {
      (*m)[name.name].push_back(name);
    }
    return m;
  }();
  return *index;
}

std::optional<c10::OperatorHandle> find_out_form(const c10::FunctionSchema& f) {
  if (!is_functional(f)) return std::nullopt;
  const auto& index = cpu_overloads();
  auto it = index.find(f.name());
  if (it == index.end()) return std::nullopt;
  for (const auto& name : it->second) {
    auto handle = c10::Dispatcher::singleton().findSchema(name);
    if (handle && is_out_form_of(f, handle->schema())) return handle;
  }
  return std::nullopt;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

std::unique_ptr<OpEntry> resolve(const char* full_name) {
  std::string name = full_name, overload;
  auto dot = name.find('.');
  if (dot != std::string::npos) {
    overload = name.substr(dot + 1);
    name.resize(dot);
  }
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  TORCH_CHECK(handle.has_value(), "aten_ref: no ATen operator named '", full_name, "'");
  auto e = std::make_unique<OpEntry>(full_name, *handle);
  const auto& schema = handle->schema();
  for (const auto& arg : schema.arguments()) e->decode.push_back(decode_of(arg));
  e->leaves_unused_outputs_empty = e->name == "aten::native_batch_norm" || e->name == "aten::native_batch_norm.out" ||
                                   starts_with(e->name, "aten::_native_batch_norm_legit");
  if (e->name == "aten::native_batch_norm_backward") e->saved_stats = OpEntry::SavedStatsArgs{1, 2, 5, 6};
  if (e->name == "aten::native_layer_norm_backward") e->saved_stats = OpEntry::SavedStatsArgs{1, 5, 3, 4};
  if (!e->leaves_unused_outputs_empty) e->out_op = find_out_form(schema);
  return e;
}

// The lock-free front: slots hashed by the op_name pointer, each holding an
// entry (or null). A hit is checked by name, so a pointer that now names another
// op, or two pointers sharing slots, only cost a trip to the slow path.
constexpr size_t kSlots = 2048;  // a power of two; more than ATen has ops
constexpr size_t kProbes = 8;
std::atomic<const OpEntry*> g_slots[kSlots];

size_t home_slot(const char* p) {
  uint64_t x = reinterpret_cast<uintptr_t>(p);
  x *= 0x9E3779B97F4A7C15ULL;
  return static_cast<size_t>(x >> 40) & (kSlots - 1);
}

const OpEntry& find_slow(const char* op_name, size_t home) {
  static std::mutex mutex;
  static auto* by_name = new std::unordered_map<std::string, std::unique_ptr<OpEntry>>();  // never freed
  std::lock_guard<std::mutex> lock(mutex);
  auto it = by_name->find(op_name);
  if (it == by_name->end()) it = by_name->emplace(op_name, resolve(op_name)).first;
  const OpEntry* e = it->second.get();
  for (size_t i = 0; i < kProbes; ++i) {
    auto& slot = g_slots[(home + i) & (kSlots - 1)];
    if (!slot.load(std::memory_order_relaxed)) {
      slot.store(e, std::memory_order_release);
      return *e;
    }
  }
  g_slots[home].store(e, std::memory_order_release);  // every slot taken: the newest wins
  return *e;
}

}  // namespace

const OpEntry& find_op(const char* op_name) {
  const size_t home = home_slot(op_name);
  for (size_t i = 0; i < kProbes; ++i) {
    const OpEntry* e = g_slots[(home + i) & (kSlots - 1)].load(std::memory_order_acquire);
    if (!e) break;
    if (std::strcmp(e->name.c_str(), op_name) == 0) return *e;
  }
  return find_slow(op_name, home);
}

}  // namespace aten_ref
