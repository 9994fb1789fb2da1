// native_layer_norm and native_batch_norm, forward and backward, float32 and
// float64. Strided inputs are packed to contiguous scratch; rows (layer norm)
// or channels (batch norm) are spread over the host's threads; per-row work is
// Eigen array arithmetic. Statistics accumulate in double. native_group_norm
// (+_backward) is the SDK's (openreg/sdk/group_norm.hpp), registered at the end.
#include <openreg/sdk/group_norm.hpp>

#include <algorithm>
#include <cmath>

#include "eigen_engine.h"

namespace eigen_engine {

namespace {

template <class T>
using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
template <class T>
using CMapA = Eigen::Map<const Arr<T>>;
template <class T>
using MapA = Eigen::Map<Arr<T>>;

bool present(const Tensor& t) { return t.defined(); }

int64_t grain_for(int64_t work_per_item) {
  return std::max<int64_t>(1, sdk::kParallelGrain / std::max<int64_t>(work_per_item, 1));
}

// ------------------------------------------------------------ layer norm
template <class T>
void layer_norm_t(const Call& call, int64_t M, int64_t N) {
  const sdk::Host& host = call.host();
  Tensor x = call.tensor(0), out = call.output(0), mean = call.output(1), rstd = call.output(2);
  std::optional<Tensor> w = call.optional_tensor(2), b = call.optional_tensor(3);
  const double eps = call.double_arg(4);
  if constexpr (std::is_same_v<T, float>) {  // contiguous float32: the ISA kernel
    if (x.is_contiguous() && out.is_contiguous() && (!w || w->is_contiguous()) && (!b || b->is_contiguous())) {
      const auto kernel = isa().layer_norm_f32;
      const float* xp = x.data<float>();
      const float* wp = w ? w->data<float>() : nullptr;
      const float* bp = b ? b->data<float>() : nullptr;
      float* op = out.data<float>();
      float* mp = mean.data<float>();
      float* rp = rstd.data<float>();
      host.parallel_for(0, M, grain_for(N), [&](int64_t r0, int64_t r1) {
        kernel(xp + r0 * N, wp, bp, op + r0 * N, mp + r0, rp + r0, r1 - r0, N, eps);
      });
      return;
    }
  }
  auto sx = host.scratch(contiguous_bytes(x));
  const T* xp = as_contiguous<T>(host, x, sx);
  auto sw = host.scratch(w ? contiguous_bytes(*w) : 0);
  auto sb = host.scratch(b ? contiguous_bytes(*b) : 0);
  const T* wp = w ? as_contiguous<T>(host, *w, sw) : nullptr;
  const T* bp = b ? as_contiguous<T>(host, *b, sb) : nullptr;
  auto so = host.scratch(contiguous_bytes(out));
  T* op = out.is_contiguous() ? out.data<T>() : so.template as<T>();
  T* mp = mean.data<T>();
  T* rp = rstd.data<T>();
  host.parallel_for(0, M, grain_for(N), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      CMapA<T> xv(xp + r * N, N);
      MapA<T> ov(op + r * N, N);
      const double mu = N ? xv.template cast<double>().sum() / N : 0.0;
      const double var = N ? (xv.template cast<double>() - mu).square().sum() / N : 0.0;
      const double rs = 1.0 / std::sqrt(var + eps);
      ov = (xv - static_cast<T>(mu)) * static_cast<T>(rs);
      if (wp) ov *= CMapA<T>(wp, N);
      if (bp) ov += CMapA<T>(bp, N);
      mp[r] = static_cast<T>(mu);
      rp[r] = static_cast<T>(rs);
    }
  });
  copy_back<T>(host, out, op);
}

template <class T>
void layer_norm_backward_t(const Call& call, int64_t M, int64_t N) {
  const sdk::Host& host = call.host();
  Tensor g = call.tensor(0), x = call.tensor(1), mean = call.tensor(3), rstd = call.tensor(4);
  std::optional<Tensor> w = call.optional_tensor(5);
  std::vector<bool> mask = bool_list(call, 7);
  mask.resize(3, false);
  Tensor gi = call.output(0), gw = call.output(1), gb = call.output(2);
  auto sg = host.scratch(contiguous_bytes(g));
  auto sx = host.scratch(contiguous_bytes(x));
  auto sm = host.scratch(contiguous_bytes(mean));
  auto sr = host.scratch(contiguous_bytes(rstd));
  auto sw = host.scratch(w ? contiguous_bytes(*w) : 0);
  const T* gp = as_contiguous<T>(host, g, sg);
  const T* xp = as_contiguous<T>(host, x, sx);
  const T* mp = as_contiguous<T>(host, mean, sm);
  const T* rp = as_contiguous<T>(host, rstd, sr);
  const T* wp = w ? as_contiguous<T>(host, *w, sw) : nullptr;
  if (mask[0] && present(gi)) {
    auto so = host.scratch(contiguous_bytes(gi));
    T* op = gi.is_contiguous() ? gi.data<T>() : so.template as<T>();
    if constexpr (std::is_same_v<T, float>) {  // the ISA kernel (this loop is built for the baseline ISA)
      const auto kernel = isa().layer_norm_backward_f32;
      host.parallel_for(0, M, grain_for(N), [&](int64_t r0, int64_t r1) {
        kernel(gp + r0 * N, xp + r0 * N, wp, mp + r0, rp + r0, op + r0 * N, r1 - r0, N);
      });
    } else {
      host.parallel_for(0, M, grain_for(N), [&](int64_t r0, int64_t r1) {
        Arr<T> gw_row(N), xhat(N);
        for (int64_t r = r0; r < r1; ++r) {
          CMapA<T> gv(gp + r * N, N), xv(xp + r * N, N);
          const T mu = mp[r], rs = rp[r];
          xhat = (xv - mu) * rs;
          if (wp) gw_row = gv * CMapA<T>(wp, N);
          else gw_row = gv;
          const T mg = N ? static_cast<T>(gw_row.template cast<double>().sum() / N) : T(0);
          const T mgx = N ? static_cast<T>((gw_row * xhat).template cast<double>().sum() / N) : T(0);
          MapA<T>(op + r * N, N) = rs * (gw_row - mg - xhat * mgx);
        }
      });
    }
    copy_back<T>(host, gi, op);
  }
  const bool want_w = mask[1] && present(gw), want_b = mask[2] && present(gb);
  if (want_w || want_b) {
    // Column sums over rows, split over column blocks.
    std::vector<double> dw(static_cast<size_t>(N), 0.0), db(static_cast<size_t>(N), 0.0);
    host.parallel_for(0, N, std::max<int64_t>(1, grain_for(M)), [&](int64_t c0, int64_t c1) {
      for (int64_t r = 0; r < M; ++r) {
        const T mu = mp[r], rs = rp[r];
        for (int64_t c = c0; c < c1; ++c) {
          const double gv = gp[r * N + c];
          dw[static_cast<size_t>(c)] += gv * static_cast<double>((xp[r * N + c] - mu) * rs);
          db[static_cast<size_t>(c)] += gv;
        }
      }
    });
    if (want_w) {
      auto s = host.scratch(sizeof(T) * N);
      for (int64_t c = 0; c < N; ++c) s.as<T>()[c] = static_cast<T>(dw[static_cast<size_t>(c)]);
      copy_back<T>(host, gw, s.as<T>());
    }
    if (want_b) {
      auto s = host.scratch(sizeof(T) * N);
      for (int64_t c = 0; c < N; ++c) s.as<T>()[c] = static_cast<T>(db[static_cast<size_t>(c)]);
      copy_back<T>(host, gb, s.as<T>());
    }
  }
}

void layer_norm_shape(const Call& call, const Tensor& x, int idx, int64_t& M, int64_t& N) {
  sdk::Span<int64_t> ns = call.int_list(idx);
  OPENREG_SDK_CHECK(ns.size() <= x.dim(), call.op_name(), ": normalized_shape longer than the input");
  N = 1;
  for (int64_t i = 0; i < ns.size(); ++i) {
    OPENREG_SDK_CHECK(x.size(x.dim() - ns.size() + i) == ns[i], call.op_name(), ": normalized_shape mismatch");
    N *= ns[i];
  }
  M = N ? x.numel() / N : 0;
  if (N == 0) M = 1;
}

// ------------------------------------------------------------ batch norm
// Input seen as [N, C, S] contiguous.
struct BNShape {
  int64_t N, C, S;
};
BNShape bn_shape(const Tensor& x) {
  BNShape s{x.size(0), x.dim() > 1 ? x.size(1) : 1, 1};
  for (int64_t d = 2; d < x.dim(); ++d) s.S *= x.size(d);
  return s;
}

// Channels per task: batch norm reads its input two or three times, and below
// ~128K elements a pool wake-up (10-50 us) costs more than the second thread saves.
int64_t bn_grain(int64_t per_channel) {
  return std::max<int64_t>(1, 4 * sdk::kParallelGrain / std::max<int64_t>(per_channel, 1));
}

template <class T>
const T* vec_or_null(const sdk::Host& host, const std::optional<Tensor>& t, const sdk::Host::Scratch& s) {
  return t ? as_contiguous<T>(host, *t, s) : nullptr;
}

template <class T>
void batch_norm_t(const Call& call) {
  const sdk::Host& host = call.host();
  Tensor x = call.tensor(0), out = call.output(0), smean = call.output(1), sinv = call.output(2);
  std::optional<Tensor> w = call.optional_tensor(1), b = call.optional_tensor(2), rm = call.optional_tensor(3),
                        rv = call.optional_tensor(4);
  const bool training = call.bool_arg(5);
  const double momentum = call.double_arg(6), eps = call.double_arg(7);
  const BNShape sh = bn_shape(x);
  const int64_t per = sh.N * sh.S;
  auto sx = host.scratch(contiguous_bytes(x));
  const T* xp = as_contiguous<T>(host, x, sx);
  auto sw = host.scratch(w ? contiguous_bytes(*w) : 0);
  auto sb = host.scratch(b ? contiguous_bytes(*b) : 0);
  const T* wp = vec_or_null<T>(host, w, sw);
  const T* bp = vec_or_null<T>(host, b, sb);
  auto so = host.scratch(contiguous_bytes(out));
  T* op = out.is_contiguous() ? out.data<T>() : so.template as<T>();
  std::vector<double> mean_c(static_cast<size_t>(sh.C)), var_c(static_cast<size_t>(sh.C));
  if (!training) {
    for (int64_t c = 0; c < sh.C; ++c) {
      mean_c[static_cast<size_t>(c)] = static_cast<double>(rm->data<T>()[c * rm->stride(0)]);
      var_c[static_cast<size_t>(c)] = static_cast<double>(rv->data<T>()[c * rv->stride(0)]);
    }
  }
  host.parallel_for(0, sh.C, bn_grain(per), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double mu, var;
      if (training) {
        double s = 0;
        for (int64_t n = 0; n < sh.N; ++n) s += CMapA<T>(xp + (n * sh.C + c) * sh.S, sh.S).template cast<double>().sum();
        mu = per ? s / per : 0.0;
        double q = 0;
        for (int64_t n = 0; n < sh.N; ++n)
          q += (CMapA<T>(xp + (n * sh.C + c) * sh.S, sh.S).template cast<double>() - mu).square().sum();
        var = per ? q / per : 0.0;
        mean_c[static_cast<size_t>(c)] = mu;
        var_c[static_cast<size_t>(c)] = var;
      } else {
        mu = mean_c[static_cast<size_t>(c)];
        var = var_c[static_cast<size_t>(c)];
      }
      const double inv = 1.0 / std::sqrt(var + eps);
      const double scale = inv * (wp ? static_cast<double>(wp[c]) : 1.0);
      const double shift = (bp ? static_cast<double>(bp[c]) : 0.0) - mu * scale;
      const T sc = static_cast<T>(scale), shf = static_cast<T>(shift);
      for (int64_t n = 0; n < sh.N; ++n) {
        const int64_t off = (n * sh.C + c) * sh.S;
        MapA<T>(op + off, sh.S) = CMapA<T>(xp + off, sh.S) * sc + shf;
      }
    }
  });
  copy_back<T>(host, out, op);
  if (training) {
    if (present(smean) && smean.numel() == sh.C) {
      T* p = smean.data<T>();
      for (int64_t c = 0; c < sh.C; ++c) p[c * smean.stride(0)] = static_cast<T>(mean_c[static_cast<size_t>(c)]);
    }
    if (present(sinv) && sinv.numel() == sh.C) {
      T* p = sinv.data<T>();
      for (int64_t c = 0; c < sh.C; ++c)
        p[c * sinv.stride(0)] = static_cast<T>(1.0 / std::sqrt(var_c[static_cast<size_t>(c)] + eps));
    }
    if (rm) {
      T* p = rm->data<T>();
      for (int64_t c = 0; c < sh.C; ++c) {
        T& r = p[c * rm->stride(0)];
        r = static_cast<T>(momentum * mean_c[static_cast<size_t>(c)] + (1.0 - momentum) * static_cast<double>(r));
      }
    }
    if (rv) {
      T* p = rv->data<T>();
      const double unbias = per > 1 ? static_cast<double>(per) / static_cast<double>(per - 1) : 1.0;
      for (int64_t c = 0; c < sh.C; ++c) {
        T& r = p[c * rv->stride(0)];
        r = static_cast<T>(momentum * var_c[static_cast<size_t>(c)] * unbias + (1.0 - momentum) * static_cast<double>(r));
      }
    }
  }
}

template <class T>
void batch_norm_backward_t(const Call& call) {
  const sdk::Host& host = call.host();
  Tensor g = call.tensor(0), x = call.tensor(1);
  std::optional<Tensor> w = call.optional_tensor(2), rm = call.optional_tensor(3), rv = call.optional_tensor(4),
                        sm = call.optional_tensor(5), si = call.optional_tensor(6);
  const bool training = call.bool_arg(7);
  const double eps = call.double_arg(8);
  std::vector<bool> mask = bool_list(call, 9);
  mask.resize(3, false);
  Tensor gi = call.output(0), gw = call.output(1), gb = call.output(2);
  const BNShape sh = bn_shape(x);
  const int64_t per = sh.N * sh.S;
  auto sg = host.scratch(contiguous_bytes(g));
  auto sx = host.scratch(contiguous_bytes(x));
  const T* gp = as_contiguous<T>(host, g, sg);
  const T* xp = as_contiguous<T>(host, x, sx);
  std::vector<double> mean_c(static_cast<size_t>(sh.C)), inv_c(static_cast<size_t>(sh.C)),
      w_c(static_cast<size_t>(sh.C), 1.0);
  for (int64_t c = 0; c < sh.C; ++c) {
    if (training) {
      mean_c[static_cast<size_t>(c)] = static_cast<double>(sm->data<T>()[c * sm->stride(0)]);
      inv_c[static_cast<size_t>(c)] = static_cast<double>(si->data<T>()[c * si->stride(0)]);
    } else {
      mean_c[static_cast<size_t>(c)] = static_cast<double>(rm->data<T>()[c * rm->stride(0)]);
      inv_c[static_cast<size_t>(c)] = 1.0 / std::sqrt(static_cast<double>(rv->data<T>()[c * rv->stride(0)]) + eps);
    }
    if (w) w_c[static_cast<size_t>(c)] = static_cast<double>(w->data<T>()[c * w->stride(0)]);
  }
  const bool want_i = mask[0] && present(gi);
  auto so = host.scratch(want_i ? contiguous_bytes(gi) : 0);
  T* op = want_i ? (gi.is_contiguous() ? gi.data<T>() : so.template as<T>()) : nullptr;
  std::vector<double> sum_g(static_cast<size_t>(sh.C)), dot(static_cast<size_t>(sh.C));
  host.parallel_for(0, sh.C, bn_grain(per), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const double mu = mean_c[static_cast<size_t>(c)], inv = inv_c[static_cast<size_t>(c)];
      double s = 0, d = 0;
      for (int64_t n = 0; n < sh.N; ++n) {
        const int64_t off = (n * sh.C + c) * sh.S;
        CMapA<T> gv(gp + off, sh.S), xv(xp + off, sh.S);
        s += gv.template cast<double>().sum();
        d += (gv.template cast<double>() * (xv.template cast<double>() - mu)).sum();
      }
      sum_g[static_cast<size_t>(c)] = s;
      dot[static_cast<size_t>(c)] = d;
      if (!op) continue;
      const double wc = w_c[static_cast<size_t>(c)];
      if (training) {
        const double k = per ? d * inv * inv / per : 0.0;  // projection coefficient
        const double gmean = per ? s / per : 0.0;
        const T a = static_cast<T>(inv * wc), kk = static_cast<T>(k), m = static_cast<T>(mu), gm = static_cast<T>(gmean);
        for (int64_t n = 0; n < sh.N; ++n) {
          const int64_t off = (n * sh.C + c) * sh.S;
          MapA<T>(op + off, sh.S) = (CMapA<T>(gp + off, sh.S) - gm - (CMapA<T>(xp + off, sh.S) - m) * kk) * a;
        }
      } else {
        const T a = static_cast<T>(inv * wc);
        for (int64_t n = 0; n < sh.N; ++n) {
          const int64_t off = (n * sh.C + c) * sh.S;
          MapA<T>(op + off, sh.S) = CMapA<T>(gp + off, sh.S) * a;
        }
      }
    }
  });
  if (op) copy_back<T>(host, gi, op);
  if (mask[1] && present(gw)) {
    T* p = gw.data<T>();
    for (int64_t c = 0; c < sh.C; ++c)
      p[c * gw.stride(0)] = static_cast<T>(dot[static_cast<size_t>(c)] * inv_c[static_cast<size_t>(c)]);
  }
  if (mask[2] && present(gb)) {
    T* p = gb.data<T>();
    for (int64_t c = 0; c < sh.C; ++c) p[c * gb.stride(0)] = static_cast<T>(sum_g[static_cast<size_t>(c)]);
  }
}

void require_all(const Call& call, const Tensor& ref, std::initializer_list<std::optional<Tensor>> ts) {
  for (const auto& t : ts)
    if (t && t->defined()) require_dtype(call, ref, *t, "tensor argument");
}

}  // namespace

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)
void layer_norm(const Call& call) {
  Tensor x = call.tensor(0), out = call.output(0);
  require_all(call, x, {out, call.output(1), call.output(2), call.optional_tensor(2), call.optional_tensor(3)});
  OPENREG_SDK_REQUIRE(call.output(1).is_contiguous() && call.output(2).is_contiguous(), call.op_name(),
                      ": strided mean/rstd outputs");
  int64_t M, N;
  layer_norm_shape(call, x, 1, M, N);
  if (x.numel() == 0) return;
  sdk::dispatch<float, double>(x.dtype(), "native_layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    layer_norm_t<T>(call, M, N);
  });
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?, output_mask)
void layer_norm_backward(const Call& call) {
  Tensor g = call.tensor(0), x = call.tensor(1);
  require_all(call, x, {g, call.tensor(3), call.tensor(4), call.optional_tensor(5)});
  for (int i = 0; i < 3; ++i)
    if (call.output(i).defined()) require_dtype(call, x, call.output(i), "output");
  int64_t M, N;
  layer_norm_shape(call, x, 2, M, N);
  if (x.numel() == 0) M = 0;
  sdk::dispatch<float, double>(x.dtype(), "native_layer_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    layer_norm_backward_t<T>(call, M, N);
  });
}

// native_batch_norm(input, weight?, bias?, running_mean?, running_var?, training, momentum, eps)
void batch_norm(const Call& call) {
  Tensor x = call.tensor(0);
  require_all(call, x, {call.output(0), call.optional_tensor(1), call.optional_tensor(2), call.optional_tensor(3),
                        call.optional_tensor(4)});
  OPENREG_SDK_REQUIRE(x.dim() >= 2, call.op_name(), ": input of ", x.dim(), " dims");
  const bool training = call.bool_arg(5);
  OPENREG_SDK_CHECK(training || (call.optional_tensor(3) && call.optional_tensor(4)), call.op_name(),
                    ": running_mean and running_var must be defined in evaluation mode");
  if (training) {
    for (int i = 1; i < 3; ++i)
      if (call.output(i).defined() && call.output(i).numel() > 0) require_dtype(call, x, call.output(i), "saved stat");
  }
  sdk::dispatch<float, double>(x.dtype(), "native_batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    batch_norm_t<T>(call);
  });
}

// native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?, save_mean?,
//                            save_invstd?, train, eps, output_mask)
void batch_norm_backward(const Call& call) {
  Tensor g = call.tensor(0), x = call.tensor(1);
  require_all(call, x, {g, call.optional_tensor(2), call.optional_tensor(3), call.optional_tensor(4),
                        call.optional_tensor(5), call.optional_tensor(6)});
  for (int i = 0; i < 3; ++i)
    if (call.output(i).defined()) require_dtype(call, x, call.output(i), "output");
  OPENREG_SDK_REQUIRE(x.dim() >= 2, call.op_name(), ": input of ", x.dim(), " dims");
  const bool training = call.bool_arg(7);
  if (training)
    OPENREG_SDK_REQUIRE(call.optional_tensor(5) && call.optional_tensor(6), call.op_name(),
                        ": training without saved statistics");
  else
    OPENREG_SDK_REQUIRE(call.optional_tensor(3) && call.optional_tensor(4), call.op_name(),
                        ": evaluation without running statistics");
  sdk::dispatch<float, double>(x.dtype(), "native_batch_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    batch_norm_backward_t<T>(call);
  });
}

// native_group_norm(+_backward): the SDK's loops (openreg/sdk/group_norm.hpp), built
// for the engine's ISA.
void register_group_norm_ops(sdk::EngineDef& e) { sdk::group_norm::register_ops(e, sdk_vector_isa()); }

}  // namespace eigen_engine
