// sum.dim_IntList and mean.dim on oneDNN's reduction primitive: the source keeps
// its strides, the destination is the output seen with the reduced dims kept as
// size 1 (keepdim=False outputs just get those dims inserted).
#include <limits>

#include "isa.hpp"
#include "ops.h"
#include "vec.hpp"

namespace onednn_engine {

namespace {

void check_reduction(const sdk::Call& call) {
  sdk::Tensor x = call.tensor(0), out = call.output(0);
  dnnl_dt(x.dtype(), call.op_name().data());
  require_dtype(call, x.dtype(), {out});
  if (!call.is_none(3)) {
    const auto& v = call.arg(3);
    OPENREG_SDK_REQUIRE(v.kind == OPENREG_VALUE_DTYPE && sdk::same_dtype(v.u.dtype, x.dtype()), call.op_name(),
                        ": a dtype argument other than the input's is not served");
  }
}

struct RedEntry {
  bool ok = false;   // oneDNN has a reduction for this case
  bool ref = false;  // oneDNN 2.6 only has its reference kernel for this layout
  dnnl::reduction::primitive_desc pd;
  dnnl::reduction prim;
};

// The float sum of a contiguous run in independent partial sums, so the
// vectorised adds do not wait on one another (one accumulator is latency-bound).
// bfloat16 in 8 lanes; float32 in four 4-float vector accumulators (registers in
// the baseline build). The former 32 partial sums were an array zeroed with
// `rep stos` and added up one after another, per run: x.mean(-1) of [8, 64, 64]
// (rows of 64 floats, as in LLaMA's RMS norm) took 24-28 us on the worker at one
// thread, now 5-6 (torch CPU 7-17 with its dispatch).
template <class T>
float run_sum(const T* q, int64_t m) {
  float lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= m; i += 8)
    for (int j = 0; j < 8; ++j) lanes[j] += static_cast<float>(q[i + j]);
  float part = 0.0f;
  for (; i < m; ++i) part += static_cast<float>(q[i]);
  return part + (((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7])));
}

float run_sum(const float* q, int64_t m) {
  using vec::V4;
  V4 a0 = {}, a1 = {}, a2 = {}, a3 = {};
  int64_t i = 0;
  for (; i + 16 <= m; i += 16) {
    a0 += vec::load<V4>(q + i);
    a1 += vec::load<V4>(q + i + 4);
    a2 += vec::load<V4>(q + i + 8);
    a3 += vec::load<V4>(q + i + 12);
  }
  const V4 a = (a0 + a1) + (a2 + a3);
  float part = (a[0] + a[2]) + (a[1] + a[3]);
  for (; i < m; ++i) part += q[i];
  return part;
}

// A contiguous input reduced over its trailing dims into a contiguous output
// (global average pooling: [8, 512, 2, 2] over (2, 3)): output o is the run
// x[o * count, (o + 1) * count), summed as reduce_loop sums a contiguous run.
// reduce_loop walked its generic index arithmetic per output, 108 us there
// against torch CPU's 22. Returns false (nothing written) for other layouts.
template <class T>
bool sum_trailing(const sdk::Tensor& x, const sdk::Tensor& out, const std::vector<bool>& red, double scale) {
  if (!x.is_contiguous() || !out.is_contiguous()) return false;
  int64_t first = x.dim();
  for (int64_t d = x.dim(); d-- > 0 && red[static_cast<size_t>(d)];) first = d;
  for (int64_t d = 0; d < first; ++d)
    if (red[static_cast<size_t>(d)] && x.size(d) > 1) return false;
  int64_t count = 1;
  for (int64_t d = first; d < x.dim(); ++d) count *= x.size(d);
  const int64_t num_out = out.numel();
  if (count <= 0 || num_out * count != x.numel()) return false;
  const T* xp = reinterpret_cast<const T*>(x.bytes());
  T* op = reinterpret_cast<T*>(out.bytes());
  const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(kMemGrain) / count);
  host().parallel_for(0, num_out, grain, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      const double acc = run_sum(xp + o * count, count);
      op[o] = static_cast<T>(static_cast<float>(acc * scale));
    }
  });
  return true;
}

// Strided reduction loop in double, for the layouts oneDNN 2.6 only covers
// with its slow serial reference kernel (sums over outer dims: bias gradients,
// batch statistics; 32x64x56x56 over (0, 2, 3) took 85 ms there), and for the
// cases it has no reduction for at all (bfloat16 without avx512_core). Parallel over
// the kept elements (host pool); each one sums its reduced sub-space, whose
// dims are merged into contiguous runs where the strides allow.
template <class T>
void reduce_loop(const sdk::Tensor& x, const sdk::Tensor& out, const std::vector<bool>& red, const memory::dims& ds,
                 bool mean) {
  const int64_t n = x.dim(), es = x.element_size();
  sdk::Shape ksize, kxs, kos, rshape, rxs;
  int64_t num_out = 1, count = 1;
  for (int64_t i = 0; i < n; ++i) {
    const size_t u = static_cast<size_t>(i);
    if (red[u]) {
      rshape.push_back(x.size(i));
      rxs.push_back(x.stride(i) * es);
      count *= x.size(i);
    } else {
      ksize.push_back(x.size(i));
      kxs.push_back(x.stride(i) * es);
      kos.push_back(ds[u] * out.element_size());
      num_out *= x.size(i);
    }
  }
  std::array<sdk::Operand, 1> rop{sdk::Operand{x.bytes(), rxs}};
  sdk::detail::coalesce(rshape, rop);
  const int64_t rows = sdk::numel_of(rshape) / rshape.back();
  const double scale = mean ? 1.0 / static_cast<double>(count) : 1.0;
  const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(kMemGrain) / std::max<int64_t>(1, count));
  host().parallel_for(0, num_out, grain, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      int64_t rem = o, xoff = 0, ooff = 0;
      for (size_t d = ksize.size(); d-- > 0;) {
        const int64_t idx = rem % ksize[d];
        rem /= ksize[d];
        xoff += idx * kxs[d];
        ooff += idx * kos[d];
      }
      double acc = 0.0;
      std::array<sdk::Operand, 1> op{sdk::Operand{x.bytes() + xoff, rop[0].byte_strides}};
      auto fn = [&acc](const std::array<char*, 1>& p, const std::array<int64_t, 1>& st, int64_t m) {
        const char* v = p[0];
        float part = 0.0f;  // runs are summed in float, then accumulated in double
        if (st[0] == static_cast<int64_t>(sizeof(T))) {
          part = run_sum(reinterpret_cast<const T*>(v), m);
        } else {
          for (int64_t i = 0; i < m; ++i, v += st[0]) part += static_cast<float>(*reinterpret_cast<const T*>(v));
        }
        acc += part;
      };
      sdk::detail::rows(rshape, op, 0, rows, fn);
      *reinterpret_cast<T*>(out.bytes() + ooff) = static_cast<T>(static_cast<float>(acc * scale));
    }
  });
}

// A reduction that keeps the innermost dim, unit stride in the input and the
// output: out[k, i] = sum over r of x[k, r, i], any strides for the other kept
// dims k and the reduced dims r (GQA's expanded key/value gradients,
// [8, 2, 2, 64, 32] over dim 2 on a transposed layout: 0.97 ms in the
// per-output loop, oneDNN has only its reference kernel). Whole rows of the
// inner dim are added (unit stride, vectorised) instead of one output element
// at a time; threads split the kept rows. Rows are added in float, in order,
// as ATen does for a reduction that keeps the inner dim. Returns false
// (nothing written) for other layouts. `ds`: out's strides per input dim.
constexpr int64_t kMaxRows = 256;
template <class T>
bool sum_rows(const sdk::Tensor& x, const sdk::Tensor& out, const std::vector<bool>& red, const memory::dims& ds,
              double scale) {
  int64_t inner = -1;  // the innermost dim of more than one element
  for (int64_t d = x.dim(); d-- > 0;)
    if (x.size(d) > 1) {
      inner = d;
      break;
    }
  if (inner < 0 || red[static_cast<size_t>(inner)] || x.stride(inner) != 1 || ds[static_cast<size_t>(inner)] != 1)
    return false;
  const int64_t I = x.size(inner);
  if (I < 8) return false;  // too short to vectorise along
  int64_t rows = 1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (red[static_cast<size_t>(d)]) rows *= x.size(d);
  if (rows > kMaxRows) return false;  // long float sums: sum_outer's blocked ones, or the primitive
  std::vector<int64_t> ks, kxs, kos, roff{0};
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d == inner || x.size(d) == 1) continue;
    if (red[static_cast<size_t>(d)]) {  // every reduced offset, in order
      const size_t n0 = roff.size();
      for (int64_t j = 1; j < x.size(d); ++j)
        for (size_t q = 0; q < n0; ++q) roff.push_back(roff[q] + j * x.stride(d));
    } else {
      ks.push_back(x.size(d));
      kxs.push_back(x.stride(d));
      kos.push_back(ds[static_cast<size_t>(d)]);
    }
  }
  int64_t K = 1;
  for (int64_t k : ks) K *= k;
  const int64_t R = static_cast<int64_t>(roff.size());
  constexpr int64_t kChunk = 1024;  // float accumulators on the stack
  const int64_t chunks = (I + kChunk - 1) / kChunk;
  const T* xp = reinterpret_cast<const T*>(x.bytes());
  T* op = reinterpret_cast<T*>(out.bytes());
  const float fs = static_cast<float>(scale);
  const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(kMemGrain) / (R * std::min(I, kChunk)));
  host().parallel_for(0, K * chunks, grain, [&](int64_t lo, int64_t hi) {
    float acc[kChunk];
    for (int64_t t = lo; t < hi; ++t) {
      int64_t rem = t / chunks, xo = 0, oo = 0;
      for (size_t d = ks.size(); d-- > 0;) {
        const int64_t idx = rem % ks[d];
        rem /= ks[d];
        xo += idx * kxs[d];
        oo += idx * kos[d];
      }
      const int64_t i0 = (t % chunks) * kChunk, m = std::min(kChunk, I - i0);
      const T* src = xp + xo + i0;
      for (int64_t i = 0; i < m; ++i) acc[i] = static_cast<float>(src[roff[0] + i]);
      for (int64_t r = 1; r < R; ++r) {
        const T* row = src + roff[static_cast<size_t>(r)];
        for (int64_t i = 0; i < m; ++i) acc[i] += static_cast<float>(row[i]);
      }
      T* dst = op + oo + i0;
      for (int64_t i = 0; i < m; ++i) dst[i] = static_cast<T>(acc[i] * fs);
    }
  });
  return true;
}

std::vector<bool> reduced_dims(const sdk::Call& call, const sdk::Tensor& x) {
  const int64_t n = x.dim();
  std::vector<bool> r(static_cast<size_t>(n), false);
  bool any = false;
  if (!call.is_none(1)) {
    for (int64_t d : call.int_list(1)) {
      d = sdk::ops::wrap_dim(call, d, n);  // out of range: declined, the reference raises IndexError
      if (n) r[static_cast<size_t>(d)] = true;
      any = true;
    }
  }
  if (!any) r.assign(static_cast<size_t>(n), true);  // no dims: everything
  return r;
}

void run_reduction(const sdk::Call& call, bool mean) {
  check_reduction(call);
  sdk::Tensor x = call.tensor(0), out = call.output(0);
  const bool keepdim = call.bool_arg(2);
  const std::vector<bool> red = reduced_dims(call, x);
  if (out.numel() == 0) return;
  if (x.numel() == 0) {  // empty reduction: 0 (sum) or NaN (mean)
    const float v = mean ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
    dispatch_float(out.dtype(), "reduction", [&](auto tag) {
      using T = typename decltype(tag)::type;
      sdk::unary_map<T>(host(), out, out, [v](T) { return v; });
    });
    return;
  }
  const int64_t n = x.dim();
  memory::dims dd, ds;
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (red[static_cast<size_t>(i)]) {
      dd.push_back(1);
      ds.push_back(keepdim ? out.stride(i) : 1);
      if (keepdim) ++k;
    } else {
      dd.push_back(x.size(i));
      ds.push_back(out.stride(k++));
    }
  }
  if (n == 0) {
    dd = {1};
    ds = {1};
  }
  bool reduces = false;  // some reduced dim has more than one element
  for (int64_t i = 0; i < n; ++i) reduces = reduces || (red[static_cast<size_t>(i)] && x.size(i) > 1);
  if (!reduces) {  // only size-1 dims reduced (or a 0-dim input): a copy
    dispatch_float(out.dtype(), "reduction", [&](auto tag) {
      using T = typename decltype(tag)::type;
      sdk::Shape shape = sdk::shape_of(x);
      sdk::Operand o;
      o.base = out.bytes();
      o.byte_strides.assign(ds.begin(), ds.end());
      for (auto& s : o.byte_strides) s *= out.element_size();
      if (n == 0) o.byte_strides.clear();
      std::array<sdk::Operand, 2> ops{o, sdk::operand(x, shape)};
      sdk::for_each_row(host(), shape, ops, [](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t m) {
        for (int64_t i = 0; i < m; ++i)
          *reinterpret_cast<T*>(p[0] + i * s[0]) = *reinterpret_cast<const T*>(p[1] + i * s[1]);
      });
    });
    return;
  }
  int64_t count = 1;
  for (int64_t i = 0; i < n; ++i)
    if (red[static_cast<size_t>(i)]) count *= x.size(i);
  const double scale = mean ? 1.0 / static_cast<double>(count) : 1.0;
  auto loop = [&] {
    dispatch_float(x.dtype(), "reduction", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (sdk::sum_outer<T>(host(), x, out, red, keepdim, scale, vector_isa())) return;  // outer dims summed row by row (bias gradients)
      if (sum_rows<T>(x, out, red, ds, scale)) return;
      if (sum_trailing<T>(x, out, red, scale)) return;
      reduce_loop<T>(x, out, red, ds, mean);
    });
  };
  // Expanded inputs (the loop walks stride 0 as is) and dtypes oneDNN has no
  // primitive for on this CPU. Small inputs whose innermost dim is reduced too:
  // the loop's contiguous runs vectorise, and it skips the primitive's fixed
  // cost (sum of 64x64: 5.6 us through the primitive, torch CPU 2.2 us).
  bool inner_reduced = false;
  for (int64_t i = n; i-- > 0;)
    if (x.size(i) > 1) {
      inner_reduced = red[static_cast<size_t>(i)] && x.stride(i) == 1;
      break;
    }
  if (has_zero_stride(x) || !has_primitives(x.dtype()) || (inner_reduced && x.numel() < kMemGrain)) return loop();
  // A contiguous input reduced over its innermost dims: the loop's row sums, on every
  // ISA. oneDNN 2.6's reduction took 80 us for [8,64,128] over its last dim below
  // AVX-512 (jit:avx2; LLaMA's RMS norm, torch CPU 11 us) and 12-20 us with it
  // (worker, host idle, 1 and 2 threads), the loop 7-11; [4,128,768] and [64,4096]
  // ran at the same speed either way.
  if (inner_reduced) {
    bool done = false;
    dispatch_float(x.dtype(), "reduction", [&](auto tag) {
      using T = typename decltype(tag)::type;
      done = sum_trailing<T>(x, out, red, scale);
    });
    if (done) return;
  }
  // The inner dim kept: whole rows added (sum_outer, sum_rows) where the layout allows.
  if (!inner_reduced) {
    bool done = false;
    dispatch_float(x.dtype(), "reduction", [&](auto tag) {
      using T = typename decltype(tag)::type;
      done = sdk::sum_outer<T>(host(), x, out, red, keepdim, scale, vector_isa()) || sum_rows<T>(x, out, red, ds, scale);
    });
    if (done) return;
  }
  const memory::desc xmd = md_of(x), omd = md_of(out, dd, ds);
  Key key(mean ? "mean" : "sum");
  key.add(x).add(dd).add(ds);
  auto e = cached<RedEntry>(key, [&] {
    RedEntry r;
    try {
      dnnl::reduction::desc d(mean ? dnnl::algorithm::reduction_mean : dnnl::algorithm::reduction_sum, xmd, omd, 0.0f,
                              0.0f);
      r.pd = dnnl::reduction::primitive_desc(d, base_attr(), cpu());
      r.prim = dnnl::reduction(r.pd);
      r.ok = true;
      r.ref = std::string(r.pd.impl_info_str()).rfind("ref", 0) == 0;
    } catch (const dnnl::error&) {
    }
    return r;
  });
  if (!e->ok || e->ref) return loop();
  execute(e->prim, e->pd, {{DNNL_ARG_SRC, make_mem(x, xmd)}, {DNNL_ARG_DST, make_mem(out, omd)}});
}

}  // namespace

void sum_dim(const sdk::Call& call) { run_reduction(call, false); }
void mean_dim(const sdk::Call& call) { run_reduction(call, true); }

}  // namespace onednn_engine
