"""Backend metadata (openreg's tags) kept through FakeTensor conversion.

A device tensor's tags (``torch._C._set_tensor_metadata(t, {"openreg.<name>": True})``,
core/src/runtime/backend_meta.cpp) live in its c10::BackendMeta. PyTorch 2.13
builds a FakeTensor from a fresh meta tensor and copies the conj and neg bits but
not the backend's metadata, so torch.compile and FakeTensorMode would see an
untagged tensor. install() makes the conversion carry the tags over.
"""

import functools

import torch
from torch._subclasses import fake_tensor as _fake_tensor

TAG_PREFIX = "openreg."


def tags(t: torch.Tensor) -> dict:
    """The openreg tags of a tensor: ``{"openreg.<name>": True}``."""
    return {k: v for k, v in torch._C._get_tensor_metadata(t).items() if k.startswith(TAG_PREFIX)}


def install() -> None:
    converter = _fake_tensor.FakeTensorConverter
    original = converter.from_real_tensor
    if getattr(original, "_openreg_keeps_tags", False):
        return

    @functools.wraps(original)
    def from_real_tensor(self, fake_mode, t, *args, **kwargs):
        fake = original(self, fake_mode, t, *args, **kwargs)
        if t.device.type == "openreg":
            found = tags(t)
            if found:
                torch._C._set_tensor_metadata(fake, found)
        return fake

    from_real_tensor._openreg_keeps_tags = True
    converter.from_real_tensor = from_real_tensor
