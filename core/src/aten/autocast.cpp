// AMP: torch.autocast(device_type="openreg") casts like CUDA's autocast does:
// the same op lists and policies PyTorch registers for AutocastCUDA
// (ATen/autocast_mode.cpp), and the same refusal of ops that are unsafe to
// autocast. Every other op falls through.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace at::autocast {
namespace {

// CUDA's autocast refuses binary_cross_entropy: in float16 its log() of a
// sigmoid output underflows. Same error class and words as CUDA's, which
// name no device.
Tensor binary_cross_entropy_refused(
    const Tensor&, const Tensor&, const std::optional<Tensor>&, int64_t) {
  TORCH_CHECK(
      false,
      "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
      "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
      "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
      "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
      "safe to autocast.");
}

#define OPENREG_AUTOCAST_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define OPENREG_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define OPENREG_AUTOCAST_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define OPENREG_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

// CUDA's lists, in its order. Not taken: cudnn_convolution and
// cudnn_convolution_transpose (CUDA-only ops no openreg tensor reaches).
TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  AT_FORALL_LOWER_PRECISION_FP(OPENREG_AUTOCAST_LOWER_PRECISION)
  AT_FORALL_FP32(OPENREG_AUTOCAST_FP32)
  // softmax, sum, cumsum...: run in float32 unless the caller gave a dtype.
  AT_FORALL_FP32_SET_OPT_DTYPE(OPENREG_AUTOCAST_FP32_SET_OPT_DTYPE)
  // norm's overloads without a dtype argument get float32 appended.
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  // Several float arguments: all cast to the widest of them.
  AT_FORALL_PROMOTE(OPENREG_AUTOCAST_PROMOTE)
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"),
         TORCH_FN(binary_cross_entropy_refused));
}

}  // namespace
}  // namespace at::autocast
