// Kernels of the oneDNN engine, one ops_<family>.cpp per family.
#pragma once

#include "common.hpp"
#include "isa.hpp"
#include "loops.hpp"

namespace onednn_engine {

// ops_matmul.cpp
void mm(const sdk::Call& call);
void addmm(const sdk::Call& call);
void bmm(const sdk::Call& call);
void baddbmm(const sdk::Call& call);

// ops_conv.cpp
void convolution(const sdk::Call& call);
void convolution_backward(const sdk::Call& call);

// ops_pool.cpp
void max_pool2d_with_indices(const sdk::Call& call);
void max_pool2d_with_indices_backward(const sdk::Call& call);
void avg_pool2d(const sdk::Call& call);
void avg_pool2d_backward(const sdk::Call& call);

// ops_norm.cpp
void batch_norm(const sdk::Call& call);
void batch_norm_backward(const sdk::Call& call);
void layer_norm(const sdk::Call& call);
void layer_norm_backward(const sdk::Call& call);

// ops_rnn_layer.cpp: an LSTM layer, forward and backward (aten::mkldnn_rnn_layer, mkldnn_rnn_layer_backward)
void lstm_layer(const sdk::Call& call);
void lstm_layer_backward(const sdk::Call& call);

// ops_softmax.cpp
void softmax(const sdk::Call& call);
void log_softmax(const sdk::Call& call);
void softmax_backward(const sdk::Call& call);
void log_softmax_backward(const sdk::Call& call);

// ops_eltwise.cpp: unary ops and activation backwards. `name` picks the op.
sdk::Kernel unary(const char* name);
sdk::Kernel activation_backward(const char* name);

// ops_binary.cpp: add/sub/mul/div/maximum/minimum with broadcasting.
sdk::Kernel binary(const char* name);

// ops_reduction.cpp
void sum_dim(const sdk::Call& call);
void mean_dim(const sdk::Call& call);

// ops_pointwise.cpp: Adam's addcmul/addcdiv/lerp, fill_, zero_ (plain loops).
void addcmul(const sdk::Call& call);
void addcdiv(const sdk::Call& call);
void lerp_scalar(const sdk::Call& call);
void lerp_tensor(const sdk::Call& call);
void fill_scalar(const sdk::Call& call);
void zero(const sdk::Call& call);

// ops_index.cpp: index_select (embedding), cat, where.self (plain copies, any dtype).
void index_select(const sdk::Call& call);
void cat(const sdk::Call& call);
void where(const sdk::Call& call);

// ops_loss.cpp: nll_loss, mse_loss and smooth_l1_loss forward/backward (plain loops).
void nll_loss_forward(const sdk::Call& call);
void nll_loss_backward(const sdk::Call& call);
void mse_loss(const sdk::Call& call);           // mse_loss and its backward: loops too
void mse_loss_backward(const sdk::Call& call);
void smooth_l1_loss(const sdk::Call& call);           // smooth_l1_loss and its backward (also .grad_input)
void smooth_l1_loss_backward(const sdk::Call& call);

}  // namespace onednn_engine
