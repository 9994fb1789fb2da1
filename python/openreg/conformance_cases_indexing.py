"""Case families of ``python -m openreg conformance`` for ops that move elements
without arithmetic: index_select (what embedding becomes), gather, index
(x[idx, ...]), cat, where, flip, roll. See
:mod:`openreg.conformance_cases`."""

import torch

from .conformance_cases import Case, T, register


def _index(values, dtype=torch.int64):
    return T(torch.tensor(values, dtype=dtype), grad=False)


@register("index_select")
def _index_select_cases(ctx):
    """(self, dim, index): int64 and int32 indices with repeats, each dim, a 0-dim
    and an empty index, strided self, the shape embedding produces."""
    rows = torch.randint(0, 100, (64,), generator=ctx.gen)
    many = torch.randint(0, 300, (200,), generator=ctx.gen)
    return [
        Case("5x7x11 dim=0", ctx.t(5, 7, 11), 0, _index([4, 0, 0, 2])),
        Case("5x7x11 dim=1, int32 index", ctx.t(5, 7, 11), 1, _index([6, 1, 3, 3], torch.int32)),
        Case("5x7x11 dim=-1", ctx.t(5, 7, 11), -1, _index([10, 0, 5, 5, 9])),
        Case("transposed 7x11 dim=0", ctx.t(7, 11, layout="transposed"), 0, _index([1, 6])),
        Case("0-dim index", ctx.t(5, 7), 1, _index(3)),
        Case("empty index", ctx.t(5, 7), 0, _index([])),
        Case("64 rows of 100x16 (embedding)", ctx.t(100, 16), 0, T(rows, grad=False)),
        Case("200 rows of 300x257 (parallel path)", ctx.t(300, 257), 0, T(many, grad=False)),
    ]


def _randint(ctx, lo, hi, *shape, dtype=torch.int64):
    return T(torch.randint(lo, hi, shape, generator=ctx.gen, dtype=dtype), grad=False)


@register("gather")
def _gather_cases(ctx):
    """(self, dim, index): index smaller than self in the other dims, each dim,
    transposed self, expanded and empty index, BERT's token types, the parallel path."""
    expanded = T(torch.randint(0, 7, (1, 3), generator=ctx.gen), lambda t: t.expand(5, 3), grad=False)
    return [
        Case("5x7x11 dim=0, index 3x7x11", ctx.t(5, 7, 11), 0, _randint(ctx, 0, 5, 3, 7, 11)),
        Case("5x7x11 dim=1, index 5x4x6", ctx.t(5, 7, 11), 1, _randint(ctx, 0, 7, 5, 4, 6)),
        Case("transposed 7x11 dim=-1, index 7x13", ctx.t(7, 11, layout="transposed"), -1,
             _randint(ctx, 0, 11, 7, 13)),
        Case("5x7 dim=1, expanded index 5x3", ctx.t(5, 7), 1, expanded),
        Case("empty index 0x7", ctx.t(5, 7), 0, _randint(ctx, 0, 5, 0, 7)),
        Case("1x128 dim=1, index 1x64 (token types)", ctx.t(1, 128), 1, _randint(ctx, 0, 128, 1, 64)),
        Case("300x257 dim=0 (parallel path)", ctx.t(300, 257), 0, _randint(ctx, 0, 300, 300, 257)),
    ]


@register("index")
def _index_cases(ctx):
    """index.Tensor(self, indices): one index, several broadcast at adjacent dims,
    non-adjacent dims (the broadcast shape goes first), negative values, int32,
    transposed self, a 0-dim and an empty index, BERT's padding-mask lookup, the
    parallel path."""
    r = lambda lo, hi, *shape, dtype=torch.int64: _randint(ctx, lo, hi, *shape, dtype=dtype)  # noqa: E731
    return [
        Case("5x7x11 [i of 4]", ctx.t(5, 7, 11), [r(0, 5, 4)]),
        Case("5x7x11 [:, 3x1, 4]", ctx.t(5, 7, 11), [None, r(0, 7, 3, 1), r(0, 11, 4)]),
        Case("5x7x11 [6, :, 6] (non-adjacent)", ctx.t(5, 7, 11), [r(0, 5, 6), None, r(0, 11, 6)]),
        Case("5x7x11 [:, negative i of 9]", ctx.t(5, 7, 11), [None, r(-7, 7, 9)]),
        Case("5x7x11 [:, i of 9 int32]", ctx.t(5, 7, 11), [None, r(0, 7, 9, dtype=torch.int32)]),
        Case("transposed 7x11 [i of 3]", ctx.t(7, 11, layout="transposed"), [r(0, 7, 3)]),
        Case("5x7 [0-dim]", ctx.t(5, 7), [_index(3)]),
        Case("5x7 [:, empty]", ctx.t(5, 7), [None, _index([])]),
        Case("8x64 [8x1x1x1, 1x1x1x64] (padding mask)", ctx.t(8, 64),
             [r(0, 8, 8, 1, 1, 1), r(0, 64, 1, 1, 1, 64)]),
        Case("300x257 [i of 200] (parallel path)", ctx.t(300, 257), [r(0, 300, 200)]),
    ]


@register("cat")
def _cat_cases(ctx):
    """(tensors, dim): uneven parts along each dim, one part, a zero-size part, the
    legacy empty 1-d part, a transposed part, large enough for the parallel path."""
    return [
        Case("2 x 32x64 dim=0", [ctx.t(32, 64), ctx.t(32, 64)], 0),
        Case("5x{2,7,1}x3 dim=1", [ctx.t(5, 2, 3), ctx.t(5, 7, 3), ctx.t(5, 1, 3)], 1),
        Case("4x3, 4x5 dim=-1", [ctx.t(4, 3), ctx.t(4, 5)], -1),
        Case("one tensor", [ctx.t(5, 7)], 0),
        Case("a zero-size part", [ctx.t(0, 7), ctx.t(3, 7)], 0),
        Case("legacy empty 1-d part", [ctx.t(0), ctx.t(3, 7)], 0),
        Case("transposed part 7x5 dim=1", [ctx.t(7, 5, layout="transposed"), ctx.t(7, 5)], 1),
        Case("200x300, 100x300 (parallel path)", [ctx.t(200, 300), ctx.t(100, 300)], 0),
    ]


@register("where")
def _where_cases(ctx):
    """where.self(condition, self, other): the op's dtype is the condition's (bool);
    self and other of several dtypes, broadcast, strided, a 0-dim float64 other,
    zero-size, 0-dim."""
    def cond(*shape, layout="contiguous"):
        return ctx.t(*shape, layout=layout, dtype=torch.bool, grad=False)

    def v(*shape, dtype=torch.float32, layout="contiguous"):
        return ctx.t(*shape, dtype=dtype, layout=layout)

    # out= (where.self_out) holds the values' dtype, not the condition's.
    cases = [Case(f"64x64 {str(d)[6:]}", cond(64, 64), v(64, 64, dtype=d), v(64, 64, dtype=d), out_dtypes=(d,))
             for d in (torch.float32, torch.float64, torch.bfloat16, torch.int64)]
    f32 = (torch.float32,)
    return cases + [
        Case("broadcast 5x1, 5x7, 7", cond(5, 1), v(5, 7), v(7), out_dtypes=f32),
        Case("transposed and sliced 7x11", cond(7, 11, layout="transposed"), v(7, 11, layout="sliced"),
             v(7, 11, layout="transposed"), out_dtypes=f32),
        Case("expanded condition 5x7", cond(5, 7, layout="expanded"), v(5, 7), v(5, 7), out_dtypes=f32),
        Case("0-dim float64 other", cond(5, 7), v(5, 7), T(torch.tensor(0.5, dtype=torch.float64), grad=False),
             out_dtypes=f32),
        Case("zero-size 0x7", cond(0, 7), v(0, 7), v(0, 7), out_dtypes=f32),
        Case("0-dim", cond(), v(), v(), out_dtypes=f32),
        Case("300x257 (parallel path)", cond(300, 257), v(300, 257), v(300, 257), out_dtypes=f32),
    ]


@register("flip")
def _flip_cases(ctx):
    """(self, dims): one dim, several, negative, every dim of a transposed and a
    sliced self, expanded selfs, a 0-dim and a zero-size self, no dims, the parallel path."""
    return [
        Case("5x7x11 dims=[0]", ctx.t(5, 7, 11), [0]),
        Case("5x7x11 dims=[-1]", ctx.t(5, 7, 11), [-1]),
        Case("5x7x11 dims=[0, 2]", ctx.t(5, 7, 11), [0, 2]),
        Case("transposed 7x11 dims=[0, 1]", ctx.t(7, 11, layout="transposed"), [0, 1]),
        Case("sliced 7x11 dims=[1]", ctx.t(7, 11, layout="sliced"), [1]),
        Case("no dims", ctx.t(5, 7), []),
        Case("0-dim", ctx.t(), [0]),
        Case("zero-size 0x7 dims=[1]", ctx.t(0, 7), [1]),
        Case("300x257 dims=[1] (parallel path)", ctx.t(300, 257), [1]),
        # rows of one repeated element (autograd's gradient of a sum is an expanded 0-dim)
        Case("5x1 expanded to 5x7 dims=[1]", T(ctx.values((5, 1)), lambda t: t.expand(5, 7)), [1]),
        Case("expanded 5x7 dims=[0]", ctx.t(5, 7, layout="expanded"), [0]),
    ]


@register("roll")
def _roll_cases(ctx):
    """(self, shifts, dims): positive, negative and beyond-size shifts, several dims,
    a dim listed twice, no dims (the flat order), a transposed self, a 0-dim and a
    zero-size self, the parallel path (Swin's shifted windows roll [B, H, W, C] by
    -3 along H and W)."""
    return [
        Case("5x7x11 shift 2 dim 1", ctx.t(5, 7, 11), [2], [1]),
        Case("5x7x11 shift -3 dim -1", ctx.t(5, 7, 11), [-3], [-1]),
        Case("5x7x11 shift 23 dim 2 (beyond the size)", ctx.t(5, 7, 11), [23], [2]),
        Case("5x7x11 shifts (1, -2) dims (0, 2)", ctx.t(5, 7, 11), [1, -2], [0, 2]),
        Case("5x7 shifts (1, 2) dims (1, 1)", ctx.t(5, 7), [1, 2], [1, 1]),
        Case("5x7 shift 3, no dims", ctx.t(5, 7), [3], []),
        Case("transposed 7x11 shift 4, no dims", ctx.t(7, 11, layout="transposed"), [4], []),
        Case("transposed 7x11 shifts (2, 5) dims (0, 1)", ctx.t(7, 11, layout="transposed"), [2, 5], [0, 1]),
        Case("shift 0", ctx.t(5, 7), [0], [0]),
        Case("0-dim", ctx.t(), [1], [0]),
        Case("zero-size 0x7 shift 2 dim 1", ctx.t(0, 7), [2], [1]),
        Case("2x16x16x64 shifts (-3, -3) dims (1, 2) (parallel path)", ctx.t(2, 16, 16, 64), [-3, -3], [1, 2]),
    ]
