// Which fused-attention inputs the reference engine (aten_ref) runs through torch
// CPU's flash attention kernel rather than its float64 definition: one head size for
// query and value, and unit-stride rows in query, key and value. Header-only, shared by
// aten_ref (engines/aten_ref/attention_cpu.cpp, which runs the kernel) and core's SDPA
// choice (core/src/aten/attention.cpp, which sends inference to the reference engine
// only for inputs it runs so), so the two cannot disagree.
#pragma once

#include <ATen/core/Tensor.h>

namespace openreg::bridge {

inline bool unit_stride_rows(const at::Tensor& t) { return t.stride(-1) == 1 || t.size(-1) == 1; }

// The operands' part of the rule; the mask's (bool or the query's dtype, not with
// is_causal) and non-empty operands are checked by both callers' own input checks.
inline bool reference_flash_takes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return v.size(-1) == q.size(-1) && unit_stride_rows(q) && unit_stride_rows(k) && unit_stride_rows(v);
}

}  // namespace openreg::bridge
