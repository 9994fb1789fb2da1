// Reductions over any set of dims, any strides, with keepdim: sum, mean (sums
// accumulate in double), amax/amin, max.dim/min.dim (values and int64 indices),
// argmax/argmin. float32, float64, bfloat16 and float16 (read as float). Output elements are spread over the host's
// threads; each walks its reduced sub-tensor with an odometer.
#include <algorithm>
#include <cmath>
#include <limits>

#include "eigen_engine.h"

namespace eigen_engine {

namespace {

struct Plan {
  std::vector<int64_t> ksz, kin, kout;  // kept dims: sizes, input strides, output strides
  std::vector<int64_t> rsz, rin;        // reduced dims: sizes, input strides
  int64_t nout = 1, nred = 1;
};

// `reduced[d]`: whether input dim d is reduced. Output dims follow the input's
// (keepdim) or the kept dims only.
Plan make_plan(const Tensor& in, const Tensor& out, const std::vector<bool>& reduced, bool keepdim) {
  Plan p;
  int64_t od = 0;
  for (int64_t d = 0; d < in.dim(); ++d) {
    if (reduced[static_cast<size_t>(d)]) {
      p.rsz.push_back(in.size(d));
      p.rin.push_back(in.stride(d));
      p.nred *= in.size(d);
      if (keepdim) ++od;
    } else {
      p.ksz.push_back(in.size(d));
      p.kin.push_back(in.stride(d));
      p.kout.push_back(out.dim() > od ? out.stride(od) : 0);
      p.nout *= in.size(d);
      ++od;
    }
  }
  return p;
}

// Calls fn(out_offset_in_elements[k], in_base_offset, lambda visiting reduced offsets).
template <size_t NO, class Fn>
void run_plan(const sdk::Host& host, const Plan& p, const std::array<std::vector<int64_t>, NO>& outs_strides, Fn fn) {
  if (p.nout == 0) return;
  const int64_t grain = std::max<int64_t>(1, sdk::kParallelGrain / std::max<int64_t>(p.nred, 1));
  host.parallel_for(0, p.nout, grain, [&](int64_t b, int64_t e) {
    std::vector<int64_t> idx(p.rsz.size());
    for (int64_t o = b; o < e; ++o) {
      int64_t r = o, in_off = 0;
      std::array<int64_t, NO> out_off{};
      for (size_t d = p.ksz.size(); d-- > 0;) {
        const int64_t i = r % p.ksz[d];
        r /= p.ksz[d];
        in_off += i * p.kin[d];
        for (size_t k = 0; k < NO; ++k) out_off[k] += i * outs_strides[k][d];
      }
      // visit(f): f(in_offset, linear_index) over the reduced elements in row-major order.
      auto visit = [&](auto&& f) {
        if (p.nred == 0) return;
        std::fill(idx.begin(), idx.end(), 0);
        int64_t off = in_off;
        const size_t nr = p.rsz.size();
        if (nr == 0) {
          f(off, int64_t(0));
          return;
        }
        const int64_t inner = p.rsz[nr - 1], istr = p.rin[nr - 1];
        for (int64_t lin = 0; lin < p.nred; lin += inner) {
          for (int64_t j = 0; j < inner; ++j) f(off + j * istr, lin + j);
          for (size_t d = nr - 1; d-- > 0;) {
            off += p.rin[d];
            if (++idx[d] < p.rsz[d]) break;
            off -= p.rsz[d] * p.rin[d];
            idx[d] = 0;
          }
        }
      };
      fn(out_off, visit);
    }
  });
}

// Whether a contiguous float32 `in` reduced into contiguous float32 `out` (neither
// empty) has its reduced dims all after its kept ones (trailing: rows of p.nred
// elements) or all before them (leading: p.nred rows of the kept elements).
enum class Block { kTrailing, kLeading };
bool dense_f32_block(const Tensor& in, const Tensor& out, const std::vector<bool>& reduced, const Plan& p,
                     Block block) {
  if (!sdk::same_dtype(in.dtype(), sdk::dtypes::float32) || !sdk::same_dtype(out.dtype(), sdk::dtypes::float32) ||
      !in.is_contiguous() || !out.is_contiguous() || p.nred == 0 || p.nout == 0)
    return false;
  for (size_t d = 1; d < reduced.size(); ++d)
    if (reduced[d - 1] != reduced[d] && reduced[d - 1] == (block == Block::kTrailing)) return false;
  return true;
}

// Sums and means of contiguous float32 over trailing dims (x.sum(), per-row sums)
// with the ISA kernel: rows over threads, or chunks of one long row whose partial
// sums are added in chunk order (the same result whatever the thread count).
// False when the call is not of that shape.
bool sum_rows_f32(const sdk::Host& host, const Tensor& in, const Tensor& out, const std::vector<bool>& reduced,
                  const Plan& p, Reduce kind) {
  if (!dense_f32_block(in, out, reduced, p, Block::kTrailing)) return false;
  const auto sum = isa().sum_f32;
  const float* x = in.data<float>();
  float* o = out.data<float>();
  const int64_t n = p.nred;
  const double scale = kind == R_MEAN ? 1.0 / static_cast<double>(n) : 1.0;
  if (p.nout > 1 || n <= sdk::kParallelGrain) {
    host.parallel_for(0, p.nout, std::max<int64_t>(1, sdk::kParallelGrain / n), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) o[r] = static_cast<float>(sum(x + r * n, n) * scale);
    });
    return true;
  }
  const int64_t chunks = (n + sdk::kParallelGrain - 1) / sdk::kParallelGrain;
  std::vector<double> partial(static_cast<size_t>(chunks));
  host.parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      const int64_t begin = c * sdk::kParallelGrain;
      partial[static_cast<size_t>(c)] = sum(x + begin, std::min(n - begin, sdk::kParallelGrain));
    }
  });
  double total = 0;
  for (double v : partial) total += v;
  *o = static_cast<float>(total * scale);
  return true;
}

// amax/amin, max.dim/min.dim and argmax/argmin of contiguous float32 over trailing
// dims (x.amax(-1), x.max(-1)) with the ISA kernel, rows over threads: the portable
// walk below compares element by element with a branch each, which random data
// mispredicts (a [512, 512] amax(-1) took 12x torch CPU's time). The index is the
// first element equal to the extremum (or the first NaN), as the walk's.
// False when the call is not of that shape.
bool extremum_rows_f32(const sdk::Host& host, const Tensor& in, const Tensor* values, const Tensor* indices,
                       const std::vector<bool>& reduced, const Plan& p, bool is_max) {
  // (the index output is int64: checked as the values would be, then its layout alone)
  if (!dense_f32_block(in, values ? *values : in, reduced, p, Block::kTrailing)) return false;
  if (indices && !indices->is_contiguous()) return false;
  const auto extremum = isa().extremum_f32;
  const float* x = in.data<float>();
  float* vo = values ? values->data<float>() : nullptr;
  int64_t* io = indices ? indices->data<int64_t>() : nullptr;
  const int64_t n = p.nred;
  host.parallel_for(0, p.nout, std::max<int64_t>(1, sdk::kParallelGrain / n), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* row = x + r * n;
      const float v = extremum(row, n, is_max);
      if (vo) vo[r] = v;
      if (io) {
        int64_t i = 0;
        if (v != v) {
          while (row[i] == row[i]) ++i;
        } else {
          while (row[i] != v) ++i;
        }
        io[r] = i;
      }
    }
  });
  return true;
}

// amax/amin of contiguous float32 over leading dims (x.amax(0)): the rows of the
// reduced block folded into the output, column chunks over threads.
bool extremum_outer_f32(const sdk::Host& host, const Tensor& in, const Tensor& out, const std::vector<bool>& reduced,
                        const Plan& p, bool is_max) {
  if (!dense_f32_block(in, out, reduced, p, Block::kLeading)) return false;
  const auto accumulate = isa().extremum_accumulate_f32;
  const float* x = in.data<float>();
  float* o = out.data<float>();
  const int64_t rows = p.nred, cols = p.nout;
  host.parallel_for(0, cols, std::max<int64_t>(16, sdk::kParallelGrain / rows), [&](int64_t b, int64_t e) {
    std::copy(x + b, x + e, o + b);
    for (int64_t r = 1; r < rows; ++r) accumulate(o + b, x + r * cols + b, e - b, is_max);
  });
  return true;
}

}  // namespace

void reduce(const Call& call, Reduce kind) {
  Tensor in = call.tensor(0);
  Tensor out = call.output(0);
  const int64_t nd = in.dim();
  std::vector<bool> reduced(static_cast<size_t>(nd), false);
  bool keepdim = false;
  const bool index_op = kind == R_MAX_DIM || kind == R_MIN_DIM || kind == R_ARGMAX || kind == R_ARGMIN;
  auto mark = [&](int64_t d) {
    OPENREG_SDK_CHECK(d >= -std::max<int64_t>(nd, 1) && d < std::max<int64_t>(nd, 1), call.op_name(), ": dim ", d,
                      " out of range");
    if (nd == 0) return;
    reduced[static_cast<size_t>(d < 0 ? d + nd : d)] = true;
  };
  if (kind == R_SUM_ALL) {
    std::fill(reduced.begin(), reduced.end(), true);
    const openreg_value& dt = call.arg(1);
    OPENREG_SDK_REQUIRE(dt.kind != OPENREG_VALUE_DTYPE || sdk::same_dtype(dt.u.dtype, in.dtype()), call.op_name(),
                        ": dtype= given");
  } else if (kind == R_SUM || kind == R_MEAN || kind == R_AMAX || kind == R_AMIN) {
    if (call.is_none(1) || call.int_list(1).empty()) {
      std::fill(reduced.begin(), reduced.end(), true);
    } else {
      for (int64_t d : call.int_list(1)) mark(d);
    }
    keepdim = call.bool_arg(2);
    if (kind == R_SUM || kind == R_MEAN) {
      const openreg_value& dt = call.arg(3);
      OPENREG_SDK_REQUIRE(dt.kind != OPENREG_VALUE_DTYPE || sdk::same_dtype(dt.u.dtype, in.dtype()), call.op_name(),
                          ": dtype= given");
    }
  } else {  // max.dim/min.dim(self, dim, keepdim), argmax/argmin(self, dim?, keepdim)
    if (call.is_none(1)) {
      std::fill(reduced.begin(), reduced.end(), true);
    } else {
      mark(call.int_arg(1));
    }
    keepdim = call.bool_arg(2);
  }
  if (kind == R_ARGMAX || kind == R_ARGMIN) {
    OPENREG_SDK_REQUIRE(sdk::same_dtype(out.dtype(), sdk::dtypes::int64), call.op_name(), ": index output not int64");
  } else {
    require_dtype(call, out, in, "self");
  }
  if (kind == R_MAX_DIM || kind == R_MIN_DIM)
    OPENREG_SDK_REQUIRE(sdk::same_dtype(call.output(1).dtype(), sdk::dtypes::int64), call.op_name(),
                        ": index output not int64");
  // keepdim with all dims reduced on argmax(dim=None): output keeps nd dims of 1.
  Plan p = make_plan(in, out, reduced, keepdim && out.dim() == nd);
  if (index_op) OPENREG_SDK_CHECK(p.nout == 0 || p.nred > 0, call.op_name(), ": reduction over an empty dimension");

  if ((kind == R_SUM || kind == R_MEAN || kind == R_SUM_ALL) && sum_rows_f32(call.host(), in, out, reduced, p, kind))
    return;
  if (kind != R_SUM && kind != R_MEAN && kind != R_SUM_ALL) {
    const bool is_max = kind == R_AMAX || kind == R_MAX_DIM || kind == R_ARGMAX;
    const bool with_values = kind == R_AMAX || kind == R_AMIN || kind == R_MAX_DIM || kind == R_MIN_DIM;
    const bool with_indices = index_op;
    const Tensor indices = kind == R_MAX_DIM || kind == R_MIN_DIM ? call.output(1) : out;
    if (extremum_rows_f32(call.host(), in, with_values ? &out : nullptr, with_indices ? &indices : nullptr, reduced, p,
                          is_max))
      return;
    if ((kind == R_AMAX || kind == R_AMIN) && extremum_outer_f32(call.host(), in, out, reduced, p, is_max)) return;
  }
  // Sums over outer dims in float32 (bias gradients): row by row, see sdk/reduce.hpp.
  if ((kind == R_SUM || kind == R_MEAN) && p.nred > 0 && sdk::same_dtype(in.dtype(), sdk::dtypes::float32) &&
      sdk::sum_outer<float>(call.host(), in, out, reduced, keepdim && out.dim() == nd,
                            kind == R_MEAN ? 1.0 / static_cast<double>(p.nred) : 1.0, sdk_vector_isa()))
    return;
  sdk::dispatch<float, double, sdk::bfloat16, sdk::float16>(in.dtype(), "reduce", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = C_t<T>;  // float for the 16-bit types: read once, compared and summed as float/double
    const T* x = in.data<T>();
    const sdk::Host& h = call.host();
    if (kind == R_SUM || kind == R_MEAN || kind == R_SUM_ALL) {
      T* o = out.data<T>();
      const double scale = kind == R_MEAN ? (p.nred == 0 ? std::numeric_limits<double>::quiet_NaN() : 1.0 / p.nred) : 1.0;
      run_plan<1>(h, p, {p.kout}, [&](const std::array<int64_t, 1>& oo, auto visit) {
        double acc = 0;
        visit([&](int64_t off, int64_t) { acc += static_cast<double>(static_cast<C>(x[off])); });
        o[oo[0]] = static_cast<T>(kind == R_MEAN ? (p.nred == 0 ? scale : acc * scale) : acc);
      });
      return;
    }
    const bool is_max = kind == R_AMAX || kind == R_MAX_DIM || kind == R_ARGMAX;
    auto better = [is_max](C v, C best) {
      if (best != best) return false;
      if (v != v) return true;
      return is_max ? v > best : v < best;
    };
    if (kind == R_AMAX || kind == R_AMIN) {
      T* o = out.data<T>();
      OPENREG_SDK_CHECK(p.nout == 0 || p.nred > 0, call.op_name(), ": reduction over an empty dimension");
      run_plan<1>(h, p, {p.kout}, [&](const std::array<int64_t, 1>& oo, auto visit) {
        bool first = true;
        C best = C(0);
        visit([&](int64_t off, int64_t) {
          const C v = static_cast<C>(x[off]);
          if (first || better(v, best)) best = v;
          first = false;
        });
        o[oo[0]] = static_cast<T>(best);
      });
      return;
    }
    // Index ops: max.dim/min.dim write values and indices, argmax/argmin indices.
    const bool values = kind == R_MAX_DIM || kind == R_MIN_DIM;
    Tensor idx_out = values ? call.output(1) : out;
    Plan pi = make_plan(in, idx_out, reduced, keepdim && idx_out.dim() == nd);
    int64_t* io = idx_out.data<int64_t>();
    T* vo = values ? out.data<T>() : nullptr;
    run_plan<2>(h, p, {p.kout, pi.kout}, [&](const std::array<int64_t, 2>& oo, auto visit) {
      bool first = true;
      C best = C(0);
      int64_t bi = 0;
      visit([&](int64_t off, int64_t lin) {
        const C v = static_cast<C>(x[off]);
        if (first || better(v, best)) {
          best = v;
          bi = lin;
        }
        first = false;
      });
      if (vo) vo[oo[0]] = static_cast<T>(best);
      io[oo[1]] = bi;
    });
  });
}

}  // namespace eigen_engine
