"""What a queued op reads is what its operands were at the call, as on CUDA.

Ops run on the execution queue after the call returns (docs/design.md, "Streams and the
execution queue"). Each test first queues a few large matmuls, so that the op under test
runs well after the Python line that called it, then changes what the op was given; the
result must be CPU's for the operands as they were at the call.
"""

import torch

DEV = "openreg"


def busy_queue():
    """Queue ~10 ms of work ahead of what follows."""
    a = torch.randn(384, 384, device=DEV)
    for _ in range(12):
        a = torch.tanh(a @ a)
    return a


def test_cpu_scalar_tensor_changed_after_the_call(openreg):
    x = torch.arange(4.0)
    s = torch.tensor(2.0)  # a 0-dim CPU tensor operand, as an LR scheduler's tensor lr
    busy_queue()
    y = torch.mul(x.to(DEV), s)
    s.fill_(100.0)
    torch.testing.assert_close(y.cpu(), x * 2.0)


def test_cpu_index_list_changed_after_the_call(openreg):
    x = torch.zeros(5)
    idx = torch.tensor([0, 2])
    busy_queue()
    y = x.to(DEV).index_put((idx,), torch.tensor(7.0, device=DEV))
    idx.fill_(4)
    torch.testing.assert_close(y.cpu(), torch.zeros(5).index_put((torch.tensor([0, 2]),), torch.tensor(7.0)))


def test_pageable_source_changed_after_the_copy(openreg):
    src = torch.arange(1000.0)
    busy_queue()
    d = src.to(DEV)
    src.fill_(-1.0)
    torch.testing.assert_close(d.cpu(), torch.arange(1000.0))


def test_operand_geometry_changed_in_place_after_the_call(openreg):
    base = torch.arange(12.0).reshape(3, 4)
    x = base.to(DEV)
    busy_queue()
    y = x + 1  # sizes and strides of x at the call: 3x4
    x.t_()  # the same TensorImpl, now 4x3
    x.unsqueeze_(0)
    torch.testing.assert_close(y.cpu(), base + 1)
    assert x.shape == (1, 4, 3)


def test_operand_freed_and_its_memory_reused(openreg):
    ref = torch.randn(256, 256)
    x = ref.to(DEV)
    busy_queue()
    y = x * 3  # queued: reads x's block later
    del x  # the block goes back to the cache now
    junk = [torch.full((256, 256), 5.0, device=DEV) for _ in range(4)]  # may get that block
    torch.testing.assert_close(y.cpu(), ref * 3)
    assert all(bool((j == 5.0).all()) for j in junk)
