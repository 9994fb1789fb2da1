// Case families: for each op the suite knows, the calls that exercise it on hostile
// inputs (odd prime shapes, zero-size, 0-dim, transposed, strided with a byte
// offset, expanded, broadcast, large enough to take the parallel path).
//
// An op name is parsed into its family and variant: "aten::add.Tensor"
// (functional), "aten::add_.Tensor" (in-place: output 0 is self), "aten::add.out"
// (out=: the trailing out arguments are the outputs, sized by the functional twin).
// Adding an op: add it to a family table below (or a new family function).
#include "harness.h"

#include <openreg/sdk/dtype.hpp>

#include <cmath>
#include <functional>
#include <set>

namespace conformance {

namespace {

namespace sdk = openreg::sdk;
namespace dt = openreg::sdk::dtypes;

struct Name {
  std::string base;      // "add_"
  std::string root;      // "add"
  std::string overload;  // "Tensor", "out", ""
  bool inplace = false;
  bool out = false;
};

Name parse(const std::string& op) {
  Name n;
  std::string s = op.rfind("aten::", 0) == 0 ? op.substr(6) : op;
  auto dot = s.find('.');
  n.base = s.substr(0, dot);
  n.overload = dot == std::string::npos ? "" : s.substr(dot + 1);
  n.inplace = n.base.size() > 1 && n.base.back() == '_' && n.base.compare(0, 2, "__") != 0;
  n.root = n.inplace ? n.base.substr(0, n.base.size() - 1) : n.base;
  // "grad_input": the out= form of a backward (smooth_l1_loss_backward.grad_input).
  n.out = n.overload == "out" || n.overload == "grad_input" ||
          (n.overload.size() > 4 && n.overload.compare(n.overload.size() - 4, 4, "_out") == 0);
  return n;
}

// The functional op whose outputs size an out= variant's out arguments.
std::string twin_of(const Name& n, const std::string& functional_overload) {
  std::string ov = n.overload;
  if (ov == "out") ov = functional_overload;
  else if (ov.size() > 4 && ov.compare(ov.size() - 4, 4, "_out") == 0) ov = ov.substr(0, ov.size() - 4);
  return "aten::" + n.root + (ov.empty() ? "" : "." + ov);
}

bool is_float(openreg_dtype d) { return d.code == OPENREG_DTYPE_CODE_FLOAT || d.code == OPENREG_DTYPE_CODE_BFLOAT; }

const std::vector<openreg_dtype> kFloats{dt::float32, dt::float64, dt::bfloat16, dt::float16};
const std::vector<openreg_dtype> kNumeric{dt::float32, dt::float64, dt::bfloat16, dt::float16, dt::int64, dt::int32};
const std::vector<openreg_dtype> kFloat32{dt::float32};  // CPU's whole-layer LSTM kernel
const std::vector<openreg_dtype> kBool{dt::bool_};  // where: the condition's dtype routes it
const std::vector<openreg_dtype> kAll{dt::float32, dt::float64, dt::bfloat16, dt::float16, dt::int64, dt::int32, dt::bool_};

TensorSpec T(openreg_dtype d, Shape s, Layout l = Layout::Contiguous, Domain dom = Domain::Any) {
  TensorSpec t;
  t.dtype = d;
  t.shape = std::move(s);
  t.layout = l;
  t.domain = dom;
  return t;
}

// A case under construction: tensors and args side by side.
struct Builder {
  Case c;
  explicit Builder(std::string label) { c.label = std::move(label); }
  Builder& tensor(TensorSpec spec) {
    c.tensors.push_back(std::move(spec));
    c.args.push_back(Arg::tensor_at(static_cast<int>(c.tensors.size()) - 1));
    return *this;
  }
  Builder& optional_tensor(bool present, TensorSpec spec) {
    if (present) return tensor(std::move(spec));
    c.args.push_back(Arg::none());
    return *this;
  }
  Builder& arg(Arg a) {
    c.args.push_back(std::move(a));
    return *this;
  }
  Case done() { return c; }
};

// Turns functional cases into the in-place or out= variant `n` asks for.
std::vector<Case> variant(const Name& n, const std::string& twin, std::vector<Case> cases, int num_outputs = 1) {
  std::vector<Case> out;
  for (Case& c : cases) {
    c.num_outputs = num_outputs;
    if (n.inplace) {
      // self must already have the result's shape and must not be an expanded view.
      if (c.tensors.empty() || c.tensors[0].layout == Layout::Expanded) continue;
      c.inplace_arg = 0;
      c.strided_outputs = false;
      out.push_back(c);
    } else if (n.out) {
      for (int k = 0; k < num_outputs; ++k) {
        TensorSpec o;
        o.dtype = c.tensors.empty() ? dt::float32 : c.tensors[0].dtype;
        o.is_out = true;
        c.tensors.push_back(o);
        c.args.push_back(Arg::tensor_at(static_cast<int>(c.tensors.size()) - 1));
        c.out_args.push_back(static_cast<int>(c.args.size()) - 1);
      }
      c.twin = twin;
      out.push_back(c);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// ------------------------------------------------------------ elementwise

struct ShapeCase {
  std::string label;
  Shape shape;
  Layout layout;
  bool strided_out;
};

const std::vector<ShapeCase>& unary_shapes() {
  static const std::vector<ShapeCase> s{
      {"5x7x11x13 contiguous", {5, 7, 11, 13}, Layout::Contiguous, false},
      {"zero-size 0x3", {0, 3}, Layout::Contiguous, false},
      {"0-dim", {}, Layout::Contiguous, false},
      {"11x13 transposed", {11, 13}, Layout::Transposed, false},
      {"5x7x11 strided+offset, strided output", {5, 7, 11}, Layout::Gapped, true},
      {"7x13 expanded (stride 0)", {7, 13}, Layout::Expanded, false},
      {"257x263 (parallel path)", {257, 263}, Layout::Contiguous, false},
  };
  return s;
}

Case perf_case(Case c) {
  c.perf_only = true;
  return c;
}

Domain unary_domain(const std::string& root) {
  static const std::set<std::string> positive{"log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal"};
  static const std::set<std::string> unit{"acos", "asin", "atanh", "logit"};
  if (positive.count(root)) return Domain::Positive;
  if (unit.count(root)) return Domain::Unit;
  return Domain::Any;
}

// neg, abs, exp, ..., gelu(approximate), leaky_relu(negative_slope), hardtanh(min, max)
std::vector<Case> unary(const Name& n, openreg_dtype d) {
  std::vector<Case> cases;
  const Domain dom = unary_domain(n.root);
  auto extra = [&](Builder& b, int which) {
    if (n.root == "gelu") b.arg(Arg::string(which % 2 ? "tanh" : "none"));
    if (n.root == "leaky_relu") b.arg(Arg::scalar(0.01));
    if (n.root == "hardtanh") b.arg(Arg::scalar(-1.0)).arg(Arg::scalar(1.0));
    if (n.root == "clamp") b.arg(Arg::scalar(-0.5)).arg(Arg::scalar(0.75));
    // pow.Tensor_Scalar, pow.Tensor_Scalar_out, pow_.Scalar: a tensor base, a Scalar exponent.
    if (n.root == "pow" && (n.overload.rfind("Tensor_Scalar", 0) == 0 || (n.inplace && n.overload == "Scalar")))
      b.arg(Arg::scalar(2.0));
  };
  int k = 0;
  for (const auto& s : unary_shapes()) {
    Builder b(s.label + (n.root == "gelu" ? (k % 2 ? ", approximate=tanh" : ", approximate=none") : ""));
    b.tensor(T(d, s.shape, s.layout, dom));
    extra(b, k++);
    b.c.strided_outputs = s.strided_out;
    cases.push_back(b.done());
  }
  if (n.root == "clamp" && is_float(d)) {  // a NaN bound makes every output NaN (ATen)
    Builder b("5x7 NaN min, no max");
    b.tensor(T(d, {5, 7})).arg(Arg::scalar(std::nan(""))).arg(Arg::none());
    cases.push_back(b.done());
  }
  Builder p("1024x1024 (perf)");
  p.tensor(T(d, {1024, 1024}, Layout::Contiguous, dom));
  extra(p, 0);
  cases.push_back(perf_case(p.done()));
  return variant(n, twin_of(n, ""), cases);
}

bool has_alpha(const std::string& root) { return root == "add" || root == "sub" || root == "rsub"; }

Arg alpha_for(openreg_dtype d) { return is_float(d) ? Arg::scalar(0.5) : Arg::scalar_int(2); }

// add/sub/mul/div/maximum/minimum/comparisons: .Tensor, .Scalar, in-place, out=
std::vector<Case> binary(const Name& n, openreg_dtype d) {
  const bool scalar_other = n.overload.rfind("Scalar", 0) == 0;
  const bool divides = n.root == "div" || n.root == "remainder" || n.root == "fmod" || n.root == "floor_divide";
  const Domain other_dom = divides ? Domain::Positive : Domain::Any;
  struct BS {
    std::string label;
    Shape a, b;
    Layout la, lb;
    bool strided_out;
  };
  std::vector<BS> shapes{
      {"5x7x11x13 both", {5, 7, 11, 13}, {5, 7, 11, 13}, Layout::Contiguous, Layout::Contiguous, false},
      {"broadcast 5x7x11x13 with 11x1", {5, 7, 11, 13}, {11, 1}, Layout::Contiguous, Layout::Contiguous, false},
      {"broadcast both 5x1x11 with 7x1", {5, 1, 11}, {7, 1}, Layout::Contiguous, Layout::Contiguous, false},
      {"zero-size 0x3 with 3", {0, 3}, {3}, Layout::Contiguous, Layout::Contiguous, false},
      {"0-dim both", {}, {}, Layout::Contiguous, Layout::Contiguous, false},
      {"5x7x11 with 0-dim", {5, 7, 11}, {}, Layout::Contiguous, Layout::Contiguous, false},
      {"11x13 transposed with contiguous", {11, 13}, {11, 13}, Layout::Transposed, Layout::Contiguous, false},
      {"5x7x11 strided+offset both, strided output", {5, 7, 11}, {5, 7, 11}, Layout::Gapped, Layout::Gapped, true},
      {"7x13 expanded with 7x13", {7, 13}, {7, 13}, Layout::Expanded, Layout::Contiguous, false},
      {"257x263 with 263 (parallel path)", {257, 263}, {263}, Layout::Contiguous, Layout::Contiguous, false},
      {"257x263 both (parallel loops)", {257, 263}, {257, 263}, Layout::Contiguous, Layout::Contiguous, false},
  };
  // Above 1M elements, float32 only (the threshold is float32's; a case this size
  // costs seconds per dtype): engines' library primitives (onednn's binary).
  if (d.code == OPENREG_DTYPE_CODE_FLOAT && d.bits == 32)
    shapes.push_back({"1100x1000 both", {1100, 1000}, {1100, 1000}, Layout::Contiguous, Layout::Contiguous, false});
  std::vector<Case> cases;
  auto finish = [&](Builder& b) {
    if (n.overload == "Tensor_mode") b.arg(Arg::string("floor"));
    if (has_alpha(n.root)) b.arg(alpha_for(d));
  };
  for (const auto& s : shapes) {
    if (scalar_other && s.b.size() != s.a.size()) continue;  // one case per self shape is enough
    Builder b(s.label);
    b.tensor(T(d, s.a, s.la));
    if (scalar_other) b.arg(is_float(d) ? Arg::scalar(1.5) : Arg::scalar_int(3));
    else b.tensor(T(d, s.b, s.lb, other_dom));
    finish(b);
    b.c.strided_outputs = s.strided_out;
    if (n.inplace && s.a.size() < s.b.size()) continue;
    if (n.inplace && s.label.rfind("broadcast both", 0) == 0) continue;
    cases.push_back(b.done());
  }
  Builder p("1024x1024 both (perf)");
  p.tensor(T(d, {1024, 1024}));
  if (scalar_other) p.arg(Arg::scalar(1.5));
  else p.tensor(T(d, {1024, 1024}, Layout::Contiguous, other_dom));
  finish(p);
  cases.push_back(perf_case(p.done()));
  const bool plain = n.root == "maximum" || n.root == "minimum";
  return variant(n, twin_of(n, plain ? "" : "Tensor"), cases);
}

// addcmul/addcdiv(self, t1, t2, value), lerp(self, end, weight)
std::vector<Case> ternary(const Name& n, openreg_dtype d) {
  std::vector<Case> cases;
  for (const auto& s : unary_shapes()) {
    Builder b(s.label);
    b.tensor(T(d, s.shape, s.layout));
    b.tensor(T(d, s.shape));
    if (n.root == "lerp") {
      if (n.overload.rfind("Tensor", 0) == 0) b.tensor(T(d, s.shape, Layout::Contiguous, Domain::Unit));  // .Tensor, .Tensor_out
      else b.arg(Arg::scalar(0.3));
    } else {
      b.tensor(T(d, s.shape, Layout::Contiguous, n.root == "addcdiv" ? Domain::Positive : Domain::Any));
      b.arg(Arg::scalar(-0.5));
    }
    b.c.strided_outputs = s.strided_out;
    cases.push_back(b.done());
  }
  return variant(n, twin_of(n, n.root == "lerp" ? "Scalar" : ""), cases);
}

// threshold_backward(grad, self, threshold), sigmoid/tanh_backward(grad, output),
// gelu_backward(grad, self, approximate), silu_backward(grad, self),
// leaky_relu_backward(grad, self, negative_slope, self_is_result),
// hardtanh_backward(grad, self, min_val, max_val), hardsigmoid_backward(grad, self)
std::vector<Case> activation_backward(const Name& n, openreg_dtype d) {
  std::vector<Case> cases;
  int k = 0;
  for (const auto& s : unary_shapes()) {
    Builder b(s.label);
    b.tensor(T(d, s.shape, s.layout));
    b.tensor(T(d, s.shape, Layout::Contiguous, n.root == "sigmoid_backward" ? Domain::Unit : Domain::Any));
    if (n.root == "threshold_backward") b.arg(Arg::scalar(0.0));
    if (n.root == "leaky_relu_backward") b.arg(Arg::scalar(k % 2 ? 0.2 : 0.01)).arg(Arg::boolean(false));
    if (n.root == "hardtanh_backward") b.arg(Arg::scalar(k % 2 ? -0.5 : -1.0)).arg(Arg::scalar(k % 2 ? 1.5 : 1.0));
    if (n.root == "gelu_backward") {
      b.arg(Arg::string(k % 2 ? "tanh" : "none"));
      b.c.label += k % 2 ? ", approximate=tanh" : ", approximate=none";
    }
    ++k;
    b.c.strided_outputs = s.strided_out;
    cases.push_back(b.done());
  }
  return variant(n, "aten::" + n.root, cases);
}

// _prelu_kernel(self, weight), _prelu_kernel_backward(grad, self, weight): the
// weight shaped to broadcast against self, as F.prelu passes it.
std::vector<Case> prelu(const Name& n, openreg_dtype d) {
  const bool backward = n.root == "_prelu_kernel_backward";
  struct PS {
    std::string label;
    Shape self, weight;
    Layout layout;
  };
  const std::vector<PS> shapes{
      {"2x3x5x7, a slope per channel", {2, 3, 5, 7}, {1, 3, 1, 1}, Layout::Contiguous},
      {"5x7, one slope", {5, 7}, {1}, Layout::Contiguous},
      {"5x7, a slope per column", {5, 7}, {1, 7}, Layout::Contiguous},
      {"transposed 7x11", {7, 11}, {1, 11}, Layout::Transposed},
      {"strided+offset 5x7", {5, 7}, {1, 7}, Layout::Gapped},
      {"zero-size 0x3x4", {0, 3, 4}, {1, 3, 1}, Layout::Contiguous},
      {"8x32x16x16 (parallel path)", {8, 32, 16, 16}, {1, 32, 1, 1}, Layout::Contiguous},
  };
  std::vector<Case> cases;
  for (const auto& s : shapes) {
    Builder b(s.label);
    if (backward) b.tensor(T(d, s.self));
    b.tensor(T(d, s.self, s.layout)).tensor(T(d, s.weight));
    cases.push_back(b.done());
  }
  if (backward) {  // one gradient value repeated along each row (an expanded gradient)
    Builder b("300, expanded gradient, one slope");
    b.tensor(T(d, {300}, Layout::Expanded)).tensor(T(d, {300})).tensor(T(d, {1}));
    cases.push_back(b.done());
  }
  return variant(n, "aten::" + n.root, cases, backward ? 2 : 1);
}

// fill_.Scalar, zero_, clone, copy_
std::vector<Case> memory_ops(const Name& n, openreg_dtype d) {
  std::vector<Case> cases;
  for (const auto& s : unary_shapes()) {
    Builder b(s.label);
    if (n.root == "copy") {
      if (s.layout == Layout::Expanded) continue;
      b.tensor(T(d, s.shape, s.layout));
      b.tensor(T(d, s.shape, s.layout == Layout::Contiguous ? Layout::Transposed : Layout::Contiguous));
      b.arg(Arg::boolean(false));
    } else {
      b.tensor(T(d, s.shape, s.layout));
      if (n.root == "fill") b.arg(is_float(d) ? Arg::scalar(-1.25) : Arg::scalar_int(7));
      if (n.root == "clone") b.arg(Arg::none());
    }
    b.c.strided_outputs = s.strided_out;
    cases.push_back(b.done());
  }
  if (n.root == "copy") {
    Builder b("broadcast 13 into 11x13");
    b.tensor(T(d, {11, 13})).tensor(T(d, {13})).arg(Arg::boolean(false));
    cases.push_back(b.done());
    if (d.code != OPENREG_DTYPE_CODE_BOOL) {
      Builder c("float64 source into this dtype");
      c.tensor(T(d, {5, 7})).tensor(T(dt::float64, {5, 7})).arg(Arg::boolean(false));
      cases.push_back(c.done());
    }
  }
  return variant(n, "aten::" + n.root, cases);
}

// ------------------------------------------------------------ reductions

std::vector<Case> reduction(const Name& n, openreg_dtype d) {
  struct RS {
    std::string label;
    Shape shape;
    Layout layout;
    std::vector<int64_t> dims;  // {}: every dim
    bool keepdim;
    bool strided_out = false;
  };
  const bool index_op = n.root == "argmax" || n.root == "argmin" || (n.root == "max" && n.overload == "dim") ||
                        (n.root == "min" && n.overload == "dim");
  const std::vector<RS> shapes{
      {"5x7x11 dim 1", {5, 7, 11}, Layout::Contiguous, {1}, false},
      {"5x7x11 dim -1 keepdim", {5, 7, 11}, Layout::Contiguous, {-1}, true},
      {"5x7x11 dims 0,2", {5, 7, 11}, Layout::Contiguous, {0, 2}, false},
      {"11x13 transposed dim 0", {11, 13}, Layout::Transposed, {0}, false},
      {"5x7x11 strided+offset dim 2, strided output", {5, 7, 11}, Layout::Gapped, {2}, false, true},
      {"zero-size 0x3 dim 1", {0, 3}, Layout::Contiguous, {1}, false},
      {"257x263 dim 1 (parallel path)", {257, 263}, Layout::Contiguous, {1}, false},
      {"257x263 dim 0", {257, 263}, Layout::Contiguous, {0}, false},
      // Only size-1 dims reduced: nothing to add up, the output is the input.
      {"5x1x7 dim 1 (size 1)", {5, 1, 7}, Layout::Contiguous, {1}, false},
      {"5x7x11 every dim (empty dim list)", {5, 7, 11}, Layout::Contiguous, {}, false},
  };
  std::vector<Case> cases;
  for (const auto& s : shapes) {
    if (index_op && s.dims.size() != 1) continue;
    if (n.root == "sum" && n.overload.empty() && s.dims.empty()) continue;  // sum(self): already every dim
    Builder b(s.label);
    b.tensor(T(d, s.shape, s.layout));
    if (n.root == "sum" && n.overload.empty()) {
      b.arg(Arg::none());  // sum(self, dtype): everything
      b.c.label = "all of " + shape_str(s.shape) + " " + layout_name(s.layout);
    } else if (index_op && n.overload != "dim") {  // argmax(self, dim?, keepdim)
      b.arg(Arg::integer(s.dims[0])).arg(Arg::boolean(s.keepdim));
    } else if (index_op) {  // max.dim(self, dim, keepdim)
      b.arg(Arg::integer(s.dims[0])).arg(Arg::boolean(s.keepdim));
    } else {
      b.arg(Arg::int_list(s.dims)).arg(Arg::boolean(s.keepdim));
      if (n.root == "sum" || n.root == "mean") b.arg(Arg::none());
    }
    b.c.tol_scale = 10;
    b.c.strided_outputs = s.strided_out;
    cases.push_back(b.done());
  }
  const int outputs = (n.root == "max" || n.root == "min") && !n.out && n.overload == "dim" ? 2 : 1;
  std::string twin = n.root == "sum" ? "aten::sum.dim_IntList" : twin_of(n, n.root == "mean" ? "dim" : "");
  return variant(n, twin, cases, outputs);
}

// ---------------------------------------------------------------- matmul

std::vector<Case> matmul(const Name& n, openreg_dtype d) {
  const bool batched = n.root == "bmm" || n.root == "baddbmm";
  const bool add = n.root == "addmm" || n.root == "baddbmm";
  struct MS {
    std::string label;
    int64_t m, k, nn;
    Layout la, lb;
    int self_kind;  // addmm: 0 full, 1 row vector, 2 0-dim, 3 row vector with beta = alpha = 1
  };
  const std::vector<MS> shapes{
      {"5x7 @ 7x11", 5, 7, 11, Layout::Contiguous, Layout::Contiguous, 0},
      {"13x1 @ 1x17", 13, 1, 17, Layout::Contiguous, Layout::Contiguous, 1},
      {"zero rows 0x7 @ 7x3", 0, 7, 3, Layout::Contiguous, Layout::Contiguous, 0},
      {"zero inner 5x0 @ 0x3", 5, 0, 3, Layout::Contiguous, Layout::Contiguous, 0},
      {"11x13 transposed @ 13x5", 11, 13, 5, Layout::Transposed, Layout::Contiguous, 1},
      {"11x13 @ 13x5 transposed", 11, 13, 5, Layout::Contiguous, Layout::Transposed, 0},
      {"strided+offset 7x5 @ 5x9", 7, 5, 9, Layout::Gapped, Layout::Gapped, 2},
      {"67x131 @ 131x97", 67, 131, 97, Layout::Contiguous, Layout::Contiguous, 0},
      // A Linear's bias on enough rows for an engine's GEMM primitive (its bias argument).
      {"67x131 @ 131x97, row bias, beta = alpha = 1", 67, 131, 97, Layout::Contiguous, Layout::Transposed, 3},
  };
  std::vector<Case> cases;
  for (const auto& s : shapes) {
    Builder b(s.label);
    const int64_t bt = 3;
    auto shape2 = [&](int64_t r, int64_t c) { return batched ? Shape{bt, r, c} : Shape{r, c}; };
    if (add) {
      Shape self = s.self_kind == 0 ? shape2(s.m, s.nn) : s.self_kind == 2 ? Shape{} : Shape{s.nn};
      b.tensor(T(d, self));
    }
    b.tensor(T(d, shape2(s.m, s.k), s.la));
    b.tensor(T(d, shape2(s.k, s.nn), s.lb));
    if (add) {
      const double beta = s.self_kind == 3 ? 1.0 : 0.5, alpha = s.self_kind == 3 ? 1.0 : 2.0;
      b.arg(Arg::scalar(beta)).arg(Arg::scalar(alpha));
    }
    b.c.tol_scale = 20;
    b.c.strided_outputs = s.la == Layout::Gapped;  // outputs may be strided too
    if (n.inplace && add && s.self_kind != 0) continue;
    cases.push_back(b.done());
  }
  Builder p("512x512 @ 512x512 (perf)");
  const Shape sq = batched ? Shape{8, 256, 256} : Shape{512, 512};
  if (add) p.tensor(T(d, sq));
  p.tensor(T(d, sq)).tensor(T(d, sq));
  if (add) p.arg(Arg::scalar(0.5)).arg(Arg::scalar(2.0));
  cases.push_back(perf_case(p.done()));
  return variant(n, "aten::" + n.root, cases);
}

// ----------------------------------------------------- softmax and losses

std::vector<Case> softmax(const Name& n, openreg_dtype d) {
  const bool backward = n.root.find("backward") != std::string::npos;
  struct SS {
    std::string label;
    Shape shape;
    Layout layout;
    int64_t dim;
  };
  const std::vector<SS> shapes{
      {"5x7x11 dim 1", {5, 7, 11}, Layout::Contiguous, 1},
      {"5x7x11 dim -1", {5, 7, 11}, Layout::Contiguous, -1},
      // Rows of 16+ elements: the vector body of engines' row loops, not only the tail.
      {"32x128 dim -1", {32, 128}, Layout::Contiguous, -1},
      {"7x40 dim -1", {7, 40}, Layout::Contiguous, -1},
      {"11x13 transposed dim -1", {11, 13}, Layout::Transposed, -1},
      {"5x7x11 strided+offset dim 0", {5, 7, 11}, Layout::Gapped, 0},
      {"zero-size 0x3 dim 1", {0, 3}, Layout::Contiguous, 1},
      {"0-dim dim 0", {}, Layout::Contiguous, 0},
      {"257x263 dim 1 (parallel path)", {257, 263}, Layout::Contiguous, 1},
  };
  std::vector<Case> cases;
  for (const auto& s : shapes) {
    Builder b(s.label);
    if (backward) {
      b.tensor(T(d, s.shape, s.layout));
      b.tensor(T(d, s.shape, Layout::Contiguous, n.root == "_softmax_backward_data" ? Domain::Unit : Domain::Any));
      b.arg(Arg::integer(s.dim)).arg(Arg::dtype_of(d));
    } else {
      b.tensor(T(d, s.shape, s.layout)).arg(Arg::integer(s.dim)).arg(Arg::boolean(false));
    }
    b.c.tol_scale = 10;
    cases.push_back(b.done());
  }
  return variant(n, "aten::" + n.root, cases);
}

// mse_loss and smooth_l1_loss (beta 1, 0.5 and 0: the L1 loss), forward and backward.
std::vector<Case> mse(const Name& n, openreg_dtype d) {
  const bool backward = n.root == "mse_loss_backward" || n.root == "smooth_l1_loss_backward";
  const bool smooth_l1 = n.root.rfind("smooth_l1", 0) == 0;
  std::vector<Case> cases;
  const std::vector<std::pair<std::string, Shape>> shapes{{"5x7x11", {5, 7, 11}}, {"257x263", {257, 263}}, {"zero-size 0x3", {0, 3}}};
  for (const auto& s : shapes) {
    for (int64_t reduction : {0, 1, 2}) {
      Builder b(s.first + (reduction == 0 ? " reduction=none" : reduction == 1 ? " reduction=mean" : " reduction=sum"));
      if (backward) b.tensor(T(d, reduction == 0 ? s.second : Shape{}));
      b.tensor(T(d, s.second, s.first == "5x7x11" ? Layout::Gapped : Layout::Contiguous));
      b.tensor(T(d, s.second));
      b.arg(Arg::integer(reduction));
      if (smooth_l1) {
        const double beta = reduction == 0 ? 1.0 : reduction == 1 ? 0.5 : 0.0;
        b.arg(Arg::real(beta));
        b.c.label += beta == 1.0 ? ", beta=1" : beta == 0.5 ? ", beta=0.5" : ", beta=0";
      }
      b.c.tol_scale = 10;
      cases.push_back(b.done());
    }
  }
  return variant(n, "aten::" + n.root, cases);
}

std::vector<Case> nll(const Name& n, openreg_dtype d) {
  const bool backward = n.root == "nll_loss_backward";
  std::vector<Case> cases;
  const int64_t N = 13, C = 7;
  for (int64_t reduction : {0, 1, 2}) {
    for (int variant_kind = 0; variant_kind < 3; ++variant_kind) {  // plain, weight, ignore_index=2
      Builder b(std::string("13x7 ") + (reduction == 0 ? "none" : reduction == 1 ? "mean" : "sum") +
                (variant_kind == 1 ? ", weight" : variant_kind == 2 ? ", ignore_index=2" : ""));
      if (backward) b.tensor(T(d, reduction == 0 ? Shape{N} : Shape{}));
      b.tensor(T(d, {N, C}));
      TensorSpec target = T(dt::int64, {N}, Layout::Contiguous, Domain::Index);
      target.hi = C;
      b.tensor(target);
      b.optional_tensor(variant_kind == 1, T(d, {C}, Layout::Contiguous, Domain::Positive));
      b.arg(Arg::integer(reduction)).arg(Arg::integer(variant_kind == 2 ? 2 : -100));
      if (backward) b.tensor(T(d, {}, Layout::Contiguous, Domain::Positive));
      b.c.tol_scale = 10;
      cases.push_back(b.done());
    }
  }
  return variant(n, "aten::" + n.root, cases, backward ? 1 : 2);
}

// ----------------------------------------------------- normalisation

std::vector<Case> layer_norm(const Name& n, openreg_dtype d) {
  const bool backward = n.root == "native_layer_norm_backward";
  struct LS {
    std::string label;
    Shape shape;
    Shape norm;
    Layout layout;
    bool affine;
    std::vector<int64_t> mask;
  };
  std::vector<LS> shapes{
      {"5x7x11 over 11, affine", {5, 7, 11}, {11}, Layout::Contiguous, true, {1, 1, 1}},
      {"5x7x11 over 7x11, affine", {5, 7, 11}, {7, 11}, Layout::Contiguous, true, {1, 1, 1}},
      {"5x7x11 over 11, no affine", {5, 7, 11}, {11}, Layout::Contiguous, false, {1, 0, 0}},
      {"strided+offset 5x7x11 over 11", {5, 7, 11}, {11}, Layout::Gapped, true, {1, 1, 0}},
      {"257x263 over 263 (parallel path)", {257, 263}, {263}, Layout::Contiguous, true, {1, 1, 1}},
      {"zero-size 0x11 over 11", {0, 11}, {11}, Layout::Contiguous, true, {1, 0, 0}},
  };
  // 64000 float32 elements: onednn's backward row loops split them into blocks of
  // rows (its forward takes the primitive there). Not in 16-bit floats: torch CPU's bfloat16 weight gradient of 1000 rows is off by 4.7
  // against float64 (on sums up to 140; onednn's 0.24), too coarse a reference.
  if (d.code == OPENREG_DTYPE_CODE_FLOAT && d.bits == 32)
    shapes.push_back({"1000x64 over 64 (blocks of rows)", {1000, 64}, {64}, Layout::Contiguous, true, {1, 1, 1}});
  std::vector<Case> cases;
  for (const auto& s : shapes) {
    Builder b(s.label);
    Shape stat = s.shape;
    for (size_t i = stat.size() - s.norm.size(); i < stat.size(); ++i) stat[i] = 1;
    if (backward) b.tensor(T(d, s.shape));
    b.tensor(T(d, s.shape, s.layout));
    b.arg(Arg::int_list(s.norm));
    if (backward) {
      b.tensor(T(d, stat)).tensor(T(d, stat, Layout::Contiguous, Domain::Positive));
    }
    b.optional_tensor(s.affine, T(d, s.norm)).optional_tensor(s.affine, T(d, s.norm));
    if (backward) b.arg(Arg::bool_list(s.mask));
    else b.arg(Arg::real(1e-5));
    b.c.tol_scale = 50;
    cases.push_back(b.done());
  }
  return variant(n, "aten::" + n.root, cases, 3);
}

std::vector<Case> batch_norm(const Name& n, openreg_dtype d) {
  const bool backward = n.root == "native_batch_norm_backward";
  std::vector<Case> cases;
  struct BS {
    std::string label;
    Shape shape;
    Layout layout;
    bool training, affine, running;
  };
  const std::vector<BS> shapes{
      {"4x3x5x7 training, affine, running stats", {4, 3, 5, 7}, Layout::Contiguous, true, true, true},
      {"4x3x5x7 training, no running stats", {4, 3, 5, 7}, Layout::Contiguous, true, true, false},
      {"4x3x5x7 eval", {4, 3, 5, 7}, Layout::Contiguous, false, true, true},
      {"strided+offset 4x3x5x7 training", {4, 3, 5, 7}, Layout::Gapped, true, true, true},
      {"13x5 (1-d batch norm) training, no affine", {13, 5}, Layout::Contiguous, true, false, true},
      {"4x3x9 (1-d batch norm over a sequence) training", {4, 3, 9}, Layout::Contiguous, true, true, true},
      {"strided+offset 4x3x9 training", {4, 3, 9}, Layout::Gapped, true, true, true},
      {"2x3x2x3x4 (3-d batch norm) training", {2, 3, 2, 3, 4}, Layout::Contiguous, true, true, true},
      {"32x16x15x15 training (parallel path)", {32, 16, 15, 15}, Layout::Contiguous, true, true, true},
  };
  for (const auto& s : shapes) {
    const int64_t C = s.shape[1];
    Builder b(s.label);
    if (!backward) {
      b.tensor(T(d, s.shape, s.layout));
      b.optional_tensor(s.affine, T(d, {C})).optional_tensor(s.affine, T(d, {C}));
      b.optional_tensor(s.running, T(d, {C})).optional_tensor(s.running, T(d, {C}, Layout::Contiguous, Domain::Positive));
      if (!s.running && !s.training) continue;
      b.arg(Arg::boolean(s.training)).arg(Arg::real(0.1)).arg(Arg::real(1e-5));
      if (s.running && s.training) {  // running_mean, running_var: the last two tensors added
        const int last = static_cast<int>(b.c.tensors.size()) - 1;
        b.c.mutated = {last - 1, last};
      }
      if (!s.training) b.c.skip_outputs = {1, 2};         // saved statistics: unused in eval
    } else {
      b.tensor(T(d, s.shape)).tensor(T(d, s.shape, s.layout));
      b.optional_tensor(s.affine, T(d, {C}));
      b.optional_tensor(s.running, T(d, {C})).optional_tensor(s.running, T(d, {C}, Layout::Contiguous, Domain::Positive));
      b.optional_tensor(s.training, T(d, {C})).optional_tensor(s.training, T(d, {C}, Layout::Contiguous, Domain::Positive));
      if (!s.training && !s.running) continue;
      b.arg(Arg::boolean(s.training)).arg(Arg::real(1e-5)).arg(Arg::bool_list({1, s.affine ? 1 : 0, s.affine ? 1 : 0}));
    }
    b.c.tol_scale = 50;
    cases.push_back(b.done());
  }
  return variant(n, "aten::" + n.root, cases, 3);
}

// native_group_norm(+_backward): (input, weight?, bias?, N, C, HxW, group, eps) and
// (grad_out, input, mean, rstd, weight?, N, C, HxW, group, output_mask). The
// backward's statistics are any values of their shape (rstd positive): the
// reference computes from the same ones.
std::vector<Case> group_norm(const Name& n, openreg_dtype d) {
  const bool backward = n.root == "native_group_norm_backward";
  struct GS {
    std::string label;
    Shape shape;
    int64_t groups;
    Layout layout;
    bool affine;
    std::vector<int64_t> mask;
  };
  const std::vector<GS> shapes{
      {"2x6x5x7 in 3 groups, affine", {2, 6, 5, 7}, 3, Layout::Contiguous, true, {1, 1, 1}},
      {"2x6x5x7 in 2 groups, no affine", {2, 6, 5, 7}, 2, Layout::Contiguous, false, {1, 0, 0}},
      {"5x12 in 3 groups (HxW 1)", {5, 12}, 3, Layout::Contiguous, true, {1, 1, 1}},
      {"3x4x37 in 2 groups (a lane tail)", {3, 4, 37}, 2, Layout::Contiguous, true, {0, 1, 1}},
      {"2x4x3x3x3 in 4 groups", {2, 4, 3, 3, 3}, 4, Layout::Contiguous, true, {1, 1, 0}},
      {"8x32x16x16 in 8 groups (parallel path)", {8, 32, 16, 16}, 8, Layout::Contiguous, true, {1, 1, 1}},
  };  // no strided inputs: ATen's kernels (the reference) take contiguous ones only
  std::vector<Case> cases;
  for (const auto& s : shapes) {
    const int64_t N = s.shape[0], C = s.shape[1];
    int64_t hxw = 1;
    for (size_t i = 2; i < s.shape.size(); ++i) hxw *= s.shape[i];
    Builder b(s.label);
    if (backward) b.tensor(T(d, s.shape, s.layout));
    b.tensor(T(d, s.shape, s.layout));
    if (backward) b.tensor(T(d, {N, s.groups})).tensor(T(d, {N, s.groups}, Layout::Contiguous, Domain::Positive));
    b.optional_tensor(s.affine, T(d, {C}));
    if (!backward) b.optional_tensor(s.affine, T(d, {C}));
    b.arg(Arg::integer(N)).arg(Arg::integer(C)).arg(Arg::integer(hxw)).arg(Arg::integer(s.groups));
    if (backward) b.arg(Arg::bool_list(s.mask));
    else b.arg(Arg::real(1e-5));
    b.c.tol_scale = 50;
    cases.push_back(b.done());
  }
  return variant(n, "aten::" + n.root, cases, 3);
}

// ------------------------------------------------ convolution and pooling

struct ConvShape {
  std::string label;
  int64_t N, C, H, W, O, kh, kw, stride, pad, dil, groups;
  bool bias;
  bool transposed;
  Layout layout = Layout::Contiguous;  // the input's
};

int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t dil) { return (in + 2 * p - dil * (k - 1) - 1) / s + 1; }

std::vector<Case> convolution(const Name& n, openreg_dtype d) {
  const bool backward = n.root == "convolution_backward";
  const std::vector<ConvShape> shapes{
      {"2x3x11x13, 5x3x3x3, pad 1", 2, 3, 11, 13, 5, 3, 3, 1, 1, 1, 1, true, false},
      {"2x3x11x13, stride 2, no bias", 2, 3, 11, 13, 5, 3, 3, 2, 0, 1, 1, false, false},
      {"1x4x9x9, dilation 2, pad 2", 1, 4, 9, 9, 3, 3, 3, 1, 2, 2, 1, true, false},
      {"2x6x7x7, groups 3", 2, 6, 7, 7, 6, 3, 3, 1, 1, 1, 3, true, false},
      {"3x5x7x11, 1x1 kernel", 3, 5, 7, 11, 7, 1, 1, 1, 0, 1, 1, true, false},
      {"zero batch 0x3x7x7", 0, 3, 7, 7, 4, 3, 3, 1, 1, 1, 1, true, false},
      {"8x16x15x15, 16x16x3x3 (parallel path)", 8, 16, 15, 15, 16, 3, 3, 1, 1, 1, 1, true, false},
      {"transposed 2x4x5x5 -> 3, stride 2", 2, 4, 5, 5, 3, 3, 3, 2, 1, 1, 1, true, true},
      // Small output images with 128 output channels: onednn's GEMM path below AVX-512.
      {"4x32x2x2, 128x32x3x3, pad 1 (2x2 output)", 4, 32, 2, 2, 128, 3, 3, 1, 1, 1, 1, true, false},
      {"2x8x4x4, 128x8x3x3, pad 1 (4x4 output)", 2, 8, 4, 4, 128, 3, 3, 1, 1, 1, 1, true, false},
      {"3x16x2x5 -> 128, stride 2, pad 1, no bias (1x3 output)", 3, 16, 2, 5, 128, 3, 3, 2, 1, 1, 1, false, false},
      {"2x6x5x5 -> 128, dilation 2, pad 1, stride 2 (2x2 output)", 2, 6, 5, 5, 128, 3, 3, 2, 1, 2, 1, true, false},
      {"strided+offset 4x8x3x3 -> 128, pad 1, stride 2 (2x2 output)", 4, 8, 3, 3, 128, 3, 3, 2, 1, 1, 1, true, false,
       Layout::Gapped},
      {"4x8x4x4 -> 128, 1x1 stride 2 (2x2 output)", 4, 8, 4, 4, 128, 1, 1, 2, 0, 1, 1, true, false},
  };
  std::vector<Case> cases;
  for (const auto& s : shapes) {
    Builder b(s.label);
    const Shape weight = s.transposed ? Shape{s.C, s.O / s.groups, s.kh, s.kw} : Shape{s.O, s.C / s.groups, s.kh, s.kw};
    const Shape input{s.N, s.C, s.H, s.W};
    int64_t Ho, Wo;
    if (s.transposed) {
      Ho = (s.H - 1) * s.stride - 2 * s.pad + s.dil * (s.kh - 1) + 1;
      Wo = (s.W - 1) * s.stride - 2 * s.pad + s.dil * (s.kw - 1) + 1;
    } else {
      Ho = conv_out(s.H, s.kh, s.stride, s.pad, s.dil);
      Wo = conv_out(s.W, s.kw, s.stride, s.pad, s.dil);
    }
    if (backward) b.tensor(T(d, {s.N, s.O, Ho, Wo}));
    b.tensor(T(d, input, s.layout)).tensor(T(d, weight));
    if (backward) b.arg(s.bias ? Arg::int_list({s.O}) : Arg::none());
    else b.optional_tensor(s.bias, T(d, {s.O}));
    b.arg(Arg::int_list({s.stride, s.stride})).arg(Arg::int_list({s.pad, s.pad})).arg(Arg::int_list({s.dil, s.dil}));
    b.arg(Arg::boolean(s.transposed)).arg(Arg::int_list({0, 0})).arg(Arg::integer(s.groups));
    if (backward) b.arg(Arg::bool_list({1, 1, s.bias ? 1 : 0}));
    b.c.tol_scale = 50;
    cases.push_back(b.done());
  }
  Builder p("32x64x56x56, 64x64x3x3 (perf)");
  if (backward) p.tensor(T(d, {32, 64, 56, 56}));
  p.tensor(T(d, {32, 64, 56, 56})).tensor(T(d, {64, 64, 3, 3}));
  if (backward) p.arg(Arg::int_list({64}));
  else p.tensor(T(d, {64}));
  p.arg(Arg::int_list({1, 1})).arg(Arg::int_list({1, 1})).arg(Arg::int_list({1, 1}));
  p.arg(Arg::boolean(false)).arg(Arg::int_list({0, 0})).arg(Arg::integer(1));
  if (backward) p.arg(Arg::bool_list({1, 1, 1}));
  cases.push_back(perf_case(p.done()));
  return variant(n, "aten::" + n.root, cases, backward ? 3 : 1);
}

std::vector<Case> pooling(const Name& n, openreg_dtype d) {
  const bool backward = n.root.find("backward") != std::string::npos;
  const bool maxpool = n.root.rfind("max_pool2d", 0) == 0;
  struct PS {
    std::string label;
    Shape shape;
    int64_t k, s, p, dil;
    bool ceil;
    Layout layout;
  };
  const std::vector<PS> shapes{
      {"2x3x11x13 k3 s2 p1", {2, 3, 11, 13}, 3, 2, 1, 1, false, Layout::Contiguous},
      {"2x3x11x13 k2 s2", {2, 3, 11, 13}, 2, 2, 0, 1, false, Layout::Contiguous},
      {"2x3x11x13 k3 s2 ceil_mode", {2, 3, 11, 13}, 3, 2, 0, 1, true, Layout::Contiguous},
      {"3x11x13 (no batch) k2 s1", {3, 11, 13}, 2, 1, 0, 1, false, Layout::Contiguous},
      {"strided+offset 2x3x9x9 k3 s3", {2, 3, 9, 9}, 3, 3, 0, 1, false, Layout::Gapped},
      {"2x3x11x13 k3 s1 dilation 2", {2, 3, 11, 13}, 3, 1, 0, 2, false, Layout::Contiguous},
      {"16x32x28x28 k2 s2 (parallel path)", {16, 32, 28, 28}, 2, 2, 0, 1, false, Layout::Contiguous},
  };
  std::vector<Case> cases;
  for (const auto& s : shapes) {
    if (!maxpool && s.dil != 1) continue;
    const size_t nd = s.shape.size();
    const int64_t H = s.shape[nd - 2], W = s.shape[nd - 1];
    auto out_size = [&](int64_t in) {
      int64_t num = in + 2 * s.p - s.dil * (s.k - 1) - 1 + (s.ceil ? s.s - 1 : 0);
      int64_t o = num / s.s + 1;
      if (s.ceil && (o - 1) * s.s >= in + s.p) --o;
      return o;
    };
    Shape out = s.shape;
    out[nd - 2] = out_size(H);
    out[nd - 1] = out_size(W);
    Builder b(s.label);
    if (backward) b.tensor(T(d, out));
    b.tensor(T(d, s.shape, s.layout));
    b.arg(Arg::int_list({s.k, s.k})).arg(Arg::int_list({s.s, s.s})).arg(Arg::int_list({s.p, s.p}));
    if (maxpool) {
      b.arg(Arg::int_list({s.dil, s.dil})).arg(Arg::boolean(s.ceil));
      if (backward) {
        TensorSpec idx = T(dt::int64, out, Layout::Contiguous, Domain::Index);
        idx.hi = H * W;
        b.tensor(idx);
      }
    } else {
      b.arg(Arg::boolean(s.ceil)).arg(Arg::boolean(true)).arg(Arg::none());
    }
    cases.push_back(b.done());
  }
  return variant(n, "aten::" + n.root, cases, maxpool && !backward ? 2 : 1);
}

// ------------------------------------------------------------ foreach ops

// _foreach_<op>[_].{Scalar,List,ScalarList}: lists of three tensors of different shapes.
std::vector<Case> foreach_op(const Name& n, openreg_dtype d) {
  const std::string op = n.root.substr(std::string("_foreach_").size());
  const std::vector<std::pair<Shape, Layout>> shapes{{{5, 7}, Layout::Contiguous}, {{11}, Layout::Contiguous},
                                                     {{3, 13}, Layout::Transposed}, {{0, 2}, Layout::Contiguous}};
  Case c;
  c.label = "list of 5x7, 11, 13x3 transposed, 0x2";
  auto list = [&](Domain dom) {
    std::vector<int> idx;
    for (const auto& s : shapes) {
      c.tensors.push_back(T(d, s.first, s.second, dom));
      idx.push_back(static_cast<int>(c.tensors.size()) - 1);
    }
    c.args.push_back(Arg::tensor_list(idx));
    return idx;
  };
  std::vector<int> self = list(op == "sqrt" || op == "div" ? Domain::Positive : Domain::Any);
  const bool ternary_op = op == "addcmul" || op == "addcdiv";
  if (n.overload == "List" || ternary_op || op == "lerp") list(op == "div" ? Domain::Positive : Domain::Any);
  if (ternary_op) list(op == "addcdiv" ? Domain::Positive : Domain::Any);
  if (n.overload == "Scalar") c.args.push_back(Arg::scalar(op == "lerp" ? 0.3 : -0.75));
  if (n.overload == "List" && (op == "add" || op == "sub")) c.args.push_back(Arg::scalar(0.5));
  if (n.overload == "ScalarList") {  // one Scalar per member
    Arg a;
    a.kind = OPENREG_VALUE_DOUBLE_LIST;
    a.doubles = {-0.75, 1.25, 2.0, 0.5};
    c.args.push_back(a);
  }
  if (n.inplace) {
    c.num_outputs = 0;
    c.mutated = self;
  } else {
    c.num_outputs = static_cast<int>(shapes.size());
  }
  return {c};
}

// ------------------------------------------------------ fused optimizer steps

// _fused_adam_, _fused_adamw_, _fused_sgd_ (and .tensor_lr): one step over lists of
// four tensors of different sizes, with each option. State steps, lr, grad_scale are
// float32 tensors in [0.25, 3]; found_inf is 0 (1, which skips the step, has a case
// in python/openreg/conformance_cases_optim.py).
std::vector<Case> fused_optim(const Name& n, openreg_dtype d) {
  const bool sgd = n.root == "_fused_sgd";
  const std::vector<Shape> shapes{{5, 7}, {11}, {}, {37, 41}};
  struct Options {
    std::string label;
    bool amsgrad_or_nesterov, maximize;
    double weight_decay;
    bool amp, first_step;
  };
  const std::vector<Options> table{{"plain", false, false, 0, false, false},
                                   {sgd ? "nesterov, weight_decay" : "amsgrad, weight_decay", true, false, 0.05, false, false},
                                   {"maximize, grad_scale, found_inf 0", false, true, 0.01, true, false},
                                   {sgd ? "first step" : "amsgrad, maximize", true, true, 0, false, true}};
  std::vector<Case> cases;
  for (const Options& o : table) {
    Builder b("4 tensors of 5x7, 11, 0-dim, 37x41: " + o.label);
    Case& c = b.c;
    c.num_outputs = 0;
    auto list = [&](Domain dom, bool present) {
      std::vector<int> idx;
      for (size_t k = 0; present && k < shapes.size(); ++k) {
        c.tensors.push_back(T(d, shapes[k], Layout::Contiguous, dom));
        idx.push_back(static_cast<int>(c.tensors.size()) - 1);
        c.mutated.push_back(idx.back());
      }
      c.args.push_back(Arg::tensor_list(idx));
    };
    auto f32 = [&](Domain dom) {
      TensorSpec t = T(dt::float32, {}, Layout::Contiguous, dom);
      t.hi = 1;  // Domain::Index: 0
      return t;
    };
    auto lr = [&](double v) {
      if (n.overload == "tensor_lr") b.tensor(f32(Domain::Positive));
      else b.arg(Arg::real(v));
    };
    list(Domain::Any, true);  // params
    list(Domain::Any, true);  // grads (unscaled in place with grad_scale)
    if (sgd) {
      list(Domain::Any, true);  // momentum buffers
      b.arg(Arg::real(o.weight_decay)).arg(Arg::real(0.9));
      lr(0.1);
      b.arg(Arg::real(0.1)).arg(Arg::boolean(o.amsgrad_or_nesterov)).arg(Arg::boolean(o.maximize));
      b.arg(Arg::boolean(o.first_step));
    } else {
      list(Domain::Any, true);                           // exp_avgs
      list(Domain::Positive, true);                      // exp_avg_sqs
      list(Domain::Positive, o.amsgrad_or_nesterov);     // max_exp_avg_sqs
      std::vector<int> steps;
      for (size_t k = 0; k < shapes.size(); ++k) {
        c.tensors.push_back(f32(Domain::Positive));
        steps.push_back(static_cast<int>(c.tensors.size()) - 1);
      }
      c.args.push_back(Arg::tensor_list(steps));
      lr(0.01);
      b.arg(Arg::real(0.9)).arg(Arg::real(0.999)).arg(Arg::real(o.weight_decay)).arg(Arg::real(1e-8));
      b.arg(Arg::boolean(o.amsgrad_or_nesterov)).arg(Arg::boolean(o.maximize));
    }
    b.optional_tensor(o.amp, f32(Domain::Positive));  // grad_scale
    b.optional_tensor(o.amp, f32(Domain::Index));     // found_inf
    cases.push_back(b.done());
  }
  return cases;
}

// ------------------------------------------------------ indexing and joining

// index_select(self, dim, index): int64 and int32 indices with repeats, each dim,
// a 0-dim and an empty index, strided self, the shape embedding produces.
std::vector<Case> index_select(const Name& n, openreg_dtype d) {
  std::vector<Case> cases;
  auto add = [&](std::string label, TensorSpec self, int64_t dim, Shape index_shape, int64_t hi, openreg_dtype it) {
    Builder b(std::move(label));
    b.tensor(std::move(self)).arg(Arg::integer(dim));
    TensorSpec index = T(it, std::move(index_shape), Layout::Contiguous, Domain::Index);
    index.hi = hi;
    b.tensor(index);
    cases.push_back(b.done());
  };
  add("5x7x11 dim=0", T(d, {5, 7, 11}), 0, {4}, 5, dt::int64);
  add("5x7x11 dim=1, int32 index", T(d, {5, 7, 11}), 1, {9}, 7, dt::int32);
  add("5x7x11 dim=-1", T(d, {5, 7, 11}), -1, {5}, 11, dt::int64);
  add("transposed 7x11 dim=0", T(d, {7, 11}, Layout::Transposed), 0, {3}, 7, dt::int64);
  add("0-dim index", T(d, {5, 7}), 1, {}, 7, dt::int64);
  add("empty index", T(d, {5, 7}), 0, {0}, 5, dt::int64);
  add("64 rows of 100x16 (embedding)", T(d, {100, 16}), 0, {64}, 100, dt::int64);
  add("200 rows of 300x257 (parallel path)", T(d, {300, 257}), 0, {200}, 300, dt::int64);
  return variant(n, "aten::index_select", cases);
}

// gather(self, dim, index): index smaller than self in the other dims, each dim,
// transposed self, expanded and empty index, BERT's token types, the parallel path.
std::vector<Case> gather(const Name& n, openreg_dtype d) {
  std::vector<Case> cases;
  auto add = [&](std::string label, TensorSpec self, int64_t dim, Shape index_shape, int64_t hi,
                 Layout index_layout = Layout::Contiguous) {
    Builder b(std::move(label));
    b.tensor(std::move(self)).arg(Arg::integer(dim));
    TensorSpec index = T(dt::int64, std::move(index_shape), index_layout, Domain::Index);
    index.hi = hi;
    b.tensor(index).arg(Arg::boolean(false));  // sparse_grad
    cases.push_back(b.done());
  };
  add("5x7x11 dim=0, index 3x7x11", T(d, {5, 7, 11}), 0, {3, 7, 11}, 5);
  add("5x7x11 dim=1, index 5x4x6", T(d, {5, 7, 11}), 1, {5, 4, 6}, 7);
  add("transposed 7x11 dim=-1, index 7x13", T(d, {7, 11}, Layout::Transposed), -1, {7, 13}, 11);
  add("5x7 dim=1, expanded index 5x3", T(d, {5, 7}), 1, {5, 3}, 7, Layout::Expanded);
  add("empty index 0x7", T(d, {5, 7}), 0, {0, 7}, 5);
  add("1x128 dim=1, index 1x64 (token types)", T(d, {1, 128}), 1, {1, 64}, 128);
  add("300x257 dim=0 (parallel path)", T(d, {300, 257}), 0, {300, 257}, 300);
  return variant(n, "aten::gather", cases);
}

// flip(self, dims): one dim, several, negative, a transposed and a gapped self,
// no dims, a 0-dim and a zero-size self, the parallel path.
std::vector<Case> flip(const Name& n, openreg_dtype d) {
  std::vector<Case> cases;
  auto add = [&](std::string label, TensorSpec self, std::vector<int64_t> dims) {
    Builder b(std::move(label));
    b.tensor(std::move(self)).arg(Arg::int_list(std::move(dims)));
    cases.push_back(b.done());
  };
  add("5x7x11 dims=[0]", T(d, {5, 7, 11}), {0});
  add("5x7x11 dims=[-1]", T(d, {5, 7, 11}), {-1});
  add("5x7x11 dims=[0, 2]", T(d, {5, 7, 11}), {0, 2});
  add("transposed 7x11 dims=[0, 1]", T(d, {7, 11}, Layout::Transposed), {0, 1});
  add("gapped 7x11 dims=[1]", T(d, {7, 11}, Layout::Gapped), {1});
  add("no dims", T(d, {5, 7}), {});
  add("0-dim", T(d, {}), {0});
  add("zero-size 0x7 dims=[1]", T(d, {0, 7}), {1});
  add("300x257 dims=[1] (parallel path)", T(d, {300, 257}), {1});
  add("expanded 300 (one element repeated) dims=[0]", T(d, {300}, Layout::Expanded), {0});
  return variant(n, "aten::flip", cases);
}

// roll(self, shifts, dims): positive, negative and beyond-size shifts, several dims,
// a dim listed twice, no dims (the flat order), a transposed self, a 0-dim and a
// zero-size self, Swin's shifted windows on the parallel path.
std::vector<Case> roll(const Name& n, openreg_dtype d) {
  std::vector<Case> cases;
  auto add = [&](std::string label, TensorSpec self, std::vector<int64_t> shifts, std::vector<int64_t> dims) {
    Builder b(std::move(label));
    b.tensor(std::move(self)).arg(Arg::int_list(std::move(shifts))).arg(Arg::int_list(std::move(dims)));
    cases.push_back(b.done());
  };
  add("5x7x11 shift 2 dim 1", T(d, {5, 7, 11}), {2}, {1});
  add("5x7x11 shift -3 dim -1", T(d, {5, 7, 11}), {-3}, {-1});
  add("5x7x11 shift 23 dim 2 (beyond the size)", T(d, {5, 7, 11}), {23}, {2});
  add("5x7x11 shifts (1, -2) dims (0, 2)", T(d, {5, 7, 11}), {1, -2}, {0, 2});
  add("5x7 shifts (1, 2) dims (1, 1)", T(d, {5, 7}), {1, 2}, {1, 1});
  add("5x7 shift 3, no dims", T(d, {5, 7}), {3}, {});
  add("transposed 7x11 shifts (2, 5) dims (0, 1)", T(d, {7, 11}, Layout::Transposed), {2, 5}, {0, 1});
  add("shift 0", T(d, {5, 7}), {0}, {0});
  add("zero-size 0x7 shift 2 dim 1", T(d, {0, 7}), {2}, {1});
  add("2x16x16x64 shifts (-3, -3) dims (1, 2) (parallel path)", T(d, {2, 16, 16, 64}), {-3, -3}, {1, 2});
  return variant(n, "aten::roll", cases);
}

// index.Tensor(self, indices): one index, several broadcast at adjacent dims,
// non-adjacent dims (the broadcast shape goes first), int32, transposed self,
// a 0-dim and an empty index, BERT's padding-mask lookup, the parallel path.
// (Negative indices: the Python-mode cases.)
std::vector<Case> index(const Name& n, openreg_dtype d) {
  std::vector<Case> cases;
  struct Ix {
    Shape shape;  // empty with hi 0: None
    int64_t hi;
    openreg_dtype dtype = dt::int64;
  };
  auto add = [&](std::string label, TensorSpec self, std::vector<Ix> indices) {
    Case c;
    c.label = std::move(label);
    c.tensors.push_back(std::move(self));
    c.args.push_back(Arg::tensor_at(0));
    std::vector<int> items;
    for (Ix& ix : indices) {
      if (ix.hi == 0) {
        items.push_back(-1);
        continue;
      }
      TensorSpec t = T(ix.dtype, std::move(ix.shape), Layout::Contiguous, Domain::Index);
      t.hi = ix.hi;
      c.tensors.push_back(t);
      items.push_back(static_cast<int>(c.tensors.size()) - 1);
    }
    c.args.push_back(Arg::tensor_list(items));
    cases.push_back(c);
  };
  const Ix none{{}, 0};
  add("5x7x11 [i of 4]", T(d, {5, 7, 11}), {{{4}, 5}});
  add("5x7x11 [:, 3x1, 4]", T(d, {5, 7, 11}), {none, {{3, 1}, 7}, {{4}, 11}});
  add("5x7x11 [6, :, 6] (non-adjacent)", T(d, {5, 7, 11}), {{{6}, 5}, none, {{6}, 11}});
  add("5x7x11 [:, i of 9 int32]", T(d, {5, 7, 11}), {none, {{9}, 7, dt::int32}});
  add("transposed 7x11 [i of 3]", T(d, {7, 11}, Layout::Transposed), {{{3}, 7}});
  add("5x7 [0-dim]", T(d, {5, 7}), {{{}, 5}});
  add("5x7 [:, empty]", T(d, {5, 7}), {none, {{0}, 7}});
  add("8x64 [8x1x1x1, 1x1x1x64] (padding mask)", T(d, {8, 64}), {{{8, 1, 1, 1}, 8}, {{1, 1, 1, 64}, 64}});
  add("300x257 [i of 200] (parallel path)", T(d, {300, 257}), {{{200}, 300}});
  return variant(n, twin_of(n, "Tensor"), cases);
}

// cat(tensors, dim): uneven parts along each dim, one part, a zero-size part, the
// legacy empty 1-d part, a transposed part, large enough for the parallel path.
std::vector<Case> cat(const Name& n, openreg_dtype d) {
  using Part = std::pair<Shape, Layout>;
  const Layout C = Layout::Contiguous;
  struct Parts {
    std::string label;
    std::vector<Part> parts;
    int64_t dim;
  };
  const std::vector<Parts> table{
      {"2 x 32x64 dim=0", {{{32, 64}, C}, {{32, 64}, C}}, 0},
      {"5x{2,7,1}x3 dim=1", {{{5, 2, 3}, C}, {{5, 7, 3}, C}, {{5, 1, 3}, C}}, 1},
      {"4x3, 4x5 dim=-1", {{{4, 3}, C}, {{4, 5}, C}}, -1},
      {"one tensor", {{{5, 7}, C}}, 0},
      {"a zero-size part", {{{0, 7}, C}, {{3, 7}, C}}, 0},
      {"legacy empty 1-d part", {{{0}, C}, {{3, 7}, C}}, 0},
      {"transposed part 7x5 dim=1", {{{7, 5}, Layout::Transposed}, {{7, 5}, C}}, 1},
      {"200x300, 100x300 (parallel path)", {{{200, 300}, C}, {{100, 300}, C}}, 0},
  };
  std::vector<Case> cases;
  for (const Parts& p : table) {
    Case c;
    c.label = p.label;
    std::vector<int> items;
    for (const Part& part : p.parts) {
      c.tensors.push_back(T(d, part.first, part.second));
      items.push_back(static_cast<int>(c.tensors.size()) - 1);
    }
    c.args.push_back(Arg::tensor_list(items));
    c.args.push_back(Arg::integer(p.dim));
    cases.push_back(c);
  }
  return variant(n, "aten::cat", cases);
}

// where.self(condition, self, other): the op's dtype is the condition's (bool);
// self and other of several dtypes, broadcast, strided, zero-size, 0-dim.
std::vector<Case> where(const Name& n, openreg_dtype d) {
  std::vector<Case> cases;
  auto add = [&](std::string label, TensorSpec cond, TensorSpec self, TensorSpec other) {
    Builder b(std::move(label));
    b.tensor(std::move(cond)).tensor(std::move(self)).tensor(std::move(other));
    cases.push_back(b.done());
  };
  for (openreg_dtype v : {dt::float32, dt::float64, dt::bfloat16, dt::int64})
    add("64x64 " + sdk::dtype_name(v), T(d, {64, 64}), T(v, {64, 64}), T(v, {64, 64}));
  add("broadcast 5x1, 5x7, 7", T(d, {5, 1}), T(dt::float32, {5, 7}), T(dt::float32, {7}));
  add("transposed and gapped 7x11", T(d, {7, 11}, Layout::Transposed), T(dt::float32, {7, 11}, Layout::Gapped),
      T(dt::float32, {7, 11}, Layout::Transposed));
  add("expanded condition 5x7", T(d, {5, 7}, Layout::Expanded), T(dt::float32, {5, 7}), T(dt::float32, {5, 7}));
  add("zero-size 0x7", T(d, {0, 7}), T(dt::float32, {0, 7}), T(dt::float32, {0, 7}));
  add("0-dim", T(d, {}), T(dt::float32, {}), T(dt::float32, {}));
  add("300x257 (parallel path)", T(d, {300, 257}), T(dt::float32, {300, 257}), T(dt::float32, {300, 257}));
  return variant(n, "aten::where.self", cases);
}

// ------------------------------------------------------------ tensor plumbing

// tril/triu(self, diagonal): each diagonal sign, batched, strided, empty, parallel.
std::vector<Case> triangle(const Name& n, openreg_dtype d) {
  std::vector<Case> cases;
  auto add = [&](std::string label, TensorSpec self, int64_t diagonal, bool strided_out = false) {
    Builder b(std::move(label));
    b.tensor(std::move(self)).arg(Arg::integer(diagonal));
    b.c.strided_outputs = strided_out;
    cases.push_back(b.done());
  };
  add("5x7 diagonal 0", T(d, {5, 7}), 0);
  add("7x5 diagonal 2", T(d, {7, 5}), 2);
  add("5x7 diagonal -1", T(d, {5, 7}), -1);
  add("3x5x7 batched diagonal 1, strided output", T(d, {3, 5, 7}), 1, true);
  add("11x13 transposed diagonal -3", T(d, {11, 13}, Layout::Transposed), -3);
  add("5x7x11 strided+offset diagonal 4", T(d, {5, 7, 11}, Layout::Gapped), 4);
  add("zero-size 0x3", T(d, {0, 3}), 0);
  add("257x263 (parallel path)", T(d, {257, 263}), 1);
  return variant(n, twin_of(n, ""), cases);
}

// isneginf/isposinf(self): the unary shapes (bool outputs).
std::vector<Case> inf_test(const Name& n, openreg_dtype d) {
  std::vector<Case> cases;
  for (const auto& s : unary_shapes()) {
    Builder b(s.label);
    b.tensor(T(d, s.shape, s.layout));
    b.c.strided_outputs = s.strided_out;
    cases.push_back(b.done());
  }
  return variant(n, twin_of(n, ""), cases);
}

// all/any: self only (.all_out too), one dim (.dim, .out), a dim list (.dims).
std::vector<Case> all_any(const Name& n, openreg_dtype d) {
  const bool whole = n.overload.empty() || n.overload == "all_out";
  const bool list = n.overload == "dims" || n.overload == "dims_out";
  std::vector<Case> cases;
  auto add = [&](std::string label, TensorSpec self, std::vector<int64_t> dims, bool keepdim) {
    Builder b(std::move(label));
    b.tensor(std::move(self));
    if (!whole) {
      if (list) b.arg(Arg::int_list(std::move(dims)));
      else b.arg(Arg::integer(dims.at(0)));
      b.arg(Arg::boolean(keepdim));
    }
    cases.push_back(b.done());
  };
  add("5x7x11 dim 1", T(d, {5, 7, 11}), {1}, false);
  add("5x7x11 dim -1 keepdim", T(d, {5, 7, 11}), {-1}, true);
  add("11x13 transposed dim 0", T(d, {11, 13}, Layout::Transposed), {0}, false);
  add("5x7x11 strided+offset dim 2", T(d, {5, 7, 11}, Layout::Gapped), {2}, false);
  add("zero-size 0x3 dim 0", T(d, {0, 3}), {0}, false);
  add("257x263 dim 1", T(d, {257, 263}), {1}, false);
  if (list) add("5x7x11 dims 0,2", T(d, {5, 7, 11}), {0, 2}, false);
  std::string twin = "aten::" + n.root + (whole ? "" : list ? ".dims" : ".dim");
  return variant(n, twin, cases);
}

// arange.start_out(start, end, step, *, out): out already has the result's length,
// so the case passes it like an in-place argument (nothing to size).
std::vector<Case> arange(const Name& n, openreg_dtype d) {
  std::vector<Case> cases;
  if (n.overload != "start_out" || d.code == OPENREG_DTYPE_CODE_BOOL) return cases;
  auto add = [&](std::string label, double start, double end, double step, int64_t length) {
    Builder b(std::move(label));
    if (is_float(d)) b.arg(Arg::scalar(start)).arg(Arg::scalar(end)).arg(Arg::scalar(step));
    else b.arg(Arg::scalar_int(static_cast<int64_t>(start))).arg(Arg::scalar_int(static_cast<int64_t>(end)))
             .arg(Arg::scalar_int(static_cast<int64_t>(step)));
    b.tensor(T(d, {length}));
    Case c = b.done();
    c.num_outputs = 1;
    c.inplace_arg = 3;
    c.strided_outputs = false;
    cases.push_back(c);
  };
  add("0 to 10 step 1", 0, 10, 1, 10);
  add("2 to 50 step 3", 2, 50, 3, 16);
  add("10 to -10 step -2", 10, -10, -2, 10);
  if (is_float(d)) add("-3 to 7.5 step 0.5", -3, 7.5, 0.5, 21);
  add("0 to 40000 step 1 (parallel path)", 0, 40000, 1, 40000);
  return cases;
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
std::vector<Case> embedding_backward(const Name& n, openreg_dtype d) {
  std::vector<Case> cases;
  auto add = [&](std::string label, Shape grad, Shape index_shape, int64_t num_weights, int64_t padding_idx,
                 bool by_freq, Layout layout = Layout::Contiguous) {
    Builder b(std::move(label));
    b.tensor(T(d, std::move(grad), layout));
    TensorSpec index = T(dt::int64, std::move(index_shape), Layout::Contiguous, Domain::Index);
    index.hi = num_weights;
    b.tensor(index).arg(Arg::integer(num_weights)).arg(Arg::integer(padding_idx)).arg(Arg::boolean(by_freq));
    b.c.tol_scale = 10;
    cases.push_back(b.done());
  };
  add("4x9 tokens of 16, 11 rows", {4, 9, 16}, {4, 9}, 11, -1, false);
  add("padding_idx 3", {4, 9, 16}, {4, 9}, 11, 3, false);
  add("scale_grad_by_freq", {4, 9, 16}, {4, 9}, 11, -1, true);
  add("transposed grad 13x7", {13, 7}, {13}, 5, -1, false, Layout::Transposed);
  add("no tokens", {0, 16}, {0}, 11, -1, false);
  add("512 tokens of 64, 1000 rows (parallel path)", {512, 64}, {512}, 1000, -1, false);
  return variant(n, "aten::embedding_dense_backward", cases);
}

// ------------------------------------------------------------ fused RNN cells

// _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?, hidden_bias?),
// _thnn_fused_gru_cell (same, hx), their backwards _thnn_fused_lstm_cell_backward_impl
// (grad_hy?, grad_cy?, cx, cy, workspace, has_bias) and _thnn_fused_gru_cell_backward
// (grad_hy, workspace, has_bias): with and without biases, absent gradients, gapped
// operands (which engines may decline), an empty batch, the parallel path.
// Workspaces hold gates in (0, 1) (engines/common/include/openreg/sdk/rnn.hpp).
std::vector<Case> rnn_cell(const Name& n, openreg_dtype d) {
  const bool lstm = n.root.rfind("_thnn_fused_lstm_cell", 0) == 0;
  const bool backward = n.root.find("backward") != std::string::npos;
  const int64_t k = lstm ? 4 : 3;
  struct Shape2 {
    std::string label;
    int64_t b, h;
    Layout layout;
  };
  const std::vector<Shape2> shapes{{"5x7", 5, 7, Layout::Contiguous},
                                   {"strided+offset 5x7", 5, 7, Layout::Gapped},
                                   {"empty batch 0x7", 0, 7, Layout::Contiguous},
                                   {"64x160 (parallel path)", 64, 160, Layout::Contiguous}};
  std::vector<Case> cases;
  for (const Shape2& s : shapes) {
    for (bool bias : {true, false}) {
      Builder b(s.label + (bias ? ", bias" : ", no bias"));
      if (!backward) {
        b.tensor(T(d, {s.b, k * s.h}, s.layout)).tensor(T(d, {s.b, k * s.h}, s.layout)).tensor(T(d, {s.b, s.h}, s.layout));
        b.optional_tensor(bias, T(d, {k * s.h})).optional_tensor(bias, T(d, {k * s.h}));
        b.c.num_outputs = lstm ? 3 : 2;
      } else if (lstm) {
        b.tensor(T(d, {s.b, s.h}, s.layout)).tensor(T(d, {s.b, s.h}, s.layout)).tensor(T(d, {s.b, s.h}, s.layout));
        b.tensor(T(d, {s.b, s.h}, s.layout)).tensor(T(d, {s.b, 4 * s.h}, s.layout, Domain::Unit));
        b.arg(Arg::boolean(bias));
        b.c.num_outputs = 3;
      } else {
        b.tensor(T(d, {s.b, s.h}, s.layout)).tensor(T(d, {s.b, 5 * s.h}, s.layout, Domain::Unit));
        b.arg(Arg::boolean(bias));
        b.c.num_outputs = 5;
      }
      b.c.tol_scale = 10;  // bias gradients sum over the batch
      cases.push_back(b.done());
    }
  }
  if (lstm && backward) {  // one gradient absent
    for (bool hy : {true, false}) {
      Builder b(hy ? "5x7, grad_hy only" : "5x7, grad_cy only");
      b.optional_tensor(hy, T(d, {5, 7})).optional_tensor(!hy, T(d, {5, 7}));
      b.tensor(T(d, {5, 7})).tensor(T(d, {5, 7})).tensor(T(d, {5, 28}, Layout::Contiguous, Domain::Unit));
      b.arg(Arg::boolean(true));
      b.c.num_outputs = 3;
      b.c.tol_scale = 10;
      cases.push_back(b.done());
    }
  }
  return cases;
}

// ------------------------------------------------------------ fused attention

// _scaled_dot_product_fused_attention_overrideable(q, k, v, attn_bias?, dropout_p,
// is_causal, return_debug_mask, *, scale?) and its _backward(grad_out, q, k, v,
// attn_bias, grad_input_mask, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
// dropout_p, is_causal, philox_seed, philox_offset, *, scale?): no mask, a scale,
// causal, bool and float masks broadcast over heads or batch, grouped key/value heads,
// gapped operands (which engines may decline). The backward's logsumexp is any value:
// every implementation rebuilds the probabilities from the one it is given
// (engines/aten_ref/attention_cpu.cpp). Bool masks only where S is long enough that
// no row is fully masked (its logsumexp is +inf, which the comparison cannot take).
std::vector<Case> attention(const Name& n, openreg_dtype d) {
  const bool backward = n.root.find("backward") != std::string::npos;
  struct Dims {
    std::string label;
    int64_t b, h, hk, L, S, E, Ev;
    Layout layout;
  };
  const std::vector<Dims> shapes{{"2x3, L 7, S 5, E 11, Ev 13", 2, 3, 3, 7, 5, 11, 13, Layout::Contiguous},
                                 {"2x2, L = S = 37", 2, 2, 2, 37, 37, 16, 16, Layout::Contiguous},
                                 {"grouped heads 4 over 2, L 70, S 23", 2, 4, 2, 70, 23, 8, 8, Layout::Contiguous},
                                 {"strided+offset 2x2x7x5", 2, 2, 2, 7, 5, 6, 6, Layout::Gapped}};
  enum Mask { kNone, kBool, kFloat };
  struct Variant {
    std::string label;
    Mask mask;
    bool causal;
    double scale;  // NaN: none
  };
  const double none = std::nan("");
  const std::vector<Variant> variants{{"no mask", kNone, false, none},        {"scale 0.3", kNone, false, 0.3},
                                      {"causal", kNone, true, none},          {"float mask [B, 1, L, S]", kFloat, false, none},
                                      {"bool mask [1, H, L, S]", kBool, false, none}};
  std::vector<Case> cases;
  for (const Dims& s : shapes) {
    for (const Variant& v : variants) {
      if (v.mask == kBool && s.S < 20) continue;
      Builder b(s.label + ", " + v.label);
      if (backward) b.tensor(T(d, {s.b, s.h, s.L, s.Ev}, s.layout));
      b.tensor(T(d, {s.b, s.h, s.L, s.E}, s.layout, Domain::Unit)).tensor(T(d, {s.b, s.hk, s.S, s.E}, s.layout, Domain::Unit));
      b.tensor(T(d, {s.b, s.hk, s.S, s.Ev}, s.layout));
      const TensorSpec mask = v.mask == kBool ? T(dt::bool_, {1, s.h, s.L, s.S}) : T(d, {s.b, 1, s.L, s.S});
      b.optional_tensor(v.mask != kNone, mask);
      const Arg scale = std::isnan(v.scale) ? Arg::none() : Arg::real(v.scale);
      if (!backward) {
        b.arg(Arg::real(0.0)).arg(Arg::boolean(v.causal)).arg(Arg::boolean(false)).arg(scale);
        b.c.num_outputs = 9;  // out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, seed, offset, debug mask
      } else {
        b.arg(Arg::bool_list({1, 1, 1, v.mask != kNone ? 1 : 0}));
        b.tensor(T(d, {s.b, s.h, s.L, s.Ev})).tensor(T(dt::float32, {s.b, s.h, s.L}, Layout::Contiguous, Domain::Unit));
        b.arg(Arg::none()).arg(Arg::none()).arg(Arg::integer(s.L)).arg(Arg::integer(s.S)).arg(Arg::real(0.0));
        b.arg(Arg::boolean(v.causal)).tensor(T(dt::int64, {})).tensor(T(dt::int64, {})).arg(scale);
        b.c.num_outputs = 4;
      }
      // Sums over the keys; the backward chains two products and a difference
      // (dP - rowsum(P dP)) of terms larger than the result, and its logsumexp being
      // any value, probabilities up to e^4: float32 differs in the 5th digit there.
      b.c.tol_scale = backward ? 50 : 10;
      cases.push_back(b.done());
    }
  }
  return cases;
}

// mkldnn_rnn_layer(input [T, B, I], w_ih, w_hh, b_ih, b_hh, hx [B, H], cx [B, H],
// reverse, batch_sizes, mode=2 (LSTM), hidden_size, num_layers=1, has_biases,
// bidirectional=False, batch_first=False, train): a whole LSTM layer as core
// sends it, train=False without a backward, train=True in training. Operands
// contiguous and time-major, as the reference (CPU's kernel) requires; the
// workspace is implementation-defined (the serving engine's record for its own
// mkldnn_rnn_layer_backward).
std::vector<Case> lstm_layer(const Name& n, openreg_dtype d) {
  std::vector<Case> cases;
  auto add = [&](std::string label, int64_t t, int64_t b, int64_t i, int64_t h, bool reverse, bool bias, bool train) {
    Builder c(std::move(label) + (train ? ", train" : ""));
    c.tensor(T(d, {t, b, i})).tensor(T(d, {4 * h, i})).tensor(T(d, {4 * h, h}));
    c.tensor(T(d, {4 * h})).tensor(T(d, {4 * h}));  // ignored without has_biases
    c.tensor(T(d, {b, h})).tensor(T(d, {b, h}));
    c.arg(Arg::boolean(reverse)).arg(Arg::int_list({})).arg(Arg::integer(2)).arg(Arg::integer(h));
    c.arg(Arg::integer(1)).arg(Arg::boolean(bias)).arg(Arg::boolean(false)).arg(Arg::boolean(false));
    c.arg(Arg::boolean(train));
    c.c.num_outputs = 4;
    c.c.skip_outputs = {3};
    c.c.tol_scale = 10;  // GEMMs over the input and hidden sizes, then a recurrence
    cases.push_back(c.done());
  };
  for (bool train : {false, true}) {
    add("6x5x9, hidden 7", 6, 5, 9, 7, false, true, train);
    add("6x5x9, hidden 7, reverse", 6, 5, 9, 7, true, true, train);
    add("6x5x9, hidden 7, has_biases=False", 6, 5, 9, 7, false, false, train);
    add("one step, batch of one", 1, 1, 9, 13, false, true, train);
    add("20x64x32, hidden 40 (parallel path)", 20, 64, 32, 40, false, true, train);
    // Hidden sizes of whole vectors and layers large enough for two threads, where
    // an engine may run a loop of its own (onednn's lstm_loop.cpp): remainders
    // of rows, reverse without biases, unit blocks that do not split evenly.
    add("16x16x64, hidden 64 (two threads)", 16, 16, 64, 64, false, true, train);
    add("24x13x64, hidden 64, reverse, has_biases=False (two threads)", 24, 13, 64, 64, true, false, train);
    add("48x6x128, hidden 48 (two threads)", 48, 6, 128, 48, false, true, train);
  }
  return variant(n, "aten::mkldnn_rnn_layer", cases, 4);
}

// mkldnn_rnn_layer_backward(input, w_ih, w_hh, b_ih, b_hh, hx, cx, output, hy,
// cy, grad_output?, grad_hy?, grad_cy?, reverse, mode=2, hidden_size,
// num_layers=1, has_biases, train=True, bidirectional=False, batch_sizes,
// batch_first=False, workspace). Its workspace means something only to the
// engine whose forward made it, and one call here cannot chain a forward: these
// cases hand it bytes no forward made (sized past what CPU's kernel, the
// reference, reads), which an engine must decline without writing anything, as
// it would another engine's workspace. The values are checked through torch
// (python/openreg/conformance_cases_rnn.py), where each side's forward makes
// its own workspace.
std::vector<Case> lstm_layer_backward(const Name&, openreg_dtype d) {
  std::vector<Case> cases;
  auto add = [&](std::string label, int64_t t, int64_t b, int64_t i, int64_t h, bool grads) {
    Builder c(std::move(label));
    c.tensor(T(d, {t, b, i})).tensor(T(d, {4 * h, i})).tensor(T(d, {4 * h, h}));
    c.tensor(T(d, {4 * h})).tensor(T(d, {4 * h})).tensor(T(d, {b, h})).tensor(T(d, {b, h}));
    c.tensor(T(d, {t, b, h})).tensor(T(d, {b, h})).tensor(T(d, {b, h}));  // output, hy, cy
    c.tensor(T(d, {t, b, h})).optional_tensor(grads, T(d, {b, h})).optional_tensor(grads, T(d, {b, h}));
    c.arg(Arg::boolean(false)).arg(Arg::integer(2)).arg(Arg::integer(h)).arg(Arg::integer(1));
    c.arg(Arg::boolean(true)).arg(Arg::boolean(true)).arg(Arg::boolean(false)).arg(Arg::int_list({}));
    c.arg(Arg::boolean(false));
    // CPU's workspace is about 17 floats per step, row and hidden unit, plus
    // fixed parts (28 KB for the smallest layer): four times that and 256 KB.
    c.tensor(T(dt::uint8, {16 * 4 * t * b * h + 262144}, Layout::Contiguous, Domain::Positive));
    c.c.num_outputs = 7;
    c.c.tol_scale = 10;
    cases.push_back(c.done());
  };
  add("6x5x9, hidden 7, a workspace no forward made", 6, 5, 9, 7, true);
  add("one step, batch of one, grad_output only, a workspace no forward made", 1, 1, 9, 13, false);
  return cases;
}

using Family = std::function<std::vector<Case>(const Name&, openreg_dtype)>;

struct FamilyInfo {
  Family make;
  const std::vector<openreg_dtype>* dtypes;
};

const std::map<std::string, FamilyInfo>& families() {
  static const std::map<std::string, FamilyInfo> table = [] {
    std::map<std::string, FamilyInfo> t;
    for (const char* op : {"neg", "abs", "relu", "sign"}) t[op] = {unary, &kNumeric};
    for (const char* op : {"exp", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "sigmoid", "tanh", "gelu", "silu",
                           "sin", "cos", "erf", "reciprocal", "floor", "ceil", "round", "trunc", "leaky_relu",
                           "hardtanh", "clamp", "pow", "hardswish", "hardsigmoid"})
      t[op] = {unary, &kFloats};
    for (const char* op : {"add", "sub", "mul", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge"})
      t[op] = {binary, &kNumeric};
    t["div"] = {binary, &kNumeric};
    for (const char* op : {"addcmul", "addcdiv", "lerp"}) t[op] = {ternary, &kFloats};
    for (const char* op : {"threshold_backward", "sigmoid_backward", "tanh_backward", "gelu_backward", "silu_backward",
                           "leaky_relu_backward", "hardtanh_backward", "hardsigmoid_backward"})
      t[op] = {activation_backward, &kFloats};
    for (const char* op : {"fill", "zero", "clone", "copy"}) t[op] = {memory_ops, &kAll};
    for (const char* op : {"sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin"}) t[op] = {reduction, &kNumeric};
    t["mean"] = {reduction, &kFloats};
    for (const char* op : {"mm", "addmm", "bmm", "baddbmm"}) t[op] = {matmul, &kFloats};
    for (const char* op : {"_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data"})
      t[op] = {softmax, &kFloats};
    for (const char* op : {"mse_loss", "mse_loss_backward", "smooth_l1_loss", "smooth_l1_loss_backward"})
      t[op] = {mse, &kFloats};
    for (const char* op : {"nll_loss_forward", "nll_loss_backward"}) t[op] = {nll, &kFloats};
    for (const char* op : {"native_layer_norm", "native_layer_norm_backward"}) t[op] = {layer_norm, &kFloats};
    for (const char* op : {"native_batch_norm", "native_batch_norm_backward"}) t[op] = {batch_norm, &kFloats};
    for (const char* op : {"native_group_norm", "native_group_norm_backward"}) t[op] = {group_norm, &kFloats};
    for (const char* op : {"convolution", "convolution_backward"}) t[op] = {convolution, &kFloats};
    for (const char* op : {"max_pool2d_with_indices", "max_pool2d_with_indices_backward", "avg_pool2d",
                           "avg_pool2d_backward"})
      t[op] = {pooling, &kFloats};
    for (const char* op : {"_foreach_add", "_foreach_sub", "_foreach_mul", "_foreach_div", "_foreach_addcmul",
                           "_foreach_addcdiv", "_foreach_lerp", "_foreach_sqrt", "_foreach_neg", "_foreach_zero",
                           "_foreach_maximum", "_foreach_minimum"})
      t[op] = {foreach_op, &kFloats};
    for (const char* op : {"_fused_adam", "_fused_adamw", "_fused_sgd"}) t[op] = {fused_optim, &kFloats};
    for (const char* op : {"_prelu_kernel", "_prelu_kernel_backward"}) t[op] = {prelu, &kFloats};
    t["index_select"] = {index_select, &kAll};
    t["gather"] = {gather, &kAll};
    t["flip"] = {flip, &kAll};
    t["roll"] = {roll, &kAll};
    t["index"] = {index, &kAll};
    t["cat"] = {cat, &kAll};
    t["where"] = {where, &kBool};
    for (const char* op : {"tril", "triu"}) t[op] = {triangle, &kAll};
    for (const char* op : {"isneginf", "isposinf"}) t[op] = {inf_test, &kNumeric};
    for (const char* op : {"all", "any"}) t[op] = {all_any, &kAll};
    t["arange"] = {arange, &kNumeric};
    t["embedding_dense_backward"] = {embedding_backward, &kFloats};
    for (const char* op : {"bitwise_and", "bitwise_or", "bitwise_xor"}) t[op] = {binary, &kAll};
    for (const char* op : {"_thnn_fused_lstm_cell", "_thnn_fused_lstm_cell_backward_impl", "_thnn_fused_gru_cell",
                           "_thnn_fused_gru_cell_backward"})
      t[op] = {rnn_cell, &kFloats};  // fused RNN cells
    for (const char* op : {"_scaled_dot_product_fused_attention_overrideable",
                           "_scaled_dot_product_fused_attention_overrideable_backward"})
      t[op] = {attention, &kFloats};
    t["mkldnn_rnn_layer"] = {lstm_layer, &kFloat32};
    t["mkldnn_rnn_layer_backward"] = {lstm_layer_backward, &kFloat32};
    return t;
  }();
  return table;
}

}  // namespace

std::vector<openreg_dtype> natural_dtypes(const std::string& op) {
  auto it = families().find(parse(op).root);
  return it == families().end() ? std::vector<openreg_dtype>{} : *it->second.dtypes;
}

OpCases cases_for(const std::string& op, openreg_dtype dtype) {
  OpCases out;
  const Name n = parse(op);
  auto it = families().find(n.root);
  if (it == families().end()) return out;
  out.known = true;
  out.dtypes = *it->second.dtypes;
  out.cases = it->second.make(n, dtype);
  if (out.cases.empty()) out.known = false;
  return out;
}

}  // namespace conformance
