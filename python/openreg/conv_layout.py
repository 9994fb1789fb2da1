"""The memory format of convolution results, told to FakeTensor as the device makes it.

On the device, a convolution whose input or weight is channels-last gives
channels-last results (output, grad_input, grad_weight), as CPU's and CUDA's kernels
do (core/src/aten/output_sizing.cpp, conv_result_format). FakeTensor (torch.compile,
export) predicts a convolution's layout with
``torch._C._conv_determine_backend_memory_format(input, weight, backend)``, which
answers "contiguous" for every backend it does not know (``Overrideable``, where
PrivateUse1 convolutions go). Inductor then asserted the predicted strides on the
real result and a compiled channels_last CNN raised. install() makes the prediction
follow the device's rule for openreg tensors; other devices keep PyTorch's answer.
"""

import functools

import torch
from torch._prims_common import suggest_memory_format

_CHANNELS_LAST = {4: torch.channels_last, 5: torch.channels_last_3d}


def _on_openreg(t: torch.Tensor) -> bool:
    device = getattr(t, "fake_device", None) or t.device
    return device.type == "openreg"


def result_format(input: torch.Tensor, weight: torch.Tensor) -> torch.memory_format:
    """The device's rule: channels-last when the input or the weight is."""
    wanted = _CHANNELS_LAST.get(input.dim())
    if wanted is not None and (suggest_memory_format(input) == wanted or suggest_memory_format(weight) == wanted):
        return wanted
    return torch.contiguous_format


def install() -> None:
    original = torch._C._conv_determine_backend_memory_format
    if getattr(original, "_openreg_rule", False):
        return

    @functools.wraps(original)
    def determine(input, weight, backend):
        if backend == torch._C._ConvBackend.Overrideable and _on_openreg(input):
            return result_format(input, weight)
        return original(input, weight, backend)

    determine._openreg_rule = True
    torch._C._conv_determine_backend_memory_format = determine
