"""Case families of ``python -m openreg conformance`` for the overrideable fused
attention ops (``_scaled_dot_product_fused_attention_overrideable`` and its
``_backward``), which ``F.scaled_dot_product_attention`` calls on the device when
the chain serves them: no mask, causal (L = S, L > S, L < S), bool and float
masks broadcast over batch or heads or 2-d, an explicit scale, heads laid out as
``(B, L, H, E).transpose(1, 2)``, grouped key/value heads, 3-d inputs, a row
block boundary, sliced operands, an expanded gradient. See
:mod:`openreg.conformance_cases`.

ATen leaves these ops to private-use backends, so torch CPU has no kernel for
them. The reference is ATen's math path written here with torch CPU ops in
float64 (rounded once), registered as the ops' CPU kernels in the process that
builds the cases when none is there (the reference engine registers its own C++
copy of the same definition, engines/aten_ref/attention_cpu.cpp, whose forward runs
torch CPU's flash kernel where that covers the call). The backward's
cases get an output and logsumexp made by the same reference, so the probabilities
it rebuilds from them are the forward's.
"""

import math

import torch

from .conformance_cases import Case, T, register

_FWD = "_scaled_dot_product_fused_attention_overrideable"
_BWD = "_scaled_dot_product_fused_attention_overrideable_backward"


# ============================================================ the reference


def _per_query_head(t, hq):
    return t if t.shape[-3] == hq else t.repeat_interleave(hq // t.shape[-3], -3)


def _scores(q, k, bias, is_causal, scale):
    s = q.double() @ _per_query_head(k, q.shape[-3]).double().transpose(-2, -1) * scale
    L, S = q.shape[-2], k.shape[-2]
    if is_causal:
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), -math.inf)
    if bias is not None:
        s = s.masked_fill(~bias, -math.inf) if bias.dtype == torch.bool else s + bias.double()
    return s


def _scale(q, scale):
    return scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])


def _batched(t, q):
    return t.unsqueeze(0) if q.dim() == 3 else t


def _check(q, dropout_p):
    if dropout_p != 0.0:
        raise NotImplementedError("dropout_p > 0 is not supported")
    if not q.is_floating_point():
        raise RuntimeError(f"query must be floating point, got {q.dtype}")


def _forward(q, k, v, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None):
    _check(q, dropout_p)
    s = _scores(q, k, attn_bias, is_causal, _scale(q, scale))
    lse = s.logsumexp(-1, keepdim=True)
    lse = lse.masked_fill(lse == -math.inf, math.inf)  # every key masked: weights 0, as flash attention
    out = (s - lse).exp() @ _per_query_head(v, q.shape[-3]).double()
    zero = torch.zeros((), dtype=torch.long)
    return (out.to(q.dtype), _batched(lse.squeeze(-1), q).float(), None, None, q.shape[-2], k.shape[-2], zero,
            zero.clone(), None)


def _per_key_head(g, hk):
    if g.shape[-3] == hk:
        return g
    shape = list(g.shape)
    shape[-3:-2] = [hk, g.shape[-3] // hk]
    return g.reshape(shape).sum(-3)


def _backward(grad_out, q, k, v, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
              dropout_p, is_causal, philox_seed, philox_offset, *, scale=None):
    _check(q, dropout_p)
    sc = _scale(q, scale)
    s = _scores(q, k, attn_bias, is_causal, sc)
    p = (s - logsumexp.double().reshape(s.shape[:-1]).unsqueeze(-1)).exp()
    hq, hk = q.shape[-3], k.shape[-3]
    g = grad_out.double()
    dv = p.transpose(-2, -1) @ g
    dp = g @ _per_query_head(v, hq).double().transpose(-2, -1)
    ds = p * (dp - (dp * p).sum(-1, keepdim=True))
    dq = ds @ _per_query_head(k, hq).double() * sc
    dk = ds.transpose(-2, -1) @ q.double() * sc
    dbias = None
    if attn_bias is not None:
        dbias = (torch.zeros_like(attn_bias) if attn_bias.dtype == torch.bool
                 else ds.sum_to_size(attn_bias.shape).to(attn_bias.dtype))
    return dq.to(q.dtype), _per_key_head(dk, hk).to(q.dtype), _per_key_head(dv, hk).to(q.dtype), dbias


_library = None


def _register_reference():
    """Makes the formulas above the ops' CPU kernels (once; only where none is registered)."""
    global _library
    if _library is not None:
        return
    _library = torch.library.Library("aten", "IMPL")
    for name, fn in ((_FWD, _forward), (_BWD, _backward)):
        if not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "CPU"):
            _library.impl(name, fn, "CPU")


# ================================================================ the cases

# (label, B, H, Hk, L, S, E, Ev, layout): layout "heads" is (B, L, H, E).transpose(1, 2),
# "rows outer" (L, B, H, E).permute(1, 2, 0, 3) (nn.MultiheadAttention's), "sliced"
# every other element of a wider base (no unit-stride rows), 3-d has no batch.
_SHAPES = (
    ("2x3, L 7, S 5, E 11, Ev 13", 2, 3, 3, 7, 5, 11, 13, "contiguous"),
    ("2x2, L = S = 37, E 16", 2, 2, 2, 37, 37, 16, 16, "contiguous"),
    ("heads transposed 2x3x17x8", 2, 3, 3, 17, 19, 8, 8, "heads"),
    ("rows outermost 2x3x17x8", 2, 3, 3, 17, 19, 8, 8, "rows outer"),
    ("3-d 3x11x8", 0, 3, 3, 11, 13, 8, 8, "contiguous"),
    ("grouped heads 4 over 2, L 70", 2, 4, 2, 70, 23, 8, 8, "contiguous"),
    ("L 70 (two row blocks)", 1, 2, 2, 70, 29, 8, 8, "contiguous"),
    ("sliced with gaps 2x2x7x5", 2, 2, 2, 7, 5, 6, 6, "sliced"),
)


def _qkv(ctx, b, h, rows, cols, layout):
    shape = (h, rows, cols) if b == 0 else (b, h, rows, cols)
    values = ctx.values(shape)
    if layout == "heads":
        return T(values.transpose(1, 2).contiguous(), lambda x: x.transpose(1, 2), grad=True)
    if layout == "rows outer":
        return T(values.permute(2, 0, 1, 3).contiguous(), lambda x: x.permute(1, 2, 0, 3), grad=True)
    return ctx.of(values, "sliced" if layout == "sliced" else "contiguous", grad=True)


def _bool_mask(ctx, shape):
    """True = attend; the first key is always kept, so no row is fully masked."""
    m = ctx.values(shape, dtype=torch.bool)
    m[..., 0] = True
    return T(m, grad=False)


def _variants(ctx, b, h, L, S):
    """(label, attn_bias, is_causal, scale) to try on one shape."""
    full = (b, h, L, S) if b else (h, L, S)
    out = [("no mask", None, False, None), ("scale 0.3", None, False, 0.3)]
    if b:
        out += [("bool mask [1, H, L, S]", _bool_mask(ctx, (1, h, L, S)), False, None),
                ("float mask [B, 1, L, S]", ctx.t(b, 1, L, S, grad=False), False, None),
                ("float mask [L, S]", ctx.t(L, S, grad=False), False, None),
                ("bool padding mask [B, 1, 1, S]", _bool_mask(ctx, (b, 1, 1, S)), False, None)]
    else:
        out += [("float mask", ctx.t(*full, grad=False), False, None)]
    out += [("causal", None, True, None), ("causal, bool mask", _bool_mask(ctx, full), True, None)]
    return out


@register(_FWD, grad=True, accumulates=True)
def _forward_cases(ctx):
    """(query, key, value, attn_bias?, dropout_p, is_causal, return_debug_mask, *, scale)."""
    _register_reference()
    cases = []
    for label, b, h, hk, L, S, E, Ev, layout in _SHAPES:
        q, k, v = _qkv(ctx, b, h, L, E, layout), _qkv(ctx, b, hk, S, E, layout), _qkv(ctx, b, hk, S, Ev, layout)
        for what, bias, causal, scale in _variants(ctx, b, h, L, S):
            cases.append(Case(f"{label}, {what}", q, k, v, bias, 0.0, causal, False, scale=scale))
    return cases


def _materialise(t):
    return t.view(t.base) if t.view else t.base


@register(_BWD, accumulates=True)
def _backward_cases(ctx):
    """(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q,
    cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, *, scale):
    out and logsumexp from the reference forward on the same inputs."""
    _register_reference()
    cases = []
    for label, b, h, hk, L, S, E, Ev, layout in _SHAPES:
        q, k, v = _qkv(ctx, b, h, L, E, layout), _qkv(ctx, b, hk, S, E, layout), _qkv(ctx, b, hk, S, Ev, layout)
        for what, bias, causal, scale in _variants(ctx, b, h, L, S):
            bias_cpu = None if bias is None else _materialise(bias)
            out, lse, *_ = _forward(_materialise(q), _materialise(k), _materialise(v), bias_cpu, 0.0, causal,
                                    scale=scale)
            shape = tuple(out.shape)
            grad = (T(ctx.values(shape[-2:]), lambda x: x.expand(shape), grad=False) if what == "no mask"
                    else ctx.of(ctx.values(shape), grad=False))
            cases.append(Case(f"{label}, {what}" + (", expanded grad_out" if what == "no mask" else ""),
                              grad, q, k, v, bias, [True, True, True, bias is not None],
                              T(out, grad=False), T(lse, grad=False), None, None, L, S, 0.0, causal,
                              T(torch.zeros((), dtype=torch.long), grad=False),
                              T(torch.zeros((), dtype=torch.long), grad=False), scale=scale))
    return cases
