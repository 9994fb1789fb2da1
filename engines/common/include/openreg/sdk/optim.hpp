// Engine SDK: the optimizer step as one call per parameter group.
//
//  - fused_adam(call, adamw): aten::_fused_adam_ / _fused_adamw_ (and .tensor_lr),
//    torch.optim.Adam/AdamW(fused=True);
//  - fused_sgd(call): aten::_fused_sgd_ (and .tensor_lr), SGD(fused=True);
//  - foreach(call, op, inplace): the aten::_foreach_* kernels the foreach paths of
//    Adam/AdamW/SGD call (torch.optim's default on openreg).
// fused_ops() and foreach_ops() list the op names with their kernels;
// register_ops(engine) adds them all (one registration, so every engine serves the
// same overloads and dtypes).
//
// Same per-element arithmetic as ATen's CPU kernels (FusedAdamKernel.cpp,
// FusedSGDKernel.cpp, the foreach ops' per-tensor loop): in float for float32 and
// bfloat16 (ATen's opmath), in double for float64. The kernels serve lists of one
// dtype whose items at each position have the same sizes (the foreach ops any
// strides; the fused ones dense items laid out alike, which they walk flat as CPU
// does) and decline (UNSUPPORTED, nothing written) anything else: the foreach ops then
// take their per-tensor loop, the fused ones the reference engine (CPU's result or
// error).
#pragma once

#include <openreg/sdk/call.hpp>
#include <openreg/sdk/engine.hpp>
#include <openreg/sdk/strided.hpp>
#include <openreg/sdk/vector_isa.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace openreg {
namespace sdk {
namespace optim {

// Elements per parallel_for chunk: small tensors stay on the calling thread.
constexpr int64_t kGrain = 32768;

// The arithmetic type of an element type (ATen's opmath_type).
template <class T>
using opmath_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Dense: the elements fill [0, numel) of memory from element 0, in some order of
// dims (contiguous, transposed, permuted), so a kernel can walk them flat.
inline bool is_dense(const Tensor& t) {
  if (t.is_contiguous()) return true;
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of dims of size > 1
  for (int64_t i = 0; i < t.dim(); ++i)
    if (t.size(i) != 1) dims.emplace_back(t.stride(i), t.size(i));
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto& d : dims) {
    if (d.first != expected) return false;
    expected *= d.second;
  }
  return true;
}

// Same sizes and the same memory order: element d of the flat walk is the same
// element of both.
inline bool same_layout(const Tensor& a, const Tensor& b) {
  if (a.dim() != b.dim()) return a.is_contiguous() && b.is_contiguous() && a.numel() == b.numel();
  for (int64_t i = 0; i < a.dim(); ++i) {
    if (a.size(i) != b.size(i)) return false;
    if (a.size(i) != 1 && a.stride(i) != b.stride(i)) return false;
  }
  return true;
}

// Declines unless every tensor of `lists` (same length n) has `dtype` and, item by
// item, the sizes of the first list's item; with `flat`, also is dense and laid out
// like it (the fused kernels walk memory flat, as CPU's do).
inline void require_lists(const Call& call, openreg_dtype dtype, const std::vector<const std::vector<Tensor>*>& lists,
                          bool flat) {
  const size_t n = lists[0]->size();
  for (const auto* l : lists) {
    OPENREG_SDK_REQUIRE(l->size() == n, call.op_name(), ": tensor lists of different lengths");
    for (size_t k = 0; k < n; ++k) {
      const Tensor& t = (*l)[k];
      OPENREG_SDK_REQUIRE(t.defined(), call.op_name(), ": undefined tensor in a list");
      OPENREG_SDK_REQUIRE(same_dtype(t.dtype(), dtype), call.op_name(), ": mixed dtypes (", dtype_name(t.dtype()),
                          " and ", dtype_name(dtype), ")");
      const Tensor& first = (*lists[0])[k];
      if (flat) {
        OPENREG_SDK_REQUIRE(is_dense(t), call.op_name(), ": tensor with gaps ", t.describe());
        OPENREG_SDK_REQUIRE(same_layout(t, first), call.op_name(), ": item ", k, " is ", t.describe(),
                            " in one list and ", first.describe(), " in another");
      } else {
        OPENREG_SDK_REQUIRE(t.sizes().vec() == first.sizes().vec(), call.op_name(), ": item ", k, " is ",
                            t.describe(), " in one list and ", first.describe(), " in another (broadcast)");
      }
    }
  }
}

// grad_scale / found_inf: optional one-element float32 tensors (as ATen's CPU kernels
// read them); anything else declines.
inline const float* optional_float_scalar(const Call& call, int i) {
  auto t = call.optional_tensor(i);
  if (!t) return nullptr;
  OPENREG_SDK_REQUIRE(same_dtype(t->dtype(), dtypes::float32) && t->numel() == 1, call.op_name(), ": argument ", i,
                      " is not a one-element float32 tensor");
  return t->data<float>();
}

// lr: a float, or (the .tensor_lr overloads) a one-element tensor.
inline double lr_arg(const Call& call, int i) {
  if (call.kind(i) == OPENREG_VALUE_TENSOR) {
    Tensor t = call.tensor(i);
    OPENREG_SDK_REQUIRE(t.numel() == 1, call.op_name(), ": lr tensor of ", t.numel(), " elements");
    return t.item();
  }
  return call.double_arg(i);
}

// ------------------------------------------------------------------ Adam / AdamW

struct AdamParams {
  double lr, beta1, beta2, weight_decay, eps;
  bool amsgrad, maximize, adamw;
};

// The element loop, without branches on the options but amsgrad and Adam's L2 term
// (the others are exact multiplications by 1 when off), so it vectorises.
template <class T, bool kAmsgrad, bool kL2>
void adam_loop(const Host& host, VectorIsa isa, const AdamParams& p, double step, T* param, T* grad, T* exp_avg,
               T* exp_avg_sq, T* max_exp_avg_sq, int64_t n, const float* grad_scale) {
  using M = opmath_t<T>;
  const double bias_correction1 = 1 - std::pow(p.beta1, step);
  const double bias_correction2 = 1 - std::pow(p.beta2, step);
  const M step_size = static_cast<M>(p.lr / bias_correction1);
  const M bc2_sqrt = static_cast<M>(std::sqrt(bias_correction2));
  const M beta1 = static_cast<M>(p.beta1), beta2 = static_cast<M>(p.beta2);
  const M avg_coef = static_cast<M>(1 - p.beta1), sq_coef = static_cast<M>(1 - p.beta2);
  const M eps = static_cast<M>(p.eps), wd = static_cast<M>(p.weight_decay);
  // AdamW's param scale; 1 (exact) without weight decay or for Adam.
  const M decay = p.adamw && p.weight_decay != 0 ? static_cast<M>(1 - p.lr * p.weight_decay) : M(1);
  const M sign = p.maximize ? M(-1) : M(1);
  const M scale = grad_scale ? static_cast<M>(*grad_scale) : M(1);  // x / 1 is exact
  host.parallel_for(0, n, kGrain, [=](int64_t b, int64_t e) {
    run_vectorised(isa, [=]() OPENREG_SDK_ROW_LAMBDA {
      // Distinct tensors (the host's overlap checks for written lists): restrict lets
      // the compiler vectorise.
      T* __restrict param_ = param;
      T* __restrict grad_ = grad;
      T* __restrict avg_ = exp_avg;
      T* __restrict sq_ = exp_avg_sq;
      T* __restrict max_ = max_exp_avg_sq;
      for (int64_t d = b; d < e; ++d) {
        M g = static_cast<M>(grad_[d]) / scale;
        grad_[d] = static_cast<T>(g);  // unscaled gradients are written back, as CPU does (same value without)
        g = g * sign;
        M x = static_cast<M>(param_[d]) * decay;
        if constexpr (kL2) g += x * wd;
        M m = static_cast<M>(avg_[d]);
        m = m * beta1 + avg_coef * g;
        avg_[d] = static_cast<T>(m);
        M v = static_cast<M>(sq_[d]);
        v = v * beta2;
        v = v + sq_coef * g * g;
        sq_[d] = static_cast<T>(v);
        M denom;
        if constexpr (kAmsgrad) {
          const M vmax = std::max(static_cast<M>(max_[d]), v);
          max_[d] = static_cast<T>(vmax);
          denom = std::sqrt(vmax) / bc2_sqrt + eps;
        } else {
          denom = std::sqrt(v) / bc2_sqrt + eps;
        }
        param_[d] = static_cast<T>(x - step_size * m / denom);
      }
    });
  });
}

template <class T>
void adam_tensor(const Host& host, VectorIsa isa, const AdamParams& p, double step, T* param, T* grad, T* exp_avg,
                 T* exp_avg_sq, T* max_exp_avg_sq, int64_t n, const float* grad_scale) {
  const bool l2 = !p.adamw && p.weight_decay != 0;
  auto run = [&](auto ams, auto l2_) {
    adam_loop<T, decltype(ams)::value, decltype(l2_)::value>(host, isa, p, step, param, grad, exp_avg, exp_avg_sq,
                                                             max_exp_avg_sq, n, grad_scale);
  };
  using Y = std::true_type;
  using N = std::false_type;
  if (p.amsgrad) l2 ? run(Y{}, Y{}) : run(Y{}, N{});
  else l2 ? run(N{}, Y{}) : run(N{}, N{});
}

// _fused_adam[w]_(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *,
// lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf).
// state_steps are read, not incremented (torch.optim increments them before).
inline void fused_adam(const Call& call, bool adamw, VectorIsa isa) {
  const std::vector<Tensor> params = call.tensor_list(0), grads = call.tensor_list(1), avgs = call.tensor_list(2),
                            sqs = call.tensor_list(3), maxs = call.tensor_list(4), steps = call.tensor_list(5);
  AdamParams p{lr_arg(call, 6),       call.double_arg(7), call.double_arg(8), call.double_arg(9),
               call.double_arg(10),   call.bool_arg(11),  call.bool_arg(12),  adamw};
  const float* grad_scale = optional_float_scalar(call, 13);
  const float* found_inf = optional_float_scalar(call, 14);
  if (params.empty()) return;
  const openreg_dtype dtype = params[0].dtype();
  std::vector<const std::vector<Tensor>*> lists{&params, &grads, &avgs, &sqs};
  if (p.amsgrad) lists.push_back(&maxs);
  require_lists(call, dtype, lists, true);
  OPENREG_SDK_REQUIRE(steps.size() == params.size(), call.op_name(), ": state_steps of another length");
  for (const Tensor& s : steps) OPENREG_SDK_REQUIRE(s.defined() && s.numel() == 1, call.op_name(), ": bad state step");
  if (found_inf && *found_inf == 1.0f) return;  // CPU skips the step on exactly 1.0
  dispatch<float, double, bfloat16>(dtype, call.op_name().data(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (size_t k = 0; k < params.size(); ++k) {
      adam_tensor<T>(call.host(), isa, p, steps[k].item(), params[k].data<T>(), grads[k].data<T>(), avgs[k].data<T>(),
                     sqs[k].data<T>(), p.amsgrad ? maxs[k].data<T>() : nullptr, params[k].numel(), grad_scale);
    }
  });
}

// ------------------------------------------------------------------------- SGD

struct SgdParams {
  double weight_decay, momentum, lr, dampening;
  bool nesterov, maximize, is_first_step;
};

template <class T>
void sgd_tensor(const Host& host, VectorIsa isa, const SgdParams& p, T* param, T* grad, T* buf, int64_t n,
                const float* grad_scale) {
  using M = opmath_t<T>;
  const M wd = static_cast<M>(p.weight_decay), mom = static_cast<M>(p.momentum), lr = static_cast<M>(p.lr);
  const M damp = static_cast<M>(1 - p.dampening);
  const bool has_wd = p.weight_decay != 0, has_mom = p.momentum != 0, maximize = p.maximize,
             nesterov = p.nesterov, first = p.is_first_step;
  host.parallel_for(0, n, kGrain, [=](int64_t b, int64_t e) {
    run_vectorised(isa, [=]() OPENREG_SDK_ROW_LAMBDA {
      T* __restrict param_ = param;  // distinct tensors: restrict lets the compiler vectorise
      T* __restrict grad_ = grad;
      T* __restrict buf_ = buf;
      for (int64_t d = b; d < e; ++d) {
        M g = static_cast<M>(grad_[d]);
        const M x = static_cast<M>(param_[d]);
        if (grad_scale) {
          g = g / static_cast<M>(*grad_scale);
          grad_[d] = static_cast<T>(g);
        }
        if (maximize) g = -g;
        if (has_wd) g += x * wd;
        if (has_mom) {
          M v = first ? g : static_cast<M>(buf_[d]) * mom + g * damp;
          buf_[d] = static_cast<T>(v);
          if (nesterov) g += v * mom;
          else g = v;
        }
        param_[d] = static_cast<T>(x - g * lr);
      }
    });
  });
}

// _fused_sgd_(self, grads, momentum_buffer_list, *, weight_decay, momentum, lr,
// dampening, nesterov, maximize, is_first_step, grad_scale, found_inf).
inline void fused_sgd(const Call& call, VectorIsa isa) {
  const std::vector<Tensor> params = call.tensor_list(0), grads = call.tensor_list(1), bufs = call.tensor_list(2);
  SgdParams p{call.double_arg(3), call.double_arg(4), lr_arg(call, 5),   call.double_arg(6),
              call.bool_arg(7),   call.bool_arg(8),   call.bool_arg(9)};
  const float* grad_scale = optional_float_scalar(call, 10);
  const float* found_inf = optional_float_scalar(call, 11);
  if (params.empty()) return;
  const openreg_dtype dtype = params[0].dtype();
  std::vector<const std::vector<Tensor>*> lists{&params, &grads};
  if (p.momentum != 0) lists.push_back(&bufs);
  else OPENREG_SDK_REQUIRE(bufs.empty(), call.op_name(), ": momentum buffers without momentum");  // CPU's error
  require_lists(call, dtype, lists, true);
  if (found_inf && *found_inf == 1.0f) return;
  dispatch<float, double, bfloat16>(dtype, call.op_name().data(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (size_t k = 0; k < params.size(); ++k) {
      sgd_tensor<T>(call.host(), isa, p, params[k].data<T>(), grads[k].data<T>(),
                    p.momentum != 0 ? bufs[k].data<T>() : nullptr, params[k].numel(), grad_scale);
    }
  });
}

// -------------------------------------------------------------------- _foreach_

enum class Foreach { kAdd, kSub, kMul, kDiv, kMaximum, kMinimum, kLerp, kAddcmul, kAddcdiv, kSqrt, kNeg, kZero };

// Number of tensor-list operands after self.
inline int foreach_lists(Foreach op) {
  switch (op) {
    case Foreach::kSqrt:
    case Foreach::kNeg:
    case Foreach::kZero: return 0;
    case Foreach::kAddcmul:
    case Foreach::kAddcdiv: return 2;
    case Foreach::kLerp: return 1;
    default: return -1;  // binary: a list, a Scalar or a ScalarList
  }
}

template <class M>
M foreach_binary(Foreach op, M a, M b) {
  switch (op) {
    case Foreach::kAdd: return a + b;
    case Foreach::kSub: return a - b;
    case Foreach::kMul: return a * b;
    case Foreach::kDiv: return a / b;
    case Foreach::kMaximum: return (a != a) ? a : (b != b ? b : std::max(a, b));  // NaN wins
    default: return (a != a) ? a : (b != b ? b : std::min(a, b));
  }
}

// aten::_foreach_<op>[_].{List,Scalar,ScalarList} and the unary ones, in place
// (writes self) or out of place (writes the outputs). The per-tensor scalar is a
// Scalar, one item of a ScalarList, or (add/sub .List) alpha scaling the other list.
inline void foreach(const Call& call, Foreach op, bool inplace, VectorIsa isa) {
  const std::vector<Tensor> self = call.tensor_list(0);
  const size_t n = self.size();
  std::vector<Tensor> outs;
  if (inplace) {
    outs = self;
  } else {
    OPENREG_SDK_CHECK(call.num_outputs() == static_cast<int>(n), call.op_name(), ": ", call.num_outputs(),
                      " outputs for ", n, " tensors");
    for (size_t k = 0; k < n; ++k) outs.push_back(call.output(static_cast<int>(k)));
  }
  if (n == 0) return;
  std::vector<Tensor> l1, l2;
  std::vector<double> scalars(n, 1.0);
  double alpha = 1.0;
  // The argument after the lists: a Scalar or a ScalarList (absent: 1).
  auto read_scalars = [&](int i) {
    if (call.is_none(i)) return;
    const openreg_value& v = call.arg(i);
    if (v.kind == OPENREG_VALUE_DOUBLE_LIST) {
      OPENREG_SDK_REQUIRE(v.u.doubles.count == static_cast<int64_t>(n), call.op_name(), ": scalar list of length ",
                          v.u.doubles.count, " for ", n, " tensors");
      scalars.assign(v.u.doubles.items, v.u.doubles.items + n);
      return;
    }
    OPENREG_SDK_REQUIRE(v.kind != OPENREG_VALUE_TENSOR && v.kind != OPENREG_VALUE_TENSOR_LIST &&
                            v.kind != OPENREG_VALUE_INT_LIST,
                        call.op_name(), ": scalar operand of value kind ", v.kind);
    scalars.assign(n, call.scalar(i));
  };
  const int nl = foreach_lists(op);
  bool list_other = false;
  if (nl < 0) {
    if (call.kind(1) == OPENREG_VALUE_TENSOR_LIST) {
      list_other = true;
      l1 = call.tensor_list(1);
      if (op == Foreach::kAdd || op == Foreach::kSub) alpha = call.scalar_or(2, 1.0);
    } else {
      read_scalars(1);
    }
  } else {
    if (nl >= 1) l1 = call.tensor_list(1);
    if (nl >= 2) l2 = call.tensor_list(2);
    if (nl >= 1) {
      OPENREG_SDK_REQUIRE(!(op == Foreach::kLerp && call.kind(2) == OPENREG_VALUE_TENSOR_LIST), call.op_name(),
                          ": weight list");
      read_scalars(nl + 1);
    }
  }
  const openreg_dtype dtype = self[0].dtype();
  std::vector<const std::vector<Tensor>*> lists{&self, &outs};
  if (!l1.empty() || list_other || nl >= 1) lists.push_back(&l1);
  if (nl >= 2) lists.push_back(&l2);
  require_lists(call, dtype, lists, false);
  dispatch<float, double, bfloat16>(dtype, call.op_name().data(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using M = opmath_t<T>;
    for (size_t k = 0; k < n; ++k) {
      // Any strides: the SDK's row walk (one flat row for contiguous items).
      const Shape shape = shape_of(outs[k]);
      const Tensor& b = l1.empty() ? self[k] : l1[k];
      const Tensor& c = l2.empty() ? self[k] : l2[k];
      const std::array<Operand, 4> ops{operand(outs[k], shape), operand(self[k], shape), operand(b, shape),
                                       operand(c, shape)};
      const M s = static_cast<M>(list_other ? alpha : scalars[k]);
      // f(x, y, z) per element: a loop of its own per op, unit-stride rows as plain
      // pointer loops the compiler vectorises.
      auto run = [&](auto f) {
        for_each_row(call.host(), shape, ops, [&](const std::array<char*, 4>& p, const std::array<int64_t, 4>& st,
                                                  int64_t len) {
          constexpr int64_t es = sizeof(T);
          T* o = reinterpret_cast<T*>(p[0]);
          const T* x = reinterpret_cast<const T*>(p[1]);
          const T* y = reinterpret_cast<const T*>(p[2]);
          const T* z = reinterpret_cast<const T*>(p[3]);
          if (st[0] == es && st[1] == es && st[2] == es && st[3] == es) {
            run_vectorised(isa, [&]() OPENREG_SDK_ROW_LAMBDA {
              for (int64_t d = 0; d < len; ++d)
                o[d] = static_cast<T>(f(static_cast<M>(x[d]), static_cast<M>(y[d]), static_cast<M>(z[d])));
            });
            return;
          }
          auto at = [&](int i, int64_t d) { return static_cast<M>(*reinterpret_cast<const T*>(p[i] + d * st[i])); };
          for (int64_t d = 0; d < len; ++d)
            *reinterpret_cast<T*>(p[0] + d * st[0]) = static_cast<T>(f(at(1, d), at(2, d), at(3, d)));
        });
      };
      switch (op) {
        case Foreach::kSqrt: run([](M x, M, M) OPENREG_SDK_ROW_LAMBDA { return std::sqrt(x); }); break;
        case Foreach::kNeg: run([](M x, M, M) OPENREG_SDK_ROW_LAMBDA { return -x; }); break;
        case Foreach::kZero: run([](M, M, M) OPENREG_SDK_ROW_LAMBDA { return M(0); }); break;
        case Foreach::kLerp:  // ATen's lerp: exact at both ends
          if (std::abs(s) < M(0.5)) run([s](M x, M y, M) OPENREG_SDK_ROW_LAMBDA { return x + s * (y - x); });
          else run([s](M x, M y, M) OPENREG_SDK_ROW_LAMBDA { return y - (y - x) * (M(1) - s); });
          break;
        case Foreach::kAddcmul: run([s](M x, M y, M z) OPENREG_SDK_ROW_LAMBDA { return x + s * y * z; }); break;
        case Foreach::kAddcdiv: run([s](M x, M y, M z) OPENREG_SDK_ROW_LAMBDA { return x + s * (y / z); }); break;
        case Foreach::kAdd:
          if (!list_other) run([s](M x, M, M) OPENREG_SDK_ROW_LAMBDA { return x + s; });
          else if (s == M(1)) run([](M x, M y, M) OPENREG_SDK_ROW_LAMBDA { return x + y; });
          else run([s](M x, M y, M) OPENREG_SDK_ROW_LAMBDA { return x + s * y; });
          break;
        case Foreach::kSub:
          if (!list_other) run([s](M x, M, M) OPENREG_SDK_ROW_LAMBDA { return x - s; });
          else run([s](M x, M y, M) OPENREG_SDK_ROW_LAMBDA { return x - s * y; });
          break;
        case Foreach::kMul:
          if (!list_other) run([s](M x, M, M) OPENREG_SDK_ROW_LAMBDA { return x * s; });
          else run([](M x, M y, M) OPENREG_SDK_ROW_LAMBDA { return x * y; });
          break;
        case Foreach::kDiv:
          if (!list_other) run([s](M x, M, M) OPENREG_SDK_ROW_LAMBDA { return x / s; });
          else run([](M x, M y, M) OPENREG_SDK_ROW_LAMBDA { return x / y; });
          break;
        case Foreach::kMaximum:
        case Foreach::kMinimum:
          if (!list_other) run([op, s](M x, M, M) OPENREG_SDK_ROW_LAMBDA { return foreach_binary(op, x, s); });
          else run([op](M x, M y, M) OPENREG_SDK_ROW_LAMBDA { return foreach_binary(op, x, y); });
          break;
      }
    }
  });
}

// ------------------------------------------------------------------- op lists

struct OpKernel {
  std::string name;
  Kernel kernel;
  // Served for bfloat16 too. Not _fused_sgd_: ATen's CPU kernel (the reference)
  // gets bfloat16 wrong on its vectorised path (torch 2.13: momentum buffers off by
  // up to 2.3 for inputs in [-2, 2] from 16 elements on), so the engines leave it to
  // the reference engine rather than disagree with CPU.
  bool bfloat16 = true;
};

inline std::vector<OpKernel> fused_ops(VectorIsa isa) {
  std::vector<OpKernel> ops;
  for (const char* ov : {"", ".tensor_lr"}) {
    ops.push_back({std::string("aten::_fused_adam_") + ov, [isa](const Call& c) { fused_adam(c, false, isa); }});
    ops.push_back({std::string("aten::_fused_adamw_") + ov, [isa](const Call& c) { fused_adam(c, true, isa); }});
    ops.push_back({std::string("aten::_fused_sgd_") + ov, [isa](const Call& c) { fused_sgd(c, isa); }, false});
  }
  return ops;
}

// Each op in place (aten::_foreach_add_.List) and out of place (aten::_foreach_add.List).
inline std::vector<OpKernel> foreach_ops(VectorIsa isa) {
  struct Family {
    const char* name;
    Foreach op;
    std::vector<const char*> overloads;  // "" for none
  };
  const std::vector<Family> families{
      {"add", Foreach::kAdd, {"List", "Scalar", "ScalarList"}},
      {"sub", Foreach::kSub, {"List", "Scalar", "ScalarList"}},
      {"mul", Foreach::kMul, {"List", "Scalar", "ScalarList"}},
      {"div", Foreach::kDiv, {"List", "Scalar", "ScalarList"}},
      {"maximum", Foreach::kMaximum, {"List", "Scalar", "ScalarList"}},
      {"minimum", Foreach::kMinimum, {"List", "Scalar", "ScalarList"}},
      {"lerp", Foreach::kLerp, {"Scalar"}},
      {"addcmul", Foreach::kAddcmul, {"Scalar", "ScalarList"}},
      {"addcdiv", Foreach::kAddcdiv, {"Scalar", "ScalarList"}},
      {"sqrt", Foreach::kSqrt, {""}},
      {"neg", Foreach::kNeg, {""}},
  };
  std::vector<OpKernel> ops;
  for (const Family& f : families) {
    for (const char* ov : f.overloads) {
      const std::string suffix = *ov ? std::string(".") + ov : std::string();
      const Foreach op = f.op;
      ops.push_back({std::string("aten::_foreach_") + f.name + suffix,
                     [op, isa](const Call& c) { foreach(c, op, false, isa); }});
      ops.push_back({std::string("aten::_foreach_") + f.name + "_" + suffix,
                     [op, isa](const Call& c) { foreach(c, op, true, isa); }});
    }
  }
  ops.push_back({"aten::_foreach_zero_", [isa](const Call& c) { foreach(c, Foreach::kZero, true, isa); }});
  return ops;
}

// Registers every op above on an engine, for the dtypes the kernels serve: the one
// registration all engines share. dynamic_op for the fused steps: they return
// nothing, so calls whose outputs Meta cannot size (_fused_sgd_ has no Meta
// kernel) are theirs too. The loops run built for `isa` (vector_isa.hpp): the
// engine's own ISA cap, by default the widest the CPU has.
inline void register_ops(EngineDef& e, VectorIsa isa = cpu_vector_isa()) {
  const auto f32 = dtypes::float32, f64 = dtypes::float64, bf16 = dtypes::bfloat16;
  for (auto& o : fused_ops(isa)) {
    if (o.bfloat16) e.dynamic_op(o.name, {f32, f64, bf16}, o.kernel);
    else e.dynamic_op(o.name, {f32, f64}, o.kernel);
  }
  for (auto& o : foreach_ops(isa)) e.op(o.name, {f32, f64, bf16}, o.kernel);
}

}  // namespace optim
}  // namespace sdk
}  // namespace openreg
