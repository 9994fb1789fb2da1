#include "conv_gemm.hpp"

#include "isa.hpp"

namespace onednn_engine {

namespace {

// Output images up to this many pixels go through the GEMM: ResNet-18's last
// two stages at 64x64 input (4x4 and 2x2 outputs). In one process, alternating,
// on an AVX2 EPYC, the GEMM's time over jit:avx2's (its weight reorder
// included) at 1 / 2 threads: 2x2 outputs 0.53 / 0.72 (512 channels) and
// 0.54 / 0.65 (256 -> 512, stride 2); 4x4 outputs 0.86 / 0.90 (256 channels)
// and 0.77 / 0.97 (128 -> 256, stride 2); 8x8 outputs 1.40 / 1.64 (128
// channels). oneDNN's 1x1 kernel (jit_1x1) holds on longer: for a 1x1
// stride-2 convolution with a 4x4 output the GEMM took 1.25 / 1.06 as long,
// so 1x1 kernels take the GEMM only up to 4 pixels.
// The backward pass (input and weight gradients) at 4x4 outputs: 1.0 / 1.0-1.4
// (256 channels; 2-thread runs noisy), so it keeps the GEMM to 2x2 outputs,
// where it took 0.6 / 0.4 of jit:avx2's time (512 channels).
constexpr int64_t kGemmConvMaxPixels = 16;
// With AVX-512 oneDNN's direct kernel (jit:avx512_core) holds on to 4x4 outputs but
// not at 2x2. In one process per build, alternating, on an AVX-512 Xeon (2026-11-30),
// the GEMM's time over the direct kernel's at 1 / 2 threads: 2x2 outputs, forward
// 0.73 / 0.53-0.79 (512 channels), 0.42-0.49 / 0.82 (256 -> 512, stride 2); their
// backward 0.52-0.60 / 0.66-0.78 and 0.40-0.43 / 0.58-0.79; 4x4 outputs (256
// channels) forward 0.82-1.32 / 1.36-2.2, so those stay on the direct kernel.
constexpr int64_t kGemmConvMaxPixelsAvx512 = 4;
constexpr int64_t kGemmConv1x1MaxPixels = 4;
constexpr int64_t kGemmConvBackwardMaxPixels = 4;
// The window columns are laid out one element at a time (a few ns each), and the
// GEMM does 2 * output channels FLOPs per element: with few output channels the
// layout is the cost. The digits CNN's second convolution ([64,16,4,4] -> 32,
// 4x4 output) took 529 us through the GEMM against 149 us on jit:avx2; ResNet's
// last stages have 256-512.
constexpr int64_t kGemmConvMinOutputChannels = 128;

}  // namespace

bool conv_gemm_fits(const sdk::Tensor& x, const sdk::Tensor& w, const sdk::Tensor& y, int64_t groups, bool backward,
                    const sdk::Tensor* grad_weight) {
  if (groups != 1 || x.dim() != 4 || !is_f32(y.dtype()) || !is_f32(x.dtype()) ||
      !is_f32(w.dtype()) || !w.is_contiguous() || w.size(0) < kGemmConvMinOutputChannels ||
      (grad_weight && !grad_weight->is_contiguous()))
    return false;
  const bool one_by_one = w.size(2) == 1 && w.size(3) == 1;
  const int64_t most = backward     ? kGemmConvBackwardMaxPixels
                       : one_by_one ? kGemmConv1x1MaxPixels
                       : cpu_caps().avx512_core ? kGemmConvMaxPixelsAvx512
                                                : kGemmConvMaxPixels;
  return y.size(2) * y.size(3) <= most;
}

namespace {

struct Dims {
  int64_t N, C, H, W, O, KH, KW, OH, OW;
  int64_t P() const { return OH * OW; }
  int64_t rows() const { return C * KH * KW; }  // a column's length: one output pixel's window
  int64_t cols() const { return N * OH * OW; }  // every image's output pixels
};
Dims dims_of(const sdk::Tensor& x, const sdk::Tensor& w, const sdk::Tensor& y) {
  return Dims{x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3), y.size(2), y.size(3)};
}

// Runs f(c0, c1) over [0, count) in chunks of whole channels (input or output
// ones) of `per_channel` elements each, on the host's threads (the SDK's grain).
template <class F>
void by_channels(int64_t count, int64_t per_channel, F f) {
  host().parallel_for(0, count, std::max<int64_t>(1, sdk::kParallelGrain / std::max<int64_t>(per_channel, 1)),
                      std::move(f));
}

// Visits every (window row, column) pair of input channels [c0, c1) with the
// input pixel it reads: f(row, col, offset into x in elements) for pixels
// inside the image, f(row, col, -1) for the padding. Rows of different
// channels read different pixels, so channel ranges can run in parallel.
template <class F>
void for_each_window_pixel(const Dims& d, const sdk::Tensor& x, const Conv2dGeometry& g, int64_t c0, int64_t c1,
                           F&& f) {
  const int64_t xs0 = x.stride(0), xs1 = x.stride(1), xs2 = x.stride(2), xs3 = x.stride(3), P = d.P();
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t i = 0; i < d.KH; ++i)
      for (int64_t j = 0; j < d.KW; ++j) {
        const int64_t row = (c * d.KH + i) * d.KW + j;
        for (int64_t n = 0; n < d.N; ++n)
          for (int64_t oy = 0; oy < d.OH; ++oy) {
            const int64_t iy = oy * g.stride[0] - g.pad[0] + i * g.dilation[0];
            const bool row_in = iy >= 0 && iy < d.H;
            for (int64_t ox = 0; ox < d.OW; ++ox) {
              const int64_t ix = ox * g.stride[1] - g.pad[1] + j * g.dilation[1];
              const int64_t col = n * P + oy * d.OW + ox;
              f(row, col, row_in && ix >= 0 && ix < d.W ? n * xs0 + c * xs1 + iy * xs2 + ix * xs3 : int64_t{-1});
            }
          }
      }
}

// columns[row, col] (rows x cols, dense) = the input pixel row `row` of column
// `col`'s window reads, 0 in the padding.
float* window_columns(Buffers& buf, const Dims& d, const sdk::Tensor& x, const Conv2dGeometry& g) {
  float* columns = buf.floats(d.rows() * d.cols());
  const float* xp = reinterpret_cast<const float*>(x.bytes());
  const int64_t cols = d.cols();
  by_channels(d.C, d.KH * d.KW * cols, [&](int64_t c0, int64_t c1) {
    for_each_window_pixel(d, x, g, c0, c1, [&](int64_t row, int64_t col, int64_t at) {
      columns[row * cols + col] = at < 0 ? 0.0f : xp[at];
    });
  });
  return columns;
}

// A [N, O, OH, OW] tensor of any strides as a dense [O, N * OH * OW] matrix.
float* channel_rows(Buffers& buf, const Dims& d, const sdk::Tensor& t) {
  float* m = buf.floats(d.O * d.cols());
  const float* tp = reinterpret_cast<const float*>(t.bytes());
  const int64_t s0 = t.stride(0), s1 = t.stride(1), s2 = t.stride(2), s3 = t.stride(3), P = d.P();
  by_channels(d.O, d.cols(), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o)
      for (int64_t n = 0; n < d.N; ++n)
        for (int64_t oy = 0; oy < d.OH; ++oy)
          for (int64_t ox = 0; ox < d.OW; ++ox)
            m[o * d.cols() + n * P + oy * d.OW + ox] = tp[n * s0 + o * s1 + oy * s2 + ox * s3];
  });
  return m;
}

// c[M, N] = op(a) @ op(b), dense row-major operands.
void gemm(char ta, char tb, int64_t M, int64_t N, int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb,
          float* c) {
  const dnnl_status_t st = dnnl_sgemm(ta, tb, M, N, K, 1.0f, a, lda, b, ldb, 0.0f, c, N);
  OPENREG_SDK_CHECK(st == dnnl_success, "convolution: oneDNN's sgemm failed (status ", static_cast<int>(st), ")");
}

}  // namespace

void conv_forward_gemm(const sdk::Tensor& x, const sdk::Tensor& w, const std::optional<sdk::Tensor>& bias,
                       const sdk::Tensor& y, const Conv2dGeometry& g) {
  const Dims d = dims_of(x, w, y);
  const int64_t P = d.P(), cols = d.cols();
  Buffers buf;
  const float* columns = window_columns(buf, d, x, g);
  // product[o, col] = weight[o, row] @ columns[row, col]: the weight read as it lies.
  float* product = buf.floats(d.O * cols);
  gemm('N', 'N', d.O, cols, d.rows(), reinterpret_cast<const float*>(w.bytes()), d.rows(), columns, cols, product);

  float* yp = reinterpret_cast<float*>(y.bytes());
  const float* bp = bias ? reinterpret_cast<const float*>(bias->bytes()) : nullptr;
  const int64_t bs = bias ? bias->stride(0) : 0;
  const int64_t ys0 = y.stride(0), ys1 = y.stride(1), ys2 = y.stride(2), ys3 = y.stride(3);
  by_channels(d.O, cols, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o)
      for (int64_t n = 0; n < d.N; ++n) {
        const float b = bp ? bp[o * bs] : 0.0f;
        const float* src = product + o * cols + n * P;
        float* dst = yp + n * ys0 + o * ys1;
        for (int64_t oy = 0; oy < d.OH; ++oy)
          for (int64_t ox = 0; ox < d.OW; ++ox) dst[oy * ys2 + ox * ys3] = src[oy * d.OW + ox] + b;
      }
  });
}

void conv_backward_gemm(const sdk::Tensor& gy, const sdk::Tensor& x, const sdk::Tensor& w, const sdk::Tensor* gx,
                        const sdk::Tensor* gw, const sdk::Tensor* gb, const Conv2dGeometry& g) {
  const Dims d = dims_of(x, w, gy);
  const int64_t rows = d.rows(), cols = d.cols();
  Buffers buf;
  const float* grad = channel_rows(buf, d, gy);  // [O, cols]
  if (gx) {
    // grad_columns[row, col] = weight[o, row]^T @ grad[o, col], added back
    // into the input pixels the windows read (zero first: windows overlap).
    float* grad_columns = buf.floats(rows * cols);
    gemm('T', 'N', rows, cols, d.O, reinterpret_cast<const float*>(w.bytes()), rows, grad, cols, grad_columns);
    float* gxp = reinterpret_cast<float*>(gx->bytes());
    sdk::unary_map<float>(host(), *gx, *gx, [](float) { return 0.0f; });
    by_channels(d.C, d.KH * d.KW * cols, [&](int64_t c0, int64_t c1) {
      for_each_window_pixel(d, *gx, g, c0, c1, [&](int64_t row, int64_t col, int64_t at) {
        if (at >= 0) gxp[at] += grad_columns[row * cols + col];
      });
    });
  }
  if (gw) {
    // grad_weight[o, row] = grad[o, col] @ columns[row, col]^T, into the
    // contiguous weight gradient (conv_gemm_fits).
    const float* columns = window_columns(buf, d, x, g);
    gemm('N', 'T', d.O, rows, cols, grad, cols, columns, cols, reinterpret_cast<float*>(gw->bytes()));
  }
  if (gb) {
    float* gbp = reinterpret_cast<float*>(gb->bytes());
    for (int64_t o = 0; o < d.O; ++o) {
      double sum = 0.0;
      for (int64_t col = 0; col < cols; ++col) sum += grad[o * cols + col];
      gbp[o * gb->stride(0)] = static_cast<float>(sum);
    }
  }
}

}  // namespace onednn_engine
