// aten::mkldnn_rnn_layer for an LSTM layer without backward (train=False): the
// whole layer in one engine call, on oneDNN's LSTM primitive (the one torch
// CPU's own kernel for this op runs). Core sends a float32 LSTM layer here
// under no_grad and inference mode (core/src/aten/lstm_layer.cpp), where
// otherwise each time step would be two calls (the hidden GEMM and the fused
// cell).
//
// PyTorch's weights [4H, I] and [4H, H] (gates i, f, g, o, oneDNN's order too)
// are oneDNN's ldgoi layout; they are reordered per call into the layout the
// primitive picks, as torch CPU does (the weights may change between calls).
// The two biases are summed into one. Training calls (train=True, whose
// workspace is the serving engine's record for its own
// mkldnn_rnn_layer_backward, which this engine does not serve), packed
// sequences, batch_first and strided operands decline: the reference engine
// runs them. The host sizes this op's outputs by the kernel (CPU's workspace
// is not the Meta kernel's size): they are allocated here, the workspace empty.
#include <string_view>

#include "ops.h"

namespace onednn_engine {

namespace {

// Argument positions of aten::mkldnn_rnn_layer(input, weight0..3, hx_, cx_,
// reverse, batch_sizes, mode, hidden_size, num_layers, has_biases,
// bidirectional, batch_first, train).
enum Arg { kInput, kWih, kWhh, kBih, kBhh, kHx, kCx, kReverse, kBatchSizes, kMode, kHidden, kLayers,
           kHasBiases, kBidirectional, kBatchFirst, kTrain };
constexpr int64_t kLstmMode = 2;  // ATen's RNN mode numbering: LSTM

struct LstmEntry {
  dnnl::lstm_forward::primitive_desc pd;
  dnnl::lstm_forward prim;
};

// Output i: the host's, or allocated here into `desc` (contiguous, `sizes`)
// when the call leaves sizing to the engine.
sdk::Tensor output(const sdk::Call& call, int i, std::vector<int64_t> sizes, openreg_tensor* desc,
                   openreg_dtype dtype = sdk::dtypes::float32) {
  if (!call.dynamic_outputs()) return call.output(i);
  *desc = openreg_tensor{};
  desc->struct_size = sizeof(openreg_tensor);
  const openreg_call* raw = call.raw();
  const openreg_status st = raw->alloc_output(raw, i, static_cast<int32_t>(sizes.size()), sizes.data(), dtype, desc);
  if (st != OPENREG_STATUS_OK) sdk::fail(st, sdk::str(call.op_name(), ": the host could not allocate output ", i));
  return sdk::Tensor(desc);
}

}  // namespace

void lstm_layer(const sdk::Call& call) {
  const std::string_view name = call.op_name();
  const sdk::Tensor x = call.tensor(kInput), w_ih = call.tensor(kWih), w_hh = call.tensor(kWhh);
  const sdk::Tensor b_ih = call.tensor(kBih), b_hh = call.tensor(kBhh), hx = call.tensor(kHx), cx = call.tensor(kCx);
  OPENREG_SDK_REQUIRE(call.int_arg(kMode) == kLstmMode, name, ": only LSTM layers (mode 2) are served here");
  OPENREG_SDK_REQUIRE(!call.bool_arg(kTrain), name, ": training calls (a workspace for the backward) are not served");
  OPENREG_SDK_REQUIRE(call.int_list(kBatchSizes).size() == 0, name, ": packed sequences are not served");
  OPENREG_SDK_REQUIRE(!call.bool_arg(kBatchFirst), name, ": batch_first layers are not served");
  OPENREG_SDK_REQUIRE(call.int_arg(kLayers) == 1 && !call.bool_arg(kBidirectional), name,
                      ": one layer in one direction per call");
  OPENREG_SDK_REQUIRE(is_f32(x.dtype()), name, ": float32 only");
  require_dtype(call, x.dtype(), {w_ih, w_hh, b_ih, b_hh, hx, cx});
  OPENREG_SDK_REQUIRE(x.dim() == 3, name, ": input must be [T, B, I], got ", x.describe());
  const int64_t T = x.size(0), B = x.size(1), I = x.size(2), H = call.int_arg(kHidden);
  OPENREG_SDK_CHECK(w_ih.dim() == 2 && w_ih.size(0) == 4 * H && w_ih.size(1) == I && w_hh.dim() == 2 &&
                        w_hh.size(0) == 4 * H && w_hh.size(1) == H && b_ih.numel() == 4 * H &&
                        b_hh.numel() == 4 * H && hx.dim() == 2 && hx.size(0) == B && hx.size(1) == H &&
                        cx.sizes().vec() == hx.sizes().vec(),
                    name, ": weights ", w_ih.describe(), ", ", w_hh.describe(), ", biases ", b_ih.describe(), ", ",
                    b_hh.describe(), " and states ", hx.describe(), ", ", cx.describe(), " do not fit input ",
                    x.describe(), " and hidden size ", H);
  for (const sdk::Tensor& t : {x, w_ih, w_hh, b_ih, b_hh, hx, cx})
    OPENREG_SDK_REQUIRE(t.is_contiguous(), name, ": contiguous operands only, got ", t.describe());
  openreg_tensor descs[4];
  const sdk::Tensor y = output(call, 0, {T, B, H}, &descs[0]), hy = output(call, 1, {B, H}, &descs[1]),
                    cy = output(call, 2, {B, H}, &descs[2]);
  output(call, 3, {0}, &descs[3], sdk::dtypes::uint8);  // no workspace: nothing to keep without a backward
  for (const sdk::Tensor& t : {y, hy, cy})
    OPENREG_SDK_REQUIRE(t.is_contiguous(), name, ": contiguous outputs only, got ", t.describe());
  if (T == 0 || B == 0 || H == 0) return;

  using tag = memory::format_tag;
  const dt f32 = dt::f32;
  const memory::desc src_md({T, B, I}, f32, tag::tnc), dst_md({T, B, H}, f32, tag::tnc);
  const memory::desc state_md({1, 1, B, H}, f32, tag::ldnc), bias_md({1, 1, 4, H}, f32, tag::ldgo);
  const memory::desc user_wl({1, 1, I, 4, H}, f32, tag::ldgoi), user_wi({1, 1, H, 4, H}, f32, tag::ldgoi);
  const bool reverse = call.bool_arg(kReverse);
  Threads threads(threads_for(2.0 * static_cast<double>(T * B) * static_cast<double>(4 * H * (I + H)), kFlopGrain));
  auto e = cached<LstmEntry>(Key("mkldnn_rnn_layer").add(T).add(B).add(I).add(H).add(int64_t{reverse}), [&] {
    const memory::desc any_wl({1, 1, I, 4, H}, f32, tag::any), any_wi({1, 1, H, 4, H}, f32, tag::any);
    dnnl::lstm_forward::desc d(dnnl::prop_kind::forward_inference,
                               reverse ? dnnl::rnn_direction::unidirectional_right2left
                                       : dnnl::rnn_direction::unidirectional_left2right,
                               src_md, state_md, state_md, any_wl, any_wi, bias_md, dst_md, state_md, state_md);
    dnnl::lstm_forward::primitive_desc pd(d, base_attr(), cpu());
    return LstmEntry{pd, dnnl::lstm_forward(pd)};
  });

  Buffers b;
  const memory wl = stage_in(b, user_wl, w_ih.bytes(), e->pd.weights_layer_desc());
  const memory wi = stage_in(b, user_wi, w_hh.bytes(), e->pd.weights_iter_desc());
  // Without has_biases the bias operands are ignored, as CPU's kernel ignores them.
  float* bias = b.floats(4 * H);
  const bool has_biases = call.bool_arg(kHasBiases);
  const float *bi = b_ih.data<float>(), *bh = b_hh.data<float>();
  for (int64_t k = 0; k < 4 * H; ++k) bias[k] = has_biases ? bi[k] + bh[k] : 0.0f;
  execute(e->prim, e->pd,
          {{DNNL_ARG_SRC_LAYER, memory(src_md, cpu(), x.bytes())},
           {DNNL_ARG_SRC_ITER, memory(state_md, cpu(), hx.bytes())},
           {DNNL_ARG_SRC_ITER_C, memory(state_md, cpu(), cx.bytes())},
           {DNNL_ARG_WEIGHTS_LAYER, wl},
           {DNNL_ARG_WEIGHTS_ITER, wi},
           {DNNL_ARG_BIAS, memory(bias_md, cpu(), bias)},
           {DNNL_ARG_DST_LAYER, memory(dst_md, cpu(), y.bytes())},
           {DNNL_ARG_DST_ITER, memory(state_md, cpu(), hy.bytes())},
           {DNNL_ARG_DST_ITER_C, memory(state_md, cpu(), cy.bytes())}});
}

}  // namespace onednn_engine
