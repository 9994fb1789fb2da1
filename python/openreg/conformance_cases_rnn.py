"""Case families of ``python -m openreg conformance`` for the fused RNN cells ATen
calls per time step on accelerators (``_thnn_fused_lstm_cell``,
``_thnn_fused_lstm_cell_backward_impl``, ``_thnn_fused_gru_cell``,
``_thnn_fused_gru_cell_backward``): with and without biases (one of the two
too), absent gradients, row-strided steps of a sequence, transposed and gapped
operands, an empty batch, a batch large enough for the parallel path. See
:mod:`openreg.conformance_cases`.

ATen has CUDA kernels only for these ops, so torch CPU cannot answer them: the
reference is the cells' formula written here with torch CPU ops in float64
(rounded to the case dtype once), registered as the ops' CPU kernels in the
process that builds the cases. The workspace format is the one engines and core
share (engines/common/include/openreg/sdk/rnn.hpp): LSTM [B, 4H] = activated
gates i, f, g, o; GRU [B, 5H] = r, z, n, hx, and the hidden part of the new gate.
"""

import math

import torch

from .conformance_cases import Case, T, register

_B, _H = 5, 7  # odd primes: no lane-multiple shortcuts


# ============================================================ the reference


def _wide(t):
    return None if t is None else t.to(torch.float64)


def _lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    gates = _wide(input_gates) + _wide(hidden_gates)
    for b in (input_bias, hidden_bias):
        if b is not None:
            gates = gates + _wide(b)
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * _wide(cx) + i * g
    hy = o * cy.tanh()
    dt = input_gates.dtype
    return hy.to(dt), cy.to(dt), torch.cat([i, f, g, o], 1).to(dt)


def _lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    i, f, g, o = _wide(workspace).chunk(4, 1)
    tanh_cy = _wide(cy).tanh()
    d_cy = _wide(grad_cy) if grad_cy is not None else torch.zeros_like(tanh_cy)
    d_o = torch.zeros_like(tanh_cy)
    if grad_hy is not None:
        d_cy = d_cy + _wide(grad_hy) * o * (1 - tanh_cy * tanh_cy)
        d_o = _wide(grad_hy) * tanh_cy * o * (1 - o)
    grad_gates = torch.cat([d_cy * g * i * (1 - i), d_cy * _wide(cx) * f * (1 - f), d_cy * i * (1 - g * g), d_o], 1)
    dt = cx.dtype
    return grad_gates.to(dt), (d_cy * f).to(dt), grad_gates.sum(0).to(dt) if has_bias else None


def _gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    ig, hg = _wide(input_gates), _wide(hidden_gates)
    if input_bias is not None:
        ig = ig + _wide(input_bias)
    if hidden_bias is not None:
        hg = hg + _wide(hidden_bias)
    i_r, i_z, i_n = ig.chunk(3, 1)
    h_r, h_z, h_n = hg.chunk(3, 1)
    r, z = (i_r + h_r).sigmoid(), (i_z + h_z).sigmoid()
    n = (i_n + r * h_n).tanh()
    h = _wide(hx)
    dt = input_gates.dtype
    return (n + z * (h - n)).to(dt), torch.cat([r, z, n, h, h_n], 1).to(dt)


def _gru_cell_backward(grad_hy, workspace, has_bias):
    r, z, n, h, hn = _wide(workspace).chunk(5, 1)
    gy = _wide(grad_hy)
    d_z = gy * (h - n) * z * (1 - z)
    d_n = gy * (1 - z) * (1 - n * n)
    d_r = d_n * hn * r * (1 - r)
    gi = torch.cat([d_r, d_z, d_n], 1)
    gh = torch.cat([d_r, d_z, d_n * r], 1)
    dt = grad_hy.dtype
    bias = (lambda x: x.sum(0).to(dt)) if has_bias else (lambda x: None)
    return gi.to(dt), gh.to(dt), (gy * z).to(dt), bias(gi), bias(gh)


_REFERENCE = {
    "_thnn_fused_lstm_cell": _lstm_cell,
    "_thnn_fused_lstm_cell_backward_impl": _lstm_cell_backward,
    "_thnn_fused_gru_cell": _gru_cell,
    "_thnn_fused_gru_cell_backward": _gru_cell_backward,
}
_library = None


def _register_reference():
    """Makes the formulas above the ops' CPU kernels (once; only ops without one)."""
    global _library
    if _library is not None:
        return
    _library = torch.library.Library("aten", "IMPL")
    for name, fn in _REFERENCE.items():
        if not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "CPU"):
            _library.impl(name, fn, "CPU")


# ================================================================ the cases


def _operand(ctx, rows, cols, layout, domain="any"):
    """A [rows, cols] operand: ``rowstep`` is a step of a wider sequence tensor
    (rows contiguous, row stride past cols, from an offset); else ``ctx.of``'s layouts."""
    if layout == "rowstep":
        base = torch.full((rows, cols + 11), float("nan"), dtype=ctx.dtype)
        base[:, 3:3 + cols] = ctx.values((rows, cols), domain)
        return T(base, lambda x: x[:, 3:3 + cols], grad=False)
    return ctx.of(ctx.values((rows, cols), domain), layout, grad=False)


def _bias(ctx, n, present):
    return ctx.t(n, grad=False) if present else None


_LAYOUTS = (
    ("5x7", _B, _H, "contiguous"),
    ("row-strided steps 5x7", _B, _H, "rowstep"),
    ("transposed 5x7", _B, _H, "transposed"),
    ("sliced with gaps 5x7", _B, _H, "sliced"),
    ("empty batch 0x7", 0, _H, "contiguous"),
    ("batch of one 1x13", 1, 13, "contiguous"),
    ("64x160 (parallel path)", 64, 160, "contiguous"),
)


@register("_thnn_fused_lstm_cell", "_thnn_fused_gru_cell")
def _cell_cases(ctx):
    """(input_gates, hidden_gates, state, input_bias?, hidden_bias?)."""
    _register_reference()
    k = 4 if ctx.base == "_thnn_fused_lstm_cell" else 3
    cases = []
    for label, b, h, layout in _LAYOUTS:
        for biases, what in (((True, True), "biases"), ((False, False), "no bias")):
            if what == "no bias" and layout not in ("contiguous", "rowstep"):
                continue
            args = (_operand(ctx, b, k * h, layout), _operand(ctx, b, k * h, layout), _operand(ctx, b, h, layout),
                    _bias(ctx, k * h, biases[0]), _bias(ctx, k * h, biases[1]))
            cases.append(Case(f"{label}, {what}", *args))
    cases.append(Case("5x7, input bias only", _operand(ctx, _B, k * _H, "contiguous"),
                      _operand(ctx, _B, k * _H, "contiguous"), _operand(ctx, _B, _H, "contiguous"),
                      _bias(ctx, k * _H, True), None))
    return cases


def _lstm_workspace(ctx, b, h, layout):
    """Activated gates: i, f, o in (0, 1), g in (-1, 1)."""
    parts = [ctx.values((b, h), d) for d in ("unit", "unit", "signed_unit", "unit")]
    values = torch.cat(parts, 1)
    if layout == "rowstep":
        base = torch.full((b, 4 * h + 11), float("nan"), dtype=ctx.dtype)
        base[:, 3:3 + 4 * h] = values
        return T(base, lambda x: x[:, 3:3 + 4 * h], grad=False)
    return ctx.of(values, layout, grad=False)


def _gru_workspace(ctx, b, h, layout):
    """r, z in (0, 1), n in (-1, 1), hx and the hidden new gate anything."""
    parts = [ctx.values((b, h), d) for d in ("unit", "unit", "signed_unit", "any", "any")]
    values = torch.cat(parts, 1)
    if layout == "rowstep":
        base = torch.full((b, 5 * h + 11), float("nan"), dtype=ctx.dtype)
        base[:, 3:3 + 5 * h] = values
        return T(base, lambda x: x[:, 3:3 + 5 * h], grad=False)
    return ctx.of(values, layout, grad=False)


@register("_thnn_fused_lstm_cell_backward_impl", accumulates=True)
def _lstm_backward_cases(ctx):
    """(grad_hy?, grad_cy?, cx, cy, workspace, has_bias): each gradient alone too."""
    _register_reference()
    cases = []
    for label, b, h, layout in _LAYOUTS:
        for has_bias in (True, False):
            grads = (_operand(ctx, b, h, layout), _operand(ctx, b, h, layout))
            cases.append(Case(f"{label}, has_bias={has_bias}", *grads, _operand(ctx, b, h, layout),
                              _operand(ctx, b, h, layout), _lstm_workspace(ctx, b, h, layout), has_bias))
    for which in ("grad_hy", "grad_cy"):
        g = _operand(ctx, _B, _H, "contiguous")
        grads = (g, None) if which == "grad_hy" else (None, g)
        cases.append(Case(f"5x7, {which} only", *grads, _operand(ctx, _B, _H, "contiguous"),
                          _operand(ctx, _B, _H, "contiguous"), _lstm_workspace(ctx, _B, _H, "contiguous"), True))
    return cases


@register("_thnn_fused_gru_cell_backward", accumulates=True)
def _gru_backward_cases(ctx):
    """(grad_hy, workspace, has_bias)."""
    _register_reference()
    cases = []
    for label, b, h, layout in _LAYOUTS:
        for has_bias in (True, False):
            cases.append(Case(f"{label}, has_bias={has_bias}", _operand(ctx, b, h, layout),
                              _gru_workspace(ctx, b, h, layout), has_bias))
    return cases


# (label, T, B, I, H, options): the whole-layer shapes both directions of the op take.
_LAYER_SHAPES = (
    ("6x5x9, hidden 7", 6, _B, 9, _H, {}),
    ("6x5x9, hidden 7, reverse", 6, _B, 9, _H, {"reverse": True}),
    ("6x5x9, hidden 7, has_biases=False", 6, _B, 9, _H, {"biases": False}),
    ("one step, batch of one", 1, 1, 9, 13, {}),
    ("20x64x32, hidden 40 (parallel path)", 20, 64, 32, 40, {}),
    # Hidden sizes of whole vectors (48, 64 floats) and layers large enough for two
    # threads, where an engine may run a loop of its own (onednn's lstm_loop.cpp):
    # batches that leave a remainder of rows, both directions, no biases, blocks of
    # units that do not split evenly across the threads.
    ("16x16x64, hidden 64 (two threads)", 16, 16, 64, 64, {}),
    ("24x13x64, hidden 64, reverse, has_biases=False (two threads)", 24, 13, 64, 64,
     {"reverse": True, "biases": False}),
    ("48x6x128, hidden 48 (two threads)", 48, 6, 128, 48, {}),
)


def _layer_operands(ctx, t, b, i, h):
    """Values of (input, w_ih, w_hh, b_ih, b_hh, hx, cx). Weights and biases in
    nn.LSTM's initial range, (-1/sqrt(h), 1/sqrt(h)): with [-2, 2] a 64-wide layer's
    gates sat deep in saturation, where float32 rounding compounds over the steps
    (CPU's own kernel was 3e-5 from a float64 recurrence over 24 steps)."""
    k = 1.0 / math.sqrt(h)
    inputs = [ctx.values((t, b, i))]
    params = [ctx.values(shape, "signed_unit") * k for shape in ((4 * h, i), (4 * h, h), (4 * h,), (4 * h,))]
    states = [ctx.values((b, h)) for _ in range(2)]
    return inputs + params + states


@register("mkldnn_rnn_layer", accumulates=True)
def _lstm_layer_cases(ctx):
    """A whole LSTM layer as core calls it for a float32 nn.LSTM: (input
    [T, B, I], w_ih, w_hh, b_ih, b_hh, hx [B, H], cx [B, H], reverse,
    batch_sizes, mode=2, hidden_size, num_layers=1, has_biases,
    bidirectional=False, batch_first=False, train), train=False under no_grad,
    train=True in training (with a workspace for mkldnn_rnn_layer_backward).

    The reference is torch CPU's own kernel (oneDNN's RNN primitive). It reads
    every operand as contiguous and time-major (a strided input gives wrong
    values, batch_first=True crashes it): core sends nothing else, so the cases
    have nothing else. The workspace output is left open: its size and layout
    are the serving engine's business (the host sizes it by the kernel)."""
    cases = []
    for train in (False, True):
        for label, t, b, i, h, opt in _LAYER_SHAPES:
            # Without has_biases the bias operands are ignored (random here, to check that).
            operands = [ctx.of(v, grad=False) for v in _layer_operands(ctx, t, b, i, h)]
            cases.append(Case(f"{label}{', train' if train else ''}", *operands, opt.get("reverse", False), [], 2, h,
                              1, opt.get("biases", True), False, False, train, loose=(3,)))
    return cases


class _Workspace(T):
    """The workspace argument of a backward case: the one the forward leaves on
    each side. On the device, the forward runs there too (the first engine that
    takes a train=True call), so an engine's backward reads its own workspace,
    as core arranges; on CPU, CPU's. ``layer`` is the forward's arguments."""

    def __init__(self, cpu_workspace, layer):
        super().__init__(cpu_workspace, grad=False)
        self.layer = layer

    def make(self, device, requires_grad=False):
        """(leaf, argument): the leaf, which the runner compares across the two
        sides after the call, is empty: the workspaces' sizes and bytes are each
        side's own."""
        if device == "cpu":
            workspace = self.base.clone()
        else:
            args = [a.to(device) if isinstance(a, torch.Tensor) else a for a in self.layer]
            with torch.enable_grad():
                workspace = torch.ops.aten.mkldnn_rnn_layer(*args)[3]
        return workspace.new_empty(0), workspace


@register("mkldnn_rnn_layer_backward", accumulates=True)
def _lstm_layer_backward_cases(ctx):
    """The backward of a whole LSTM layer, as core calls it after a
    mkldnn_rnn_layer(train=True): (input, w_ih, w_hh, b_ih, b_hh, hx, cx,
    output, hy, cy, grad_output?, grad_hy?, grad_cy?, reverse, mode=2,
    hidden_size, num_layers=1, has_biases, train=True, bidirectional=False,
    batch_sizes, batch_first=False, workspace).

    The workspace is the one its forward left, and means something only to the
    implementation that made it: each side gets its own (:class:`_Workspace`;
    CPU's forward keeps one only under grad mode). output, hy and cy are CPU's
    forward's on both sides. Absent gradients: some outputs unused."""
    cases = []
    grads_sets = (("all gradients", (True, True, True)), ("grad_output only", (True, False, False)),
                  ("grad_hy and grad_cy only", (False, True, True)))
    for label, t, b, i, h, opt in _LAYER_SHAPES:
        operands = _layer_operands(ctx, t, b, i, h)
        reverse, biases = opt.get("reverse", False), opt.get("biases", True)
        layer = (*operands, reverse, [], 2, h, 1, biases, False, False, True)
        with torch.enable_grad():
            y, hy, cy, workspace = torch.ops.aten.mkldnn_rnn_layer(*layer)
        # Every set of absent gradients on the small layer and on a layer an engine's own
        # loop may take (hidden 64 without options: onednn's lstm_loop.cpp).
        for which, present in (grads_sets if not opt and t in (6, 16) else grads_sets[:1]):
            grads = [ctx.of(ctx.values(o.shape), grad=False) if p else None for o, p in zip((y, hy, cy), present)]
            cases.append(Case(f"{label}, {which}", *(ctx.of(v, grad=False) for v in operands),
                              *(ctx.of(o, grad=False) for o in (y, hy, cy)), *grads, reverse, 2, h, 1, biases, True,
                              False, [], False, _Workspace(workspace, layer)))
    return cases
