// Engine SDK: the fused LSTM and GRU cells ATen calls once per time step on
// accelerators, one pass over each row instead of ~20 small ops:
//
//   aten::_thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?, hidden_bias?)
//       -> (hy, cy, workspace)
//   aten::_thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace, has_bias)
//       -> (grad_gates, grad_cx, grad_bias)
//   aten::_thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias?, hidden_bias?)
//       -> (hy, workspace)
//   aten::_thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias)
//       -> (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias)
//
// The workspace is a contract between engines and core's composite
// (core/src/aten/rnn_cells.cpp, the fallback): a forward and its backward may run
// on different engines, so every implementation writes and reads exactly
//  - LSTM [B, 4H]: the activated gates i, f, g, o;
//  - GRU  [B, 5H]: the activated gates r, z, n, then hx and the hidden part of the
//    new gate (hidden_gates' third chunk plus its bias).
//
// Arithmetic in float (double for float64), stored once per output. Inputs with
// contiguous rows (any row stride, as a step of a [T, B, 4H] tensor has) are read in
// place, other layouts through a packed copy; outputs must have contiguous rows.
// Anything else (strided outputs, mixed dtypes, shapes the op does not take) is
// declined before anything is written, and core's composite then runs it or raises
// the error.
#pragma once

#include <openreg/sdk/call.hpp>
#include <openreg/sdk/dtype.hpp>
#include <openreg/sdk/engine.hpp>
#include <openreg/sdk/vector_isa.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace openreg {
namespace sdk {
namespace rnn {

template <class T>
using opmath_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// -------------------------------------------------------- instruction sets

// The row loops below are written to vectorise. Built for the compiler's default
// x86-64 target (SSE2) they run 4 floats an instruction; on a CPU with AVX2 and FMA
// the cell kernels run them inlined into a function built for those (8 floats, the
// activations' polynomials fused; vector_isa.hpp): a 128-wide LSTM cell of batch 8
// took 13 us before, 4 after. OPENREG_SDK_ROW_INLINE marks what must inline into
// that clone.

// rows(b0, b1), a lambda marked OPENREG_SDK_ROW_LAMBDA over row functions marked
// OPENREG_SDK_ROW_INLINE, built for AVX2+FMA when the CPU has them.
template <class F>
void run_rows(const F& rows, int64_t b0, int64_t b1) {
  run_vectorised_fma(VectorIsa::kAvx2, [&]() OPENREG_SDK_ROW_LAMBDA { rows(b0, b1); });
}

// ------------------------------------------------------------- activations

// a where c holds, else b: a blend of bits, so that GCC keeps it branch-free (a
// ternary on a constant bound turned the loops below into control flow that the
// vectoriser gives up on).
OPENREG_SDK_ROW_INLINE float select_f(bool c, float a, float b) {
  const int32_t mask = -static_cast<int32_t>(c);
  int32_t ia, ib;
  std::memcpy(&ia, &a, sizeof ia);
  std::memcpy(&ib, &b, sizeof ib);
  const int32_t r = (ia & mask) | (ib & ~mask);
  float f;
  std::memcpy(&f, &r, sizeof f);
  return f;
}

// e^x in float, within 1e-7 relative, branch-free so that a loop over a row
// vectorises (libm's expf does not without -ffast-math). Cephes' polynomial on
// [-ln2/2, ln2/2]; x is clamped to [-87, 88] (0 and inf beyond: saturated sigmoid
// and tanh), NaN stays NaN.
OPENREG_SDK_ROW_INLINE float exp_f(float x) {
  x = select_f(x < -87.0f, -87.0f, x);
  x = select_f(x > 88.0f, 88.0f, x);
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = x * 1.44269504088896341f + shifter;
  const float n = t - shifter;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t ti;  // t's bits are the shifter's plus n
  std::memcpy(&ti, &t, sizeof ti);
  const uint32_t bits = static_cast<uint32_t>(ti - 0x4B400000 + 127) << 23;  // 2^n, n in [-126, 127]
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

OPENREG_SDK_ROW_INLINE float sigmoid(float x) { return 1.0f / (1.0f + exp_f(-x)); }
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// tanh in float: an odd Taylor polynomial below 0.5 (no cancellation near 0), the
// exponential form above; both computed, one selected, so the loop vectorises.
OPENREG_SDK_ROW_INLINE float tanh_f(float x) {
  const float a = std::fabs(x);
  const float a2 = a * a;
  float p = 21844.0f / 6081075.0f;
  p = p * a2 - 1382.0f / 155925.0f;
  p = p * a2 + 62.0f / 2835.0f;
  p = p * a2 - 17.0f / 315.0f;
  p = p * a2 + 2.0f / 15.0f;
  p = p * a2 - 1.0f / 3.0f;
  const float small = a + a * a2 * p;
  const float e = exp_f(-2.0f * a);
  const float large = (1.0f - e) / (1.0f + e);
  return std::copysign(select_f(a < 0.5f, small, large), x);
}
OPENREG_SDK_ROW_INLINE float tanh_(float x) { return tanh_f(x); }
inline double tanh_(double x) { return std::tanh(x); }

// ------------------------------------------------------------- operands

// A [rows, cols] operand whose rows are contiguous: element (b, j) is p[b * ld + j].
template <class T>
struct Rows {
  T* p = nullptr;
  int64_t ld = 0;
  T* row(int64_t b) const { return p + b * ld; }
};

// An input `t` of `dtype` and sizes [rows, cols] (declined otherwise). Rows that are
// contiguous are read in place (any row stride: a step of a [T, B, 4H] tensor);
// other layouts (transposed, gapped, expanded such as the gradient of a sum) are
// first copied into `packed`.
template <class T>
Rows<T> rows_of(const Call& call, const Tensor& t, const char* what, int64_t rows, int64_t cols,
                std::vector<T>& packed) {
  OPENREG_SDK_REQUIRE(same_dtype(t.dtype(), dtype_of<T>()), call.op_name(), ": ", what, " has dtype ",
                      dtype_name(t.dtype()), ", expected ", dtype_name(dtype_of<T>()));
  OPENREG_SDK_REQUIRE(t.dim() == 2 && t.size(0) == rows && t.size(1) == cols, call.op_name(), ": ", what, " is ",
                      t.describe(), ", expected [", rows, ", ", cols, "]");
  if (cols <= 1 || t.stride(1) == 1) return {t.data<T>(), rows <= 1 ? 0 : t.stride(0)};
  packed.resize(static_cast<size_t>(rows * cols));
  const T* src = t.data<T>();
  const int64_t rs = t.stride(0), cs = t.stride(1);
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t j = 0; j < cols; ++j) packed[static_cast<size_t>(b * cols + j)] = src[b * rs + j * cs];
  return {packed.data(), cols};
}

// An optional [n] bias as opmath values; zeros when absent.
template <class T>
std::vector<opmath_t<T>> bias_of(const Call& call, int arg, int64_t n) {
  std::vector<opmath_t<T>> out(static_cast<size_t>(n), opmath_t<T>(0));
  auto t = call.optional_tensor(arg);
  if (!t || !t->defined()) return out;
  OPENREG_SDK_REQUIRE(same_dtype(t->dtype(), dtype_of<T>()), call.op_name(), ": bias has dtype ",
                      dtype_name(t->dtype()), ", expected ", dtype_name(dtype_of<T>()));
  OPENREG_SDK_REQUIRE(t->dim() == 1 && t->size(0) == n, call.op_name(), ": bias is ", t->describe(), ", expected [",
                      n, "]");
  const T* p = t->data<T>();
  const int64_t s = n <= 1 ? 1 : t->stride(0);
  for (int64_t k = 0; k < n; ++k) out[static_cast<size_t>(k)] = static_cast<opmath_t<T>>(p[k * s]);
  return out;
}

// The call's outputs: given by the host (checked), or, for calls flagged
// OPENREG_CALL_DYNAMIC_OUTPUTS, allocated here contiguous. Declines, before any
// allocation, an output the kernel cannot write; `shapes[i]` empty: the output
// stays absent (it must be absent in the call too).
class Outputs {
 public:
  Outputs(const Call& call, std::vector<std::vector<int64_t>> shapes, openreg_dtype dtype)
      : call_(call), shapes_(std::move(shapes)), dtype_(dtype), descs_(shapes_.size()) {
    OPENREG_SDK_REQUIRE(call.num_outputs() == static_cast<int>(shapes_.size()), call.op_name(), ": ",
                        call.num_outputs(), " outputs, expected ", shapes_.size());
    for (size_t i = 0; i < shapes_.size(); ++i) {
      const bool wanted = !shapes_[i].empty();
      if (call.dynamic_outputs()) {
        // The host needs every output of a dynamic call: an absent one is not possible.
        OPENREG_SDK_REQUIRE(wanted, call.op_name(), ": output ", i, " is absent, which a call sized by the engine "
                            "cannot return");
        continue;
      }
      Tensor o = call.output(static_cast<int>(i));
      OPENREG_SDK_REQUIRE(o.defined() == wanted, call.op_name(), ": output ", i,
                          wanted ? " is absent, expected one" : " is present, expected none");
      if (!wanted) continue;
      OPENREG_SDK_REQUIRE(same_dtype(o.dtype(), dtype) && o.sizes().vec() == shapes_[i], call.op_name(), ": output ",
                          i, " is ", o.describe());
      OPENREG_SDK_REQUIRE(shapes_[i].size() != 2 || shapes_[i][1] <= 1 || o.stride(1) == 1, call.op_name(),
                          ": output ", i, " has strided rows ", o.describe());
      OPENREG_SDK_REQUIRE(shapes_[i].size() != 1 || shapes_[i][0] <= 1 || o.stride(0) == 1, call.op_name(),
                          ": output ", i, " is strided ", o.describe());
    }
  }
  // Allocates the dynamic outputs: call once every input check has passed.
  void allocate() {
    for (size_t i = 0; i < shapes_.size(); ++i) {
      if (call_.dynamic_outputs()) {
        descs_[i] = openreg_tensor{};
        descs_[i].struct_size = sizeof(openreg_tensor);
        const openreg_call* raw = call_.raw();
        const openreg_status st = raw->alloc_output(raw, static_cast<int32_t>(i), static_cast<int32_t>(shapes_[i].size()),
                                                    shapes_[i].data(), dtype_, &descs_[i]);
        if (st != OPENREG_STATUS_OK) fail(st, str(call_.op_name(), ": the host could not allocate output ", i));
      } else {
        descs_[i] = *call_.output(static_cast<int>(i)).raw();
      }
    }
  }
  bool present(size_t i) const { return !shapes_[i].empty(); }
  template <class T>
  Rows<T> rows(size_t i) const {
    Tensor t(&descs_[i]);
    const int64_t ld = t.dim() == 2 && t.size(0) > 1 ? t.stride(0) : 0;
    return {t.data<T>(), ld};
  }
  template <class T>
  T* flat(size_t i) const {
    return Tensor(&descs_[i]).data<T>();
  }

 private:
  const Call& call_;
  std::vector<std::vector<int64_t>> shapes_;
  openreg_dtype dtype_;
  std::vector<openreg_tensor> descs_;
};

// Rows per parallel chunk: about 32k elements, small batches stay on the caller.
inline int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, cols)); }

// out[k] = sum over rows b of g.row(b)[k] (a bias gradient: the batch's sum).
template <class T>
void column_sums(Rows<T> g, int64_t rows, int64_t cols, T* out) {
  using M = opmath_t<T>;
  std::vector<M> acc(static_cast<size_t>(cols), M(0));
  M* a = acc.data();
  for (int64_t b = 0; b < rows; ++b) {
    const T* r = g.row(b);
    for (int64_t k = 0; k < cols; ++k) a[k] += static_cast<M>(r[k]);
  }
  for (int64_t k = 0; k < cols; ++k) out[k] = static_cast<T>(a[k]);
}

// Batch and hidden sizes of a cell from its gates: [B, chunks * H].
inline void gate_sizes(const Call& call, const Tensor& gates, int64_t chunks, int64_t* batch, int64_t* hidden) {
  OPENREG_SDK_REQUIRE(gates.dim() == 2 && gates.size(1) % chunks == 0, call.op_name(), ": gates are ",
                      gates.describe(), ", expected [batch, ", chunks, " * hidden]");
  *batch = gates.size(0);
  *hidden = gates.size(1) / chunks;
}

// ------------------------------------------------------------ row loops

// One row of each cell. Separate functions so that __restrict on the parameters
// tells GCC the streams do not overlap (with this many streams its run-time alias
// checks would exceed its limit and leave the loop scalar).

template <class T>
OPENREG_SDK_ROW_INLINE void lstm_row(const T* __restrict gi, const T* __restrict gh, const opmath_t<T>* __restrict bs,
              const T* __restrict c0, T* __restrict h1, T* __restrict c1, T* __restrict w, int64_t H) {
  using M = opmath_t<T>;
  for (int64_t j = 0; j < H; ++j) {
    const M i = sigmoid(static_cast<M>(gi[j]) + static_cast<M>(gh[j]) + bs[j]);
    const M f = sigmoid(static_cast<M>(gi[H + j]) + static_cast<M>(gh[H + j]) + bs[H + j]);
    const M g = tanh_(static_cast<M>(gi[2 * H + j]) + static_cast<M>(gh[2 * H + j]) + bs[2 * H + j]);
    const M o = sigmoid(static_cast<M>(gi[3 * H + j]) + static_cast<M>(gh[3 * H + j]) + bs[3 * H + j]);
    const M c = f * static_cast<M>(c0[j]) + i * g;
    c1[j] = static_cast<T>(c);
    h1[j] = static_cast<T>(o * tanh_(c));
    w[j] = static_cast<T>(i);
    w[H + j] = static_cast<T>(f);
    w[2 * H + j] = static_cast<T>(g);
    w[3 * H + j] = static_cast<T>(o);
  }
}

template <class T>
OPENREG_SDK_ROW_INLINE void lstm_backward_row(const T* __restrict w, const T* __restrict c0, const T* __restrict c1,
                       const T* __restrict dh, const T* __restrict dc, T* __restrict d, T* __restrict dcx, int64_t H) {
  using M = opmath_t<T>;
  for (int64_t j = 0; j < H; ++j) {
    const M i = static_cast<M>(w[j]), f = static_cast<M>(w[H + j]), g = static_cast<M>(w[2 * H + j]),
            o = static_cast<M>(w[3 * H + j]);
    const M tc = tanh_(static_cast<M>(c1[j]));
    const M gh = static_cast<M>(dh[j]);
    const M d_cy = static_cast<M>(dc[j]) + gh * o * (M(1) - tc * tc);
    d[j] = static_cast<T>(d_cy * g * i * (M(1) - i));
    d[H + j] = static_cast<T>(d_cy * static_cast<M>(c0[j]) * f * (M(1) - f));
    d[2 * H + j] = static_cast<T>(d_cy * i * (M(1) - g * g));
    d[3 * H + j] = static_cast<T>(gh * tc * o * (M(1) - o));
    dcx[j] = static_cast<T>(d_cy * f);
  }
}

template <class T>
OPENREG_SDK_ROW_INLINE void gru_row(const T* __restrict gi, const T* __restrict gh, const opmath_t<T>* __restrict ib,
             const opmath_t<T>* __restrict hb, const T* __restrict h0, T* __restrict h1, T* __restrict w, int64_t H) {
  using M = opmath_t<T>;
  for (int64_t j = 0; j < H; ++j) {
    const M r = sigmoid((static_cast<M>(gi[j]) + ib[j]) + (static_cast<M>(gh[j]) + hb[j]));
    const M z = sigmoid((static_cast<M>(gi[H + j]) + ib[H + j]) + (static_cast<M>(gh[H + j]) + hb[H + j]));
    const M hn = static_cast<M>(gh[2 * H + j]) + hb[2 * H + j];
    const M n = tanh_((static_cast<M>(gi[2 * H + j]) + ib[2 * H + j]) + r * hn);
    const M h = static_cast<M>(h0[j]);
    h1[j] = static_cast<T>(n + z * (h - n));
    w[j] = static_cast<T>(r);
    w[H + j] = static_cast<T>(z);
    w[2 * H + j] = static_cast<T>(n);
    w[3 * H + j] = h0[j];
    w[4 * H + j] = static_cast<T>(hn);
  }
}

template <class T>
OPENREG_SDK_ROW_INLINE void gru_backward_row(const T* __restrict w, const T* __restrict dh, T* __restrict di, T* __restrict dhg,
                      T* __restrict dhx, int64_t H) {
  using M = opmath_t<T>;
  for (int64_t j = 0; j < H; ++j) {
    const M r = static_cast<M>(w[j]), z = static_cast<M>(w[H + j]), n = static_cast<M>(w[2 * H + j]),
            h = static_cast<M>(w[3 * H + j]), hn = static_cast<M>(w[4 * H + j]);
    const M g = static_cast<M>(dh[j]);
    const M d_z = g * (h - n) * z * (M(1) - z);
    const M d_n = g * (M(1) - z) * (M(1) - n * n);
    const M d_r = d_n * hn * r * (M(1) - r);
    di[j] = static_cast<T>(d_r);
    di[H + j] = static_cast<T>(d_z);
    di[2 * H + j] = static_cast<T>(d_n);
    dhg[j] = static_cast<T>(d_r);
    dhg[H + j] = static_cast<T>(d_z);
    dhg[2 * H + j] = static_cast<T>(d_n * r);
    dhx[j] = static_cast<T>(g * z);
  }
}

// ------------------------------------------------------------------ LSTM

template <class T>
void lstm_cell_t(const Call& call) {
  using M = opmath_t<T>;
  int64_t B, H;
  gate_sizes(call, call.tensor(0), 4, &B, &H);
  std::vector<T> p0, p1, p2;
  const Rows<T> ig = rows_of<T>(call, call.tensor(0), "input_gates", B, 4 * H, p0);
  const Rows<T> hg = rows_of<T>(call, call.tensor(1), "hidden_gates", B, 4 * H, p1);
  const Rows<T> cx = rows_of<T>(call, call.tensor(2), "cx", B, H, p2);
  const std::vector<M> ib = bias_of<T>(call, 3, 4 * H), hb = bias_of<T>(call, 4, 4 * H);
  Outputs outs(call, {{B, H}, {B, H}, {B, 4 * H}}, dtype_of<T>());
  outs.allocate();
  const Rows<T> hy = outs.rows<T>(0), cy = outs.rows<T>(1), ws = outs.rows<T>(2);
  std::vector<M> bias(static_cast<size_t>(4 * H));
  for (size_t k = 0; k < bias.size(); ++k) bias[k] = ib[k] + hb[k];
  const M* bs = bias.data();
  auto rows = [&](int64_t b0, int64_t b1) OPENREG_SDK_ROW_LAMBDA {
    for (int64_t b = b0; b < b1; ++b) {
      lstm_row<T>(ig.row(b), hg.row(b), bs, cx.row(b), hy.row(b), cy.row(b), ws.row(b), H);
    }
  };
  call.host().parallel_for(0, B, row_grain(4 * H), [&](int64_t b0, int64_t b1) { run_rows(rows, b0, b1); });
}

template <class T>
void lstm_cell_backward_t(const Call& call) {
  const Tensor cx_t = call.tensor(2);
  OPENREG_SDK_REQUIRE(cx_t.dim() == 2, call.op_name(), ": cx is ", cx_t.describe(), ", expected [batch, hidden]");
  const int64_t B = cx_t.size(0), H = cx_t.size(1);
  auto ghy_t = call.optional_tensor(0), gcy_t = call.optional_tensor(1);
  const bool has_ghy = ghy_t && ghy_t->defined(), has_gcy = gcy_t && gcy_t->defined();
  // Neither gradient: ATen returns no outputs at all; core's composite handles it.
  OPENREG_SDK_REQUIRE(has_ghy || has_gcy, call.op_name(), ": neither grad_hy nor grad_cy");
  const bool has_bias = call.bool_arg(5);
  std::vector<T> p0, p1, p2, p3, p4;
  const Rows<T> cx = rows_of<T>(call, cx_t, "cx", B, H, p0);
  const Rows<T> cy = rows_of<T>(call, call.tensor(3), "cy", B, H, p1);
  const Rows<T> ws = rows_of<T>(call, call.tensor(4), "workspace", B, 4 * H, p2);
  // An absent gradient reads as a row of zeros (stride 0).
  std::vector<T> zeros(static_cast<size_t>(H), static_cast<T>(0.0f));
  const Rows<T> ghy = has_ghy ? rows_of<T>(call, *ghy_t, "grad_hy", B, H, p3) : Rows<T>{zeros.data(), 0};
  const Rows<T> gcy = has_gcy ? rows_of<T>(call, *gcy_t, "grad_cy", B, H, p4) : Rows<T>{zeros.data(), 0};
  Outputs outs(call, {{B, 4 * H}, {B, H}, has_bias ? std::vector<int64_t>{4 * H} : std::vector<int64_t>{}},
               dtype_of<T>());
  outs.allocate();
  const Rows<T> gg = outs.rows<T>(0), gcx = outs.rows<T>(1);
  auto rows = [&](int64_t b0, int64_t b1) OPENREG_SDK_ROW_LAMBDA {
    for (int64_t b = b0; b < b1; ++b) {
      lstm_backward_row<T>(ws.row(b), cx.row(b), cy.row(b), ghy.row(b), gcy.row(b), gg.row(b), gcx.row(b), H);
    }
  };
  call.host().parallel_for(0, B, row_grain(4 * H), [&](int64_t b0, int64_t b1) { run_rows(rows, b0, b1); });
  if (has_bias) column_sums<T>(gg, B, 4 * H, outs.flat<T>(2));
}

// ------------------------------------------------------------------- GRU

template <class T>
void gru_cell_t(const Call& call) {
  using M = opmath_t<T>;
  int64_t B, H;
  gate_sizes(call, call.tensor(0), 3, &B, &H);
  std::vector<T> p0, p1, p2;
  const Rows<T> ig = rows_of<T>(call, call.tensor(0), "input_gates", B, 3 * H, p0);
  const Rows<T> hg = rows_of<T>(call, call.tensor(1), "hidden_gates", B, 3 * H, p1);
  const Rows<T> hx = rows_of<T>(call, call.tensor(2), "hx", B, H, p2);
  const std::vector<M> ibias = bias_of<T>(call, 3, 3 * H), hbias = bias_of<T>(call, 4, 3 * H);
  Outputs outs(call, {{B, H}, {B, 5 * H}}, dtype_of<T>());
  outs.allocate();
  const Rows<T> hy = outs.rows<T>(0), ws = outs.rows<T>(1);
  const M* ib = ibias.data();
  const M* hb = hbias.data();
  auto rows = [&](int64_t b0, int64_t b1) OPENREG_SDK_ROW_LAMBDA {
    for (int64_t b = b0; b < b1; ++b) {
      gru_row<T>(ig.row(b), hg.row(b), ib, hb, hx.row(b), hy.row(b), ws.row(b), H);
    }
  };
  call.host().parallel_for(0, B, row_grain(5 * H), [&](int64_t b0, int64_t b1) { run_rows(rows, b0, b1); });
}

template <class T>
void gru_cell_backward_t(const Call& call) {
  const Tensor ghy_t = call.tensor(0);
  OPENREG_SDK_REQUIRE(ghy_t.dim() == 2, call.op_name(), ": grad_hy is ", ghy_t.describe(),
                      ", expected [batch, hidden]");
  const int64_t B = ghy_t.size(0), H = ghy_t.size(1);
  const bool has_bias = call.bool_arg(2);
  std::vector<T> p0, p1;
  const Rows<T> ghy = rows_of<T>(call, ghy_t, "grad_hy", B, H, p0);
  const Rows<T> ws = rows_of<T>(call, call.tensor(1), "workspace", B, 5 * H, p1);
  const std::vector<int64_t> bias_shape = has_bias ? std::vector<int64_t>{3 * H} : std::vector<int64_t>{};
  Outputs outs(call, {{B, 3 * H}, {B, 3 * H}, {B, H}, bias_shape, bias_shape}, dtype_of<T>());
  outs.allocate();
  const Rows<T> gi = outs.rows<T>(0), gh = outs.rows<T>(1), ghx = outs.rows<T>(2);
  auto rows = [&](int64_t b0, int64_t b1) OPENREG_SDK_ROW_LAMBDA {
    for (int64_t b = b0; b < b1; ++b) {
      gru_backward_row<T>(ws.row(b), ghy.row(b), gi.row(b), gh.row(b), ghx.row(b), H);
    }
  };
  call.host().parallel_for(0, B, row_grain(5 * H), [&](int64_t b0, int64_t b1) { run_rows(rows, b0, b1); });
  if (has_bias) {
    column_sums<T>(gi, B, 3 * H, outs.flat<T>(3));
    column_sums<T>(gh, B, 3 * H, outs.flat<T>(4));
  }
}

// ------------------------------------------------------------ registration

// The kernels by the dtype of the call's first tensor (float32, float64,
// bfloat16, float16; the 16-bit ones computed in float).
template <template <class> class K>
void by_dtype(const Call& call, const char* what) {
  int first = 0;
  while (first < call.num_args() && call.kind(first) != OPENREG_VALUE_TENSOR) ++first;
  OPENREG_SDK_REQUIRE(first < call.num_args(), call.op_name(), ": no tensor argument");
  dispatch<float, double, bfloat16, float16>(call.tensor(first).dtype(), what, [&](auto tag) {
    K<typename decltype(tag)::type>::run(call);
  });
}
template <class T> struct LstmCell { static void run(const Call& c) { lstm_cell_t<T>(c); } };
template <class T> struct LstmCellBackward { static void run(const Call& c) { lstm_cell_backward_t<T>(c); } };
template <class T> struct GruCell { static void run(const Call& c) { gru_cell_t<T>(c); } };
template <class T> struct GruCellBackward { static void run(const Call& c) { gru_cell_backward_t<T>(c); } };

// Registers the four cell ops on an engine. dynamic_op: ATen has no Meta kernel for
// some calls (the GRU cells; the LSTM cell without biases), whose outputs the kernel
// then allocates.
inline void register_ops(EngineDef& e) {
  const auto f32 = dtypes::float32, f64 = dtypes::float64, bf16 = dtypes::bfloat16, f16 = dtypes::float16;
  e.dynamic_op("aten::_thnn_fused_lstm_cell", {f32, f64, bf16, f16},
               [](const Call& c) { by_dtype<LstmCell>(c, "_thnn_fused_lstm_cell"); });
  e.dynamic_op("aten::_thnn_fused_lstm_cell_backward_impl", {f32, f64, bf16, f16},
               [](const Call& c) { by_dtype<LstmCellBackward>(c, "_thnn_fused_lstm_cell_backward_impl"); });
  e.dynamic_op("aten::_thnn_fused_gru_cell", {f32, f64, bf16, f16},
               [](const Call& c) { by_dtype<GruCell>(c, "_thnn_fused_gru_cell"); });
  e.dynamic_op("aten::_thnn_fused_gru_cell_backward", {f32, f64, bf16, f16},
               [](const Call& c) { by_dtype<GruCellBackward>(c, "_thnn_fused_gru_cell_backward"); });
}

}  // namespace rnn
}  // namespace sdk
}  // namespace openreg
