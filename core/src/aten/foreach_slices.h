// The queued call of an elementwise _foreach_ op, cut into slices so that the execution
// queue can interleave it with the ops around it (runtime/interleaved_runs.h: the
// optimizer's step, a slice of the parameters through all of its ops at a time).
#pragma once

#include <openreg/engine.h>

#include <memory>
#include <vector>

#include "../runtime/interleaved_runs.h"

namespace openreg {

class ForeachSlices {
 public:
  // Null unless `call` is an elementwise _foreach_ op (add, mul, lerp, addcdiv, sqrt, ...)
  // whose lists hold contiguous device tensors, position by position of one size, and
  // whose other arguments are numbers or lists of them (no single tensor). `call` must
  // stay valid and unchanged while the result lives.
  static std::unique_ptr<ForeachSlices> of(const openreg_call& call);
  // Whether the op (schema name, "aten::_foreach_add_.List") is of an elementwise
  // _foreach_ family, whose calls of() may cut: an op's plan asks once.
  static bool elementwise_op(const char* op_name);

  const SliceableWork& work() const { return work_; }

  // The call on `count` slices: each list holds one 1-d piece per slice, number lists
  // one item per slice. Valid until the next call (the worker's thread only).
  openreg_call& sliced(const Slice* slices, size_t count);

 private:
  explicit ForeachSlices(const openreg_call& call) : call_(call) {}

  const openreg_call& call_;
  SliceableWork work_;
  std::vector<openreg_value> values_;
  std::vector<openreg_tensor> pieces_;
  std::vector<const openreg_tensor*> items_;
  std::vector<double> doubles_;
  std::vector<int64_t> lengths_;
  std::vector<openreg_tensor> outputs_;
  openreg_call sub_{};
};

}  // namespace openreg
