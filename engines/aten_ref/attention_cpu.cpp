// CPU kernels for the overrideable fused attention ops
// (aten::_scaled_dot_product_fused_attention_overrideable and its _backward),
// which ATen leaves to private-use backends: with them the reference engine runs
// these ops like any other, and both conformance suites have a reference.
//
// The forward has two kernels behind one contract:
//  - torch CPU's flash attention kernel, what F.scaled_dot_product_attention runs on
//    torch CPU, where it covers the call (flash_covers: the operands that
//    core/src/bridge/reference_flash.h names, which core's SDPA choice also reads before
//    it sends inference on a chain without another engine for the op here; not both a
//    mask and is_causal). It accumulates in float32, and
//    for bfloat16 and float16 rounds the probabilities to that dtype before the second
//    product, as torch CPU does;
//  - otherwise the definition: ATen's math path (matmul, mask, softmax, matmul)
//    computed in float64 and rounded once to the arguments' dtype.
// The backward is always the definition: the flash backward reads the forward's output,
// which the contract's backward does not (it rebuilds the probabilities from the
// logsumexp alone, and the conformance cases give it any logsumexp), so core's choice
// keeps training on such chains on the math path. The logsumexp of each score row is
// float32, as the ops' Meta kernel sizes it. The contract engines share:
//  - scale defaults to 1/sqrt(E); is_causal keeps key j <= query i (top left);
//  - a bool attn_bias keeps the positions that are true, a float one is added;
//    either broadcasts to [batch, heads, L, S];
//  - key and value may have fewer heads than the query, a divisor of them (query
//    head h reads key head h / (Hq / Hk)); their gradients sum over each group;
//  - a row whose keys are all masked gives output 0 and logsumexp +inf (as flash
//    attention; ATen's math path gives 0 too);
//  - the backward takes the probabilities from the logsumexp it is given; the
//    bias gradient is the scores' gradient summed to the bias's shape (zeros for a
//    bool mask); this engine writes every gradient output whatever grad_input_mask
//    says, and an engine may leave grad_attn_bias zero when grad_input_mask[3] is
//    false (autograd asks for it only when the mask needs a gradient);
//  - philox_seed and philox_offset are 0 (no dropout: dropout_p > 0 is refused).
#include "bridge/reference_flash.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <array>
#include <cmath>
#include <limits>

namespace {

using at::Tensor;
using OptTensor = std::optional<Tensor>;

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, double dropout_p, const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(dropout_p == 0.0, op, ": dropout_p > 0 is not supported (got ", dropout_p,
                              "); scaled_dot_product_attention takes the math path for dropout");
  TORCH_CHECK(q.dim() == 4 || q.dim() == 3, op, ": query must be 3-d or 4-d, got ", q.dim(), "-d");
  TORCH_CHECK(k.dim() == q.dim() && v.dim() == q.dim(), op, ": query, key and value must have the same number of "
              "dims, got ", q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  TORCH_CHECK(at::isFloatingType(q.scalar_type()), op, ": query must be floating point, got ", q.scalar_type());
  TORCH_CHECK(k.scalar_type() == q.scalar_type() && v.scalar_type() == q.scalar_type(), op,
              ": query, key and value must have one dtype, got ", q.scalar_type(), ", ", k.scalar_type(), ", ",
              v.scalar_type());
  const int64_t hq = q.size(-3), hk = k.size(-3);
  TORCH_CHECK(k.size(-1) == q.size(-1) && v.size(-2) == k.size(-2) && v.size(-3) == hk &&
                  (q.dim() == 3 || (k.size(0) == q.size(0) && v.size(0) == q.size(0))) && hk > 0 && hq % hk == 0,
              op, ": shapes do not fit: query ", q.sizes(), ", key ", k.sizes(), ", value ", v.sizes());
}

// key/value heads repeated to the query's (grouped-query attention).
Tensor per_query_head(const Tensor& t, int64_t hq) {
  const int64_t hk = t.size(-3);
  return hk == hq ? t : t.repeat_interleave(hq / hk, -3);
}

// The scaled, masked scores in float64: [.., H, L, S].
Tensor scores_of(const Tensor& q, const Tensor& k, const OptTensor& bias, bool is_causal, double scale) {
  Tensor s = at::matmul(q.to(at::kDouble), per_query_head(k, q.size(-3)).to(at::kDouble).transpose(-2, -1)) * scale;
  const int64_t L = q.size(-2), S = k.size(-2);
  if (is_causal) s.masked_fill_(at::ones({L, S}, q.options().dtype(at::kBool)).tril().logical_not(),
                                -std::numeric_limits<double>::infinity());
  if (bias && bias->defined()) {
    if (bias->scalar_type() == at::kBool) s.masked_fill_(bias->logical_not(), -std::numeric_limits<double>::infinity());
    else s = s + bias->to(at::kDouble);
  }
  return s;
}

double scale_of(const Tensor& q, std::optional<double> scale) {
  return scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
}

// [.., H, L] -> [B, H, L] (B = 1 for 3-d inputs), as the Meta kernel sizes it.
Tensor batched(const Tensor& t, const Tensor& q) { return q.dim() == 3 ? t.unsqueeze(0) : t; }

// ---- torch CPU's flash attention kernel, where it covers the call

bool flash_covers(const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& bias, bool is_causal) {
  const bool has_bias = bias && bias->defined();
  if (has_bias && (is_causal || (bias->scalar_type() != at::kBool && bias->scalar_type() != q.scalar_type()))) {
    return false;
  }
  return q.numel() > 0 && k.numel() > 0 && openreg::bridge::reference_flash_takes(q, k, v);
}

// The mask as the flash kernel takes it: 4-d (it takes 2-d or 4-d only; the contract
// broadcasts any rank up to 4, so leading dims of 1 are added), a bool mask as 0 / -inf
// in the query's dtype.
OptTensor flash_mask(const OptTensor& bias, const Tensor& q) {
  if (!bias || !bias->defined()) return std::nullopt;
  Tensor m = bias->scalar_type() != at::kBool
                 ? *bias
                 : at::zeros(bias->sizes(), q.options())
                       .masked_fill_(bias->logical_not(), -std::numeric_limits<double>::infinity());
  while (m.dim() < 4) m = m.unsqueeze(0);
  return m;
}

Tensor as_4d(const Tensor& t) { return t.dim() == 3 ? t.unsqueeze(0) : t; }

std::tuple<Tensor, Tensor> flash_forward(const Tensor& q, const Tensor& k, const Tensor& v, const OptTensor& bias,
                                         bool is_causal, std::optional<double> scale) {
  // Grouped heads go in as they are: the kernel maps query head h to key head
  // h / (Hq / Hk) itself, as F.scaled_dot_product_attention(enable_gqa=True) has it do.
  const OptTensor mask = flash_mask(bias, q);
  auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(as_4d(q), as_4d(k), as_4d(v), 0.0, is_causal,
                                                                    mask, scale);
  // A row with every key masked: the flash kernel gives output 0 and logsumexp 0; the
  // contract's logsumexp is +inf (not both a mask and is_causal here, and a causal row
  // always sees its first key). Found as the rows of the float mask whose largest
  // entry is -inf: one reduction (isneginf then all(-1) took a fifth of the call).
  if (mask) {
    lse.masked_fill_(mask->amax(-1) == -std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::infinity());
  }
  return {q.dim() == 3 ? out.squeeze(0) : out, lse.to(at::kFloat)};
}

// ---- the ops' CPU kernels: the flash kernel where it covers the forward, else the definition

std::tuple<Tensor, Tensor, Tensor, Tensor, c10::SymInt, c10::SymInt, Tensor, Tensor, Tensor> fused_attention(
    const Tensor& query, const Tensor& key, const Tensor& value, const OptTensor& attn_bias, double dropout_p,
    bool is_causal, bool /*return_debug_mask*/, std::optional<double> scale) {
  check_inputs(query, key, value, dropout_p, "_scaled_dot_product_fused_attention_overrideable");
  const Tensor zero = at::zeros({}, query.options().dtype(at::kLong));
  if (flash_covers(query, key, value, attn_bias, is_causal)) {
    auto [out, lse] = flash_forward(query, key, value, attn_bias, is_causal, scale);
    return {out, lse, Tensor(), Tensor(), c10::SymInt(query.size(-2)), c10::SymInt(key.size(-2)), zero, zero.clone(),
            Tensor()};
  }
  const Tensor s = scores_of(query, key, attn_bias, is_causal, scale_of(query, scale));
  // A row with every key masked: logsumexp +inf (as flash attention), so its weights are 0.
  Tensor lse = s.logsumexp(-1, /*keepdim=*/true);
  lse.masked_fill_(lse == -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity());
  const Tensor out = at::matmul((s - lse).exp(), per_query_head(value, query.size(-3)).to(at::kDouble));
  return {out.to(query.scalar_type()), batched(lse.squeeze(-1), query).to(at::kFloat), Tensor(), Tensor(),
          c10::SymInt(query.size(-2)), c10::SymInt(key.size(-2)), zero, zero.clone(), Tensor()};
}

// Sums the per-query-head gradient [.., Hq, S, D] over each key head's group.
Tensor per_key_head(const Tensor& g, int64_t hk) {
  const int64_t hq = g.size(-3);
  if (hq == hk) return g;
  auto shape = g.sizes().vec();
  shape[shape.size() - 3] = hk;
  shape.insert(shape.end() - 2, hq / hk);
  return g.reshape(shape).sum(-3);
}

std::tuple<Tensor, Tensor, Tensor, Tensor> fused_attention_backward(
    const Tensor& grad_out, const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_bias,
    std::array<bool, 4> /*grad_input_mask*/, const Tensor& /*out*/, const Tensor& logsumexp,
    const Tensor& /*cum_seq_q*/, const Tensor& /*cum_seq_k*/, c10::SymInt /*max_q*/, c10::SymInt /*max_k*/,
    double dropout_p, bool is_causal, const Tensor& /*philox_seed*/, const Tensor& /*philox_offset*/,
    std::optional<double> scale) {
  check_inputs(query, key, value, dropout_p, "_scaled_dot_product_fused_attention_overrideable_backward");
  const double sc = scale_of(query, scale);
  const OptTensor bias = attn_bias.defined() ? OptTensor(attn_bias) : std::nullopt;
  const Tensor s = scores_of(query, key, bias, is_causal, sc);
  const Tensor lse = logsumexp.to(at::kDouble).reshape(s.sizes().slice(0, s.dim() - 1)).unsqueeze(-1);
  const Tensor p = (s - lse).exp();
  const int64_t hq = query.size(-3), hk = key.size(-3);
  const Tensor g = grad_out.to(at::kDouble);
  const Tensor dv = at::matmul(p.transpose(-2, -1), g);
  const Tensor dp = at::matmul(g, per_query_head(value, hq).to(at::kDouble).transpose(-2, -1));
  const Tensor ds = p * (dp - (dp * p).sum(-1, /*keepdim=*/true));
  const Tensor dq = at::matmul(ds, per_query_head(key, hq).to(at::kDouble)) * sc;
  const Tensor dk = at::matmul(ds.transpose(-2, -1), query.to(at::kDouble)) * sc;
  Tensor dbias;
  if (attn_bias.defined()) {
    dbias = attn_bias.scalar_type() == at::kBool ? at::zeros_like(attn_bias)
                                                 : ds.sum_to_size(attn_bias.sizes()).to(attn_bias.scalar_type());
  }
  const auto dt = query.scalar_type();
  return {dq.to(dt), per_key_head(dk, hk).to(dt), per_key_head(dv, hk).to(dt), dbias};
}

// Boxed: the schema's attn_bias is a plain Tensor, yet autograd passes an undefined
// one when the forward had none, which reaches an engine as None.
void fused_attention_backward_boxed(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  constexpr size_t kArgs = 17;
  auto args = torch::jit::last(*stack, kArgs);
  auto tensor = [&](size_t i) { return args[i].isNone() ? Tensor() : args[i].toTensor(); };
  const auto mask = args[5].toBoolList();
  const std::array<bool, 4> grad_input_mask{mask[0], mask[1], mask[2], mask[3]};
  std::optional<double> scale;
  if (!args[16].isNone()) scale = args[16].toDouble();
  auto [dq, dk, dv, dbias] = fused_attention_backward(
      tensor(0), tensor(1), tensor(2), tensor(3), tensor(4), grad_input_mask, tensor(6), tensor(7), tensor(8),
      tensor(9), args[10].toSymInt(), args[11].toSymInt(), args[12].toDouble(), args[13].toBool(), tensor(14),
      tensor(15), scale);
  torch::jit::drop(*stack, kArgs);
  for (Tensor* t : {&dq, &dk, &dv, &dbias}) stack->emplace_back(std::move(*t));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, CPU, m) {
  m.impl("_scaled_dot_product_fused_attention_overrideable", fused_attention);
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward",
         torch::CppFunction::makeFromBoxedFunction<&fused_attention_backward_boxed>());
}
