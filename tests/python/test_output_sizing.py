"""Outputs are sized as on CPU, by ATen's C++ Meta kernels where torch has them.

The device sizes an op's outputs before an engine runs it, from the op's Meta
kernel (core/src/aten/output_sizing.cpp). For the ops of
core/src/aten/cpp_meta_kernels.cpp that is ATen's C++ Meta kernel called
directly (the structured kernels' meta functions, which CPU's kernels run too)
instead of the Python one `import torch` puts in the dispatcher, and for where,
relu, mse_loss_backward, layer norm, batch norm and their backwards, whose ATen
Meta kernels are Python only, one of openreg's. Reference: the
same calls on torch CPU: sizes, strides, dtypes, values, and the error for
arguments that do not fit.
"""

import pytest
import torch
import torch.nn.functional as F


def _g():
    return torch.Generator().manual_seed(0)


def _permuted(*shape):
    # A tensor whose memory order is not its logical order (channels-last-like).
    return torch.randn(*shape, generator=_g()).permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)


# label -> fn(*cpu_or_device_args), args built on CPU (moved to the device by the test)
CASES = {
    "add broadcast, permuted operand": (lambda a, b: a + b, lambda: (_permuted(2, 3, 4, 5), torch.randn(5))),
    "mul by a Python float, int tensor": (lambda a: a * 2.5, lambda: (torch.arange(12).reshape(3, 4),)),
    "true division of ints": (lambda a, b: a / b, lambda: (torch.arange(1, 7), torch.full((6,), 4))),
    "floor division mode": (lambda a, b: torch.div(a, b, rounding_mode="floor"),
                            lambda: (torch.arange(-6, 6), torch.full((12,), 4))),
    "comparison with a scalar": (lambda a: a >= 0.5, lambda: (torch.rand(4, 3, generator=_g()),)),
    "comparison of mixed dtypes": (lambda a, b: a < b, lambda: (torch.arange(6), torch.rand(6, generator=_g()))),
    "in-place add of a broadcast operand": (lambda a, b: a.add_(b, alpha=2), lambda: (torch.randn(3, 4), torch.randn(4))),
    "pow by a scalar": (lambda a: a.pow(3), lambda: (torch.randn(2, 5, generator=_g()),)),
    "gelu of a transposed tensor": (lambda a: F.gelu(a), lambda: (torch.randn(5, 7, generator=_g()).t(),)),
    "silu": (lambda a: F.silu(a), lambda: (torch.randn(3, 8, generator=_g()),)),
    "where": (lambda c, a, b: torch.where(c, a, b),
              lambda: (torch.rand(4, 1, generator=_g()) > 0.5, torch.randn(4, 3), torch.randn(3))),
    "sum over dims, keepdim": (lambda a: a.sum(dim=(0, 2), keepdim=True), lambda: (torch.randn(3, 4, 5),)),
    "sum of ints to a float dtype": (lambda a: a.sum(dim=1, dtype=torch.float64), lambda: (torch.arange(12).reshape(3, 4),)),
    "mean of a permuted tensor": (lambda a: a.mean(dim=1), lambda: (_permuted(2, 3, 4, 5),)),
    "amax": (lambda a: a.amax(dim=-1), lambda: (torch.randn(4, 6, generator=_g()),)),
    "argmax": (lambda a: a.argmax(dim=0), lambda: (torch.randn(4, 6, generator=_g()),)),
    "mm of a transposed operand": (lambda a, b: a @ b, lambda: (torch.randn(6, 4).t(), torch.randn(6, 3))),
    "addmm": (lambda c, a, b: torch.addmm(c, a, b), lambda: (torch.randn(3), torch.randn(5, 4), torch.randn(4, 3))),
    "bmm": (lambda a, b: torch.bmm(a, b), lambda: (torch.randn(2, 3, 4), torch.randn(2, 4, 5))),
    "log_softmax": (lambda a: F.log_softmax(a, dim=1), lambda: (torch.randn(4, 7, generator=_g()),)),
    "softmax of a transposed tensor": (lambda a: F.softmax(a, dim=0), lambda: (torch.randn(4, 7, generator=_g()).t(),)),
    "cat of mixed dtypes": (lambda a, b: torch.cat([a, b], dim=1), lambda: (torch.randn(2, 3), torch.arange(4).reshape(2, 2))),
    "gather": (lambda a, i: torch.gather(a, 1, i), lambda: (torch.randn(3, 5), torch.tensor([[0, 4], [1, 1], [3, 2]]))),
    "index with a tensor": (lambda a, i: a[i], lambda: (torch.randn(6, 4), torch.tensor([5, 0, 2]))),
    "max_pool2d with indices": (lambda a: F.max_pool2d(a, 2, return_indices=True),
                                lambda: (torch.randn(2, 3, 6, 6, generator=_g()),)),
    "nll_loss": (lambda a, t: F.nll_loss(F.log_softmax(a, 1), t),
                 lambda: (torch.randn(5, 4, generator=_g()), torch.tensor([0, 3, 1, 2, 3]))),
    "mse_loss, no reduction": (lambda a, b: F.mse_loss(a, b, reduction="none"), lambda: (torch.randn(3, 4), torch.randn(3, 4))),
    "clamp_min": (lambda a: a.clamp_min(0.1), lambda: (torch.randn(3, 4, generator=_g()),)),
    "lerp_ in place": (lambda a, b: a.lerp_(b, 0.3), lambda: (torch.randn(4, 3), torch.randn(4, 3))),
    "addcmul_ in place": (lambda a, b, c: a.addcmul_(b, c, value=0.5), lambda: (torch.randn(4), torch.randn(4), torch.randn(4))),
    "fill_": (lambda a: a.fill_(3), lambda: (torch.empty(2, 3),)),
    "zero_ of a transposed tensor": (lambda a: a.t().zero_(), lambda: (torch.randn(3, 2),)),
    # where, relu, mse_loss_backward, layer norm, batch norm and their backwards: Meta kernels
    # of openreg's own (ATen's are Python).
    "relu of a permuted tensor": (lambda a: torch.relu(a), lambda: (_permuted(2, 3, 4, 5),)),
    "relu_ in place, transposed": (lambda a: a.t().relu_(), lambda: (torch.randn(4, 3, generator=_g()),)),
    "relu of ints": (lambda a: torch.relu(a), lambda: (torch.arange(-4, 4).reshape(2, 4),)),
    "layer_norm of a transposed input": (lambda x, w, b: torch.ops.aten.native_layer_norm(x.transpose(0, 1), [6], w, b, 1e-5),
                                         lambda: (torch.randn(3, 4, 6, generator=_g()), torch.randn(6), torch.randn(6))),
    "layer_norm over two dims, no weight or bias": (lambda x: torch.ops.aten.native_layer_norm(x, [4, 5], None, None, 1e-5),
                                                    lambda: (torch.randn(2, 3, 4, 5, generator=_g()),)),
    "layer_norm, bfloat16 input, float weight": (lambda x, w, b: torch.ops.aten.native_layer_norm(x, [8], w, b, 1e-5),
                                                 lambda: (torch.randn(4, 8, generator=_g()).bfloat16(), torch.randn(8), torch.randn(8))),
    "layer_norm_backward, every gradient": (lambda g, x, w, b: _layer_norm_backward(g, x, w, b, [True, True, True]),
                                            lambda: (torch.randn(3, 5, 6), torch.randn(3, 5, 6, generator=_g()), torch.randn(6), torch.randn(6))),
    "layer_norm_backward, the input's gradient only": (lambda g, x, w: _layer_norm_backward(g, x, w, None, [True, False, False]),
                                                       lambda: (torch.randn(4, 6).t(), torch.randn(6, 4, generator=_g()), torch.randn(4))),
    "where, permuted operands of mixed dtypes": (lambda c, a, b: torch.where(c, a, b),
                                                 lambda: (_permuted(2, 3, 4, 5) > 0, _permuted(2, 3, 4, 5),
                                                          torch.arange(5, dtype=torch.int32))),
    "where with a scalar": (lambda c, a: torch.where(c, a, -1.5),
                            lambda: (torch.rand(3, 4, generator=_g()) > 0.5, torch.randn(4, 3).t())),
    "mse_loss_backward, transposed input": (
        lambda g, x, t: torch.ops.aten.mse_loss_backward(g, x.t(), t, 1),
        lambda: (torch.tensor(1.0), torch.randn(5, 3, generator=_g()), torch.randn(3, 5))),
    "mse_loss_backward, no reduction, broadcast target": (
        lambda g, x, t: torch.ops.aten.mse_loss_backward(g, x, t, 0),
        lambda: (torch.randn(4, 6), torch.randn(4, 6, generator=_g()), torch.randn(6))),
    "batch_norm training, channels-last input": (
        lambda x, w, b, rm, rv: torch.ops.aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5),
        lambda: (_permuted(2, 3, 4, 5), torch.randn(3), torch.randn(3), torch.zeros(3), torch.ones(3))),
    "batch_norm evaluation, 3-d input": (  # the output; the statistics: test_saved_statistics_...
        lambda x, w, b, rm, rv: torch.ops.aten.native_batch_norm(x, w, b, rm, rv, False, 0.1, 1e-5)[0],
        lambda: (torch.randn(4, 3, 7, generator=_g()), torch.randn(3), torch.randn(3), torch.randn(3), torch.rand(3) + 0.5)),
    "batch_norm training, no parameters or running statistics": (
        lambda x: torch.ops.aten.native_batch_norm(x, None, None, None, None, True, 0.1, 1e-5),
        lambda: (torch.randn(5, 4, generator=_g()),)),
    "batch_norm, bfloat16 input, float parameters": (
        lambda x, w, b, rm, rv: torch.ops.aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5),
        lambda: (torch.randn(4, 3, 5, 5, generator=_g()).bfloat16(), torch.randn(3), torch.randn(3), torch.zeros(3),
                 torch.ones(3))),
    "batch_norm_backward, channels-last, every gradient": (
        lambda g, x, w: _batch_norm_backward(g, x, w, True, [True, True, True]),
        lambda: (_permuted(2, 3, 4, 5), _permuted(2, 3, 4, 5), torch.randn(3))),
    "batch_norm_backward, transposed gradient, the input's only": (
        lambda g, x, w: _batch_norm_backward(g.transpose(2, 3), x, w, True, [True, False, False]),
        lambda: (torch.randn(2, 3, 5, 4), torch.randn(2, 3, 4, 5, generator=_g()), torch.randn(3))),
    "batch_norm_backward, evaluation mode": (
        lambda g, x, w: _batch_norm_backward(g, x, w, False, [True, True, False]),
        lambda: (torch.randn(6, 3), torch.randn(6, 3, generator=_g()), torch.randn(3))),
}


def _batch_norm_backward(grad, x, w, train, mask):
    rm, rv = torch.zeros(3, device=x.device), torch.ones(3, device=x.device)
    _, mean, invstd = torch.ops.aten.native_batch_norm(x, w, None, rm, rv, train, 0.1, 1e-5)
    return torch.ops.aten.native_batch_norm_backward(grad, x, w, rm, rv, mean, invstd, train, 1e-5, mask)


def _layer_norm_backward(grad, x, w, b, mask):
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [x.shape[-1]], w, b, 1e-5)
    return torch.ops.aten.native_layer_norm_backward(grad, x, [x.shape[-1]], mean, rstd, w, b, mask)


def _flat(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


@pytest.mark.parametrize("label", list(CASES))
def test_outputs_have_cpu_sizes_strides_and_dtypes(openreg, assert_close_cpu, label):
    fn, make = CASES[label]
    torch.manual_seed(0)
    args = make()
    want = _flat(fn(*[a.clone() for a in args]))
    got = _flat(fn(*[a.to("openreg") for a in args]))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if w is None:  # a gradient not asked for
            assert g is None, label
            continue
        assert g.device.type == "openreg"
        assert (g.shape, g.stride(), g.dtype) == (w.shape, w.stride(), w.dtype), label
        assert_close_cpu(g, w)


BAD_CALLS = {
    "add of shapes that do not broadcast": (lambda a, b: a + b, lambda: (torch.randn(3, 4), torch.randn(5, 4))),
    "gelu's approximate": (lambda a: F.gelu(a, approximate="xyz"), lambda: (torch.randn(3),)),
    "gelu_backward's approximate": (lambda g, a: torch.ops.aten.gelu_backward(g, a, approximate="fast"),
                                    lambda: (torch.randn(3), torch.randn(3))),
    "where's condition": (lambda c, a: torch.where(c, a, a), lambda: (torch.randn(3), torch.randn(3))),
    "where of shapes that do not broadcast": (lambda c, a, b: torch.where(c, a, b),
                                              lambda: (torch.ones(3, dtype=torch.bool), torch.randn(3), torch.randn(4))),
    "relu of booleans": (lambda a: torch.relu(a), lambda: (torch.tensor([True, False]),)),
    "layer_norm's normalized shape": (lambda a: F.layer_norm(a, (5,)), lambda: (torch.randn(3, 4),)),
    "layer_norm's weight shape": (lambda a, w: F.layer_norm(a, (4,), w), lambda: (torch.randn(3, 4), torch.randn(3))),
}


@pytest.mark.parametrize("label", list(BAD_CALLS))
def test_bad_arguments_raise_cpus_error_at_the_call(openreg, label):
    fn, make = BAD_CALLS[label]
    args = make()
    with pytest.raises(RuntimeError) as cpu:
        fn(*args)
    with pytest.raises(RuntimeError) as dev:
        fn(*[a.to("openreg") for a in args])  # raised here, not at a later synchronisation
    assert str(dev.value) == str(cpu.value)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.randn(2, 3, device="openreg") @ torch.randn(4, 2, device="openreg")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_saved_statistics_follow_torchs_meta_kernels(openreg, dtype):
    # Where CPU's kernels differ from torch's Meta kernels (which torch.compile traces
    # with, and CUDA follows): the statistics of a half or bfloat16 input in float,
    # batch norm's in evaluation mode per channel (CPU: empty). The device follows Meta.
    def geometry(outs):
        return [(tuple(t.shape), t.stride(), t.dtype) for t in outs[1:]]

    def both(fn, *args):
        got = fn(*[a.to("openreg") for a in args])
        want = fn(*[a.to("meta") for a in args])
        assert geometry(got) == geometry(want)

    x, p = torch.randn(4, 3, 5, dtype=dtype), torch.randn(3, dtype=dtype)
    for train in (True, False):
        both(lambda x, w, rm, rv: torch.ops.aten.native_batch_norm(x, w, w, rm, rv, train, 0.1, 1e-5),
             x, p, torch.zeros(3, dtype=dtype), torch.ones(3, dtype=dtype))
    y, q = torch.randn(2, 6, 8, dtype=dtype), torch.randn(8, dtype=dtype)
    both(lambda y, w: torch.ops.aten.native_layer_norm(y, [8], w, w, 1e-5), y, q)


def _geometry(outs):
    return [(tuple(t.shape), t.stride(), t.dtype) if isinstance(t, torch.Tensor) else t for t in outs]


_ATTENTION_INPUTS = {
    # query, key, value (as made on CPU), mask
    "contiguous": lambda: (torch.randn(2, 4, 5, 8), torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 8), None),
    # the layout a model's q/k/v projections give: [batch, length, heads, dim] storage
    "heads transposed": lambda: (torch.randn(2, 5, 4, 8).transpose(1, 2), torch.randn(2, 7, 4, 8).transpose(1, 2),
                                 torch.randn(2, 7, 4, 8).transpose(1, 2), None),
    "value dim differs": lambda: (torch.randn(2, 5, 4, 8).transpose(1, 2), torch.randn(2, 4, 7, 8),
                                  torch.randn(2, 4, 7, 6), None),
    "grouped heads": lambda: (torch.randn(2, 4, 5, 8), torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 8), None),
    "float mask": lambda: (torch.randn(2, 4, 5, 8), torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 8),
                           torch.randn(2, 1, 5, 7)),
    "3-d": lambda: (torch.randn(4, 5, 8), torch.randn(4, 7, 8), torch.randn(4, 7, 8), None),
}


@pytest.mark.parametrize("name", sorted(_ATTENTION_INPUTS))
def test_fused_attention_outputs_follow_torchs_meta_kernels(openreg, name):
    # The overrideable fused attention ops have no CPU kernel: their outputs are what
    # torch's Meta kernels say (torch.compile traces with them), forward and backward.
    q, k, v, mask = _ATTENTION_INPUTS[name]()
    gqa = k.size(-3) != q.size(-3)

    def forward(device):
        return torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
            q.to(device), k.to(device), v.to(device), None if mask is None else mask.to(device), 0.0, False, False,
            scale=None)

    got, want = forward("openreg"), forward("meta")
    assert _geometry(got) == _geometry(want)
    assert [t.device.type for t in got if isinstance(t, torch.Tensor)] == ["openreg"] * 4
    if gqa or q.dim() == 3:
        return  # the engines' backward takes 4-d query, key and value of equal heads

    def backward(device, fwd):
        out, lse = fwd[0], fwd[1]
        return torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward(
            torch.ones_like(out), q.to(device), k.to(device), v.to(device),
            None if mask is None else mask.to(device), [True, True, True, mask is not None], out, lse, None, None,
            fwd[4], fwd[5], 0.0, False, fwd[6], fwd[7], scale=None)

    assert _geometry(backward("openreg", got)) == _geometry(backward("meta", want))


def test_batch_norm_with_parameters_of_the_wrong_size_raises(openreg):
    # CPU's kernel reads past a short parameter when called directly; the device
    # checks it as torch.nn.functional.batch_norm does.
    x = torch.randn(4, 3, 5, device="openreg")
    with pytest.raises(RuntimeError, match="weight should contain 3 elements not 4"):
        torch.ops.aten.native_batch_norm(x, torch.ones(4, device="openreg"), None, None, None, True, 0.1, 1e-5)
    with pytest.raises(RuntimeError, match="running_mean and running_var must be defined in evaluation mode"):
        torch.ops.aten.native_batch_norm(x, None, None, None, None, False, 0.1, 1e-5)


def test_a_models_first_ops_do_not_import_torch_dynamo(run_python, describe):
    # Python Meta kernels (torch._refs) import torch._dynamo on first use: one to
    # two seconds before a script's first device op returns. (torch.optim's
    # constructors import it too, on any device: not part of this check.)
    proc = run_python(
        "import sys, torch\n"
        "m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), "
        "torch.nn.LayerNorm(16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to('openreg')\n"
        "x = torch.randn(5, 8, device='openreg')\n"
        "loss = torch.nn.functional.cross_entropy(m(x) * 2.0 + 1, torch.tensor([0, 1, 2, 3, 0], device='openreg'))\n"
        "loss.backward()\n"
        "print(loss.item(), 'torch._dynamo' in sys.modules)\n"
    )
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout.split()[-1] == "False", describe(proc)
