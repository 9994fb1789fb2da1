"""Fused attention on the device: F.scaled_dot_product_attention through the engines.

On openreg, ``_fused_sdp_choice`` picks SDPBackend.OVERRIDEABLE when the engine chain
serves ``aten::_scaled_dot_product_fused_attention_overrideable`` for the inputs
(core/src/aten/attention.cpp), so SDPA runs as that op and, in backward,
``_scaled_dot_product_fused_attention_overrideable_backward``, each one engine call
(onednn natively). Otherwise (dropout, a chain whose engines lack the op, such as
eigen's or aten_ref's: its kernel is the float64 reference of the conformance suites,
slower than the math path) it takes ATen's math path. Everything is compared with torch CPU; the suite runs once
per engine (pytest --engine / OPENREG_ENGINE).
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

FWD = "aten::_scaled_dot_product_fused_attention_overrideable"
BWD = "aten::_scaled_dot_product_fused_attention_overrideable_backward"


def _fused_chain(openreg, grad=True):
    """Whether this chain takes the fused op for float32: with autograd, only when an
    engine implements it (onednn); without, also when only the reference engine does
    (aten_ref runs torch CPU's flash kernel forward, its backward is the slow float64
    definition)."""
    chain = openreg.info()["chain"]
    return "onednn" in chain or (not grad and "aten_ref" in chain)


def _qkv(b=2, h=4, L=37, S=29, E=16, Ev=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, L, E, generator=g), torch.randn(b, h, S, E, generator=g),
            torch.randn(b, h, S, Ev, generator=g))


def _bool_mask(shape, seed=1):
    m = torch.rand(shape, generator=torch.Generator().manual_seed(seed)) > 0.4
    m[..., 0] = True  # no fully masked row
    return m


CASES = {
    "no mask": dict(),
    "causal": dict(is_causal=True),
    "causal, L > S": dict(is_causal=True),
    "bool mask [1, H, L, S]": dict(attn_mask=lambda L, S: _bool_mask((1, 4, L, S))),
    "bool padding mask [B, 1, 1, S]": dict(attn_mask=lambda L, S: _bool_mask((2, 1, 1, S))),
    "float mask [B, 1, L, S]": dict(attn_mask=lambda L, S: torch.randn(2, 1, L, S)),
    "float mask [L, S]": dict(attn_mask=lambda L, S: torch.randn(L, S)),
    "scale 0.3": dict(scale=0.3),
    "float mask and scale": dict(attn_mask=lambda L, S: torch.randn(2, 4, L, S), scale=0.7),
    # 4 query heads, 2 key/value heads (LLaMA's grouped-query attention)
    "grouped heads": dict(enable_gqa=True, kv_heads=2),
    "grouped heads, causal": dict(enable_gqa=True, kv_heads=2, is_causal=True),
    "grouped heads, one key/value head, bool mask": dict(enable_gqa=True, kv_heads=1,
                                                         attn_mask=lambda L, S: _bool_mask((2, 1, L, S))),
}


def _run(openreg, name):
    kw = dict(CASES[name])
    L, S = (37, 23) if name == "causal, L > S" else (37, 37) if kw.get("is_causal") else (37, 29)
    q, k, v = _qkv(L=L, S=S)
    if "kv_heads" in kw:
        heads = kw.pop("kv_heads")
        k, v = k[:, :heads].contiguous(), v[:, :heads].contiguous()
    if callable(kw.get("attn_mask")):
        kw["attn_mask"] = kw["attn_mask"](L, S)
    cpu = [t.clone().requires_grad_() for t in (q, k, v)]
    dev = [t.to("openreg").requires_grad_() for t in (q, k, v)]
    dev_kw = {key: (val.to("openreg") if isinstance(val, torch.Tensor) else val) for key, val in kw.items()}
    grad = torch.randn(2, 4, L, 12, generator=torch.Generator().manual_seed(2))
    openreg.reset_stats()
    out_cpu = F.scaled_dot_product_attention(*cpu, **kw)
    out_dev = F.scaled_dot_product_attention(*dev, **dev_kw)
    out_cpu.backward(grad)
    out_dev.backward(grad.to("openreg"))
    torch.openreg.synchronize()
    return out_cpu, out_dev, cpu, dev, openreg.stats()


@pytest.mark.parametrize("grad", [False, True])
def test_fused_sdp_choice_is_overrideable(openreg, grad):
    # one head size for query and value: what aten_ref's flash forward takes
    q, k, v = (t.to("openreg").requires_grad_(grad) for t in _qkv(Ev=16))
    want = (SDPBackend.OVERRIDEABLE if _fused_chain(openreg, grad) else SDPBackend.MATH).value
    assert torch._fused_sdp_choice(q, k, v) == want
    assert torch._fused_sdp_choice(q, k, v, is_causal=True) == want
    mask = torch.zeros(37, 29, device="openreg")
    assert torch._fused_sdp_choice(q, k, v, mask, scale=0.5) == want
    # grouped-query attention: the engines take key/value heads that divide the query's
    assert torch._fused_sdp_choice(q, k[:, :2], v[:, :2], enable_gqa=True) == want
    if grad:  # under no_grad autograd asks for no backward
        with torch.no_grad():
            assert torch._fused_sdp_choice(q, k, v) == (
                SDPBackend.OVERRIDEABLE if _fused_chain(openreg, grad=False) else SDPBackend.MATH).value


@pytest.mark.parametrize("why,call", [
    ("dropout", lambda q, k, v: torch._fused_sdp_choice(q, k, v, dropout_p=0.1)),
    ("3-d inputs", lambda q, k, v: torch._fused_sdp_choice(q[0], k[0], v[0])),
    ("grouped heads without enable_gqa", lambda q, k, v: torch._fused_sdp_choice(q, k[:, :2], v[:, :2])),
    ("key and value heads that differ", lambda q, k, v: torch._fused_sdp_choice(
        q, k[:, :2], v[:, :1], enable_gqa=True)),
    ("mask and is_causal", lambda q, k, v: torch._fused_sdp_choice(
        q, k, v, torch.zeros(37, 29, device="openreg"), is_causal=True)),
    ("integer mask dtype", lambda q, k, v: torch._fused_sdp_choice(
        q, k, v, torch.zeros(37, 29, device="openreg", dtype=torch.int32))),
])
def test_fused_sdp_choice_is_math_for_inputs_the_fused_op_does_not_take(openreg, why, call):
    q, k, v = (t.to("openreg") for t in _qkv())
    assert call(q, k, v) == SDPBackend.MATH.value, why


def test_sdpa_kernel_context_is_respected(openreg):
    if not _fused_chain(openreg, grad=False):
        pytest.skip("this chain takes the math path anyway")
    q, k, v = (t.to("openreg") for t in _qkv(Ev=16))
    with sdpa_kernel(SDPBackend.MATH):
        assert torch._fused_sdp_choice(q, k, v) == SDPBackend.MATH.value
    with sdpa_kernel(SDPBackend.OVERRIDEABLE):
        assert torch._fused_sdp_choice(q, k, v) == SDPBackend.OVERRIDEABLE.value


@pytest.mark.parametrize("name", list(CASES))
def test_sdpa_forward_and_backward_match_cpu(openreg, assert_close_cpu, name):
    out_cpu, out_dev, cpu, dev, stats = _run(openreg, name)
    assert_close_cpu(out_dev, out_cpu, atol=1e-5, rtol=1e-4)
    for label, d, c in zip("qkv", dev, cpu):
        assert_close_cpu(d.grad, c.grad, atol=1e-5, rtol=1e-4, msg=f"grad of {label}")
    if _fused_chain(openreg):  # one engine call each way, not the decomposition
        assert sum(stats.get(FWD, {}).values()) == 1, stats
        assert sum(stats.get(BWD, {}).values()) == 1, stats
        assert "aten::bmm" not in stats and "aten::_softmax" not in stats, stats
    else:
        assert FWD not in stats, stats


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_grouped_heads_take_the_fused_op_without_autograd(openreg, assert_close_cpu, mode):
    q, k, v = _qkv(Ev=16)  # one head size: what aten_ref's flash forward takes
    k, v = k[:, :2].contiguous(), v[:, :2].contiguous()
    want = F.scaled_dot_product_attention(q, k, v, is_causal=False, enable_gqa=True)
    openreg.reset_stats()
    with getattr(torch, mode)():
        got = F.scaled_dot_product_attention(*(t.to("openreg") for t in (q, k, v)), enable_gqa=True)
    assert_close_cpu(got, want, atol=1e-5, rtol=1e-4)
    stats = openreg.stats()
    if _fused_chain(openreg, grad=False):
        assert sum(stats.get(FWD, {}).values()) == 1, stats
        assert "aten::bmm" not in stats, stats


def test_grouped_heads_that_do_not_divide_raise_as_on_cpu(openreg):
    q, k, v = _qkv()
    k, v = k[:, :3], v[:, :3]  # 4 query heads over 3 key/value heads
    with pytest.raises(RuntimeError) as cpu_error:
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    with pytest.raises(RuntimeError) as dev_error:
        F.scaled_dot_product_attention(*(t.to("openreg") for t in (q, k, v)), enable_gqa=True)
    assert str(dev_error.value).split("\n")[0] == str(cpu_error.value).split("\n")[0]


@pytest.mark.parametrize("grad", [True, False])
def test_fully_masked_rows_give_zeros_as_cpu(openreg, assert_close_cpu, grad):
    """Padded generation (GPT-2, LLaMA) masks every key of some rows: CPU gives 0
    there, and zero gradients. (Without autograd, chains without onednn take aten_ref's
    flash forward, which handles such rows itself.)"""
    q, k, v = _qkv(L=9, S=7, Ev=16)
    mask = _bool_mask((2, 1, 9, 7))
    mask[0, 0, 3] = False
    cpu = [t.clone().requires_grad_(grad) for t in (q, k, v)]
    dev = [t.to("openreg").requires_grad_(grad) for t in (q, k, v)]
    openreg.reset_stats()
    out_cpu = F.scaled_dot_product_attention(*cpu, attn_mask=mask)
    out_dev = F.scaled_dot_product_attention(*dev, attn_mask=mask.to("openreg"))
    assert_close_cpu(out_dev, out_cpu, atol=1e-5, rtol=1e-4)
    assert (FWD in openreg.stats()) == _fused_chain(openreg, grad), openreg.stats()
    if grad:
        out_cpu.sum().backward()
        out_dev.sum().backward()
        for d, c in zip(dev, cpu):
            assert_close_cpu(d.grad, c.grad, atol=1e-5, rtol=1e-4)


def _definition(q, k, v, mask, is_causal, scale):
    """The contract's forward in float64: ATen's math path, and each row's logsumexp
    (+inf for a row whose keys are all masked)."""
    q, k, v = q.double(), k.double(), v.double()
    if k.shape[-3] != q.shape[-3]:
        k, v = (t.repeat_interleave(q.shape[-3] // t.shape[-3], -3) for t in (k, v))
    s = q @ k.transpose(-2, -1) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if is_causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.double()
    lse = s.logsumexp(-1, keepdim=True)
    lse = lse.masked_fill(lse == float("-inf"), float("inf"))
    return (s - lse).exp() @ v, lse.squeeze(-1)


# Masks of every rank the contract broadcasts (torch CPU's flash kernel itself takes
# only 2-d and 4-d ones), 3-d queries, grouped heads, float masks, causal with L != S.
_REFERENCE_CASES = {
    "1-d bool mask": dict(q=(2, 4, 9, 16), kv=(2, 4, 7, 16), mask=("bool", (7,))),
    "2-d bool mask": dict(q=(2, 4, 9, 16), kv=(2, 4, 7, 16), mask=("bool", (9, 7))),
    "3-d bool mask": dict(q=(2, 4, 9, 16), kv=(2, 4, 7, 16), mask=("bool", (4, 9, 7))),
    "4-d bool mask, fully masked rows": dict(q=(2, 4, 9, 16), kv=(2, 4, 7, 16), mask=("bool", (2, 1, 9, 7))),
    "3-d query, 3-d float mask": dict(q=(4, 9, 16), kv=(4, 7, 16), mask=("float", (4, 9, 7))),
    "3-d query, no mask": dict(q=(4, 9, 16), kv=(4, 7, 16)),
    "grouped heads, causal, L > S": dict(q=(2, 4, 9, 16), kv=(2, 2, 7, 16), causal=True),
    "one key head, 4-d float mask, fully masked rows": dict(q=(2, 4, 9, 16), kv=(2, 1, 7, 16),
                                                            mask=("float", (2, 1, 9, 7))),
    "causal, L < S, scale": dict(q=(2, 4, 7, 16), kv=(2, 4, 9, 16), causal=True, scale=0.3),
}


def _reference_case(name):
    case = _REFERENCE_CASES[name]
    g = torch.Generator().manual_seed(3)
    q = torch.randn(case["q"], generator=g)
    k, v = torch.randn(case["kv"], generator=g), torch.randn(case["kv"], generator=g)
    mask = None
    if "mask" in case:
        kind, shape = case["mask"]
        mask = torch.rand(shape, generator=g) > 0.3
        if name.endswith("fully masked rows"):
            mask[0, 0, 3] = False
        if kind == "float":
            mask = torch.zeros(shape).masked_fill(~mask, float("-inf")) + torch.randn(shape, generator=g)
    return q, k, v, mask, case.get("causal", False), case.get("scale")


def test_reference_engines_flash_forward_keeps_the_contract(run_python, tmp_path):
    """aten_ref's forward runs torch CPU's flash kernel where it covers the call: the
    op called directly on the aten_ref chain matches the float64 definition, output
    and logsumexp (float32, +inf on fully masked rows). One process for every case."""
    names = sorted(_REFERENCE_CASES)
    torch.save([_reference_case(n) for n in names], tmp_path / "cases.pt")
    code = (
        "import torch, openreg\n"
        f"cases = torch.load({str(tmp_path / 'cases.pt')!r})\n"
        "results = []\n"
        "for q, k, v, mask, causal, scale in cases:\n"
        "    dev = [None if t is None else t.to('openreg') for t in (q, k, v, mask)]\n"
        "    with torch.no_grad():\n"
        "        out, lse, *_ = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(\n"
        "            *dev, 0.0, causal, scale=scale)\n"
        "    results.append((out.cpu(), lse.cpu()))\n"
        "assert openreg.info()['chain'] == ['aten_ref'], openreg.info()['chain']\n"
        f"torch.save(results, {str(tmp_path / 'results.pt')!r})\n"
    )
    proc = run_python(code, env_extra={"OPENREG_ENGINE": "aten_ref"})
    assert proc.returncode == 0, proc.stderr
    for name, (out, lse) in zip(names, torch.load(tmp_path / "results.pt")):
        q, k, v, mask, causal, scale = _reference_case(name)
        want_out, want_lse = _definition(q, k, v, mask, causal, scale)
        torch.testing.assert_close(out, want_out.float(), atol=1e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")
        assert lse.dtype == torch.float32, name
        assert lse.shape == ((1, *want_lse.shape) if q.dim() == 3 else want_lse.shape), name
        lse = lse.reshape(want_lse.shape)
        torch.testing.assert_close(lse, want_lse.float(), atol=1e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")
        if name.endswith("fully masked rows"):
            assert (lse[0, :, 3] == float("inf")).all(), lse[0, :, 3]
            assert (out[0, :, 3] == 0).all()


def test_reference_only_chain_takes_the_math_path_where_flash_does_not_cover(run_python):
    """Without another engine for the fused op, inference takes it only for inputs
    aten_ref's flash forward takes; a value head size other than the query's would
    get the float64 definition, so it takes the math path."""
    code = (
        "import torch, openreg\n"
        "q, k = torch.randn(2, 4, 9, 16).to('openreg'), torch.randn(2, 4, 7, 16).to('openreg')\n"
        "with torch.no_grad():\n"
        "    print(torch._fused_sdp_choice(q, k, torch.randn(2, 4, 7, 16).to('openreg')),\n"
        "          torch._fused_sdp_choice(q, k, torch.randn(2, 4, 7, 12).to('openreg')))\n"
    )
    proc = run_python(code, env_extra={"OPENREG_ENGINE": "aten_ref"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(SDPBackend.OVERRIDEABLE.value), str(SDPBackend.MATH.value)]


# (B, L, H, E).transpose(1, 2), as Hugging Face models make q, k and v; and
# (L, B, H, E).permute(1, 2, 0, 3), nn.MultiheadAttention's, with the rows outermost
# in memory (the onednn engine copies those to dense heads).
_LAYOUTS = {"heads transposed": ((0, 2, 1, 3), (0, 2, 1, 3)), "rows outermost": ((2, 0, 1, 3), (1, 2, 0, 3))}


@pytest.mark.parametrize("layout", sorted(_LAYOUTS))
def test_strided_layouts_and_expanded_gradient(openreg, assert_close_cpu, layout):
    """Operands viewed from another memory order, and the expanded gradient of out.sum()."""
    store, view = _LAYOUTS[layout]
    q, k, v = _qkv()
    cpu = [t.permute(*store).contiguous().requires_grad_() for t in (q, k, v)]
    dev = [t.detach().to("openreg").requires_grad_() for t in cpu]
    out_cpu = F.scaled_dot_product_attention(*(t.permute(*view) for t in cpu), is_causal=False)
    out_dev = F.scaled_dot_product_attention(*(t.permute(*view) for t in dev), is_causal=False)
    out_cpu.sum().backward()
    out_dev.sum().backward()
    assert_close_cpu(out_dev, out_cpu, atol=1e-5, rtol=1e-4)
    for d, c in zip(dev, cpu):
        assert_close_cpu(d.grad, c.grad, atol=1e-5, rtol=1e-4)


def test_dropout_takes_the_math_path(openreg):
    q, k, v = (t.to("openreg") for t in _qkv())
    openreg.reset_stats()
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.openreg.synchronize()
    assert out.shape == (2, 4, 37, 12) and bool(torch.isfinite(out.cpu()).all())
    assert FWD not in openreg.stats()


def test_the_fused_op_refuses_dropout_with_a_clear_error(openreg):
    q, k, v = (t.to("openreg") for t in _qkv())
    with pytest.raises(NotImplementedError, match="dropout_p > 0 is not supported"):
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, k, v, None, 0.5)
        torch.openreg.synchronize()


@pytest.mark.parametrize("engine,fallback,want_inference,want_training", [
    ("eigen", "none", SDPBackend.MATH, SDPBackend.MATH),  # no engine has the op
    # only the reference (behind a native engine, or alone): its forward is torch CPU's
    # flash kernel, its backward the float64 definition, slower than the math path
    ("eigen", "aten_ref", SDPBackend.OVERRIDEABLE, SDPBackend.MATH),
    ("aten_ref", "aten_ref", SDPBackend.OVERRIDEABLE, SDPBackend.MATH),
    ("onednn", "none", SDPBackend.OVERRIDEABLE, SDPBackend.OVERRIDEABLE),
])
def test_the_choice_follows_the_chain(run_python, engine, fallback, want_inference, want_training):
    code = (
        "import torch, openreg\n"
        "import torch.nn.functional as F\n"
        "q = torch.randn(2, 4, 8, 16)\n"
        "for grad in (False, True):\n"
        "    qc = q.clone().requires_grad_(grad)\n"
        "    d = q.to('openreg').requires_grad_(grad)\n"
        "    out = F.scaled_dot_product_attention(d, d, d)\n"
        "    ref = F.scaled_dot_product_attention(qc, qc, qc)\n"
        "    err = float((out.detach().cpu() - ref.detach()).abs().max())\n"
        "    if grad:\n"
        "        out.sum().backward(); ref.sum().backward()\n"
        "        err = max(err, float((d.grad.cpu() - qc.grad).abs().max()))\n"
        "    print(torch._fused_sdp_choice(d, d, d), err)\n"
    )
    proc = run_python(code, env_extra={"OPENREG_ENGINE": engine, "OPENREG_FALLBACK": fallback})
    assert proc.returncode == 0, proc.stderr
    (choice_inference, err_inference), (choice_training, err_training) = (
        line.split() for line in proc.stdout.splitlines())
    assert int(choice_inference) == want_inference.value
    assert int(choice_training) == want_training.value
    assert float(err_inference) < 1e-5 and float(err_training) < 1e-4


def _train_step(model, inputs, target):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = model(*inputs)
    out = out[0] if isinstance(out, tuple) else out
    loss = (out - target).pow(2).mean()
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    opt.step()
    return loss, out, grads


@pytest.mark.parametrize("kind", ["TransformerEncoderLayer", "MultiheadAttention"])
def test_training_step_matches_cpu(openreg, assert_close_cpu, kind):
    torch.manual_seed(0)
    if kind == "TransformerEncoderLayer":
        ref = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
        x = torch.randn(3, 17, 32)
        mask = nn.Transformer.generate_square_subsequent_mask(17)
        inputs, dev_inputs = (x, mask), (x.to("openreg"), mask.to("openreg"))
    else:
        ref = nn.MultiheadAttention(32, 4, batch_first=True)
        x, y = torch.randn(3, 17, 32), torch.randn(3, 11, 32)
        pad = torch.zeros(3, 11, dtype=torch.bool)
        pad[0, 7:] = True  # a padded sequence
        # need_weights=False: with weights asked for, MHA computes them itself, not through SDPA.
        inputs = (x, y, y, pad, False)
        dev_inputs = tuple(t.to("openreg") for t in inputs[:4]) + (False,)
    torch.manual_seed(1)  # other initial weights, then the reference's loaded
    dev = (nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
           if kind == "TransformerEncoderLayer" else nn.MultiheadAttention(32, 4, batch_first=True))
    dev.load_state_dict(ref.state_dict())
    dev.to("openreg")
    target = torch.randn(3, 17, 32)
    openreg.reset_stats()
    loss_c, out_c, grads_c = _train_step(ref, inputs, target)
    loss_d, out_d, grads_d = _train_step(dev, dev_inputs, target.to("openreg"))
    torch.openreg.synchronize()
    stats = openreg.stats()
    if _fused_chain(openreg):
        assert sum(stats.get(FWD, {}).values()) >= 1 and sum(stats.get(BWD, {}).values()) >= 1, stats
    assert_close_cpu(loss_d, loss_c, atol=1e-6, rtol=1e-5)
    assert_close_cpu(out_d, out_c, atol=1e-5, rtol=1e-4)
    for n, g in grads_c.items():
        assert_close_cpu(grads_d[n], g, atol=1e-5, rtol=1e-4, msg=f"grad of {n}")
    for (n, p_d), (_, p_c) in zip(dev.named_parameters(), ref.named_parameters()):
        assert_close_cpu(p_d, p_c, atol=1e-5, rtol=1e-4, msg=f"updated {n}")
