// The argument checks CPU and CUDA kernels make and the router's path would
// otherwise skip (outputs are sized on Meta twins, so ATen's own checks never see
// the real tensors): devices (as CUDA: every tensor on the op's device, 0-dim CPU
// tensors and advanced-indexing index lists excepted) and memory overlap of
// written tensors (as CPU). The facts come from the schema, once per op; the
// checks themselves allocate nothing and build text only to raise (tens of ns).
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <optional>
#include <string>

namespace openreg {

struct DeviceRule {
  const c10::FunctionSchema* schema = nullptr;  // for argument names in messages
  // Bit i: argument i holds tensors that must be on the op's device (Tensor,
  // Tensor?, Tensor[]). Not set for Tensor?[] (index lists: ATen moves them to
  // the device), _foreach_*'s CPU `scalars`, nor arguments past the 64th.
  uint64_t device_args = 0;
  // Bit i: argument i holds tensors whose memory a written tensor must not share
  // (every tensor argument, index lists included).
  uint64_t overlap_args = 0;
  bool devices_unchecked = false;       // copies between devices
  bool overlap_unchecked = false;       // metadata-only in-place ops (squeeze_, ...)
  bool internal_overlap_allowed = false;  // fill_, masked_fill_, index_put_: CPU allows (or only warns)
  bool partial_overlap_allowed = false;   // kernels CPU runs unchecked (mm, softmax, ...)
  bool any_overlap_refused = false;       // kernels with at::assert_no_overlap: even full overlap
  // _foreach_* ops: a written list's item k is checked against item k of every other
  // list and against every single tensor argument, as CPU's per-tensor loop checks
  // each of its in-place ops (a partial overlap raises); not item against item across
  // positions, which that loop runs one after the other.
  bool foreach_lists = false;
  // Bit i: argument i is a ScalarType (quantize_per_tensor's dtype, _to_copy's):
  // a quantized one is refused, as quantized tensors are.
  uint64_t dtype_args = 0;
  // max() and min() without a dim: CPU raises on an empty input, their Meta
  // kernels don't (they give a 0-dim result the engines fill with -inf/+inf).
  bool empty_input_refused = false;
  // The in-place random fills (normal_, uniform_, bernoulli_(p), random_,
  // exponential_, geometric_, log_normal_, cauchy_): self keeps its metadata, so
  // their outputs need no Meta kernel (output_sizing.cpp); check_random_fill makes
  // CPU's argument checks, which their Meta kernels make only in part.
  bool random_fill = false;
};

DeviceRule device_rule_for(const c10::FunctionSchema& schema);

// Throws c10::Error "Expected all tensors to be on the same device, ..." (as CUDA
// does) when a tensor argument is neither on `device` nor a 0-dim CPU tensor.
// First, raises refuse_quantized's error for a quantized tensor or dtype argument.
void check_devices(const DeviceRule& rule, const std::string& op_name, c10::ArrayRef<c10::IValue> args,
                   c10::Device device);

// Throws as CPU does ("unsupported operation: ... refer to a single memory
// location") when a written tensor (the arguments `written_args`) has internal
// overlap (an expanded tensor; not for fill_ and the few others CPU allows), or
// shares memory with another tensor argument: partially, unless CPU's kernel runs
// unchecked (mm, softmax, ...); fully (the same elements, as in x.add_(x)) only for
// the kernels that refuse any overlap (index_select, gather, take, cat, scatter,
// index_add, ...). CPU checks some ops before resizing out= arguments
// (TensorIterator, index_select) and some after (gather, cat): call it before
// out= arguments are resized, and again after if any was resized.
// openreg has no quantized tensors: a NotImplementedError that says so and what to
// do instead (quantize on the CPU). Every quantized op raises it: those routed
// here through check_devices, and every op of the QuantizedPrivateUse1 key (where
// ops on a quantized dtype dispatch: empty(dtype=qint8), q_cpu.to("openreg")).
[[noreturn]] void refuse_quantized(const std::string& op_name, std::optional<c10::ScalarType> dtype);

// Throws CPU's error ("max(): Expected reduction dim to be specified for
// input.numel() == 0. ...") when `rule` refuses an empty input and `self` is empty.
void check_empty_input(const DeviceRule& rule, c10::ArrayRef<c10::IValue> args);

void check_written_overlap(const DeviceRule& rule, c10::ArrayRef<c10::IValue> args,
                           c10::ArrayRef<int> written_args);

// For a random fill (rule.random_fill): raises what CPU raises for these arguments
// and self's dtype ("uniform_ expects to return a [from, to) range, ...", "\"normal_kernel_cpu\"
// not implemented for 'Long'"), by running CPU's kernel on a one-element CPU tensor of
// self's dtype with a generator of its own (the global CPU stream does not move).
void check_random_fill(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args);

}  // namespace openreg
