"""Case families of ``python -m openreg conformance`` for ops that combine many
input elements into each output: matmul, reductions, softmax, losses, layer and
batch norm, convolution and pooling (forward and backward). See
:mod:`openreg.conformance_cases`."""

import torch

from .conformance_cases import LAYOUT_CASES, Case, T, family_for, register


@register("mm", "addmm", "bmm", "baddbmm", grad=True, accumulates=True)
def _matmul_cases(ctx):
    """mm/addmm/bmm/baddbmm: odd shapes, K = 0, M = 0, transposed and sliced operands,
    broadcast bias, beta/alpha (beta = 0 ignores a NaN bias)."""
    batch = (3,) if ctx.base in ("bmm", "baddbmm") else ()
    with_bias = ctx.base in ("addmm", "baddbmm")

    def case(name, m, k, n, la="contiguous", lb="contiguous", bias="full", **kw):
        a = ctx.t(*batch, m, k, layout=la)
        b = ctx.t(*batch, k, n, layout=lb)
        if not with_bias:
            return Case(name, a, b)
        if bias == "row":
            c = ctx.t(n)
        elif bias == "sliced row":
            c = ctx.t(n, layout="sliced")
        elif bias == "column":
            c = ctx.t(m, 1)
        elif bias == "nan":
            c = ctx.of(torch.full(batch + (m, n), float("nan"), dtype=ctx.dtype))
        else:
            c = ctx.t(*batch, m, n)
        return Case(name, c, a, b, inplace_ok=bias not in ("row", "column"), **kw)

    cases = [
        case("5x7 @ 7x11", 5, 7, 11),
        case("37x41 @ 41x43", 37, 41, 43),
        case("1x1 @ 1x1", 1, 1, 1),
        case("transposed lhs", 5, 7, 11, la="transposed"),
        case("transposed rhs", 5, 7, 11, lb="transposed"),
        case("both transposed", 5, 7, 11, la="transposed", lb="transposed"),
        case("sliced lhs with gaps", 5, 7, 11, la="sliced"),
        case("K = 0", 5, 0, 11),
        case("M = 0", 0, 7, 11),
    ]
    if with_bias:
        cases.append(case("broadcast bias row", 5, 7, 11, bias="row"))
        # Rows enough for an engine's GEMM primitive rather than a small-M path:
        # a row bias (a Linear's) may be the primitive's bias argument, a column
        # bias may not.
        cases.append(case("broadcast bias row, 37x41 @ 41x43", 37, 41, 43, bias="row"))
        cases.append(case("broadcast bias column, 37x41 @ 41x43", 37, 41, 43, bias="column"))
        # alpha scales the product only, not the bias (a GEMM's own bias argument is
        # scaled with the product); a bias read through its strides.
        cases.append(case("broadcast bias row, alpha=2, 37x41 @ 41x43", 37, 41, 43, bias="row",
                          alpha=ctx.number(2.0, 3)))
        cases.append(case("broadcast bias row, alpha=0, 37x41 @ 41x43", 37, 41, 43, bias="row", alpha=0))
        cases.append(case("sliced bias row (gaps), 37x41 @ 41x43", 37, 41, 43, bias="sliced row"))
        cases.append(case("beta=0.5, alpha=2", 5, 7, 11, beta=ctx.number(0.5, 2), alpha=ctx.number(2.0, 3)))
        if ctx.floating:
            cases.append(case("beta=0 ignores a NaN bias", 5, 7, 11, bias="nan", beta=0))
    return cases


_ARG_REDUCTIONS = {"max", "min", "amax", "amin", "argmax", "argmin"}


@register("sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "prod",
         grad=True, accumulates=True)
def _reduction_cases(ctx):
    """Reductions over dims (lists, a single dim, None, keepdim) and full reductions.
    max/min/arg*: distinct values, so that indices are unambiguous."""
    if ctx.has("other"):  # max.other / min.other are binary elementwise ops
        return family_for("aten::maximum").cases(ctx)
    dom = "unique" if ctx.base in _ARG_REDUCTIONS else "any"
    out_dtypes = (ctx.dtype, torch.int64) if ctx.base in ("max", "min") else None
    if ctx.base in ("argmax", "argmin"):
        out_dtypes = (torch.int64,)

    def case(name, shape, *args, layout="contiguous", **kw):
        return Case(name, ctx.t(*shape, domain=dom, layout=layout), *args, out_dtypes=out_dtypes, **kw)

    if not ctx.has("dim"):
        return [case(name, shape if dom == "any" else _small(shape), layout=layout)
                for name, shape, layout in LAYOUT_CASES]
    kind = ctx.kind("dim")
    if kind == "IntType":  # max.dim: one dim
        dims = [("dim=1", 1), ("dim=0", 0), ("dim=-1", -1)]
    elif kind == "OptionalType" and "List" not in str(ctx.arguments["dim"].type):  # argmax: int?
        dims = [("dim=None", None), ("dim=1", 1), ("dim=-1", -1)]
    else:  # int[1]? / int[1]
        dims = [("dim=[1]", [1]), ("dim=[0, 2]", [0, 2]), ("dim=[-1]", [-1]), ("dim=[]", [])]
        if kind == "OptionalType":
            dims.append(("dim=None", None))
    cases = [case(f"3x5x11 {label}", (3, 5, 11), d, False) for label, d in dims]
    one = dims[0][1]
    last = dims[2][1]
    cases += [
        case(f"keepdim {dims[1][0]}", (3, 5, 11), dims[1][1], True),
        case(f"transposed 5x11 {dims[2][0]}", (5, 11), last, False, layout="transposed"),
        case(f"sliced with gaps 5x7 {dims[0][0]}", (5, 7), one, False, layout="sliced"),
        case(f"zero-size 0x7 {dims[0][0]}", (0, 7), one, False),
    ]
    if dom == "any":
        cases.append(case(f"5x7x11x13 {dims[0][0]}", (5, 7, 11, 13), one, False))
    if ctx.base in _ARG_REDUCTIONS and ctx.floating:
        # Rows longer than a vector register: a NaN in one (it wins, its first index),
        # a tie for the extremum in another (its first index), infinities, -0 and 0.
        rows = ctx.values((4, 37), dtype=torch.float64)
        rows[0, 20] = rows[0, 30] = float("nan")
        rows[1, 5] = rows[1, 30] = 9.0
        rows[1, 7] = rows[1, 31] = -9.0
        rows[2] = float("-inf")
        rows[2, 17] = float("inf")
        rows[3, :4] = torch.tensor([-0.0, 0.0, -0.0, 0.0])
        x = ctx.of(rows.to(ctx.dtype))
        cases.append(Case(f"NaN, ties, infinities 4x37 {dims[2][0]}", x, last, False, out_dtypes=out_dtypes))
        cases.append(Case(f"NaN, ties, infinities 4x37 {dims[1][0]}", x, dims[1][1], False, out_dtypes=out_dtypes))
    if dom == "any" and isinstance(one, list):
        # Sums over outer dims with a wide contiguous run kept (bias gradients):
        # engines add whole rows; blocks of rows and of columns, and their tails.
        cases += [
            case("bias gradient 150x40 dim=[0]", (150, 40), [0], False),
            case("outer dims 3x50x40 dim=[0, 1] keepdim", (3, 50, 40), [0, 1], True),
            case("wide 6x700 dim=[0]", (6, 700), [0], False),
        ]
        # A middle dim of a permuted layout, the unit-stride inner dim kept (GQA's
        # key/value gradients): rows added whole in engines.
        values = ctx.values((4, 3, 6, 40))
        permuted = T(values.transpose(1, 2).contiguous(), lambda x: x.transpose(1, 2))
        cases.append(Case("permuted 4x3x6x40, dim=[1], inner kept", permuted, [1], False, out_dtypes=out_dtypes))
    return cases


def _small(shape):
    """A shape with at most 256 elements (distinct values stay exact in bfloat16)."""
    return (3, 5, 11) if len(shape) > 2 else shape


@register("_softmax", "_log_softmax", grad=True, accumulates=True)
def _softmax_cases(ctx):
    """_softmax/_log_softmax over each dim, strided inputs, large logits, width 1."""
    def case(name, x, dim):
        return Case(name, x, dim, False)

    return [
        case("5x7x11 dim=-1", ctx.t(5, 7, 11), -1),
        # rows of 16+ elements: the vector body of engines' row loops, not only the tail
        case("32x128 dim=-1", ctx.t(32, 128), -1),
        case("7x40 dim=-1", ctx.t(7, 40), -1),
        case("large logits 7x40 (x30) dim=-1", ctx.of(ctx.values((7, 40)) * 30), -1),
        case("5x7x11 dim=1", ctx.t(5, 7, 11), 1),
        case("5x7x11 dim=0", ctx.t(5, 7, 11), 0),
        case("transposed 7x11 dim=-1", ctx.t(7, 11, layout="transposed"), -1),
        case("sliced with gaps 5x7 dim=1", ctx.t(5, 7, layout="sliced"), 1),
        case("large logits (x30)", ctx.of(ctx.values((5, 11)) * 30), 1),
        # logits far from 0: x - max must come first (x - (max + log(sum)) rounds at
        # max's scale, 5e-4 off near 1e4); a contiguous row and strided lines
        case("logits near 1e4 7x40 dim=-1", ctx.of(ctx.values((7, 40)) + 1e4), -1),
        case("logits near 1e4 5x7x11 dim=1", ctx.of(ctx.values((5, 7, 11)) + 1e4), 1),
        # enough rows for engines to split them across threads
        case("300x130 dim=-1 (rows in parallel chunks)", ctx.t(300, 130), -1),
        case("a NaN and a -inf in 6x40 dim=-1", ctx.of(_with_nan_and_neg_inf(ctx.values((6, 40)))), -1),
        case("width 1", ctx.t(5, 1), 1),
        # over dim 0 of [3, 1] (the softmax dim innermost, as the last): an infinity
        # makes the row NaN (inf - inf), a 0-dim infinity too
        case("+inf in 3x1 dim=0", ctx.of(torch.tensor([[float("inf")], [0.3], [-1.0]], dtype=ctx.dtype)), 0)
        if ctx.floating else case("3x1 dim=0", ctx.t(3, 1), 0),
        case("0-dim -inf", ctx.of(torch.tensor(float("-inf"), dtype=ctx.dtype)), 0)
        if ctx.floating else case("0-dim", ctx.t(), 0),
        case("zero-size 0x7 dim=1", ctx.t(0, 7), 1),
        case("0-dim", ctx.t(), 0),
    ]


def _with_nan_and_neg_inf(v):
    """A copy of v with a NaN in row 1 and a -inf in row 3."""
    v = v.clone()
    v[1, 5] = float("nan")
    v[3, 17] = float("-inf")
    return v


@register("_softmax_backward_data", "_log_softmax_backward_data", accumulates=True)
def _softmax_backward_cases(ctx):
    """(grad_output, output of the forward on CPU, dim, input dtype)."""
    forward = torch.ops.aten._log_softmax if ctx.base.startswith("_log") else torch.ops.aten._softmax

    def case(name, shape, dim, layout="contiguous", nan=False):
        x = ctx.values(shape)
        if nan:
            x = _with_nan_and_neg_inf(x)
        out = forward.default(x, dim, False)
        g = ctx.values(shape)
        if nan:
            g[2, 3] = float("nan")
        return Case(name, ctx.of(g, layout), ctx.of(out, layout), dim, ctx.dtype)

    return [
        case("5x7x11 dim=-1", (5, 7, 11), -1),
        case("300x130 dim=-1 (rows in parallel chunks)", (300, 130), -1),
        case("NaNs and a -inf in 6x40 dim=-1", (6, 40), -1, nan=True),
        case("5x7x11 dim=1", (5, 7, 11), 1),
        # rows of 16+ elements: the vector body of engines' row loops and a tail
        case("7x40 dim=-1", (7, 40), -1),
        case("transposed 7x11 dim=-1", (7, 11), -1, "transposed"),
        case("sliced with gaps 5x7 dim=1", (5, 7), 1, "sliced"),
        case("zero-size 0x7 dim=1", (0, 7), 1),
        case("0-dim", (), 0),
    ]


_REDUCTIONS = (("none", 0), ("mean", 1), ("sum", 2))


@register("mse_loss", grad=True, accumulates=True)
def _mse_loss_cases(ctx):
    """mse_loss for each reduction, strided input, zero-size, 0-dim."""
    cases = [Case(f"5x7x11 reduction={name}", ctx.t(5, 7, 11), ctx.t(5, 7, 11), r) for name, r in _REDUCTIONS]
    cases += [
        # enough contiguous elements for engines' blocked sums
        Case("67x41 reduction=mean", ctx.t(67, 41), ctx.t(67, 41), 1),
        Case("transposed input, mean", ctx.t(7, 11, layout="transposed"), ctx.t(7, 11), 1),
        Case("sliced target, sum", ctx.t(5, 7), ctx.t(5, 7, layout="sliced"), 2),
        Case("zero-size, sum", ctx.t(0, 7), ctx.t(0, 7), 2),
        Case("0-dim, mean", ctx.t(), ctx.t(), 1),
    ]
    return cases


@register("mse_loss_backward", accumulates=True)
def _mse_loss_backward_cases(ctx):
    """(grad_output, self, target, reduction)."""
    cases = []
    for name, r in _REDUCTIONS:
        grad = ctx.t(5, 7, 11) if r == 0 else ctx.t()
        cases.append(Case(f"5x7x11 reduction={name}", grad, ctx.t(5, 7, 11), ctx.t(5, 7, 11), r))
    cases.append(Case("transposed input, mean", ctx.t(), ctx.t(7, 11, layout="transposed"), ctx.t(7, 11), 1))
    cases.append(Case("zero-size, sum", ctx.t(), ctx.t(0, 7), ctx.t(0, 7), 2))
    return cases


@register("smooth_l1_loss", grad=True, accumulates=True)
def _smooth_l1_loss_cases(ctx):
    """smooth_l1_loss(self, target, reduction, beta) for each reduction; beta 1 (the
    default), 0.5 and 0 (the L1 loss); |self - target| on both sides of beta and at it."""
    cases = [Case(f"5x7x11 reduction={name}", ctx.t(5, 7, 11), ctx.t(5, 7, 11), r) for name, r in _REDUCTIONS]
    diffs = torch.tensor([-2.0, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 2.0], dtype=ctx.dtype).repeat(8)
    target = ctx.values(diffs.shape)
    cases += [
        Case("67x41 reduction=mean, beta=0.5", ctx.t(67, 41), ctx.t(67, 41), 1, 0.5),
        Case("differences at and around beta=0.5, none", ctx.of(target + diffs), ctx.of(target), 0, 0.5),
        Case("beta=0 (L1), sum", ctx.t(5, 7), ctx.t(5, 7), 2, 0.0),
        Case("transposed input, mean", ctx.t(7, 11, layout="transposed"), ctx.t(7, 11), 1),
        Case("sliced target, sum", ctx.t(5, 7), ctx.t(5, 7, layout="sliced"), 2),
        Case("broadcast target, none", ctx.t(5, 7), ctx.t(7), 0),
        Case("zero-size, sum", ctx.t(0, 7), ctx.t(0, 7), 2),
    ]
    return cases


@register("smooth_l1_loss_backward", accumulates=True)
def _smooth_l1_loss_backward_cases(ctx):
    """(grad_output, self, target, reduction, beta)."""
    cases = []
    for (name, r), beta in zip(_REDUCTIONS, (1.0, 0.5, 0.0)):
        grad = ctx.t(5, 7, 11) if r == 0 else ctx.t()
        cases.append(Case(f"5x7x11 reduction={name}, beta={beta}", grad, ctx.t(5, 7, 11), ctx.t(5, 7, 11), r, beta))
    diffs = torch.tensor([-2.0, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 2.0], dtype=ctx.dtype).repeat(8)
    target = ctx.values(diffs.shape)
    cases.append(Case("differences at and around beta=0.5, mean", ctx.t(), ctx.of(target + diffs), ctx.of(target), 1,
                      0.5))
    cases.append(Case("transposed input, mean", ctx.t(), ctx.t(7, 11, layout="transposed"), ctx.t(7, 11), 1, 1.0))
    cases.append(Case("zero-size, sum", ctx.t(), ctx.t(0, 7), ctx.t(0, 7), 2, 1.0))
    return cases


def _nll_inputs(ctx, n, c, ignore=None):
    """(log-probabilities (n, c) or (c,), int64 targets, positive class weights)."""
    shape = (n, c) if n is not None else (c,)
    logp = torch.ops.aten._log_softmax.default(ctx.values(shape), -1, False)
    target = torch.randint(0, c, (n,) if n is not None else (), generator=ctx.gen)
    if ignore is not None and n:
        target[::3] = ignore
    weight = ctx.values((c,), "positive")
    return logp, target, weight


def _nll_cases(ctx):
    """(name, logp, target, weight or None, reduction, ignore_index) for nll_loss."""
    out = []
    logp, target, weight = _nll_inputs(ctx, 7, 5)
    for name, r in _REDUCTIONS:
        out.append((f"7x5 reduction={name}", logp, target, None, r, -100))
    out.append(("class weights, mean", logp, target, weight, 1, -100))
    out.append(("class weights, none", logp, target, weight, 0, -100))
    logp2, target2, _ = _nll_inputs(ctx, 7, 5, ignore=2)
    out.append(("ignore_index=2, mean", logp2, target2, weight, 1, 2))
    logp3, target3, _ = _nll_inputs(ctx, None, 5)
    out.append(("1-d input, 0-dim target", logp3, target3, None, 1, -100))
    return out


@register("nll_loss_forward", grad=True, accumulates=True)
def _nll_loss_forward_cases(ctx):
    """(self, target, weight, reduction, ignore_index) -> (output, total_weight)."""
    return [Case(name, ctx.of(logp), T(target, grad=False), ctx.of(w, grad=False) if w is not None else None,
                 r, ignore, out_dtypes=(ctx.dtype, ctx.dtype))
            for name, logp, target, w, r, ignore in _nll_cases(ctx)]


@register("nll_loss_backward", accumulates=True)
def _nll_loss_backward_cases(ctx):
    """(grad_output, self, target, weight, reduction, ignore_index, total_weight)."""
    cases = []
    for name, logp, target, w, r, ignore in _nll_cases(ctx):
        logp = logp.to(ctx.dtype)
        wt = w.to(ctx.dtype) if w is not None else None
        out, total = torch.ops.aten.nll_loss_forward.default(logp, target, wt, r, ignore)
        grad = ctx.t(*out.shape)
        cases.append(Case(name, grad, ctx.of(logp), T(target, grad=False),
                          ctx.of(wt) if wt is not None else None, r, ignore, ctx.of(total)))
    return cases


@register("native_layer_norm", grad=True, accumulates=True)
def _layer_norm_cases(ctx):
    """(input, normalized_shape, weight, bias, eps) -> (out, mean, rstd)."""
    def case(name, x, normalized, w, b):
        return Case(name, x, normalized, w, b, 1e-5, loose=(1, 2))

    return [
        case("5x7x11 over [11]", ctx.t(5, 7, 11), [11], ctx.t(11), ctx.t(11)),
        case("no weight, no bias", ctx.t(5, 7, 11), [11], None, None),
        case("over [7, 11]", ctx.t(5, 7, 11), [7, 11], ctx.t(7, 11), ctx.t(7, 11)),
        case("transposed input", ctx.t(5, 11, 7, layout="transposed"), [7], ctx.t(7), ctx.t(7)),
        case("sliced input with gaps", ctx.t(5, 13, layout="sliced"), [13], ctx.t(13), None),
        case("mean offset 10", ctx.of(ctx.values((5, 7, 11)) + 10), [11], ctx.t(11), ctx.t(11)),
        # rows of 70: the 32-wide body of engines' row loops and a tail
        case("3x5x70 over [70]", ctx.t(3, 5, 70), [70], ctx.t(70), ctx.t(70)),
        # 64000 elements: past engines' small-input row loops (onednn's primitive from 8K)
        case("1000x64 over [64]", ctx.t(1000, 64), [64], ctx.t(64), ctx.t(64)),
        case("zero-size batch", ctx.t(0, 11), [11], ctx.t(11), ctx.t(11)),
    ]


@register("native_layer_norm_backward", accumulates=True)
def _layer_norm_backward_cases(ctx):
    """(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask)."""
    def case(name, shape, normalized, affine=True, mask=(True, True, True), layout="contiguous"):
        x = ctx.values(shape)
        w = ctx.values(normalized) if affine else None
        b = ctx.values(normalized) if affine else None
        _, mean, rstd = torch.ops.aten.native_layer_norm.default(x, list(normalized), w, b, 1e-5)
        return Case(name, ctx.t(*shape, layout=layout), ctx.of(x, layout), list(normalized), ctx.of(mean),
                    ctx.of(rstd), ctx.of(w) if affine else None, ctx.of(b) if affine else None, list(mask))

    return [
        case("5x7x11 over [11]", (5, 7, 11), (11,)),
        case("over [7, 11]", (5, 7, 11), (7, 11)),
        case("3x5x70 over [70]", (3, 5, 70), (70,)),
        case("3x5x70, no weight", (3, 5, 70), (70,), affine=False, mask=(True, False, False)),
        # 64000 elements: engines' row loops sum the parameter gradients per block of rows
        case("1000x64 over [64]", (1000, 64), (64,)),
        case("1000x64, no input gradient", (1000, 64), (64,), mask=(False, True, True)),
        case("no weight, no bias", (5, 7, 11), (11,), affine=False, mask=(True, False, False)),
        case("grad_input only", (5, 7, 11), (11,), mask=(True, False, False)),
        case("transposed input", (5, 11, 7), (7,), layout="transposed"),
        case("zero-size batch", (0, 11), (11,)),
    ]



def _group_dims(shape):
    """(N, C, HxW) of an input seen as group norm sees it."""
    hxw = 1
    for s in shape[2:]:
        hxw *= s
    return shape[0], shape[1], hxw


# (name, input shape, groups, affine, input layout)
_GROUP_NORMS = (
    ("2x6x5x7 in 3 groups", (2, 6, 5, 7), 3, True, "contiguous"),
    ("no weight, no bias", (2, 6, 5, 7), 2, False, "contiguous"),
    ("one group (layer norm over C, H, W)", (3, 4, 5), 1, True, "contiguous"),
    ("a group per channel (instance norm)", (2, 4, 9), 4, True, "contiguous"),
    # groups of 4 values: in groups of 2, two near-equal values (rstd 53) made torch CPU's
    # float32 input gradient 5e-4 off float64's, 28 times the engines' error
    ("2-d input [N, C]", (5, 12), 3, True, "contiguous"),
    ("3-d spatial 2x4x3x3x3", (2, 4, 3, 3, 3), 2, True, "contiguous"),
    # groups of 2 x 37 elements: the lanes' tail; and sums past one flush of the lanes
    ("odd rows 3x4x37", (3, 4, 37), 2, True, "contiguous"),
    ("groups of 4096 (8x32x32x32 in 8 groups)", (8, 32, 32, 32), 8, True, "contiguous"),
    ("channels-last input", (2, 6, 5, 7), 3, True, "channels_last"),
    ("sliced input with gaps", (2, 6, 9), 3, True, "sliced"),
    ("zero-size batch", (0, 6, 5), 3, True, "contiguous"),
)


@register("native_group_norm", grad=True, accumulates=True)
def _group_norm_cases(ctx):
    """(input, weight, bias, N, C, HxW, group, eps) -> (out, mean, rstd)."""
    cases = []
    for name, shape, groups, affine, layout in _GROUP_NORMS:
        x = ctx.t(*shape, layout=layout)
        w = ctx.t(shape[1]) if affine else None
        b = ctx.t(shape[1]) if affine else None
        cases.append(Case(name, x, w, b, *_group_dims(shape), groups, 1e-5, loose=(1, 2)))
    x = ctx.of(ctx.values((2, 6, 5, 7)) + 10)
    cases.append(Case("mean offset 10", x, ctx.t(6), ctx.t(6), 2, 6, 35, 3, 1e-5, loose=(1, 2)))
    return cases


@register("native_group_norm_backward", accumulates=True)
def _group_norm_backward_cases(ctx):
    """(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask)."""
    cases = []
    masks = {"no weight, no bias": (True, False, False), "a group per channel (instance norm)": (False, True, True)}
    for name, shape, groups, affine, layout in _GROUP_NORMS:
        x = ctx.values(shape)
        w = ctx.values((shape[1],)) if affine else None
        n, c, hxw = _group_dims(shape)
        _, mean, rstd = torch.ops.aten.native_group_norm.default(x, w, None, n, c, hxw, groups, 1e-5)
        mask = list(masks.get(name, (True, affine, affine)))
        cases.append(Case(name, ctx.t(*shape, layout=layout), ctx.of(x, layout), ctx.of(mean), ctx.of(rstd),
                          ctx.of(w) if affine else None, n, c, hxw, groups, mask))
    return cases

# (name, input shape, weight shape, bias, stride, padding, dilation, transposed,
#  output_padding, groups, input layout)
_CONVOLUTIONS = (
    ("2x3x11x13, 3x3, padding 1", (2, 3, 11, 13), (5, 3, 3, 3), True, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, "contiguous"),
    ("stride 2, 3x5 kernel, no bias", (2, 3, 11, 13), (4, 3, 3, 5), False, [2, 2], [0, 0], [1, 1], False, [0, 0], 1, "contiguous"),
    ("dilation 2", (2, 3, 11, 13), (5, 3, 3, 3), True, [1, 1], [2, 2], [2, 2], False, [0, 0], 1, "contiguous"),
    ("groups 2", (2, 4, 11, 13), (6, 2, 3, 3), True, [1, 1], [1, 1], [1, 1], False, [0, 0], 2, "contiguous"),
    ("depthwise", (2, 3, 7, 11), (3, 1, 3, 3), True, [1, 1], [1, 1], [1, 1], False, [0, 0], 3, "contiguous"),
    ("1x1 kernel", (2, 3, 7, 11), (7, 3, 1, 1), True, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, "contiguous"),
    ("channels-last input", (2, 3, 11, 13), (5, 3, 3, 3), True, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, "channels_last"),
    ("1-d", (2, 3, 13), (5, 3, 3), True, [1], [1], [1], False, [0], 1, "contiguous"),
    ("transposed, stride 2", (2, 3, 7, 11), (3, 5, 3, 3), True, [2, 2], [1, 1], [1, 1], True, [1, 1], 1, "contiguous"),
    ("1x1 stride 2, even size (ResNet downsampling)", (2, 3, 8, 10), (5, 3, 1, 1), False, [2, 2], [0, 0], [1, 1], False, [0, 0], 1, "contiguous"),
    ("1x1 stride 2x3, bias, channels-last input", (2, 3, 7, 11), (5, 3, 1, 1), True, [2, 3], [0, 0], [1, 1], False, [0, 0], 1, "channels_last"),
    ("3x3 stride 3, last rows skipped", (2, 3, 13, 14), (4, 3, 3, 3), True, [3, 3], [0, 0], [1, 1], False, [0, 0], 1, "contiguous"),
    ("transposed, output_padding beyond padding", (2, 3, 5, 6), (3, 5, 3, 3), True, [2, 2], [0, 0], [1, 1], True, [1, 1], 1, "contiguous"),
    ("zero batch", (0, 3, 11, 13), (5, 3, 3, 3), True, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, "contiguous"),
    # An empty output (padding eats the rows): the input's gradient is zeros, not left
    # as it was allocated.
    ("transposed, empty output", (2, 6, 3, 7), (6, 2, 2, 1), False, [1, 1], [2, 1], [1, 2], True, [0, 0], 3, "contiguous"),
    # Small output images with 128 output channels: onednn's GEMM path (up to 4x4 outputs below
    # AVX-512, up to 2x2 with it).
    ("2x2 output, 128 channels", (4, 32, 2, 2), (128, 32, 3, 3), True, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, "contiguous"),
    ("4x4 output, 128 channels, channels-last input", (2, 8, 4, 4), (128, 8, 3, 3), True, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, "channels_last"),
    ("1x3 output, stride 2, dilation 2, no bias", (3, 16, 3, 7), (128, 16, 3, 3), False, [2, 2], [1, 1], [2, 2], False, [0, 0], 1, "contiguous"),
)


def _conv_bias_size(w_shape, transposed, groups):
    return w_shape[1] * groups if transposed else w_shape[0]


@register("convolution", grad=True, accumulates=True)
def _convolution_cases(ctx):
    """aten::convolution: padding, stride, dilation, groups, 1-d, transposed, channels-last."""
    cases = []
    for name, xs, ws, bias, stride, pad, dil, tr, opad, groups, layout in _CONVOLUTIONS:
        b = ctx.t(_conv_bias_size(ws, tr, groups)) if bias else None
        cases.append(Case(name, ctx.t(*xs, layout=layout), ctx.t(*ws), b, stride, pad, dil, tr, opad, groups))
    return cases


@register("convolution_backward", accumulates=True)
def _convolution_backward_cases(ctx):
    """(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    output_padding, groups, output_mask), grad_output shaped by the CPU forward."""
    cases = []
    for name, xs, ws, bias, stride, pad, dil, tr, opad, groups, layout in _CONVOLUTIONS:
        x, w = ctx.values(xs), ctx.values(ws)
        try:
            out = torch.ops.aten.convolution.default(x, w, None, stride, pad, dil, tr, opad, groups)
        except RuntimeError:  # torch CPU refuses the empty output in some dtypes (float64): no case
            continue
        bias_sizes = [_conv_bias_size(ws, tr, groups)] if bias else None
        cases.append(Case(name, ctx.t(*out.shape), ctx.of(x, layout), ctx.of(w), bias_sizes, stride, pad, dil,
                          tr, opad, groups, [True, True, bias]))
    return cases


# (name, input shape, kernel, stride, padding, dilation, ceil_mode, layout); at most
# 256 elements, so that distinct values stay exact in bfloat16 (no ties).
_POOLS = (
    ("1x2x11x11, 3x3 stride 2 padding 1", (1, 2, 11, 11), [3, 3], [2, 2], [1, 1], [1, 1], False, "contiguous"),
    ("ceil_mode", (1, 2, 11, 11), [3, 3], [2, 2], [1, 1], [1, 1], True, "contiguous"),
    ("default stride", (1, 2, 11, 11), [2, 2], [], [0, 0], [1, 1], False, "contiguous"),
    ("dilation 2", (1, 2, 11, 11), [3, 3], [1, 1], [1, 1], [2, 2], False, "contiguous"),
    ("2x3 kernel, stride 1x2", (2, 1, 7, 13), [2, 3], [1, 2], [0, 1], [1, 1], False, "contiguous"),
    ("no batch dim", (2, 11, 11), [3, 3], [2, 2], [1, 1], [1, 1], False, "contiguous"),
    ("channels-last input", (1, 2, 11, 11), [3, 3], [2, 2], [1, 1], [1, 1], False, "channels_last"),
    # 2x2 stride 2, which engines may run as vectors of windows: planes smaller than a
    # vector, a count of windows that leaves a part-vector at the end, an odd height
    # (the last row unused), planes that are not one after another (expanded batch).
    ("2x2 stride 2, 8x8 planes", (1, 3, 8, 8), [2, 2], [2, 2], [0, 0], [1, 1], False, "contiguous"),
    ("2x2 stride 2, 2x4 planes", (1, 3, 2, 4), [2, 2], [2, 2], [0, 0], [1, 1], False, "contiguous"),
    ("2x2 stride 2, 5x16 planes", (1, 2, 5, 16), [2, 2], [2, 2], [0, 0], [1, 1], False, "contiguous"),
    ("2x2 stride 2, expanded batch", (2, 2, 4, 16), [2, 2], [2, 2], [0, 0], [1, 1], False, "expanded"),
    # ceil_mode with an odd height and width: the last window of each row and column
    # hangs over the edge and holds fewer elements (a 2x2 loop must not read past it).
    # 5x7: 4 windows a row; 3x15: 8 (a whole vector of them).
    ("2x2 stride 2 ceil_mode, 5x7 planes", (2, 3, 5, 7), [2, 2], [2, 2], [0, 0], [1, 1], True, "contiguous"),
    ("2x2 stride 2 ceil_mode, 3x15 planes", (1, 2, 3, 15), [2, 2], [2, 2], [0, 0], [1, 1], True, "contiguous"),
    ("3x3 stride 2 padding 1, 40 wide", (1, 1, 5, 40), [3, 3], [2, 2], [1, 1], [1, 1], False, "contiguous"),
    # Other windows in vectors along a row (stride 1, also dilated) and a column at a
    # time (stride 3), with a part-vector at each row's end.
    ("3x3 stride 1 padding 1, 40 wide", (1, 1, 5, 40), [3, 3], [1, 1], [1, 1], [1, 1], False, "contiguous"),
    ("2x3 kernel, stride 1, dilation 2x3, 24 wide", (1, 1, 8, 24), [2, 3], [1, 1], [1, 1], [2, 3], False,
     "contiguous"),
    ("3x3 stride 3, 30 wide", (1, 1, 6, 30), [3, 3], [3, 3], [0, 0], [1, 1], True, "contiguous"),
)


@register("max_pool2d_with_indices", grad=True)
def _max_pool_cases(ctx):
    """(self, kernel_size, stride, padding, dilation, ceil_mode) -> (out, indices)."""
    cases = [Case(name, ctx.t(*shape, domain="unique", layout=layout), k, s, p, d, ceil,
                  out_dtypes=(ctx.dtype, torch.int64))
             for name, shape, k, s, p, d, ceil, layout in _POOLS]
    # Equal values (the first in ATen's order wins: two values, so most windows hold
    # ties) and NaN (always wins; every 11th element, so that windows with one NaN
    # have it in each of their places), 2x2 stride 2 and 3x3 stride 2 padding 1.
    # 8-wide planes (several per vector) and 40-wide ones (vectors along a row).
    for shape in ((2, 3, 4, 8), (1, 2, 5, 40)):
        x = (ctx.values(shape, "ties") > 0).to(ctx.dtype)
        if x.is_floating_point():
            x.view(-1)[3::11] = float("nan")
        wide = "x".join(map(str, shape))
        for name, k, s, p in (("2x2 stride 2", [2, 2], [2, 2], [0, 0]),
                              ("3x3 stride 2 padding 1", [3, 3], [2, 2], [1, 1]),
                              ("3x3 stride 1 padding 1", [3, 3], [1, 1], [1, 1])):
            cases.append(Case(f"ties and NaN, {wide}, {name}", ctx.of(x), k, s, p, [1, 1], False,
                              out_dtypes=(ctx.dtype, torch.int64)))
    return cases


@register("max_pool2d_with_indices_backward", accumulates=True)
def _max_pool_backward_cases(ctx):
    """(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices)."""
    cases = []
    for name, shape, k, s, p, d, ceil, layout in _POOLS:
        x = ctx.values(shape, "unique")
        out, idx = torch.ops.aten.max_pool2d_with_indices.default(x, k, s, p, d, ceil)
        cases.append(Case(name, ctx.t(*out.shape), ctx.of(x, layout), k, s or k, p, d, ceil, T(idx, grad=False)))
    return cases


# (name, input shape, kernel, stride, padding, ceil_mode, count_include_pad,
#  divisor_override, layout)
_AVG_POOLS = (
    ("2x3x11x13, 3x3 stride 2 padding 1", (2, 3, 11, 13), [3, 3], [2, 2], [1, 1], False, True, None, "contiguous"),
    ("count_include_pad=False", (2, 3, 11, 13), [3, 3], [2, 2], [1, 1], False, False, None, "contiguous"),
    ("ceil_mode with padding", (1, 2, 11, 11), [3, 3], [2, 2], [1, 1], True, True, None, "contiguous"),
    ("ceil_mode, count_include_pad=False", (1, 2, 11, 11), [3, 3], [2, 2], [1, 1], True, False, None, "contiguous"),
    # The last window starts in the padding's range and ends past it: ATen's divisor
    # counts padding up to the declared padding only.
    ("ceil_mode, last window past the padding", (1, 2, 10, 10), [3, 3], [2, 2], [1, 1], True, True, None,
     "contiguous"),
    ("divisor_override=5", (2, 3, 11, 13), [3, 3], [2, 2], [1, 1], False, True, 5, "contiguous"),
    ("default stride", (2, 3, 11, 13), [2, 2], [], [0, 0], False, True, None, "contiguous"),
    ("2x3 kernel, stride 1x2, padding 0x1", (2, 1, 7, 13), [2, 3], [1, 2], [0, 1], False, True, None, "contiguous"),
    ("no batch dim", (3, 11, 13), [3, 3], [2, 2], [1, 1], False, True, None, "contiguous"),
    ("channels-last input", (2, 3, 11, 13), [3, 3], [2, 2], [1, 1], False, True, None, "channels_last"),
    ("sliced input with gaps", (2, 3, 7, 11), [2, 2], [2, 2], [0, 0], False, True, None, "sliced"),
    ("zero batch", (0, 3, 7, 7), [3, 3], [2, 2], [1, 1], False, True, None, "contiguous"),
)


@register("avg_pool2d", grad=True, accumulates=True)
def _avg_pool_cases(ctx):
    """(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)."""
    return [Case(name, ctx.t(*shape, layout=layout), k, s, p, ceil, include_pad, divisor)
            for name, shape, k, s, p, ceil, include_pad, divisor, layout in _AVG_POOLS]


@register("avg_pool2d_backward", accumulates=True)
def _avg_pool_backward_cases(ctx):
    """(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
    divisor_override), grad_output shaped by the CPU forward."""
    cases = []
    for name, shape, k, s, p, ceil, include_pad, divisor, layout in _AVG_POOLS:
        x = ctx.values(shape)
        out = torch.ops.aten.avg_pool2d.default(x, k, s, p, ceil, include_pad, divisor)
        cases.append(Case(name, ctx.t(*out.shape), ctx.of(x, layout), k, s or k, p, ceil, include_pad, divisor))
    return cases


@register("native_batch_norm", grad=True, accumulates=True)
def _batch_norm_cases(ctx):
    """(input, weight, bias, running_mean, running_var, training, momentum, eps); the
    running statistics it updates are compared too."""
    def stats(c):
        return ctx.t(c, grad=False), ctx.t(c, domain="positive", grad=False)

    def case(name, shape, training, affine=True, running=True, layout="contiguous", offset=0.0):
        c = shape[1]
        w, b = (ctx.t(c), ctx.t(c)) if affine else (None, None)
        rm, rv = stats(c) if running else (None, None)
        x = ctx.of(ctx.values(shape) + offset, layout) if offset else ctx.t(*shape, layout=layout)
        return Case(name, x, w, b, rm, rv, training, 0.1, 1e-5, loose=(1, 2))

    return [
        case("4x3x5x7 training", (4, 3, 5, 7), True),
        case("training without running stats", (4, 3, 5, 7), True, running=False),
        case("eval", (4, 3, 5, 7), False),
        case("eval, no affine", (4, 3, 5, 7), False, affine=False),
        case("eval, 2-d input", (7, 3), False),
        case("eval, channels-last input", (4, 3, 5, 7), False, layout="channels_last"),
        case("no affine", (4, 3, 5, 7), True, affine=False),
        case("2-d input", (7, 3), True),
        case("3-d input", (4, 3, 9), True),
        case("3-d sliced input", (4, 3, 9), True, layout="sliced"),
        case("5-d input", (2, 3, 2, 3, 4), True),
        case("channels-last input", (4, 3, 5, 7), True, layout="channels_last"),
        # Statistics summed in float lose the variance of values far from 0 (oneDNN
        # 2.6's own: y off CPU's by 2.9e-4 here; engines/onednn/ops_norm.cpp).
        case("training, 2048 values a channel near 100", (8, 16, 16, 16), True, offset=100.0),
    ]


@register("native_batch_norm_backward", accumulates=True)
def _batch_norm_backward_cases(ctx):
    """(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd,
    train, eps, output_mask), saved statistics from the CPU forward."""
    def case(name, shape, train, mask=(True, True, True), layout="contiguous"):
        c = shape[1]
        x, w = ctx.values(shape), ctx.values((c,))
        rm, rv = ctx.values((c,)), ctx.values((c,), "positive")
        _, mean, invstd = torch.ops.aten.native_batch_norm.default(x, w, None, rm.clone(), rv.clone(), train, 0.1, 1e-5)
        saved = (ctx.of(mean), ctx.of(invstd)) if train else (None, None)
        return Case(name, ctx.t(*shape, layout=layout), ctx.of(x, layout), ctx.of(w), ctx.of(rm), ctx.of(rv),
                    *saved, train, 1e-5, list(mask))

    return [
        case("4x3x5x7 training", (4, 3, 5, 7), True),
        case("eval", (4, 3, 5, 7), False),
        case("grad_input only", (4, 3, 5, 7), True, mask=(True, False, False)),
        case("2-d input", (7, 3), True),
        case("3-d input", (4, 3, 9), True),
        case("3-d transposed input", (4, 3, 9), True, layout="transposed"),
        case("5-d input", (2, 3, 2, 3, 4), True),
        case("channels-last input", (4, 3, 5, 7), True, layout="channels_last"),
    ]
