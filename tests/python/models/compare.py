"""Shared machinery of the model suite: one training step of the same model, from
the same weights and inputs, on CPU and on the device, and the comparisons.

A model family is described by a :class:`Case` (how to build the model, its
inputs and its loss). :func:`train_step` runs forward, backward and one AdamW
step on a copy of the model and returns everything the checks need, on CPU.

Tolerances. Each tensor is compared as a whole: the largest difference from the
CPU float32 run must stay below ``rtol * max|reference|`` plus the rounding noise
float32 itself has on that tensor, measured as the distance between the CPU
float32 run and a CPU float64 run of the same step. The noise term matters for
tensors that are zero up to rounding (the gradient of an attention key bias, for
instance, is exactly zero in exact arithmetic): there the device may differ from
CPU by as much as CPU differs from the exact result. bf16 autocast runs are
compared with CPU's own bf16 autocast run, normwise, with a bound set by how far
CPU's bf16 run is from its float32 run.
"""

import contextlib
import copy
from dataclasses import dataclass
from typing import Callable, Dict, Optional

import torch
import torch.nn as nn

DEVICE = "openreg"

# AdamW's first step moves a weight by lr * g / (|g| + eps) ~ lr * sign(g).
LR = 1e-2
WEIGHT_DECAY = 0.01
ADAM_EPS = 1e-8

# float32 runs: allowed difference relative to the largest entry of the tensor.
RTOL_FP32 = 1e-4
# ... plus this many times the tensor's own float32 rounding noise (CPU fp32 vs fp64).
NOISE_FACTOR = 8.0
# generate: the logits of each step, relative to the largest (no float64 reference there).
GENERATE_RTOL = 1e-4
# bf16 autocast runs: normwise relative difference from CPU's bf16 run, at least this
# (bf16 keeps 8 significant bits: one rounding is 2**-8 = 0.4% relative) ...
RTOL_BF16 = 3e-2
# ... or this many times CPU's own bf16 error (normwise, against its float32 run).
BF16_NOISE_FACTOR = 3.0


@dataclass
class Case:
    """One model family.

    build():          the model on CPU, float32, random weights (called under a fixed seed)
    inputs(gen):      a dict of CPU tensors (and plain values) drawn from ``gen``
    loss(model, x):   (scalar loss, output tensor) for inputs ``x`` already on the model's device
    """

    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[torch.Generator], dict]
    loss: Callable[[nn.Module, dict], tuple]
    seed: int = 0


@dataclass
class StepResult:
    loss: torch.Tensor
    output: torch.Tensor
    grads: Dict[str, Optional[torch.Tensor]]
    params_before: Dict[str, torch.Tensor]
    params_after: Dict[str, torch.Tensor]
    buffers: Dict[str, torch.Tensor]
    tied: list


def import_transformers():
    """transformers, which scripts/setup.sh installs; without it the model families
    built from it skip, except in CI (CI=true), where a skip would hide a missing
    install step."""
    import os

    import pytest

    if os.environ.get("CI", "").lower() == "true":
        import transformers

        return transformers
    return pytest.importorskip("transformers")


def build_model(case):
    """The case's CPU float32 model, from the case's seed (same weights every call)."""
    torch.manual_seed(case.seed)
    return case.build()


def make_inputs(case):
    return case.inputs(torch.Generator().manual_seed(case.seed + 1))


def tied_groups(model):
    """Names of the parameters that are one Parameter object, grouped, sorted:
    [['lm_head.weight', 'transformer.wte.weight'], ...]."""
    by_id = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(p), []).append(name)
    return sorted(sorted(names) for names in by_id.values() if len(names) > 1)


def _to(value, device, dtype=None):
    if isinstance(value, torch.Tensor):
        if dtype is not None and value.is_floating_point():
            return value.to(device=device, dtype=dtype)
        return value.to(device)
    if isinstance(value, dict):
        return {k: _to(v, device, dtype) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device, dtype) for v in value)
    return value


def _cpu(t):
    return t.detach().to("cpu").clone()


def train_step(case, cpu_model, inputs, device, dtype=torch.float32, autocast=None, window=contextlib.nullcontext):
    """Forward, backward and one AdamW step of a copy of ``cpu_model`` on ``device``.

    ``dtype``: the copy's parameters and floating inputs (float32, or float64 for the
    rounding-noise reference). ``autocast``: None or a dtype for torch.autocast.
    ``window``: a context manager factory entered around the model's own work
    (forward and backward, then the step), not the copies made for the checks.
    Returns a StepResult whose tensors are all on CPU."""
    model = copy.deepcopy(cpu_model)  # deepcopy keeps tied parameters tied
    if dtype != torch.float32:
        model = model.to(dtype)
    model = model.to(device)
    model.train()
    tied = tied_groups(model)
    x = _to(inputs, device, dtype)
    # The device gets PyTorch's default AdamW (foreach on accelerators), CPU the
    # per-parameter loop: two implementations of the same step.
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, eps=ADAM_EPS)
    params_before = {n: _cpu(p) for n, p in model.named_parameters()}
    ctx = contextlib.nullcontext()
    if autocast is not None:
        ctx = torch.autocast(device_type=torch.device(device).type, dtype=autocast)
    with window():
        with ctx:
            loss, output = case.loss(model, x)
        loss.backward()
    grads = {n: None if p.grad is None else _cpu(p.grad) for n, p in model.named_parameters()}
    buffers = {n: _cpu(b) for n, b in model.named_buffers() if b.is_floating_point()}
    with window():
        opt.step()
    params_after = {n: _cpu(p) for n, p in model.named_parameters()}
    return StepResult(_cpu(loss), _cpu(output), grads, params_before, params_after, buffers, tied)


# ------------------------------------------------------------------ comparisons


def _max_abs(t):
    return t.double().abs().max().item() if t.numel() else 0.0


def _noise(ref, ref64):
    return _max_abs(ref.double() - ref64.double())


def tolerance_fp32(ref, ref64):
    """Largest allowed |device - ref| for one float32 tensor (see the module doc)."""
    return RTOL_FP32 * _max_abs(ref) + NOISE_FACTOR * _noise(ref, ref64)


def check_tensor_fp32(what, dev, ref, ref64):
    """Compares one tensor of a float32 run; returns (error, tolerance)."""
    assert dev.shape == ref.shape, f"{what}: shape {tuple(dev.shape)} != CPU {tuple(ref.shape)}"
    assert dev.dtype == ref.dtype, f"{what}: dtype {dev.dtype} != CPU {ref.dtype}"
    assert torch.isfinite(dev).all(), f"{what}: non-finite values on the device"
    err = _max_abs(dev.double() - ref.double())
    tol = tolerance_fp32(ref, ref64)
    assert err <= tol, (f"{what}: max |device - CPU| = {err:.3g} > tolerance {tol:.3g} "
                        f"(max |CPU| = {_max_abs(ref):.3g}, CPU fp32 vs fp64 = {_noise(ref, ref64):.3g})")
    return err, tol


def compare_fp32(dev, ref, ref64):
    """Checks a device float32 step against the CPU float32 step (``ref``) with the
    CPU float64 step (``ref64``) as the measure of rounding noise.

    Returns a summary of the gradients: 'max_rel_grad_diff', the largest
    max|device - CPU| / max|CPU| over the gradients well above their rounding noise;
    'noise_level', the names of the others (zero up to rounding, such as attention
    key biases); 'worst', the largest error / tolerance and its gradient."""
    assert dev.tied == ref.tied, f"tied parameters: device {dev.tied} != CPU {ref.tied}"
    check_tensor_fp32("loss", dev.loss, ref.loss, ref64.loss)
    check_tensor_fp32("output", dev.output, ref.output, ref64.output)
    assert sorted(dev.buffers) == sorted(ref.buffers)
    for name in ref.buffers:
        check_tensor_fp32(f"buffer {name}", dev.buffers[name], ref.buffers[name], ref64.buffers[name])
    assert list(dev.grads) == list(ref.grads), "parameter names differ"
    summary = {"max_rel_grad_diff": 0.0, "noise_level": [], "worst": (0.0, None)}
    for name, g_ref in ref.grads.items():
        g_dev = dev.grads[name]
        assert (g_dev is None) == (g_ref is None), f"{name}: gradient is {g_dev} on the device, CPU has {g_ref}"
        if g_ref is None:
            continue
        err, tol = check_tensor_fp32(f"gradient of {name}", g_dev, g_ref, ref64.grads[name])
        if tol > 0 and err / tol >= summary["worst"][0]:
            summary["worst"] = (err / tol, name)
        scale = _max_abs(g_ref)
        if RTOL_FP32 * scale >= NOISE_FACTOR * _noise(g_ref, ref64.grads[name]) and scale > 0:
            summary["max_rel_grad_diff"] = max(summary["max_rel_grad_diff"], err / scale)
        else:
            summary["noise_level"].append(name)
        check_adamw_step(name, dev, ref, tol)
    return summary


def check_adamw_step(name, dev, ref, grad_tol):
    """Parameters after the AdamW step, from the same weights.

    The first step moves w to w * (1 - lr * wd) - lr * g / (|g| + eps). Where the CPU
    gradient is zero up to the gradient tolerance, its sign is rounding and the
    weight may move either way: those entries were judged by the gradient check;
    here they only have to make a legal step (at most lr * (1 + wd * |w|)). Elsewhere
    the device gradient has the same sign and both are far from eps, so the two
    updates agree to about lr * eps / |g| (below lr * 1e-3 with the threshold below)."""
    before = ref.params_before[name].double()
    assert torch.equal(dev.params_before[name], ref.params_before[name]), f"{name}: weights differ before the step"
    p_dev, p_ref = dev.params_after[name].double(), ref.params_after[name].double()
    g_ref = ref.grads[name].double()
    decided = g_ref.abs() > max(2 * grad_tol, 1e3 * ADAM_EPS)
    rounding = 4 * torch.finfo(torch.float32).eps * (before.abs().max().item() + LR)
    diff = (p_dev - p_ref).abs()
    if decided.any():
        bad = diff[decided].max().item()
        assert bad <= LR * 1e-3 + rounding, (
            f"{name}: after the AdamW step the weights differ by {bad:.3g} where the gradient is not zero "
            f"(bound {LR * 1e-3 + rounding:.3g})")
    step = (p_dev - before).abs()
    legal = LR * (1 + WEIGHT_DECAY * before.abs()) + rounding
    assert (step <= legal).all(), f"{name}: the device's AdamW step moved a weight by {step.max().item():.3g} > lr"
    # The CPU step really moved the weights (the comparison above means something).
    assert (p_ref - before).abs().max().item() > LR / 2 or not decided.any(), f"{name}: CPU step did not move"


def _normwise(a, b):
    """||a - b|| / ||b|| (float64), 0 when both are zero."""
    a, b = a.double(), b.double()
    denom = b.norm().item()
    diff = (a - b).norm().item()
    return diff / denom if denom > 0 else diff


def check_tensor_bf16(what, dev, ref, ref32):
    """A tensor of a bf16 autocast run: device vs CPU bf16 autocast run (``ref``), with
    CPU's distance from its float32 run (``ref32``) as the measure of bf16 noise.
    Returns (normwise error, CPU's bf16 noise)."""
    assert dev.shape == ref.shape, f"{what}: shape {tuple(dev.shape)} != CPU {tuple(ref.shape)}"
    assert torch.isfinite(dev.float()).all(), f"{what}: non-finite values on the device"
    noise = _normwise(ref.double(), ref32.double())
    err = _normwise(dev.double(), ref.double())
    tol = max(RTOL_BF16, BF16_NOISE_FACTOR * noise)
    assert err <= tol, (f"{what}: ||device - CPU|| / ||CPU|| = {err:.3g} > {tol:.3g} under bf16 autocast "
                        f"(CPU bf16 vs fp32: {noise:.3g})")
    return err, noise


def compare_bf16(dev, ref, ref32):
    """A device bf16 autocast step against CPU's (loss, output, gradients). Returns
    'max_normwise_grad_diff' over the gradients that bf16 computes to better than
    RTOL_BF16 on CPU, and 'noise_level', the others."""
    # The output dtype may differ: the device follows PyTorch's autocast op lists for
    # accelerators (CUDA's), CPU its own (an LSTM, for one, runs in bf16 on CUDA only).
    check_tensor_bf16("loss", dev.loss.reshape(1), ref.loss.reshape(1), ref32.loss.reshape(1))
    check_tensor_bf16("output", dev.output, ref.output, ref32.output)
    summary = {"max_normwise_grad_diff": 0.0, "noise_level": []}
    for name, g_ref in ref.grads.items():
        g_dev = dev.grads[name]
        assert (g_dev is None) == (g_ref is None), f"{name}: gradient is {g_dev} on the device, CPU has {g_ref}"
        if g_ref is None:
            continue
        assert g_dev.dtype == g_ref.dtype, f"gradient of {name}: dtype {g_dev.dtype} != CPU {g_ref.dtype}"
        err, noise = check_tensor_bf16(f"gradient of {name}", g_dev, g_ref, ref32.grads[name])
        if noise <= RTOL_BF16:
            summary["max_normwise_grad_diff"] = max(summary["max_normwise_grad_diff"], err)
        else:
            summary["noise_level"].append(name)
    return summary


# ----------------------------------------------------------- the standard checks


def check_train_step(case, device=DEVICE, window=contextlib.nullcontext):
    """The float32 step on the device matches CPU; returns compare_fp32's summary.
    ``window``: see train_step (the device step only)."""
    model, inputs = build_model(case), make_inputs(case)
    cpu = train_step(case, model, inputs, "cpu")
    cpu64 = train_step(case, model, inputs, "cpu", dtype=torch.float64)
    dev = train_step(case, model, inputs, device, window=window)
    return compare_fp32(dev, cpu, cpu64)


def check_bf16_autocast(case, device=DEVICE):
    model, inputs = build_model(case), make_inputs(case)
    cpu32 = train_step(case, model, inputs, "cpu")
    cpu = train_step(case, model, inputs, "cpu", autocast=torch.bfloat16)
    dev = train_step(case, model, inputs, device, autocast=torch.bfloat16)
    return compare_bf16(dev, cpu, cpu32)


def check_greedy_generate(model, inputs, device=DEVICE, **kwargs):
    """Greedy generate on CPU and on the device gives the same tokens.

    Each step's logits must match CPU's. A token may only differ where CPU's two
    best logits are that close (random weights can produce near-ties); that
    sequence then diverges, so the comparison of its row stops there."""
    model = copy.deepcopy(model).eval()
    kw = dict(do_sample=False, num_beams=1, output_scores=True, return_dict_in_generate=True, **kwargs)
    with torch.no_grad():
        ref = model.generate(**inputs, **kw)
        dev_model = copy.deepcopy(model).to(device)
        assert tied_groups(dev_model) == tied_groups(model), "generate: tied parameters untied by .to()"
        out = dev_model.generate(**_to(inputs, device), **kw)
    seq, seq_ref = out.sequences.cpu(), ref.sequences
    assert seq.shape == seq_ref.shape, f"generated shape {tuple(seq.shape)} != CPU {tuple(seq_ref.shape)}"
    new = len(ref.scores)
    start = seq_ref.shape[1] - new
    assert torch.equal(seq[:, :start], seq_ref[:, :start]), "the prompt part differs"
    alive = torch.ones(seq.shape[0], dtype=torch.bool)  # rows that still follow CPU's sequence
    for step in range(new):
        scores, scores_dev = ref.scores[step].double(), out.scores[step].cpu().double()
        # The logits of the rows that got the same prefix (computed from the KV cache).
        tol = GENERATE_RTOL * scores.abs().max().item()
        err = (scores_dev[alive] - scores[alive]).abs().max().item()
        assert err <= tol, f"generate: step {step}: logits differ from CPU's by {err:.3g} > {tol:.3g}"
        differs = alive & (seq[:, start + step] != seq_ref[:, start + step])
        if differs.any():
            top2 = scores.topk(2, dim=-1).values
            gap = (top2[:, 0] - top2[:, 1])[differs]
            assert (gap <= 2 * tol).all(), (
                f"generate: token {step} differs from CPU ({seq[:, start + step].tolist()} vs "
                f"{seq_ref[:, start + step].tolist()}) although CPU's best logit leads by {gap.max().item():.3g}")
            alive &= ~differs
    assert alive.any(), "every generated sequence left CPU's at a near-tie: the check compared nothing"
    return seq_ref
