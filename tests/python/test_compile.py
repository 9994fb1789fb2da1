"""torch.compile on openreg: the default backend (Inductor) generates C++ kernels that run
on device memory, with the engines serving the ops it leaves as fallbacks.

Every result is checked against the same model or function run eagerly on torch CPU.
Compiles are slow (seconds each on two cores), so each model is compiled once.
"""

import copy
import os
import sys

import pytest
import torch
import torch.nn as nn
from queued_work import launch_blocking, make_input, slow

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "models"))  # the model suite's tiny configs
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))

DEVICE = "openreg"
STEPS = 3
LR = 1e-2
NOISE_GRAD = 1e-6  # a gradient below this is float32 rounding noise here


@pytest.fixture(autouse=True)
def _fresh_dynamo(openreg):
    """Each test starts with no compiled frames, so recompilation counts are its own."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _to(x, device):
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in x.items()}


def _train(model, inputs, loss_fn, device, compiled):
    """STEPS AdamW steps of a copy of ``model`` on ``device``: the losses, the first
    step's gradients and the final parameters, on CPU."""
    model = copy.deepcopy(model).to(device)
    run = torch.compile(model) if compiled else model  # default backend, no options
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    x = _to(inputs, device)
    losses, first_grads = [], None
    for _ in range(STEPS):
        opt.zero_grad()
        loss = loss_fn(run, x)
        loss.backward()
        if first_grads is None:
            first_grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}
        opt.step()
        losses.append(loss.detach().cpu())
    return torch.stack(losses), first_grads, {n: p.detach().cpu() for n, p in model.named_parameters()}


def _check_training_matches_cpu(model, inputs, loss_fn):
    losses, grads, params = _train(model, inputs, loss_fn, DEVICE, compiled=True)
    ref_losses, ref_grads, ref_params = _train(model, inputs, loss_fn, "cpu", compiled=False)
    # Inductor's fused kernels sum in another order than the eager kernels: float32
    # rounding, relative to each tensor's largest entry.
    torch.testing.assert_close(losses, ref_losses, rtol=1e-4, atol=1e-5)
    assert grads.keys() == ref_grads.keys()
    for name, ref in ref_grads.items():
        err = (grads[name] - ref).abs().max().item()
        assert err <= 1e-3 * ref.abs().max().item() + 1e-6, f"gradient of {name}: max |compiled - CPU| = {err:.3g}"
    for name, ref in ref_params.items():
        if ref_grads[name].abs().max().item() < NOISE_GRAD:
            continue  # zero up to rounding (a conv bias before batch norm): Adam's
            # g / (|g| + eps) turns that noise into full steps of either sign
        # An AdamW step moves a weight by about LR; the steps must agree far closer.
        err = (params[name] - ref).abs().max().item()
        assert err <= 0.02 * LR, f"{name} after {STEPS} steps: max |compiled - CPU| = {err:.3g}"


# ------------------------------------------------------- the model suite's models


def test_gpt2_trains_compiled_as_on_cpu(openreg):
    import test_gpt2 as gpt2

    torch.manual_seed(0)
    model = gpt2.build()
    _check_training_matches_cpu(model, gpt2.inputs(torch.Generator().manual_seed(1)), lambda m, x: gpt2.loss(m, x)[0])


def test_bert_trains_compiled_as_on_cpu(openreg):
    import test_bert as bert

    torch.manual_seed(0)
    model = bert.build()
    _check_training_matches_cpu(model, bert.inputs(torch.Generator().manual_seed(1)), lambda m, x: bert.loss(m, x)[0])


def test_digits_cnn_trains_compiled_as_on_cpu(openreg):
    from train import make_model

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(8)
    x = {"x": torch.rand(16, 1, 8, 8, generator=g), "y": torch.randint(0, 10, (16,), generator=g)}
    _check_training_matches_cpu(make_model(), x, lambda m, x: nn.functional.cross_entropy(m(x["x"]), x["y"]))


def test_channels_last_cnn_trains_compiled_as_on_cpu(openreg):
    """The device's convolutions give channels-last results for channels-last inputs;
    FakeTensor must predict that layout (openreg/conv_layout.py), or the compiled graph's
    stride assertions fail."""
    import test_conv as conv

    torch.manual_seed(0)
    x = conv.channels_last_inputs(torch.Generator().manual_seed(1))
    _check_training_matches_cpu(conv.channels_last_net(), x, lambda m, x: conv.loss(m, x)[0])


# ------------------------------------------------------------ the generated code


def _scaled_gelu_sum(a, b):
    return (nn.functional.gelu(a * b) + 1).sum(dim=1)


def test_generated_kernels_run_on_device_memory(openreg):
    from torch._inductor.utils import run_and_get_code

    a, b = torch.randn(8, 32), torch.randn(8, 32)
    out, codes = run_and_get_code(torch.compile(_scaled_gelu_sum), a.to(DEVICE), b.to(DEVICE))
    code = "\n".join(codes)
    # One fused C++ kernel, called on buffers the wrapper allocates on the device,
    # after the wait for the queued device work.
    assert "device='openreg'" in code, code
    assert "cpp_fused_" in code, code
    call = code[code.index("def call("):]
    assert "wait_for_device_work(0)\n" in call and call.index("wait_for_device_work(0)") < call.index("cpp_fused_")
    assert out.device.type == DEVICE
    torch.testing.assert_close(out.cpu(), _scaled_gelu_sum(a, b))


def test_kernel_reads_what_queued_ops_wrote(openreg):
    # slow() queues milliseconds of matmuls; the compiled kernel, which runs on the
    # calling thread, must see their result, not the memory before it.
    if launch_blocking():
        pytest.skip("with OPENREG_LAUNCH_BLOCKING=1 nothing is queued")
    f = torch.compile(lambda x: (x * 3 + 1).relu())
    f(make_input(seed=1).to(DEVICE))  # compiled before, for the same shape: no compile below
    x = make_input()
    out = f(slow(x.to(DEVICE)))
    torch.testing.assert_close(out.cpu(), (slow(x) * 3 + 1).relu(), rtol=1e-4, atol=1e-5)


def test_queued_ops_after_a_kernel_see_its_result(openreg):
    # The compiled graph's kernel writes y; the eager ops enqueued after it read y.
    f = torch.compile(lambda x: x.sin() * 2)
    x = make_input()
    y = f(x.to(DEVICE))
    z = slow(y)
    torch.testing.assert_close(z.cpu(), slow(x.sin() * 2), rtol=1e-4, atol=1e-5)


def test_async_error_of_queued_work_is_raised_before_a_kernel(openreg):
    # An out-of-range index fails on the worker; the compiled kernel that would read
    # the result raises that error instead (as a synchronisation point does).
    f = torch.compile(lambda x: x * 2 + 1)
    f(torch.randn(3, 3, device=DEVICE))
    weight = torch.randn(5, 3, device=DEVICE)
    index = torch.tensor([0, 7, 2], device=DEVICE)
    with pytest.raises((IndexError, RuntimeError), match="index"):
        f(torch.index_select(weight, 0, index))
    torch.openreg.synchronize()  # reported once: the device works afterwards
    torch.testing.assert_close(f(torch.ones(3, 3, device=DEVICE)).cpu(), torch.full((3, 3), 3.0))


# --------------------------------------------- recompilation, graph breaks, autocast


def test_shape_change_recompiles_then_goes_dynamic(openreg):
    from torch._dynamo.testing import CompileCounterWithBackend

    counter = CompileCounterWithBackend("inductor")
    f = torch.compile(_scaled_gelu_sum, backend=counter)
    for rows in (8, 12, 16):
        a, b = torch.randn(rows, 32), torch.randn(rows, 32)
        torch.testing.assert_close(f(a.to(DEVICE), b.to(DEVICE)).cpu(), _scaled_gelu_sum(a, b))
    # 8 rows: a static graph; 12: recompiled with a symbolic row count; 16: reused.
    assert counter.frame_count == 2


def _with_a_break(x):
    y = torch.tanh(x) * 2
    torch._dynamo.graph_break()
    return (y @ y.T).softmax(-1)


def test_graph_break_splits_and_matches_cpu(openreg):
    from torch._dynamo.testing import CompileCounterWithBackend

    counter = CompileCounterWithBackend("inductor")
    x = torch.randn(6, 5)
    out = torch.compile(_with_a_break, backend=counter)(x.to(DEVICE))
    assert counter.frame_count == 2, "the break splits the function into two graphs"
    torch.testing.assert_close(out.cpu(), _with_a_break(x))


def _autocast_layer(device_type, x, w):
    with torch.autocast(device_type=device_type, dtype=torch.bfloat16):
        y = torch.relu(x @ w)  # mm in bfloat16 (autocast's lower-precision list)
        return y, (y.float() * 0.5).sum()


def test_autocast_inside_compiled_code(openreg):
    x, w = torch.randn(8, 16), torch.randn(16, 8)
    y, s = torch.compile(_autocast_layer)(DEVICE, x.to(DEVICE), w.to(DEVICE))
    ref_y, ref_s = _autocast_layer("cpu", x, w)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.cpu(), ref_y)
    torch.testing.assert_close(s.cpu(), ref_s)


def test_max_autotune_mode(openreg):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    x = torch.randn(8, 16)
    compiled = torch.compile(copy.deepcopy(model).to(DEVICE), mode="max-autotune-no-cudagraphs")
    torch.testing.assert_close(compiled(x.to(DEVICE)).detach().cpu(), model(x).detach())


def test_backend_named_after_the_device(openreg):
    assert "openreg" in torch._dynamo.list_backends()
    a, b = torch.randn(4, 32), torch.randn(4, 32)
    out = torch.compile(_scaled_gelu_sum, backend="openreg")(a.to(DEVICE), b.to(DEVICE))
    torch.testing.assert_close(out.cpu(), _scaled_gelu_sum(a, b))


def test_device_interface(openreg):
    from torch._dynamo.device_interface import get_interface_for_device

    iface = get_interface_for_device(DEVICE)
    assert iface.device_count() == torch.openreg.device_count()
    assert iface.current_device() == torch.openreg.current_device()
    assert isinstance(iface.current_stream(), torch.Stream) and iface.current_stream().device.type == DEVICE
    assert iface.get_device_properties().multi_processor_count == torch.get_num_threads()
    x = torch.randn(64, 64, device=DEVICE)
    start, end = iface.Event(enable_timing=True), iface.Event(enable_timing=True)
    start.record()
    x = x @ x
    end.record()
    iface.synchronize()
    assert start.elapsed_time(end) >= 0
