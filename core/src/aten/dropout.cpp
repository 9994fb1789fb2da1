// Dropout on the device, with the device's random numbers.
//
// aten::native_dropout takes no generator argument: CPU's and CUDA's kernels draw
// from their own device's default generator. Through the op path an engine gets no
// random stream for it (the ABI passes one only for a Generator argument), and the
// reference engine ran CPU's kernel, which drew the mask from torch CPU's generator:
// torch.openreg.manual_seed and set_rng_state did not reproduce a dropout mask, and
// each dropout moved CPU's random stream. So core gives it the kernel CPU's is (a
// Bernoulli mask, then input * mask * scale), written with device ops: the mask
// from bernoulli_ (whose random stream is the device generator's, as for every
// random op), the products routed to the engines like any op. Its backward,
// native_dropout_backward (grad * mask * scale, no random numbers), routes as usual.
#include <ATen/ScalarOps.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/ones_like.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

namespace openreg {
namespace {

std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  // CPU's kernel: an empty input comes back as itself (and its mask in the input's
  // dtype); outside training the output is a copy and every element kept; p = 1 drops
  // everything (scale 0, no division by 0).
  const auto mask_options = input.options().dtype(at::kBool);
  if (input.numel() == 0) return {input, at::empty_like(input)};
  if (train.has_value() && !*train) return {input.clone(), at::ones_like(input, mask_options)};
  const double keep = 1.0 - p;
  const double scale = keep == 0.0 ? 0.0 : 1.0 / keep;
  at::Tensor mask = at::empty_like(input, mask_options).bernoulli_(keep);
  // The scale as a wrapped number (mul_.Tensor, as Python's `*=` calls it): an integer
  // input then raises CPU's "result type Float can't be cast to ... Long".
  at::Tensor output = input.mul(mask).mul_(at::native::wrapped_scalar_tensor(scale));
  return {output, mask};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("native_dropout", native_dropout); }

}  // namespace openreg
