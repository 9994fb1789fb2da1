// mm, addmm, bmm, baddbmm (functional, in-place and out= forms), float32 and
// float64. Each operand is seen as a column-major matrix or the transpose of one
// (Eigen::Map with OuterStride, no copy); operands with no unit stride are copied
// to contiguous scratch first. The output is split into column (or row) blocks
// over the host's parallel_for, and each block is one single-threaded Eigen GEMM
// (gemm_*.cpp: AVX-512 / AVX2 / baseline, chosen from the CPU at first use).
#include <algorithm>

#include "eigen_engine.h"

namespace eigen_engine {

namespace {

// A rows x cols matrix with element strides (rs, cs) as a column-major operand:
// trans=false -> the matrix itself with leading dimension ld; trans=true -> its
// transpose is column-major with ld. False when neither stride is usable.
bool as_colmajor(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool& trans, int64_t& ld) {
  if ((rs == 1 || rows <= 1) && (cols <= 1 || cs >= std::max<int64_t>(rows, 1))) {
    trans = false;
    ld = cols <= 1 ? std::max<int64_t>(rows, 1) : cs;
    return true;
  }
  if ((cs == 1 || cols <= 1) && (rows <= 1 || rs >= std::max<int64_t>(cols, 1))) {
    trans = true;
    ld = rows <= 1 ? std::max<int64_t>(cols, 1) : rs;
    return true;
  }
  return false;
}

struct Mat {
  const void* ptr;
  int64_t rs, cs;
};

constexpr int64_t kParallelFlops = int64_t(1) << 18;

// C[M,N] = alpha * A[M,K] @ B[K,N] + beta * C; A, B and C already usable by
// as_colmajor. threads: split the columns/rows over the host pool.
template <class T>
void product(const sdk::Host& host, bool threads, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t ars,
             int64_t acs, const T* B, int64_t brs, int64_t bcs, T beta, T* C, int64_t crs, int64_t ccs) {
  if (M == 0 || N == 0) return;
  bool ta = false, tb = false, tc = false;
  int64_t lda = 1, ldb = 1, ldc = 1;
  as_colmajor(M, N, crs, ccs, tc, ldc);
  as_colmajor(M, K, ars, acs, ta, lda);
  as_colmajor(K, N, brs, bcs, tb, ldb);
  // Column-major problem: R[m,n] = op1 @ op2.
  int64_t m = M, n = N;
  const T *p1 = A, *p2 = B;
  bool t1 = ta, t2 = tb;
  int64_t ld1 = lda, ld2 = ldb;
  if (tc) {  // C row-major: C^T = B^T A^T
    m = N;
    n = M;
    p1 = B;
    p2 = A;
    t1 = !tb;
    t2 = !ta;
    ld1 = ldb;
    ld2 = lda;
  }
  const int nt = host.num_threads();
  if (!threads || nt <= 1 || M * N * std::max<int64_t>(K, 1) < kParallelFlops) {
    gemm<T>(t1, t2, m, n, K, alpha, p1, ld1, p2, ld2, beta, C, ldc);
    return;
  }
  if (n >= m) {  // split columns of R
    const int64_t grain = std::max<int64_t>(16, (n + nt - 1) / nt);
    host.parallel_for(0, n, grain, [&](int64_t j0, int64_t j1) {
      const T* b = t2 ? p2 + j0 : p2 + j0 * ld2;
      gemm<T>(t1, t2, m, j1 - j0, K, alpha, p1, ld1, b, ld2, beta, C + j0 * ldc, ldc);
    });
  } else {  // split rows of R
    const int64_t grain = std::max<int64_t>(16, (m + nt - 1) / nt);
    host.parallel_for(0, m, grain, [&](int64_t i0, int64_t i1) {
      const T* a = t1 ? p1 + i0 * ld1 : p1 + i0;
      gemm<T>(t1, t2, i1 - i0, n, K, alpha, a, ld1, p2, ld2, beta, C + i0, ldc);
    });
  }
}

bool usable(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  bool t;
  int64_t ld;
  return as_colmajor(rows, cols, rs, cs, t, ld);
}

// Copies a (batch x) rows x cols strided matrix into contiguous scratch.
template <class T>
void pack(const T* src, int64_t batch, int64_t rows, int64_t cols, int64_t bs, int64_t rs, int64_t cs, T* dst) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) dst[(b * rows + i) * cols + j] = src[b * bs + i * rs + j * cs];
}

// The operands of mm/addmm/bmm/baddbmm, checked: out = beta * self + alpha * (a @ b),
// batched over BT (1 for mm/addmm); sizes M x K times K x N; off = 1 when batched.
struct MatmulArgs {
  Tensor out, a, b;
  std::optional<Tensor> self;
  int64_t off, BT, M, K, N;
  double beta = 0, alpha = 1;
};

MatmulArgs matmul_args(const Call& call, bool batched, bool add) {
  const int ia = add ? 1 : 0;
  MatmulArgs m{call.output(0), call.tensor(ia), call.tensor(ia + 1), std::nullopt, 0, 1, 0, 0, 0};
  const Tensor &out = m.out, &a = m.a, &b = m.b;
  const int64_t nd = batched ? 3 : 2;
  OPENREG_SDK_CHECK(a.dim() == nd && b.dim() == nd && out.dim() == nd, call.op_name(), ": expected ", nd,
                    "-d operands, got ", a.describe(), " and ", b.describe());
  m.off = batched ? 1 : 0;
  m.BT = batched ? a.size(0) : 1, m.M = a.size(m.off), m.K = a.size(m.off + 1), m.N = b.size(m.off + 1);
  OPENREG_SDK_CHECK(b.size(m.off) == m.K && (!batched || b.size(0) == m.BT), call.op_name(), ": shapes ",
                    a.describe(), " and ", b.describe(), " cannot be multiplied");
  OPENREG_SDK_CHECK(out.size(m.off) == m.M && out.size(m.off + 1) == m.N && (!batched || out.size(0) == m.BT),
                    call.op_name(), ": output ", out.describe(), " has the wrong shape");
  if (add) {
    m.self = call.tensor(0);
    m.beta = call.scalar_or(3, 1.0);
    m.alpha = call.scalar_or(4, 1.0);
  }
  return m;
}

template <class T>
void matmul_t(const Call& call, bool batched, bool add) {
  const sdk::Host& host = call.host();
  const MatmulArgs m = matmul_args(call, batched, add);
  const Tensor &out = m.out, &a = m.a, &b = m.b;
  const std::optional<Tensor>& self = m.self;
  const int64_t off = m.off, BT = m.BT, M = m.M, K = m.K, N = m.N;
  const double beta = m.beta, alpha = m.alpha;
  if (out.numel() == 0) return;
  const T alpha_t = static_cast<T>(alpha);

  // Operands: strided views when usable, else packed copies.
  auto bstride = [&](const Tensor& t) { return batched ? t.stride(0) : 0; };
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  int64_t abs_ = bstride(a), ars = a.stride(off), acs = a.stride(off + 1);
  int64_t bbs = bstride(b), brs = b.stride(off), bcs = b.stride(off + 1);
  sdk::Host::Scratch sa = host.scratch(usable(M, K, ars, acs) ? 0 : sizeof(T) * BT * M * K);
  sdk::Host::Scratch sb = host.scratch(usable(K, N, brs, bcs) ? 0 : sizeof(T) * BT * K * N);
  if (sa.as<T>()) {
    pack(pa, BT, M, K, abs_, ars, acs, sa.as<T>());
    pa = sa.as<T>();
    abs_ = M * K, ars = K, acs = 1;
  }
  if (sb.as<T>()) {
    pack(pb, BT, K, N, bbs, brs, bcs, sb.as<T>());
    pb = sb.as<T>();
    bbs = K * N, brs = N, bcs = 1;
  }
  // Output: in place when usable, else a contiguous scratch copied back.
  const bool direct = usable(M, N, out.stride(off), out.stride(off + 1));
  sdk::Host::Scratch sc = host.scratch(direct ? 0 : sizeof(T) * BT * M * N);
  LocalTensor tmp_desc(sc.as<T>(), out.dtype(), {BT, M, N});
  T* pc = direct ? out.data<T>() : sc.as<T>();
  const int64_t cbs = direct ? bstride(out) : M * N, crs = direct ? out.stride(off) : N,
                ccs = direct ? out.stride(off + 1) : 1;

  // beta * self into the output (broadcast), unless beta == 0 (self ignored) or
  // the output is self already (addmm_ with beta 1).
  T beta_t = T(0);
  if (add && beta != 0.0) {
    const Tensor& s = *self;
    OPENREG_SDK_REQUIRE(same_dtype(s, out), call.op_name(), ": self of another dtype");
    const bool is_self = s.bytes() == out.bytes() && s.dim() == out.dim() &&
                         std::equal(s.strides().begin(), s.strides().end(), out.strides().begin()) &&
                         std::equal(s.sizes().begin(), s.sizes().end(), out.sizes().begin());
    if (direct) {
      if (!(is_self && beta == 1.0)) {
        const T bt = static_cast<T>(beta);
        emap<T, 1>(host, out, {s}, [bt](T x) { return bt * x; });
      }
    } else {
      LocalTensor view(sc.as<T>(), out.dtype(), {M, N});
      const T bt = static_cast<T>(beta);
      if (batched) emap<T, 1>(host, tmp_desc.view(), {s}, [bt](T x) { return bt * x; });
      else emap<T, 1>(host, view.view(), {s}, [bt](T x) { return bt * x; });
    }
    beta_t = T(1);
  }

  const int nt = host.num_threads();
  const bool over_batches = BT >= 2 * nt && M * N * std::max<int64_t>(K, 1) * BT >= kParallelFlops;
  if (over_batches) {
    host.parallel_for(0, BT, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i)
        product<T>(host, false, M, N, K, alpha_t, pa + i * abs_, ars, acs, pb + i * bbs, brs, bcs, beta_t,
                   pc + i * cbs, crs, ccs);
    });
  } else {
    for (int64_t i = 0; i < BT; ++i)
      product<T>(host, true, M, N, K, alpha_t, pa + i * abs_, ars, acs, pb + i * bbs, brs, bcs, beta_t, pc + i * cbs,
                 crs, ccs);
  }
  if (!direct) {
    if (batched) emap<T, 1>(host, out, {tmp_desc.view()}, [](T x) { return x; });
    else {
      LocalTensor view(sc.as<T>(), out.dtype(), {M, N});
      emap<T, 1>(host, out, {view.view()}, [](T x) { return x; });
    }
  }
}

// bfloat16: operands widened to float in scratch, one float GEMM, then
// out = beta * self + product rounded once to bfloat16 (ATen accumulates in float too).
void to_float(const sdk::Host& host, const Tensor& src, float* dst) {
  LocalTensor d(dst, sdk::dtypes::float32, src.sizes());
  sdk::Shape shape = sdk::shape_of(src);
  std::array<sdk::Operand, 2> ops{sdk::operand(d.view(), shape), sdk::operand(src, shape)};
  sdk::for_each_row(host, shape, ops, [&](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<float*>(p[0] + i * s[0]) = static_cast<float>(*reinterpret_cast<const sdk::bfloat16*>(p[1] + i * s[1]));
  });
}

void matmul_bf16(const Call& call, bool batched, bool add) {
  const sdk::Host& host = call.host();
  const MatmulArgs m = matmul_args(call, batched, add);
  const Tensor &out = m.out, &a = m.a, &b = m.b;
  const std::optional<Tensor>& self = m.self;
  const int64_t BT = m.BT, M = m.M, K = m.K, N = m.N;
  const double beta = m.beta, alpha = m.alpha;
  if (add && beta != 0.0) OPENREG_SDK_REQUIRE(same_dtype(*self, out), call.op_name(), ": self of another dtype");
  if (out.numel() == 0) return;
  auto sa = host.scratch(sizeof(float) * BT * M * K), sb = host.scratch(sizeof(float) * BT * K * N),
       sc = host.scratch(sizeof(float) * BT * M * N);
  to_float(host, a, sa.as<float>());
  to_float(host, b, sb.as<float>());
  float* pa = sa.as<float>();
  float* pb = sb.as<float>();
  float* pc = sc.as<float>();
  const float al = static_cast<float>(alpha);
  const int nt = host.num_threads();
  if (BT >= 2 * nt && M * N * std::max<int64_t>(K, 1) * BT >= kParallelFlops) {
    host.parallel_for(0, BT, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i)
        product<float>(host, false, M, N, K, al, pa + i * M * K, K, 1, pb + i * K * N, N, 1, 0.f, pc + i * M * N, N, 1);
    });
  } else {
    for (int64_t i = 0; i < BT; ++i)
      product<float>(host, true, M, N, K, al, pa + i * M * K, K, 1, pb + i * K * N, N, 1, 0.f, pc + i * M * N, N, 1);
  }
  LocalTensor prod(pc, sdk::dtypes::float32, out.sizes());
  sdk::Shape shape = sdk::shape_of(out);
  const float bt = static_cast<float>(beta);
  if (add && beta != 0.0) {
    std::array<sdk::Operand, 3> ops{sdk::operand(out, shape), sdk::operand(*self, shape), sdk::operand(prod.view(), shape)};
    sdk::for_each_row(host, shape, ops, [&](const std::array<char*, 3>& p, const std::array<int64_t, 3>& s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        const float sv = static_cast<float>(*reinterpret_cast<const sdk::bfloat16*>(p[1] + i * s[1]));
        const float pv = *reinterpret_cast<const float*>(p[2] + i * s[2]);
        *reinterpret_cast<sdk::bfloat16*>(p[0] + i * s[0]) = sdk::bfloat16(bt * sv + pv);
      }
    });
  } else {
    std::array<sdk::Operand, 2> ops{sdk::operand(out, shape), sdk::operand(prod.view(), shape)};
    sdk::for_each_row(host, shape, ops, [&](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<sdk::bfloat16*>(p[0] + i * s[0]) = sdk::bfloat16(*reinterpret_cast<const float*>(p[1] + i * s[1]));
    });
  }
}

}  // namespace

// mm(self, mat2), bmm(self, mat2), addmm(self, mat1, mat2, beta, alpha),
// baddbmm(self, batch1, batch2, beta, alpha)
void matmul(const Call& call, bool batched, bool add) {
  Tensor out = call.output(0);
  const int ia = add ? 1 : 0;
  Tensor a = call.tensor(ia), b = call.tensor(ia + 1);
  require_dtype(call, out, a, "first matrix");
  require_dtype(call, out, b, "second matrix");
  if (sdk::same_dtype(out.dtype(), sdk::dtypes::bfloat16)) {
    matmul_bf16(call, batched, add);
    return;
  }
  sdk::dispatch<float, double>(out.dtype(), "matmul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    matmul_t<T>(call, batched, add);
  });
}

}  // namespace eigen_engine
