// Kernels of ops_misc.cpp: elementwise math oneDNN has no primitive for.
#pragma once

#include "ops.h"

namespace onednn_engine {

// neg, rsqrt, silu, sin, cos, hardswish, hardsigmoid (functional, in-place, out=), by name.
sdk::Kernel math_unary(const char* name);
// leaky_relu, leaky_relu_, leaky_relu.out.
void leaky_relu(const sdk::Call& call);
// pow.Tensor_Scalar, pow_.Scalar, pow.Tensor_Scalar_out.
void pow_scalar(const sdk::Call& call);
// silu_backward(grad_output, self).
void silu_backward(const sdk::Call& call);
// leaky_relu_backward, hardtanh_backward, hardsigmoid_backward (functional).
void leaky_relu_backward(const sdk::Call& call);
void hardtanh_backward(const sdk::Call& call);
void hardsigmoid_backward(const sdk::Call& call);

}  // namespace onednn_engine
