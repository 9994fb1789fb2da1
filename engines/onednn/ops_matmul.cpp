// mm, addmm, bmm, baddbmm on oneDNN's matmul primitive. Inputs keep their own
// strides (transposed operands are just other strides); alpha is an output
// scale; beta*self (beta == 1) is the matmul's own bias argument when self varies
// along the last dim only (the Linear bias case), else a fused binary-add
// post-op; otherwise it is written into the output first and added by a sum
// post-op.
#include <optional>
#include <type_traits>

#include "ops.h"

namespace onednn_engine {

namespace {

struct MatmulEntry {
  bool ok = false;
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
};

// Descriptor of `self` broadcast to out's rank (missing leading dims are size 1).
memory::desc bias_md(const sdk::Tensor& self, int64_t rank) {
  memory::dims d(static_cast<size_t>(rank), 1), s(static_cast<size_t>(rank), 1);
  const int64_t lead = rank - self.dim();
  for (int64_t i = 0; i < self.dim(); ++i) {
    d[static_cast<size_t>(lead + i)] = self.size(i);
    s[static_cast<size_t>(lead + i)] = self.size(i) == 1 ? 1 : self.stride(i);
  }
  return memory::desc(d, dnnl_dt(self.dtype(), "addmm"), s);
}

bool overlaps(const sdk::Tensor& a, const sdk::Tensor& b) { return a.bytes() == b.bytes(); }

// Whether two tensors' elements share any byte (both non-empty).
bool share_memory(const sdk::Tensor& a, const sdk::Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const auto x = sdk::ops::detail::byte_span(a), y = sdk::ops::detail::byte_span(b);
  return x.first < y.second && y.first < x.second;
}

// A self that varies along the output's last dim only (a Linear's bias [N]):
// the matmul's own bias argument takes it.
bool row_bias(const sdk::Tensor& self) {
  for (int64_t i = 0; i + 1 < self.dim(); ++i)
    if (self.size(i) != 1) return false;
  return self.dim() >= 1 && self.size(self.dim() - 1) > 1;
}

// A 2-d float32 operand as BLAS sees it: row-major ('N') or its transpose
// ('T', a transposed view such as Linear's w.t()), with a leading dimension.
struct Blas {
  char trans;
  int64_t ld;
};
std::optional<Blas> blas_of(const sdk::Tensor& t) {
  const int64_t r = t.size(0), c = t.size(1), s0 = t.stride(0), s1 = t.stride(1);
  if ((s1 == 1 || c == 1) && s0 >= std::max<int64_t>(c, 1)) return Blas{'N', std::max<int64_t>(s0, 1)};
  if ((s0 == 1 || r == 1) && s1 >= std::max<int64_t>(r, 1)) return Blas{'T', std::max<int64_t>(s1, 1)};
  return std::nullopt;
}

// Small-M float32 products (a Linear or LSTM cell on a batch of 8: [8, 128] @
// w.t() with w [512, 128]) through oneDNN's sgemm: it reads the transposed
// weights in place, and skips the primitive's fixed costs (12.9 us against
// 16.8 us for the primitive, measured on that shape; the primitive is faster
// from M = 64 on). out = alpha * a @ b + (out as prefilled, when `acc`).
constexpr int64_t kGemmMaxM = 32;
bool sgemm_ok(const sdk::Tensor& a, const sdk::Tensor& b, const sdk::Tensor& out) {
  return a.dim() == 2 && a.size(0) <= kGemmMaxM && is_f32(out.dtype()) && out.is_contiguous() &&
         !has_zero_stride(a) && !has_zero_stride(b) && blas_of(a) && blas_of(b);
}
bool sgemm(const sdk::Tensor& a, const sdk::Tensor& b, const sdk::Tensor& out, float alpha, bool acc) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  const auto ab = blas_of(a), bb = blas_of(b);
  // dnnl_sgemm is row-major: out = alpha * op(a) @ op(b) + (acc ? out : 0).
  const dnnl_status_t st = dnnl_sgemm(ab->trans, bb->trans, M, N, K, alpha, reinterpret_cast<const float*>(a.bytes()),
                                      ab->ld, reinterpret_cast<const float*>(b.bytes()), bb->ld, acc ? 1.0f : 0.0f,
                                      reinterpret_cast<float*>(out.bytes()), std::max<int64_t>(N, 1));
  return st == dnnl_success;
}

void run_matmul(const sdk::Call& call, bool batched, bool add) {
  const int ai = add ? 1 : 0;
  sdk::Tensor a = call.tensor(ai), b = call.tensor(ai + 1), out = call.output(0);
  const int rank = batched ? 3 : 2;
  dnnl_dt(out.dtype(), "matmul");
  require_primitives(call, out.dtype());
  require_dtype(call, out.dtype(), {a, b});
  if (add) require_dtype(call, out.dtype(), {call.tensor(0)});
  OPENREG_SDK_REQUIRE(a.dim() == rank && b.dim() == rank, call.op_name(), ": ", rank, "-d operands expected");
  const double beta = add ? call.scalar_or(3, 1.0) : 0.0;
  const double alpha = add ? call.scalar_or(4, 1.0) : 1.0;
  const int64_t M = a.size(rank - 2), K = a.size(rank - 1), N = b.size(rank - 1);
  const int64_t B = batched ? a.size(0) : 1;
  OPENREG_SDK_CHECK(b.size(rank - 2) == K, call.op_name(), ": shapes ", a.describe(), " and ", b.describe(),
                    " cannot be multiplied");
  std::optional<sdk::Tensor> self;
  if (add && beta != 0.0) self = call.tensor(0);
  if (M == 0 || N == 0 || B == 0) return;
  // The product is written while a and b are still read: an output on their memory
  // (x.addmm_(x, x)) would read what it wrote.
  OPENREG_SDK_REQUIRE(!share_memory(out, a) && !share_memory(out, b), call.op_name(), ": the output ",
                      out.describe(), " shares memory with an operand (left to the next engine)");
  Threads threads(threads_for(2.0 * static_cast<double>(B * M) * static_cast<double>(N * K), kFlopGrain));
  dispatch_float(out.dtype(), call.op_name().data(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const float fbeta = static_cast<float>(beta);
    if (K == 0) {  // out = beta * self, or zeros
      if (self) sdk::unary_map<T>(host(), out, *self, [fbeta](T x) { return fbeta * static_cast<float>(x); });
      else sdk::unary_map<T>(host(), out, out, [](T) { return 0.0f; });
      return;
    }
    if constexpr (std::is_same_v<T, float>) {
      // sgemm: self (any broadcast) prefilled as beta * self, then accumulated into.
      // (addmm_ with beta 1 accumulates into self as it is.)
      const bool in_place = self && overlaps(*self, out);
      if (!batched && (!in_place || beta == 1.0) && sgemm_ok(a, b, out)) {
        if (self && !in_place) sdk::unary_map<T>(host(), out, *self, [fbeta](T x) { return fbeta * x; });
        if (sgemm(a, b, out, static_cast<float>(alpha), self.has_value())) return;
      }
    }
    Buffers buf;
    const View av = view_of(buf, a), bv = view_of(buf, b);  // expanded operands: dense copies
    // 0: no self; 1: fused binary add; 2: out prefilled with beta*self, sum post-op;
    // 3: the matmul's bias argument. On AVX2 CPUs oneDNN 2.6's matmul is its GEMM
    // (gemm:jit), which applies a binary-add post-op in a pass of its own: a
    // [512, 128] @ [128, 384] Linear took 560 us with the bias so, 463 without it.
    // The output scale (alpha) applies to a @ b + bias (mode 3) but before post-ops
    // (mode 1), so mode 3 needs alpha 1; and oneDNN reads self densely in modes 1 and
    // 3 (a strided bias came out as its first elements), so they need a contiguous self.
    const bool fused =
        self && beta == 1.0 && !overlaps(*self, out) && !has_zero_stride(*self) && self->is_contiguous();
    int mode = !self ? 0 : !fused ? 2 : row_bias(*self) && alpha == 1.0 ? 3 : 1;
    auto make = [&](int m) {
      Key k("matmul");
      k.add(av.md.dims()).add(bv.md.dims()).add(a).add(b).add(out).add(alpha).add(static_cast<int64_t>(m));
      k.add(static_cast<int64_t>(has_zero_stride(a))).add(static_cast<int64_t>(has_zero_stride(b)));
      if (m == 1) k.add(*self);
      return cached<MatmulEntry>(k, [&] {
        MatmulEntry e;
        dnnl::primitive_attr attr = base_attr();
        if (alpha != 1.0) attr.set_output_scales(0, {static_cast<float>(alpha)});
        dnnl::post_ops po;
        if (m == 1) po.append_binary(dnnl::algorithm::binary_add, bias_md(*self, rank));
        if (m == 2) po.append_sum(1.0f);
        attr.set_post_ops(po);
        try {
          const dnnl::matmul::desc d = m == 3 ? dnnl::matmul::desc(av.md, bv.md, bias_md(*self, rank), md_of(out))
                                              : dnnl::matmul::desc(av.md, bv.md, md_of(out));
          e.pd = dnnl::matmul::primitive_desc(d, attr, cpu());
          e.prim = dnnl::matmul(e.pd);
          e.ok = true;
        } catch (const dnnl::error&) {
          e.ok = false;
        }
        return e;
      });
    };
    auto e = make(mode);
    if (!e->ok && mode == 3) {
      mode = 1;
      e = make(mode);
    }
    if (!e->ok && mode == 1) {
      mode = 2;
      e = make(mode);
    }
    OPENREG_SDK_REQUIRE(e->ok, call.op_name(), ": oneDNN has no matmul for ", a.describe(), " @ ", b.describe(), " -> ",
                        out.describe());
    Args args{{DNNL_ARG_SRC, memory(av.md, cpu(), av.p)},
              {DNNL_ARG_WEIGHTS, memory(bv.md, cpu(), bv.p)},
              {DNNL_ARG_DST, make_mem(out, md_of(out))}};
    if (mode == 1)
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, make_mem(*self, bias_md(*self, rank)));
    if (mode == 3) args.emplace(DNNL_ARG_BIAS, make_mem(*self, bias_md(*self, rank)));
    if (mode == 2) sdk::unary_map<T>(host(), out, *self, [fbeta](T x) { return fbeta * static_cast<float>(x); });
    execute(e->prim, e->pd, std::move(args));
  });
}

}  // namespace

void mm(const sdk::Call& call) { run_matmul(call, false, false); }
void addmm(const sdk::Call& call) { run_matmul(call, false, true); }
void bmm(const sdk::Call& call) { run_matmul(call, true, false); }
void baddbmm(const sdk::Call& call) { run_matmul(call, true, true); }

}  // namespace onednn_engine
