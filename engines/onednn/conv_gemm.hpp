// A 2-D float32 convolution as one GEMM over the whole batch, forward and
// backward: the input's windows laid out as columns (im2col, every image side
// by side) and multiplied by the weights read in place; the backward pass's
// input gradient is the transposed product added back into the windows' pixels,
// its weight gradient the output gradient times the columns.
//
// Why: below AVX-512, oneDNN 2.6's only direct kernel is jit:avx2, which
// blocks over output rows and widths and runs small images at half its
// speed: ResNet-18's last stage at 64x64 input ([8,512,2,2] by 512x512x3x3)
// took 3.9 ms, 38 GFLOP/s, plus 0.7 ms reordering the weights into its
// blocked layout, where one sgemm of the batch's columns takes ~2.2 ms
// (AMD EPYC, AVX2, one thread); its backward pass took 13 ms. oneDNN's own
// gemm convolution makes a GEMM per image (4 columns here) and is slower
// still (6.4 ms). With AVX-512 (jit:avx512_core) the direct kernel loses at 2x2
// outputs only: 3.3 ms forward and 12.2 backward for that last stage, against
// 2.4 and 6.8 through the GEMM (Xeon, one thread).
#pragma once

#include <cstdint>
#include <optional>

#include "common.hpp"

namespace onednn_engine {

struct Conv2dGeometry {
  int64_t stride[2], pad[2], dilation[2];  // dilation as ATen's (1 = dense)
};

// True when this machine and shape are better served by the GEMM than by
// oneDNN's direct kernels, for the forward pass or the backward one: a small
// output image y (smaller with AVX-512, as oneDNN sees the CPU) and many output channels
// (conv_gemm.cpp's limits), float32, one group, 2-D, a contiguous weight (and
// weight gradient, when given).
bool conv_gemm_fits(const sdk::Tensor& x, const sdk::Tensor& w, const sdk::Tensor& y, int64_t groups, bool backward,
                    const sdk::Tensor* grad_weight = nullptr);

// y = conv2d(x, w) + bias; x and y of any strides.
void conv_forward_gemm(const sdk::Tensor& x, const sdk::Tensor& w, const std::optional<sdk::Tensor>& bias,
                       const sdk::Tensor& y, const Conv2dGeometry& g);

// The gradients conv_forward_gemm's forward pass has, for the same shapes
// (conv_gemm_fits(x, w, grad_output, groups, true)): grad_input, grad_weight
// (contiguous) and grad_bias, each written when not null (grad_input and
// grad_bias of any strides).
void conv_backward_gemm(const sdk::Tensor& grad_output, const sdk::Tensor& x, const sdk::Tensor& w,
                        const sdk::Tensor* grad_input, const sdk::Tensor* grad_weight, const sdk::Tensor* grad_bias,
                        const Conv2dGeometry& g);

}  // namespace onednn_engine
