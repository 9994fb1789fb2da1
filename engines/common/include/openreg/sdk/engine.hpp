// openreg engine SDK: the engine table, built from a list of ops and kernels.
//
//   static void relu(const sdk::Call& call) { ... }
//
//   extern "C" OPENREG_ENGINE_EXPORT const openreg_engine* openreg_engine_entry(int32_t, int32_t) {
//     static sdk::EngineDef engine = sdk::EngineDef("my_engine", "0.1.0")
//                                        .op("aten::relu", {sdk::dtypes::float32}, relu);
//     return engine.table();
//   }
//
// EngineDef fills every required field of openreg_engine, dispatches run() on the
// op table index the host passes, checks that index, and wraps every kernel in
// sdk::guard, so exceptions become statuses with messages. A kernel declines a call
// by throwing sdk::unsupported("reason") before writing any output: that is the
// normal way (ABI 1.1), one crossing of the ABI per call.
//
// An optional per-op SupportsCheck runs before the kernel. Only when some op has
// one does the table get a `supports` function, which the host then calls before
// every run(); run() runs the check itself too unless supports() just accepted the
// same call on this thread, so the check holds whatever the host asks first.
#pragma once

#include <openreg/engine.h>
#include <openreg/sdk/call.hpp>
#include <openreg/sdk/status.hpp>

#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace openreg {
namespace sdk {

using Kernel = std::function<void(const Call&)>;
// Throws sdk::unsupported(reason) to decline; returns normally to accept.
using SupportsCheck = std::function<void(const Call&)>;

class EngineDef {
 public:
  EngineDef(std::string name, std::string version,
            int32_t flags = OPENREG_ENGINE_FLAG_HOST_MEMORY | OPENREG_ENGINE_FLAG_CONCURRENT_RUN)
      : name_(std::move(name)), version_(std::move(version)), flags_(flags | OPENREG_ENGINE_FLAG_HOST_MEMORY) {}

  // Adds one op (a schema name with overload, "aten::add.Tensor") served by
  // `kernel` for the listed dtypes of its first tensor argument ({}: any dtype).
  // `supports`, when given, runs before the kernel and declines by throwing
  // sdk::unsupported; declining from the kernel before writing works as well and
  // keeps the engine at one ABI crossing per call (see the top of this file).
  EngineDef& op(std::string name, std::initializer_list<openreg_dtype> dtypes, Kernel kernel,
                SupportsCheck supports = nullptr) {
    ops_.push_back(Op{std::move(name), std::vector<openreg_dtype>(dtypes), std::move(kernel), std::move(supports), false});
    return *this;
  }
  // Same, for an op whose kernel can size its own outputs: it also receives the
  // calls flagged OPENREG_CALL_DYNAMIC_OUTPUTS (outputs unallocated; ask the host
  // through call.raw()->alloc_output). Ops added with op() decline those calls.
  EngineDef& dynamic_op(std::string name, std::initializer_list<openreg_dtype> dtypes, Kernel kernel,
                        SupportsCheck supports = nullptr) {
    op(std::move(name), dtypes, std::move(kernel), std::move(supports));
    ops_.back().dynamic = true;
    return *this;
  }
  // Called once by init() (after the host table is stored); throw to fail init.
  EngineDef& on_init(std::function<void(const Host&)> fn) {
    on_init_ = std::move(fn);
    return *this;
  }
  EngineDef& on_release(std::function<void()> fn) {
    on_release_ = std::move(fn);
    return *this;
  }

  const Host& host() const { return host_; }
  int32_t negotiated_minor() const { return negotiated_minor_; }

  // The ABI table. Call from the entry point, on an EngineDef with static storage
  // duration (it must outlive the process's use of the engine).
  const openreg_engine* table() {
    if (!built_) build();
    return &table_;
  }

 private:
  struct Op {
    std::string name;
    std::vector<openreg_dtype> dtypes;
    Kernel kernel;
    SupportsCheck supports;
    bool dynamic;  // takes OPENREG_CALL_DYNAMIC_OUTPUTS calls
  };

  void build() {
    infos_.clear();
    for (const Op& op : ops_) {
      openreg_op_info info{};
      info.struct_size = sizeof(openreg_op_info);
      info.name = op.name.c_str();
      info.num_dtypes = static_cast<int32_t>(op.dtypes.size());
      info.dtypes = op.dtypes.empty() ? nullptr : op.dtypes.data();
      infos_.push_back(info);
    }
    table_ = openreg_engine{};
    table_.struct_size = sizeof(openreg_engine);
    table_.abi_major = OPENREG_ABI_VERSION_MAJOR;
    table_.abi_minor = OPENREG_ABI_VERSION_MINOR;
    table_.flags = flags_;
    table_.magic = OPENREG_ENGINE_MAGIC;
    table_.name = name_.c_str();
    table_.version = version_.c_str();
    table_.ctx = this;
    table_.init = &EngineDef::abi_init;
    table_.release = &EngineDef::abi_release;
    table_.get_ops = &EngineDef::abi_get_ops;
    table_.run = &EngineDef::abi_run;
    // supports() costs the host a second crossing per call: only when a check needs it.
    bool any_check = false;
    for (const Op& op : ops_) any_check = any_check || static_cast<bool>(op.supports);
    table_.supports = any_check ? &EngineDef::abi_supports : nullptr;
    table_.get_proc_address = nullptr;
    built_ = true;
  }

  const Op& op_for(const openreg_call* call) const {
    OPENREG_SDK_CHECK(call->op_index >= 0 && static_cast<size_t>(call->op_index) < ops_.size(), name_,
                      ": op index ", call->op_index, " for ", call->op_name ? call->op_name : "?",
                      " is outside the op table (", ops_.size(), " entries)");
    const Op& op = ops_[static_cast<size_t>(call->op_index)];
    // Unallocated outputs would reach a kernel that writes through them: decline.
    if ((call->flags & OPENREG_CALL_DYNAMIC_OUTPUTS) && !op.dynamic)
      unsupported(str(op.name, ": this call needs the engine to size its outputs (OPENREG_CALL_DYNAMIC_OUTPUTS); "
                               "register the op with dynamic_op() to accept such calls"));
    return op;
  }

  static openreg_status abi_init(void* ctx, const openreg_host* host, int32_t negotiated_minor) {
    auto* self = static_cast<EngineDef*>(ctx);
    self->host_ = Host(host);
    self->negotiated_minor_ = negotiated_minor;
    return guard(host, [&] {
      if (self->on_init_) self->on_init_(self->host_);
    });
  }
  static void abi_release(void* ctx) {
    auto* self = static_cast<EngineDef*>(ctx);
    guard(nullptr, [&] {
      if (self->on_release_) self->on_release_();
    });
    self->host_ = Host();
  }
  static openreg_status abi_get_ops(void* ctx, const openreg_op_info** ops, int32_t* count) {
    auto* self = static_cast<EngineDef*>(ctx);
    *ops = self->infos_.empty() ? nullptr : self->infos_.data();
    *count = static_cast<int32_t>(self->infos_.size());
    return OPENREG_STATUS_OK;
  }
  // The call supports() accepted last on this thread: run() skips the check for it
  // (the host calls supports then run with the same call). Taken by the next run().
  struct Accepted {
    const EngineDef* engine;
    const openreg_call* call;
    int32_t op_index;
  };
  static Accepted& accepted() {
    static thread_local Accepted a{nullptr, nullptr, -1};
    return a;
  }

  static openreg_status abi_run(void* ctx, const openreg_call* call) {
    auto* self = static_cast<EngineDef*>(ctx);
    return guard(self->host_.raw(), [&] {
      try {
        const Op& op = self->op_for(call);  // declines here, before anything is written
        const Call c(call, self->host_);
        if (op.supports) {
          Accepted& a = accepted();
          const bool asked = a.engine == self && a.call == call && a.op_index == call->op_index;
          a = Accepted{nullptr, nullptr, -1};
          if (!asked) op.supports(c);
        }
        op.kernel(c);
      } catch (const Error& e) {
        // A 1.0 host does not know the error kinds of 1.1 (IndexError, ...): the generic one.
        if (self->negotiated_minor_ < 1 && e.status() >= OPENREG_STATUS_INDEX_ERROR &&
            e.status() <= OPENREG_STATUS_LINALG_ERROR)
          fail(OPENREG_STATUS_INVALID_ARGUMENT, e.what());
        throw;
      }
    });
  }
  static openreg_status abi_supports(void* ctx, const openreg_call* call) {
    auto* self = static_cast<EngineDef*>(ctx);
    accepted() = Accepted{nullptr, nullptr, -1};
    return guard(self->host_.raw(), [&] {
      const Op& op = self->op_for(call);
      if (op.supports) op.supports(Call(call, self->host_));
      accepted() = Accepted{self, call, call->op_index};
    });
  }

  std::string name_, version_;
  int32_t flags_;
  std::vector<Op> ops_;
  std::vector<openreg_op_info> infos_;
  std::function<void(const Host&)> on_init_;
  std::function<void()> on_release_;
  Host host_;
  int32_t negotiated_minor_ = 0;
  openreg_engine table_{};
  bool built_ = false;
};

}  // namespace sdk
}  // namespace openreg
