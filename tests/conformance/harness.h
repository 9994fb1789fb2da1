// The conformance harness: builds hostile inputs for one op call, runs it on the
// engine under test and on the reference engine (aten_ref) through the ABI, and
// compares. Torch-free: both engines are dlopened like the device runtime does.
#pragma once

#include <openreg/engine.h>

#include "engine_host.h"

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace conformance {

using Shape = std::vector<int64_t>;

// How a tensor's elements sit in memory.
enum class Layout {
  Contiguous,  // row-major
  Transposed,  // last two dimensions swapped in memory (a .t() view)
  Gapped,      // every dimension strided with gaps, plus a byte offset (a sliced view)
  Expanded,    // dimension 0 has stride 0 (an .expand() view)
};
const char* layout_name(Layout layout);

// What values an input holds.
enum class Domain {
  Any,       // floats in [-2, 2], ints in [-5, 5]
  Positive,  // floats in [0.25, 3], ints in [1, 5]
  Unit,      // floats in (0, 1)
  Index,     // ints in [0, hi)
};

struct TensorSpec {
  openreg_dtype dtype{};
  Shape shape;
  Layout layout = Layout::Contiguous;
  Domain domain = Domain::Any;
  int64_t hi = 0;           // Domain::Index upper bound (exclusive)
  bool is_out = false;      // an out= argument: shape comes from the functional twin
};

struct Arg {
  int32_t kind = OPENREG_VALUE_NONE;
  int tensor = -1;              // TENSOR: index into Case::tensors
  std::vector<int> tensors;     // TENSOR_LIST (-1: a NULL item)
  int64_t i = 0;
  double d = 0;
  std::vector<int64_t> ints;
  std::vector<double> doubles;
  std::string str;
  int32_t scalar_kind = OPENREG_SCALAR_DOUBLE;
  openreg_dtype dtype{};

  static Arg none() { return Arg{}; }
  static Arg tensor_at(int index) { Arg a; a.kind = OPENREG_VALUE_TENSOR; a.tensor = index; return a; }
  static Arg integer(int64_t v) { Arg a; a.kind = OPENREG_VALUE_INT; a.i = v; return a; }
  static Arg real(double v) { Arg a; a.kind = OPENREG_VALUE_DOUBLE; a.d = v; return a; }
  static Arg boolean(bool v) { Arg a; a.kind = OPENREG_VALUE_BOOL; a.i = v; return a; }
  static Arg int_list(std::vector<int64_t> v) { Arg a; a.kind = OPENREG_VALUE_INT_LIST; a.ints = std::move(v); return a; }
  static Arg bool_list(std::vector<int64_t> v) { Arg a; a.kind = OPENREG_VALUE_BOOL_LIST; a.ints = std::move(v); return a; }
  static Arg scalar(double v) { Arg a; a.kind = OPENREG_VALUE_SCALAR; a.scalar_kind = OPENREG_SCALAR_DOUBLE; a.d = v; return a; }
  static Arg scalar_int(int64_t v) { Arg a; a.kind = OPENREG_VALUE_SCALAR; a.scalar_kind = OPENREG_SCALAR_INT; a.i = v; return a; }
  static Arg string(std::string v) { Arg a; a.kind = OPENREG_VALUE_STRING; a.str = std::move(v); return a; }
  static Arg dtype_of(openreg_dtype v) { Arg a; a.kind = OPENREG_VALUE_DTYPE; a.dtype = v; return a; }
  static Arg tensor_list(std::vector<int> v) { Arg a; a.kind = OPENREG_VALUE_TENSOR_LIST; a.tensors = std::move(v); return a; }
};

struct Tolerance {
  double rtol = 0, atol = 0;
};

// One call of one op: inputs, scalars, and how its outputs relate to them.
struct Case {
  std::string label;                 // "5x7x11x13 contiguous"
  std::vector<TensorSpec> tensors;
  std::vector<Arg> args;             // schema order
  int num_outputs = 1;               // schema returns
  int inplace_arg = -1;              // in-place op: this argument is output 0
  std::vector<int> out_args;         // out= op: these arguments are the outputs
  std::string twin;                  // out= op: functional op that sizes the outputs
  bool strided_outputs = false;      // functional outputs get gaps and a byte offset
  std::vector<int> skip_outputs;     // outputs whose values are implementation-defined
  std::vector<int> mutated;          // tensors (Case::tensors indices) the op writes in place
                                     // besides its outputs: compared with the reference too
  double tol_scale = 1;              // accumulating ops: looser by this factor
  bool perf_only = false;            // a large case for --mode=perf
};

// The families know which ops they can build calls for.
struct OpCases {
  bool known = false;                       // false: no case family for this op
  std::vector<openreg_dtype> dtypes;        // dtypes the op makes sense for
  std::vector<Case> cases;
};
OpCases cases_for(const std::string& op, openreg_dtype dtype);
std::vector<openreg_dtype> natural_dtypes(const std::string& op);

Tolerance default_tolerance(openreg_dtype dtype);

// --------------------------------------------------------------- running

struct Buffer;

struct RunResult {
  enum Status { Pass, Fail, Unsupported, Error } status = Pass;
  std::string message;     // why (failures: what differed, where)
  bool weak = false;       // reference output mostly zeros: the case checks little
  std::string weak_note;
};

struct Harness {
  openreg_host host{};
  openreg::Engine* engine = nullptr;      // under test
  openreg::Engine* reference = nullptr;   // aten_ref
  std::map<std::string, Tolerance> tolerance_overrides;  // "op:dtype" or "op" -> tolerance

  // Runs one case: reference, then engine, then every check.
  RunResult run(const std::string& op, openreg_dtype dtype, const Case& c, uint64_t seed);
  // Median seconds per call of the engine and of the reference on this case.
  bool time(const std::string& op, openreg_dtype dtype, const Case& c, uint64_t seed, int reps,
            double* engine_s, double* reference_s, std::string* why);

  Tolerance tolerance(const std::string& op, openreg_dtype dtype, const Case& c) const;
};

// The host services the harness gives engines: a real thread pool behind
// parallel_for (so data races in kernels show up), the loader's error sink.
openreg_host make_pool_host(int threads);

std::string shape_str(const Shape& s);

}  // namespace conformance
