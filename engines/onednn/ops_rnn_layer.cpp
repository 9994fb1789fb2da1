// aten::mkldnn_rnn_layer and aten::mkldnn_rnn_layer_backward for a float32 LSTM
// layer: the whole layer in one engine call each way, on oneDNN's LSTM
// primitives (the ones torch CPU's own kernels for these ops run), or, for
// small layers (inference on two threads or more, training on any), the engine's
// own loop (lstm_loop.cpp). Core sends a float32 LSTM layer here
// (core/src/aten/lstm_layer.cpp): train=False under
// no_grad and inference mode, train=True then the backward in training, where
// otherwise each time step would be two calls each way.
//
// PyTorch's weights [4H, I] and [4H, H] (gates i, f, g, o, oneDNN's order too)
// are oneDNN's ldgoi layout; they are reordered per call into the layout the
// primitive picks, as torch CPU does (the weights may change between calls).
// The two biases are summed into one; their gradients are the same sum, as on
// CPU. Packed sequences, batch_first and several layers or directions per call
// decline: the reference engine runs them.
//
// The workspace (train=True's fourth output, read by the backward) is this
// engine's own: a header naming this engine, the path that made it (the loop or
// the primitive) and the layer's geometry, then that path's record: the loop's
// gates and cell states (LstmLoopRecord), or oneDNN's workspace. The backward
// declines a workspace without that header (another engine's, CPU's): the
// engine that made it runs it instead. The host sizes mkldnn_rnn_layer's outputs by the kernel (CPU's
// workspace is not the Meta kernel's size): they are allocated here, the
// workspace empty without training.
#include <cstring>
#include <string_view>

#include "lstm_loop.hpp"
#include "ops.h"

namespace onednn_engine {

namespace {

// Argument positions of aten::mkldnn_rnn_layer(input, weight0..3, hx_, cx_,
// reverse, batch_sizes, mode, hidden_size, num_layers, has_biases,
// bidirectional, batch_first, train).
enum Arg { kInput, kWih, kWhh, kBih, kBhh, kHx, kCx, kReverse, kBatchSizes, kMode, kHidden, kLayers,
           kHasBiases, kBidirectional, kBatchFirst, kTrain };
// Of aten::mkldnn_rnn_layer_backward(input, weight1..4, hx_, cx_tmp, output,
// hy_, cy_, grad_output?, grad_hy?, grad_cy?, reverse, mode, hidden_size,
// num_layers, has_biases, train, bidirectional, batch_sizes, batch_first,
// workspace).
enum BackArg { kBOutput = 7, kBHy, kBCy, kBGradOutput, kBGradHy, kBGradCy, kBReverse, kBMode, kBHidden, kBLayers,
               kBHasBiases, kBTrain, kBBidirectional, kBBatchSizes, kBBatchFirst, kBWorkspace };
constexpr int64_t kLstmMode = 2;  // ATen's RNN mode numbering: LSTM

// The start of this engine's workspace; the path's record follows, 64 bytes in.
struct WorkspaceHeader {
  char magic[24];
  int64_t t, b, i, h, reverse;
};
static_assert(sizeof(WorkspaceHeader) == 64, "the record must start 64-byte aligned");
constexpr char kPrimitiveMagic[24] = "openreg onednn LSTM v1";  // oneDNN's workspace follows
constexpr char kLoopMagic[24] = "openreg onednn LSTM lp1";    // LstmLoopRecord follows

size_t loop_workspace_bytes(int64_t t, int64_t b, int64_t h) {
  return sizeof(WorkspaceHeader) + static_cast<size_t>(LstmLoopRecord::floats(t, b, h)) * sizeof(float);
}
LstmLoopRecord loop_record(const sdk::Tensor& ws, int64_t t, int64_t b, int64_t h) {
  return LstmLoopRecord::at(reinterpret_cast<float*>(static_cast<char*>(ws.bytes()) + sizeof(WorkspaceHeader)), t,
                            b, h);
}

struct LstmEntry {
  dnnl::lstm_forward::primitive_desc pd;
  dnnl::lstm_forward prim;
};

struct LstmTrainEntry {
  dnnl::lstm_forward::primitive_desc fwd_pd;
  dnnl::lstm_forward fwd;
  dnnl::lstm_backward::primitive_desc bwd_pd;
  dnnl::lstm_backward bwd;
};

// One layer's geometry and the descriptors both directions share.
struct Layer {
  int64_t t, b, i, h;
  bool reverse;
  memory::desc src, dst, state, bias, user_wl, user_wi;
  Layer(int64_t t_, int64_t b_, int64_t i_, int64_t h_, bool reverse_)
      : t(t_), b(b_), i(i_), h(h_), reverse(reverse_),
        src({t, b, i}, dt::f32, memory::format_tag::tnc),
        dst({t, b, h}, dt::f32, memory::format_tag::tnc),
        state({1, 1, b, h}, dt::f32, memory::format_tag::ldnc),
        bias({1, 1, 4, h}, dt::f32, memory::format_tag::ldgo),
        user_wl({1, 1, i, 4, h}, dt::f32, memory::format_tag::ldgoi),
        user_wi({1, 1, h, 4, h}, dt::f32, memory::format_tag::ldgoi) {}
  dnnl::rnn_direction direction() const {
    return reverse ? dnnl::rnn_direction::unidirectional_right2left : dnnl::rnn_direction::unidirectional_left2right;
  }
  Key key(const char* op) const { return Key(op).add(t).add(b).add(i).add(h).add(int64_t{reverse}); }
  double flops() const { return 2.0 * static_cast<double>(t * b) * static_cast<double>(4 * h * (i + h)); }
  // The threads a call gets: by one time step's work, not the layer's. oneDNN splits
  // each step's GEMM and cell across the threads and meets them at a barrier every
  // step, so a small step on two threads waits more than it computes (a 2-layer,
  // 128-wide LSTM of batch 8: 2.4 ms on one thread, 7.5 on two).
  int threads(double passes) const { return threads_for(passes * flops() / static_cast<double>(std::max<int64_t>(1, t)), kFlopGrain); }
};

std::shared_ptr<LstmTrainEntry> train_entry(const Layer& l) {
  return cached<LstmTrainEntry>(l.key("mkldnn_rnn_layer train"), [&] {
    const memory::desc any_wl({1, 1, l.i, 4, l.h}, dt::f32, memory::format_tag::any);
    const memory::desc any_wi({1, 1, l.h, 4, l.h}, dt::f32, memory::format_tag::any);
    dnnl::lstm_forward::desc fd(dnnl::prop_kind::forward_training, l.direction(), l.src, l.state, l.state, any_wl,
                                any_wi, l.bias, l.dst, l.state, l.state);
    dnnl::lstm_forward::primitive_desc fpd(fd, base_attr(), cpu());
    dnnl::lstm_backward::desc bd(dnnl::prop_kind::backward, l.direction(), l.src, l.state, l.state, any_wl, any_wi,
                                 l.bias, l.dst, l.state, l.state, l.src, l.state, l.state, any_wl, any_wi, l.bias,
                                 l.dst, l.state, l.state);
    dnnl::lstm_backward::primitive_desc bpd(bd, base_attr(), cpu(), fpd);
    return LstmTrainEntry{fpd, dnnl::lstm_forward(fpd), bpd, dnnl::lstm_backward(bpd)};
  });
}

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

// The two biases summed (zeros without has_biases: CPU's kernel ignores them).
float* summed_bias(Buffers& b, const sdk::Tensor& b_ih, const sdk::Tensor& b_hh, bool has_biases, int64_t h) {
  float* bias = b.floats(4 * h);
  const float *bi = b_ih.data<float>(), *bh = b_hh.data<float>();
  for (int64_t k = 0; k < 4 * h; ++k) bias[k] = has_biases ? bi[k] + bh[k] : 0.0f;
  return bias;
}

// Runs a primitive with more arguments than execute()'s array holds (the
// backward has 19), adding the scratchpad from `b`.
void execute_many(const dnnl::primitive& p, const dnnl::primitive_desc_base& pd, Buffers& b,
                  std::unordered_map<int, memory> args) {
  const memory::desc spd = pd.scratchpad_desc();
  if (spd.get_size()) args.emplace(DNNL_ARG_SCRATCHPAD, memory(spd, cpu(), b.alloc(spd.get_size())));
  dnnl::stream s(cpu());
  p.execute(s, args);
  s.wait();
}

}  // namespace

void lstm_layer(const sdk::Call& call) {
  const std::string_view name = call.op_name();
  const sdk::Tensor x = call.tensor(kInput), w_ih = call.tensor(kWih), w_hh = call.tensor(kWhh);
  const sdk::Tensor b_ih = call.tensor(kBih), b_hh = call.tensor(kBhh), hx = call.tensor(kHx), cx = call.tensor(kCx);
  OPENREG_SDK_REQUIRE(call.int_arg(kMode) == kLstmMode, name, ": only LSTM layers (mode 2) are served here");
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
  const bool train = call.bool_arg(kTrain);
  // An empty training layer would leave no workspace worth a backward: the
  // reference engine takes both calls.
  OPENREG_SDK_REQUIRE(!train || (T > 0 && B > 0 && H > 0), name, ": empty training layers are not served");
  const Layer l(T, B, I, H, call.bool_arg(kReverse));
  const bool loop = lstm_loop_serves(T, B, I, H, train);
  std::shared_ptr<LstmTrainEntry> te = train && !loop ? train_entry(l) : nullptr;
  const size_t ws_bytes = !train ? 0
                          : loop ? loop_workspace_bytes(T, B, H)
                                 : sizeof(WorkspaceHeader) + te->fwd_pd.workspace_desc().get_size();

  openreg_tensor descs[4];
  const sdk::Tensor y = output(call, 0, {T, B, H}, &descs[0]), hy = output(call, 1, {B, H}, &descs[1]),
                    cy = output(call, 2, {B, H}, &descs[2]);
  const sdk::Tensor ws = output(call, 3, {static_cast<int64_t>(ws_bytes)}, &descs[3], sdk::dtypes::uint8);
  for (const sdk::Tensor& t : {y, hy, cy})
    OPENREG_SDK_REQUIRE(t.is_contiguous(), name, ": contiguous outputs only, got ", t.describe());
  OPENREG_SDK_REQUIRE(!train || (ws.numel() == static_cast<int64_t>(ws_bytes) && ws.is_contiguous()), name,
                      ": the workspace output is ", ws.describe(), ", this engine's takes ", ws_bytes, " bytes");
  if (T == 0 || B == 0 || H == 0) return;
  auto write_header = [&](const char (&magic)[24]) {
    WorkspaceHeader header{};
    std::memcpy(header.magic, magic, sizeof header.magic);
    header.t = T, header.b = B, header.i = I, header.h = H, header.reverse = l.reverse;
    std::memcpy(ws.bytes(), &header, sizeof header);
  };

  if (loop) {
    Buffers b;
    const LstmLoopArgs args{T, B, I, H, l.reverse, x.data<float>(), w_ih.data<float>(), w_hh.data<float>(),
                            summed_bias(b, b_ih, b_hh, call.bool_arg(kHasBiases), H), hx.data<float>(),
                            cx.data<float>(), y.data<float>(), hy.data<float>(), cy.data<float>()};
    if (!train) return lstm_loop_forward(args, nullptr, b);
    write_header(kLoopMagic);
    const LstmLoopRecord record = loop_record(ws, T, B, H);
    lstm_loop_forward(args, &record, b);
    return;
  }
  Threads threads(l.threads(1));
  std::shared_ptr<LstmEntry> e;
  if (!te) {
    e = cached<LstmEntry>(l.key("mkldnn_rnn_layer"), [&] {
      const memory::desc any_wl({1, 1, I, 4, H}, dt::f32, memory::format_tag::any);
      const memory::desc any_wi({1, 1, H, 4, H}, dt::f32, memory::format_tag::any);
      dnnl::lstm_forward::desc d(dnnl::prop_kind::forward_inference, l.direction(), l.src, l.state, l.state, any_wl,
                                 any_wi, l.bias, l.dst, l.state, l.state);
      dnnl::lstm_forward::primitive_desc pd(d, base_attr(), cpu());
      return LstmEntry{pd, dnnl::lstm_forward(pd)};
    });
  }
  const dnnl::lstm_forward::primitive_desc& pd = te ? te->fwd_pd : e->pd;

  Buffers b;
  const memory wl = stage_in(b, l.user_wl, w_ih.bytes(), pd.weights_layer_desc());
  const memory wi = stage_in(b, l.user_wi, w_hh.bytes(), pd.weights_iter_desc());
  float* bias = summed_bias(b, b_ih, b_hh, call.bool_arg(kHasBiases), H);
  Args args{{DNNL_ARG_SRC_LAYER, memory(l.src, cpu(), x.bytes())},
            {DNNL_ARG_SRC_ITER, memory(l.state, cpu(), hx.bytes())},
            {DNNL_ARG_SRC_ITER_C, memory(l.state, cpu(), cx.bytes())},
            {DNNL_ARG_WEIGHTS_LAYER, wl},
            {DNNL_ARG_WEIGHTS_ITER, wi},
            {DNNL_ARG_BIAS, memory(l.bias, cpu(), bias)},
            {DNNL_ARG_DST_LAYER, memory(l.dst, cpu(), y.bytes())},
            {DNNL_ARG_DST_ITER, memory(l.state, cpu(), hy.bytes())},
            {DNNL_ARG_DST_ITER_C, memory(l.state, cpu(), cy.bytes())}};
  if (te) {
    write_header(kPrimitiveMagic);
    args.emplace(DNNL_ARG_WORKSPACE,
                 memory(pd.workspace_desc(), cpu(), static_cast<char*>(ws.bytes()) + sizeof(WorkspaceHeader)));
    execute(te->fwd, pd, args);
  } else {
    execute(e->prim, pd, args);
  }
}

void lstm_layer_backward(const sdk::Call& call) {
  const std::string_view name = call.op_name();
  const sdk::Tensor x = call.tensor(kInput), w_ih = call.tensor(kWih), w_hh = call.tensor(kWhh);
  const sdk::Tensor b_ih = call.tensor(kBih), b_hh = call.tensor(kBhh), hx = call.tensor(kHx), cx = call.tensor(kCx);
  const sdk::Tensor y = call.tensor(kBOutput), hy = call.tensor(kBHy), cy = call.tensor(kBCy);
  const sdk::Tensor ws = call.tensor(kBWorkspace);
  const std::optional<sdk::Tensor> gy = call.optional_tensor(kBGradOutput), ghy = call.optional_tensor(kBGradHy),
                                   gcy = call.optional_tensor(kBGradCy);
  OPENREG_SDK_REQUIRE(call.int_arg(kBMode) == kLstmMode, name, ": only LSTM layers (mode 2) are served here");
  OPENREG_SDK_REQUIRE(call.bool_arg(kBTrain), name, ": train=False leaves no workspace to differentiate with");
  OPENREG_SDK_REQUIRE(call.int_list(kBBatchSizes).size() == 0, name, ": packed sequences are not served");
  OPENREG_SDK_REQUIRE(!call.bool_arg(kBBatchFirst), name, ": batch_first layers are not served");
  OPENREG_SDK_REQUIRE(call.int_arg(kBLayers) == 1 && !call.bool_arg(kBBidirectional), name,
                      ": one layer in one direction per call");
  OPENREG_SDK_REQUIRE(is_f32(x.dtype()) && x.dim() == 3, name, ": a float32 input [T, B, I] only, got ",
                      x.describe());
  require_dtype(call, x.dtype(), {w_ih, w_hh, b_ih, b_hh, hx, cx, y, hy, cy});
  const int64_t T = x.size(0), B = x.size(1), I = x.size(2), H = call.int_arg(kBHidden);
  const Layer l(T, B, I, H, call.bool_arg(kBReverse));
  const std::vector<int64_t> steps_shape{T, B, H};
  // The workspace first: only this engine's own, for this very layer.
  WorkspaceHeader header{};
  if (ws.is_contiguous() && ws.numel() >= static_cast<int64_t>(sizeof header))
    std::memcpy(&header, ws.bytes(), sizeof header);
  const bool loop = std::memcmp(header.magic, kLoopMagic, sizeof header.magic) == 0;
  OPENREG_SDK_REQUIRE((loop || std::memcmp(header.magic, kPrimitiveMagic, sizeof header.magic) == 0) && header.t == T &&
                          header.b == B && header.i == I && header.h == H && header.reverse == l.reverse,
                      name, ": the workspace ", ws.describe(), " was not made by this engine for this layer");
  OPENREG_SDK_CHECK(w_ih.dim() == 2 && w_ih.size(0) == 4 * H && w_ih.size(1) == I && w_hh.dim() == 2 &&
                        w_hh.size(0) == 4 * H && w_hh.size(1) == H && b_ih.numel() == 4 * H &&
                        b_hh.numel() == 4 * H && hx.dim() == 2 && hx.size(0) == B && hx.size(1) == H &&
                        cx.sizes().vec() == hx.sizes().vec() && y.sizes().vec() == steps_shape &&
                        hy.sizes().vec() == hx.sizes().vec() && cy.sizes().vec() == hx.sizes().vec(),
                    name, ": the operands do not fit input ", x.describe(), " and hidden size ", H);
  for (const std::optional<sdk::Tensor>& g : {gy, ghy, gcy}) {
    if (!g) continue;
    OPENREG_SDK_REQUIRE(is_f32(g->dtype()), name, ": gradients must be float32, got ", g->describe());
    OPENREG_SDK_CHECK(g->sizes().vec() == (g->dim() == 3 ? y.sizes().vec() : hx.sizes().vec()), name,
                      ": gradient ", g->describe(), " does not fit the layer");
  }
  const sdk::Tensor dx = call.output(0), dw_ih = call.output(1), dw_hh = call.output(2), db_ih = call.output(3),
                    db_hh = call.output(4), dhx = call.output(5), dcx = call.output(6);
  for (const sdk::Tensor& t : {x, w_ih, w_hh, b_ih, b_hh, hx, cx, y, hy, cy, dx, dw_ih, dw_hh, db_ih, db_hh, dhx, dcx})
    OPENREG_SDK_REQUIRE(t.is_contiguous(), name, ": contiguous operands only, got ", t.describe());
  for (const std::optional<sdk::Tensor>& g : {gy, ghy, gcy})
    OPENREG_SDK_REQUIRE(!g || g->is_contiguous(), name, ": contiguous gradients only, got ", g->describe());
  if (loop) {
    OPENREG_SDK_CHECK(ws.numel() == static_cast<int64_t>(loop_workspace_bytes(T, B, H)), name, ": the workspace ",
                      ws.describe(), " is not this layer's size");
    Buffers b;
    const LstmLoopArgs args{T, B, I, H, l.reverse, x.data<float>(), w_ih.data<float>(), w_hh.data<float>(),
                            nullptr, hx.data<float>(), cx.data<float>(), y.data<float>(),
                            nullptr, nullptr};
    const LstmLoopGrads grads{gy ? gy->data<float>() : nullptr, ghy ? ghy->data<float>() : nullptr,
                              gcy ? gcy->data<float>() : nullptr, dx.data<float>(), dw_ih.data<float>(),
                              dw_hh.data<float>(), db_ih.data<float>(), dhx.data<float>(), dcx.data<float>()};
    lstm_loop_backward(args, loop_record(ws, T, B, H), grads, b);
    std::memcpy(db_hh.bytes(), db_ih.bytes(), static_cast<size_t>(4 * H) * sizeof(float));
    return;
  }
  std::shared_ptr<LstmTrainEntry> te = train_entry(l);
  OPENREG_SDK_CHECK(ws.numel() == static_cast<int64_t>(sizeof header + te->fwd_pd.workspace_desc().get_size()),
                    name, ": the workspace ", ws.describe(), " is not this layer's size");

  Threads threads(l.threads(2));
  const auto& pd = te->bwd_pd;
  Buffers b;
  // An absent gradient is zeros; the weight and bias gradients accumulate into
  // zeroed buffers (oneDNN adds to them).
  auto grad_or_zeros = [&](const std::optional<sdk::Tensor>& g, const memory::desc& md) {
    if (g) return memory(md, cpu(), g->bytes());
    void* p = b.alloc(md.get_size());
    std::memset(p, 0, md.get_size());
    return memory(md, cpu(), p);
  };
  auto zeroed = [&](const memory::desc& md) {
    void* p = b.alloc(md.get_size());
    std::memset(p, 0, md.get_size());
    return memory(md, cpu(), p);
  };
  const memory d_wl = zeroed(pd.diff_weights_layer_desc()), d_wi = zeroed(pd.diff_weights_iter_desc());
  std::memset(db_ih.bytes(), 0, static_cast<size_t>(4 * H) * sizeof(float));
  execute_many(te->bwd, pd, b,
               {{DNNL_ARG_SRC_LAYER, memory(l.src, cpu(), x.bytes())},
                {DNNL_ARG_SRC_ITER, memory(l.state, cpu(), hx.bytes())},
                {DNNL_ARG_SRC_ITER_C, memory(l.state, cpu(), cx.bytes())},
                {DNNL_ARG_WEIGHTS_LAYER, stage_in(b, l.user_wl, w_ih.bytes(), pd.weights_layer_desc())},
                {DNNL_ARG_WEIGHTS_ITER, stage_in(b, l.user_wi, w_hh.bytes(), pd.weights_iter_desc())},
                {DNNL_ARG_BIAS, memory(l.bias, cpu(), summed_bias(b, b_ih, b_hh, call.bool_arg(kBHasBiases), H))},
                {DNNL_ARG_DST_LAYER, memory(l.dst, cpu(), y.bytes())},
                {DNNL_ARG_DST_ITER, memory(l.state, cpu(), hy.bytes())},
                {DNNL_ARG_DST_ITER_C, memory(l.state, cpu(), cy.bytes())},
                {DNNL_ARG_WORKSPACE, memory(te->fwd_pd.workspace_desc(), cpu(),
                                            static_cast<char*>(ws.bytes()) + sizeof(WorkspaceHeader))},
                {DNNL_ARG_DIFF_DST_LAYER, grad_or_zeros(gy, l.dst)},
                {DNNL_ARG_DIFF_DST_ITER, grad_or_zeros(ghy, l.state)},
                {DNNL_ARG_DIFF_DST_ITER_C, grad_or_zeros(gcy, l.state)},
                {DNNL_ARG_DIFF_SRC_LAYER, memory(l.src, cpu(), dx.bytes())},
                {DNNL_ARG_DIFF_SRC_ITER, memory(l.state, cpu(), dhx.bytes())},
                {DNNL_ARG_DIFF_SRC_ITER_C, memory(l.state, cpu(), dcx.bytes())},
                {DNNL_ARG_DIFF_WEIGHTS_LAYER, d_wl},
                {DNNL_ARG_DIFF_WEIGHTS_ITER, d_wi},
                {DNNL_ARG_DIFF_BIAS, memory(l.bias, cpu(), db_ih.bytes())}});
  reorder(pd.diff_weights_layer_desc(), d_wl.get_data_handle(), l.user_wl, dw_ih.bytes());
  reorder(pd.diff_weights_iter_desc(), d_wi.get_data_handle(), l.user_wi, dw_hh.bytes());
  std::memcpy(db_hh.bytes(), db_ih.bytes(), static_cast<size_t>(4 * H) * sizeof(float));
}

}  // namespace onednn_engine
