"""Case families of ``python -m openreg conformance`` for the tensor plumbing real
models call between the heavy ops: tril/triu (causal masks), isneginf/isposinf,
all/any, arange (positions), embedding_dense_backward and bitwise and/or/xor. See
:mod:`openreg.conformance_cases`."""

import torch

from .conformance_cases import LAYOUT_CASES, Case, T, register

_SPECIALS = (float("-inf"), float("inf"), float("nan"), -0.0)


def _with_specials(ctx, values):
    """``values`` with -inf, inf, NaN and -0.0 written at seeded places (floats only)."""
    if not values.is_floating_point() or values.numel() == 0:
        return values
    flat = values.reshape(-1).clone()
    where = torch.randint(0, flat.numel(), (max(4, flat.numel() // 4),), generator=ctx.gen)
    for i, at in enumerate(where.tolist()):
        flat[at] = _SPECIALS[i % len(_SPECIALS)]
    return flat.reshape(values.shape)


@register("tril", "triu")
def _triangle_cases(ctx):
    """(self, diagonal): square, wide and tall matrices, diagonals inside and past
    the matrix, batches, strided selfs (in-place only where self owns its memory)."""
    def case(name, shape, diagonal, layout="contiguous", inplace_ok=True):
        return Case(name, ctx.t(*shape, layout=layout), diagonal, inplace_ok=inplace_ok)

    return [
        case("7x7 k=0", (7, 7), 0),
        case("5x9 k=1", (5, 9), 1),
        case("9x5 k=-2", (9, 5), -2),
        case("5x7 k=12 (past the corner)", (5, 7), 12),
        case("5x7 k=-12 (past the corner)", (5, 7), -12),
        case("batched 3x4x6 k=0", (3, 4, 6), 0),
        case("batched 2x3x5x5 k=-1", (2, 3, 5, 5), -1),
        case("transposed 7x11 k=2", (7, 11), 2, "transposed"),
        case("sliced with gaps 5x7 k=0", (5, 7), 0, "sliced"),
        case("expanded batch 3x5x7 k=1", (3, 5, 7), 1, "expanded", inplace_ok=False),
        # One value along each row (stride 0 on the last dim), as the gradient of a sum.
        Case("rows broadcast 2x5x7 k=1", T(ctx.values((2, 5, 1)), lambda x: x.expand(2, 5, 7), True), 1,
             inplace_ok=False),
        case("zero-size 0x7", (0, 7), 0),
        case("zero-size 3x0x4", (3, 0, 4), 0),
        case("causal mask 64x64 (parallel path)", (64, 600), 0),
    ]


@register("isneginf", "isposinf")
def _signed_inf_cases(ctx):
    """Inputs holding -inf, inf, NaN and -0.0 (floats), in every layout."""
    layouts = (
        ("5x7x11", (5, 7, 11), "contiguous"),
        ("transposed 7x11", (7, 11), "transposed"),
        ("sliced with gaps 5x7", (5, 7), "sliced"),
        ("expanded (stride 0) 5x7", (5, 7), "expanded"),
        ("zero-size 0x7", (0, 7), "contiguous"),
        ("0-dim", (), "contiguous"),
        ("300x257 (parallel path)", (300, 257), "contiguous"),
    )
    cases = [Case(name, ctx.of(_with_specials(ctx, ctx.values(shape)), layout, grad=False), out_dtypes=(torch.bool,))
             for name, shape, layout in layouts]
    if ctx.floating:
        cases.append(Case("0-dim -inf", T(torch.tensor(float("-inf"), dtype=ctx.dtype), grad=False),
                          out_dtypes=(torch.bool,)))
    return cases


@register("all", "any")
def _all_any_cases(ctx):
    """Full reductions, one dim, dim lists (None, [], several), keepdim; inputs
    mostly true or mostly false (so both answers occur), NaN (true), zero-size
    inputs (all: True, any: False), strided layouts."""
    def values(shape, fill):
        v = ctx.values(shape)
        if v.dtype == torch.bool:
            v = torch.full(shape, fill, dtype=torch.bool)
        elif v.numel():
            v = torch.full(shape, 1 if fill else 0, dtype=v.dtype)
        flip = torch.rand(shape, generator=ctx.gen) < 0.08  # a few elements of the other kind
        other = (0 if fill else 1) if v.dtype != torch.bool else (not fill)
        v = torch.where(flip, torch.tensor(other, dtype=v.dtype), v)
        if v.is_floating_point() and v.numel() and fill:
            v.reshape(-1)[0] = float("nan")  # NaN is true
        return v

    def t(shape, fill=True, layout="contiguous"):
        return ctx.of(values(shape, fill), layout, grad=False)

    result = torch.uint8 if ctx.dtype == torch.uint8 else torch.bool  # as ATen: uint8 stays uint8

    def case(name, *args):  # every case of the family has the same out= dtype
        return Case(name, *args, out_dtypes=(result,))

    if not ctx.has("dim"):
        return [
            case("5x7x11 mostly true", t((5, 7, 11), True)),
            case("5x7x11 mostly false", t((5, 7, 11), False)),
            case("all true", ctx.of(torch.ones(4, 6, dtype=ctx.dtype), grad=False)),
            case("all false", ctx.of(torch.zeros(4, 6, dtype=ctx.dtype), grad=False)),
            case("transposed 7x11", t((7, 11), True, "transposed")),
            case("sliced with gaps 5x7", t((5, 7), False, "sliced")),
            case("zero-size 0x7", t((0, 7))),
            case("0-dim", t(())),
        ]
    if ctx.kind("dim") == "IntType":
        dims = [("dim=1", 1), ("dim=0", 0), ("dim=-1", -1)]
    else:
        dims = [("dim=[1]", [1]), ("dim=[0, 2]", [0, 2]), ("dim=[-1]", [-1]), ("dim=[] (no reduction)", [])]
        if ctx.kind("dim") == "OptionalType":
            dims.append(("dim=None", None))
    cases = []
    for label, d in dims:
        cases += [case(f"3x5x11 {label} mostly true", t((3, 5, 11), True), d, False),
                  case(f"3x5x11 {label} mostly false", t((3, 5, 11), False), d, False)]
    one, last = dims[0][1], dims[2][1]
    return cases + [
        case(f"keepdim {dims[1][0]}", t((3, 5, 11), True), dims[1][1], True),
        case(f"transposed 5x11 {dims[2][0]}", t((5, 11), True, "transposed"), last, False),
        case(f"sliced with gaps 5x7 {dims[0][0]}", t((5, 7), False, "sliced"), one, False),
        case(f"expanded 5x7 {dims[0][0]}", t((5, 7), True, "expanded"), one, False),
        case(f"zero-size 0x7 {dims[0][0]}", t((0, 7)), one, False),
        case(f"reduced dim of size 0: 7x0 {dims[2][0]}", t((7, 0)), last, False),
        case(f"0-dim {dims[2][0]}", t(()), last, False),
        case(f"mask 8x1x64x64 {dims[2][0]}", t((8, 1, 64, 64), True), last, False),
    ]


@register("arange")
def _arange_cases(ctx):
    """arange.start_out(start, end, step): up and down, empty, fractional steps
    (floats), int64 values beyond 2**53, long enough for the parallel path."""
    if not ctx.has("start") or not ctx.has("step"):
        return []
    cases = [
        Case("0..10", 0, 10, 1),
        Case("3..40 step 3", 3, 40, 3),
        Case("10..-7 step -2", 10, -7, -2),
        Case("empty 5..5", 5, 5, 1),
        Case("0..70000 (parallel path)", 0, 70000, 1) if ctx.dtype not in (torch.bfloat16, torch.float16)
        else Case("0..200", 0, 200, 1),
    ]
    if ctx.floating:
        cases += [Case("0.5..7.3 step 0.7", 0.5, 7.3, 0.7), Case("1..-1 step -0.125", 1.0, -1.0, -0.125)]
    if ctx.dtype == torch.int64:
        cases.append(Case("beyond 2**53", 2**53 + 1, 2**53 + 9, 2))
    return cases


@register("embedding_dense_backward")
def _embedding_backward_cases(ctx):
    """(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq): repeated
    indices (summed in index order), a padding index, frequency scaling, int32
    indices, strided grads, 1-d and 0-size indices, enough indices for the
    parallel path."""
    def idx(shape, bound, dtype=torch.int64):
        return T(torch.randint(0, bound, shape, generator=ctx.gen).to(dtype), grad=False)

    def grad(*shape, layout="contiguous"):
        return ctx.t(*shape, layout=layout, grad=False)

    return [
        Case("4x5 indices, 10x16 weights", grad(4, 5, 16), idx((4, 5), 10), 10, -1, False),
        Case("padding_idx=3", grad(4, 5, 16), idx((4, 5), 6), 6, 3, False),
        Case("scale_grad_by_freq", grad(4, 5, 16), idx((4, 5), 6), 6, -1, True),
        Case("scale_grad_by_freq and padding_idx=0", grad(6, 8), idx((6,), 3), 3, 0, True),
        Case("int32 indices", grad(7, 9), idx((7,), 4, torch.int32), 4, -1, False),
        Case("transposed grad 11x7", grad(11, 7, layout="transposed"), idx((11,), 5), 5, -1, False),
        Case("sliced grad 6x7", grad(6, 7, layout="sliced"), idx((6,), 5), 5, -1, False),
        Case("no indices", grad(0, 8), idx((0,), 5), 5, -1, False),
        Case("0-dim index", grad(8), idx((), 5), 5, -1, False),
        Case("40x30 indices over 50 rows (parallel path)", grad(40, 30, 32), idx((40, 30), 50), 50, -1, False),
    ]


@register("bitwise_and", "bitwise_or", "bitwise_xor")
def _bitwise_cases(ctx):
    """Bool and integer operands (negative ints too) of every layout, broadcast both
    ways, strided pairs, a 0-dim other, a Python number other (Scalar overloads)."""
    if ctx.kind("other") == "NumberType":
        k = ctx.number(3, 3)
        return [Case(name, ctx.t(*shape, layout=layout), k) for name, shape, layout in LAYOUT_CASES]
    cases = [Case(name, ctx.t(*shape, layout=layout), ctx.t(*shape)) for name, shape, layout in LAYOUT_CASES]
    return cases + [
        Case("broadcast 5x7x11 with 7x1", ctx.t(5, 7, 11), ctx.t(7, 1)),
        Case("broadcast 7x1 with 5x1x11", ctx.t(7, 1), ctx.t(5, 1, 11), inplace_ok=False),
        Case("both strided: sliced with transposed", ctx.t(5, 7, layout="sliced"), ctx.t(5, 7, layout="transposed")),
        Case("0-dim other", ctx.t(5, 7), ctx.t()),
        Case("mask 8x1x64x64 with 8x1x1x64", ctx.t(8, 1, 64, 64), ctx.t(8, 1, 1, 64)),
    ]
