"""Case families of ``python -m openreg conformance`` for elementwise ops: binary
and unary ops (Tensor and Scalar overloads, in place, out=), comparisons, pow,
addcmul/addcdiv, lerp, clamp, activation backwards, fill/zero/clone/copy and the
_foreach_ ops (lists of tensors). See :mod:`openreg.conformance_cases`."""

import torch

from .conformance_cases import LAYOUT_CASES, Case, T, register

# Values whose results are exact or special (signed zeros, units, halves).
_EXACT_VALUES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 3.0, -3.0, 0.125, -7.0]

@register("add", "sub", "mul", "div", "maximum", "minimum", "remainder", grad=True)
def binary_cases(ctx):
    """Elementwise binary ops, Tensor and Scalar overloads, alpha and rounding modes."""
    dom = "nonzero" if ctx.base in ("div", "remainder") else "any"
    if ctx.base == "pow":
        dom = "positive"
    scalar = ctx.kind("exponent" if ctx.base == "pow" else "other") == "NumberType"
    k = ctx.number(1.5, 3)

    def rhs(*shape, layout="contiguous"):
        return k if scalar else ctx.t(*shape, domain=dom, layout=layout)

    lhs_dom = "positive" if ctx.base == "pow" else "any"
    cases = [Case(name, ctx.t(*shape, domain=lhs_dom, layout=layout), rhs(*shape))
             for name, shape, layout in LAYOUT_CASES]
    if not scalar:
        other = torch.float64 if ctx.dtype != torch.float64 else torch.float32
        cases += [
            Case("broadcast 5x7x11 with 7x1", ctx.t(5, 7, 11, domain=lhs_dom), rhs(7, 1)),
            Case("broadcast 7x1 with 5x1x11", ctx.t(7, 1, domain=lhs_dom), rhs(5, 1, 11), inplace_ok=False),
            # rows of 40: the vector body of engines' strided-row loops, not only the tail
            Case("broadcast 6x40 with 40 (bias)", ctx.t(6, 40, domain=lhs_dom), rhs(40)),
            Case("broadcast 6x40 with 6x1", ctx.t(6, 40, domain=lhs_dom), rhs(6, 1)),
            Case("both strided: sliced with transposed", ctx.t(5, 7, domain=lhs_dom, layout="sliced"),
                 rhs(5, 7, layout="transposed")),
            # large enough for engines' library primitives (not only their loops), with
            # operands of different strides (the rotary embedding's add)
            Case("large 8x4x64x40, contiguous with transposed", ctx.t(8, 4, 64, 40, domain=lhs_dom),
                 rhs(8, 4, 64, 40, layout="transposed")),
            Case("0-dim other", ctx.t(5, 7, domain=lhs_dom), rhs()),
            Case("python number other", ctx.t(5, 7, domain=lhs_dom), ctx.number(2.5, 3)),
            Case(f"mixed dtypes ({str(other)[6:]} other)", ctx.t(5, 7, domain=lhs_dom),
                 ctx.t(5, 7, domain=dom, dtype=other)),
        ]
    if not scalar and ctx.dtype == torch.float32:  # above 1M elements, one layout: onednn's binary primitive
        cases.append(Case("large 1100x1000, contiguous", ctx.t(1100, 1000, domain=lhs_dom), rhs(1100, 1000)))
    if ctx.has("alpha"):
        cases.append(Case("alpha", ctx.t(5, 7, 11), rhs(5, 7, 11), alpha=ctx.number(0.5, 2)))
    if ctx.has("rounding_mode"):
        for mode in ("trunc", "floor"):
            cases.append(Case(f"rounding_mode={mode}", ctx.t(5, 7, 11), rhs(5, 7, 11), rounding_mode=mode))
    return cases


# Scalar exponents of pow.Tensor_Scalar (kernels special-case some: square, sqrt,
# reciprocal) and the domain of the base each needs; integers take the integral ones.
_POW_EXPONENTS = ((2, "any"), (3, "any"), (0.5, "positive"), (-0.5, "positive"), (-1, "nonzero"),
                  (-2, "nonzero"), (1.7, "positive"), (0, "any"), (1, "any"))


@register("pow", grad=True)
def _pow_cases(ctx):
    """pow.Tensor_Scalar: each exponent of _POW_EXPONENTS, and the hostile layouts with
    exponent 3; pow.Tensor_Tensor is a binary op."""
    if ctx.kind("exponent") != "NumberType":
        return binary_cases(ctx)
    exponents = [(e, dom) for e, dom in _POW_EXPONENTS if ctx.floating or (isinstance(e, int) and e >= 0)]
    cases = [Case(f"{name}, exponent 3", ctx.t(*shape, layout=layout), 3, inplace_ok=layout != "expanded")
             for name, shape, layout in LAYOUT_CASES]
    cases += [Case(f"exponent {e}", ctx.t(5, 7, 11, domain=dom), e) for e, dom in exponents]
    if ctx.floating:
        exact = ctx.of(torch.tensor(_EXACT_VALUES, dtype=ctx.dtype))
        cases.append(Case("exact values (0, -0, +-1, ...), exponent 2", exact, 2))
    return cases


@register("eq", "ne", "lt", "le", "gt", "ge")
def _comparison_cases(ctx):
    """eq/ne/lt/le/gt/ge, Tensor and Scalar overloads, on values with ties (so that
    equal pairs occur), NaN and infinities; broadcasting, strided and mixed-dtype
    operands. Results are bool (in place: self's dtype)."""
    scalar = ctx.kind("other") == "NumberType"
    k = ctx.number(0.5, 1)
    out = (torch.bool,)

    def lhs(*shape, layout="contiguous"):
        return ctx.t(*shape, domain="ties", layout=layout)

    def rhs(*shape, layout="contiguous"):
        return k if scalar else ctx.t(*shape, domain="ties", layout=layout)

    cases = [Case(name, lhs(*shape, layout=layout), rhs(*shape), out_dtypes=out, inplace_ok=layout != "expanded")
             for name, shape, layout in LAYOUT_CASES]
    if not scalar:
        other = torch.float64 if ctx.dtype != torch.float64 else torch.float32
        cases += [
            Case("broadcast 5x7x11 with 7x1", lhs(5, 7, 11), rhs(7, 1), out_dtypes=out),
            Case("broadcast 7x1 with 5x1x11", lhs(7, 1), rhs(5, 1, 11), out_dtypes=out, inplace_ok=False),
            Case("both strided: sliced with transposed", lhs(5, 7, layout="sliced"), rhs(5, 7, layout="transposed"),
                 out_dtypes=out),
            Case("0-dim other", lhs(5, 7), rhs(), out_dtypes=out),
            Case(f"mixed dtypes ({str(other)[6:]} other)", lhs(5, 7),
                 ctx.t(5, 7, domain="ties", dtype=other), out_dtypes=out),
        ]
    if ctx.floating:
        special = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.0, float("nan"), -1.5]
        x = ctx.of(torch.tensor(special, dtype=ctx.dtype))
        if scalar:
            cases.append(Case("NaN, infinities, -0 with 0.5", x, 0.5, out_dtypes=out))
            cases.append(Case("NaN other", ctx.t(5, 7, domain="ties"), float("nan"), out_dtypes=out))
            cases.append(Case("infinite other", x, float("inf"), out_dtypes=out))
        else:
            y = ctx.of(torch.tensor([float("nan"), float("inf"), float("inf"), -0.0, 0.0, float("nan"), 1.0, -1.5],
                                    dtype=ctx.dtype))
            cases.append(Case("NaN, infinities, -0 on both sides", x, y, out_dtypes=out))
    return cases


_POSITIVE_DOMAIN = {"log", "log2", "log10", "log1p", "sqrt", "rsqrt"}
# Ops whose result is near 0 for x near 1 (the logs) or near 0 (log1p, expm1): cases
# there are compared by relative tolerance only.
_ZERO_AT_ONE, _ZERO_AT_ZERO = {"log", "log2", "log10"}, {"log1p", "expm1"}
# Special inputs of the unary ops by domain (each also past its edges: torch CPU's NaN
# or infinity is the expected value there).
_UNARY_SPECIALS = {
    "any": [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1e-30, -1e-30, 1e30, -1e30, 0.75],
    "positive": [float("nan"), float("inf"), 0.0, -0.0, 1e-30, 1e30, -1.0, -0.5, -2.0, 0.75],
    "nonzero": [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1e-30, -1e-30, 1e30, -1e30, 0.75],
}


# Activations made of pieces: kernels select on comparisons, which the kinks test.
_PIECEWISE_LINEAR = ("hardtanh", "leaky_relu", "hardswish", "hardsigmoid",
                     "hardtanh_backward", "leaky_relu_backward", "hardsigmoid_backward")


def _kinks(dtype, nan=True):
    """Inputs at and just beside hardswish/hardsigmoid's (+-3) and hardtanh's (+-1)
    kinks, zeros, NaN and infinities, tiled past a vector register's width."""
    values = [-3.0, 3.0, -1.0, 1.0, 0.0, -0.0, float("inf"), float("-inf"),
              -3.25, -2.75, 2.75, 3.25, -1.25, -0.75, 0.75, 1.25] + ([float("nan")] if nan else [])
    return torch.tensor(values, dtype=dtype).repeat(11)


def _activation_sweep(dtype):
    """Inputs across an activation's range: where kernels' erf and exp change regime,
    and far into the tails."""
    return torch.cat([torch.linspace(-12, 12, 241, dtype=torch.float64),
                      torch.linspace(-1, 1, 101, dtype=torch.float64),
                      torch.tensor([-100.0, -88.0, -87.0, 87.0, 88.0, 100.0], dtype=torch.float64)]).to(dtype)


@register("relu", "sigmoid", "tanh", "gelu", "silu", "exp", "log", "sqrt", "rsqrt", "neg", "abs",
         "sin", "cos", "erf", "log1p", "expm1", "reciprocal", "hardtanh", "leaky_relu", "elu",
         "hardswish", "hardsigmoid", "mish", "softplus", "log2", "log10", "sign", "floor",
         "ceil", "round", "trunc", grad=True)
def _unary_cases(ctx):
    """Elementwise unary ops (positive inputs for log/sqrt/rsqrt), their parameters."""
    dom = "positive" if ctx.base in _POSITIVE_DOMAIN else ("nonzero" if ctx.base == "reciprocal" else "any")
    cases = [Case(name, ctx.t(*shape, domain=dom, layout=layout)) for name, shape, layout in LAYOUT_CASES]
    if ctx.floating and dom == "any":
        cases.append(Case("exact values (0, -0, +-1, ...)", ctx.of(torch.tensor(_EXACT_VALUES, dtype=ctx.dtype))))
    if ctx.floating and ctx.base not in ("round",):  # round: ties to even on both, but bfloat16 rounds 1e30
        # Tiled past a vector register's width, so that vectorised kernels meet them too.
        special = torch.tensor(_UNARY_SPECIALS[dom], dtype=ctx.dtype).repeat(11)
        # torch CPU's gelu of a contiguous tensor runs its bundled oneDNN, whose AVX-512
        # kernel gives NaN for gelu(+inf) (inf on AVX2, in ATen's kernel and on CUDA).
        cases.append(Case("NaN, infinities, zeros, tiny and huge values (tiled)", ctx.of(special),
                          aten_reference=ctx.base == "gelu"))
    if ctx.floating and ctx.base in ("relu", "abs", "sqrt", "neg"):
        # Large enough for an engine's elementwise primitive (onednn: from 32K elements),
        # with NaN every 997th element: relu keeps NaN.
        big = ctx.values((40000,), dom)
        big[5::997] = float("nan")
        cases.append(Case("40000 elements with NaN", ctx.of(big.to(ctx.dtype))))
    if ctx.floating and ctx.base in _PIECEWISE_LINEAR:
        cases.append(Case("at and around the kinks (+-3, +-1, 0), tiled", ctx.of(_kinks(ctx.dtype))))
    if ctx.base == "tanh" and ctx.dtype == torch.float32:  # kernels switch formula near |x| = 0.6 and saturate
        sweep = torch.cat([torch.linspace(-20, 20, 161, dtype=torch.float64),
                           torch.linspace(-0.7, 0.7, 113, dtype=torch.float64)]).to(ctx.dtype)
        cases.append(Case("sweep of |x| up to 20", ctx.of(sweep)))
    if ctx.base in ("gelu", "silu") and ctx.dtype == torch.float32:  # kernels' own erf and exp
        cases.append(Case("sweep of x in [-12, 12], and +-87, +-100", ctx.of(_activation_sweep(ctx.dtype))))
    if ctx.floating and ctx.base in _ZERO_AT_ONE | _ZERO_AT_ZERO:
        # Results near 0 judged by relative tolerance alone: log(1) must be 0 and
        # log(1 + 1e-4) right to float32's precision (oneDNN 2.6's AVX2 log gave -1.4e-6
        # and 1.4% low, inside the elementwise atol of 1e-5). Tiled past a vector's width.
        k = torch.arange(-8, 9, dtype=torch.float64)
        d = torch.cat([k * torch.finfo(ctx.dtype).eps, k * 1e-3])  # offsets from 1 (or from 0)
        at_one = ctx.base in _ZERO_AT_ONE
        x = (1 + d if at_one else d).to(ctx.dtype).repeat(3)
        cases.append(Case(f"x near {1 if at_one else 0}, relative error only", ctx.of(x), relative=True))
    if ctx.base in ("sin", "cos") and ctx.dtype == torch.float32:  # argument reduction far from 0
        big = torch.linspace(-1e5, 1e5, 77, dtype=torch.float64).to(ctx.dtype)
        cases.append(Case("large arguments (|x| up to 1e5)", ctx.of(big)))
    if ctx.has("approximate"):
        cases.append(Case("approximate=tanh", ctx.t(5, 7, 11), approximate="tanh"))
    if ctx.has("negative_slope"):
        cases.append(Case("negative_slope=0.2", ctx.t(5, 7, 11), 0.2))
    if ctx.has("min_val"):
        cases.append(Case("min_val=-0.5, max_val=1.5", ctx.t(5, 7, 11), -0.5, 1.5))
    return cases


@register("addcmul", "addcdiv", grad=True)
def _addc_cases(ctx):
    """addcmul/addcdiv(self, tensor1, tensor2, *, value): self in each hostile layout,
    strided and broadcast tensor1/tensor2, the default value, value 0 and negative;
    addcdiv divides by nonzero values."""
    den = "nonzero" if ctx.base == "addcdiv" else "any"
    v = ctx.number(-0.5, -2)
    cases = [Case(name, ctx.t(*shape, layout=layout), ctx.t(*shape), ctx.t(*shape, domain=den), value=v,
                  inplace_ok=layout != "expanded")
             for name, shape, layout in LAYOUT_CASES]
    cases += [
        Case("default value (1)", ctx.t(5, 7, 11), ctx.t(5, 7, 11), ctx.t(5, 7, 11, domain=den)),
        Case("value=0", ctx.t(5, 7, 11), ctx.t(5, 7, 11), ctx.t(5, 7, 11, domain=den), value=0),
        Case("transposed tensor1, sliced tensor2", ctx.t(7, 11), ctx.t(7, 11, layout="transposed"),
             ctx.t(7, 11, domain=den, layout="sliced"), value=v),
        Case("broadcast tensor1 7x1 and tensor2 11", ctx.t(5, 7, 11), ctx.t(7, 1), ctx.t(11, domain=den), value=v),
        Case("broadcast self 7x1 to 5x7x11", ctx.t(7, 1), ctx.t(5, 1, 11), ctx.t(7, 11, domain=den), value=v,
             inplace_ok=False),
        Case("0-dim tensor1 and tensor2", ctx.t(5, 7), ctx.t(), ctx.t(domain=den), value=v),
    ]
    return cases


@register("lerp", grad=True)
def _lerp_cases(ctx):
    """lerp(self, end, weight): Scalar weights on both sides of 0.5 (kernels switch
    formulas there), at 0 and 1 and outside [0, 1]; Tensor weights strided,
    broadcast, 0-dim and outside [0, 1]."""
    tensor_weight = ctx.kind("weight") == "TensorType"

    def weight(*shape, layout="contiguous"):
        return ctx.t(*shape, domain="unit", layout=layout) if tensor_weight else 0.3

    cases = [Case(name, ctx.t(*shape, layout=layout), ctx.t(*shape), weight(*shape), inplace_ok=layout != "expanded")
             for name, shape, layout in LAYOUT_CASES]
    cases += [
        Case("sliced self, transposed end", ctx.t(7, 11, layout="sliced"), ctx.t(7, 11, layout="transposed"),
             weight(7, 11)),
        Case("broadcast end 7x1", ctx.t(5, 7, 11), ctx.t(7, 1), weight(11)),
        Case("broadcast self 7x1 to 5x7x11", ctx.t(7, 1), ctx.t(5, 1, 11), weight(7, 11), inplace_ok=False),
    ]
    if tensor_weight:
        cases += [
            Case("weights in [-3, 3]", ctx.t(5, 7, 11), ctx.t(5, 7, 11), ctx.of(ctx.values((5, 7, 11)) * 1.5)),
            Case("sliced weight", ctx.t(5, 7), ctx.t(5, 7), weight(5, 7, layout="sliced")),
            Case("0-dim weight", ctx.t(5, 7), ctx.t(5, 7), weight()),
        ]
    else:
        cases += [Case(f"weight={w}", ctx.t(5, 7, 11), ctx.t(5, 7, 11), w) for w in (0.0, 0.5, 0.7, 1.0, -0.5, 1.5)]
    return cases


@register("clamp", "clamp_min", "clamp_max", grad=True)
def _clamp_cases(ctx):
    """clamp(self, min, max) with Scalar or Tensor bounds (clamp_min/clamp_max: one):
    each hostile layout, one bound None, min > max (max wins), NaN and infinite
    inputs (NaN is kept), a NaN bound; Tensor bounds strided, broadcast, 0-dim."""
    names = [n for n in ("min", "max") if ctx.has(n)]
    tensor_bounds = "Tensor" in str(ctx.arguments[names[0]].type)
    lo, hi = ctx.number(-0.5, -2), ctx.number(0.75, 2)

    def bound(value, *shape, layout="contiguous"):
        """``value`` itself, or a tensor of values near it (some past the other bound)."""
        if value is None or not tensor_bounds:
            return value
        near = ctx.values(shape, dtype=torch.float64) * 0.25 + value
        return ctx.of(near.to(ctx.dtype), layout)

    def case(name, x, mn, mx, **kw):
        given = {"min": mn, "max": mx}
        return Case(name, x, *[given[n] for n in names], **kw)

    def bounds(*shape, layout="contiguous"):
        return bound(lo, *shape, layout=layout), bound(hi, *shape, layout=layout)

    cases = [case(name, ctx.t(*shape, layout=layout), *bounds(*shape), inplace_ok=layout != "expanded")
             for name, shape, layout in LAYOUT_CASES]
    if len(names) == 2:
        cases += [
            case("min only", ctx.t(5, 7, 11), bound(lo, 5, 7, 11), None),
            case("max only", ctx.t(5, 7, 11), None, bound(hi, 5, 7, 11)),
            case("min > max (max wins)", ctx.t(5, 7, 11), bound(hi, 5, 7, 11), bound(lo, 5, 7, 11)),
        ]
    if tensor_bounds:
        cases += [
            case("broadcast bounds 11", ctx.t(5, 7, 11), *bounds(11)),
            case("0-dim bounds", ctx.t(5, 7), *bounds()),
            case("sliced bounds", ctx.t(5, 7, layout="transposed"), *bounds(5, 7, layout="sliced")),
        ]
    if ctx.floating:
        special = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0, 0.0, -7.0, 7.0, 0.5], dtype=ctx.dtype)
        cases.append(case("NaN and infinite inputs", ctx.of(special), *bounds(len(special))))
        nan = bound(float("nan"), 5, 7)
        cases.append(case("NaN bound", ctx.t(5, 7), *((nan, None) if "min" in names else (None, nan))))
    return cases


# Second argument of each activation backward: its domain and extra arguments.
_ACTIVATION_BACKWARD = {
    "threshold_backward": ("any", lambda ctx: (ctx.number(0.0, 0),)),
    "sigmoid_backward": ("unit", lambda ctx: ()),
    "tanh_backward": ("signed_unit", lambda ctx: ()),
    "gelu_backward": ("any", lambda ctx: ()),
    "silu_backward": ("any", lambda ctx: ()),
    "hardtanh_backward": ("any", lambda ctx: (-1.0, 1.0)),
    "leaky_relu_backward": ("any", lambda ctx: (0.01, False)),
    "hardsigmoid_backward": ("any", lambda ctx: ()),
}


@register(*_ACTIVATION_BACKWARD)
def _activation_backward_cases(ctx):
    """threshold/sigmoid/tanh/gelu... backward: (grad_output, self or output, extras)."""
    dom, extras = _ACTIVATION_BACKWARD[ctx.base]
    extra = extras(ctx)
    cases = [Case(name, ctx.t(*shape, layout=layout), ctx.t(*shape, domain=dom), *extra)
             for name, shape, layout in LAYOUT_CASES]
    cases.append(Case("sliced input", ctx.t(5, 7), ctx.t(5, 7, domain=dom, layout="sliced"), *extra))
    if ctx.floating and dom == "any":
        exact = torch.tensor(_EXACT_VALUES, dtype=ctx.dtype)
        cases.append(Case("exact values (0, -0, +-1, ...)", ctx.t(len(_EXACT_VALUES)), ctx.of(exact), *extra))
    if ctx.floating and ctx.base in _PIECEWISE_LINEAR:
        # torch 2.13's CPU hardtanh_backward gives 0 for a NaN self in its vectorised
        # loop and the gradient in its scalar tail, so which one a NaN gets depends on
        # its position: no NaN in its case.
        kinks = _kinks(ctx.dtype, nan=ctx.base != "hardtanh_backward")
        cases.append(Case("self at and around the kinks (+-3, +-1, 0), tiled", ctx.t(len(kinks)), ctx.of(kinks),
                          *extra))
    if ctx.base == "threshold_backward":
        cases.append(Case("threshold=0.5", ctx.t(5, 7, 11), ctx.t(5, 7, 11), ctx.number(0.5, 1)))
    if ctx.base in ("gelu_backward", "silu_backward") and ctx.dtype == torch.float32:  # kernels' own erf and exp
        sweep = _activation_sweep(ctx.dtype)
        cases.append(Case("sweep of x in [-12, 12], and +-87, +-100", ctx.t(len(sweep)), ctx.of(sweep), *extra))
        # Tiled past a vector register's width, so that vectorised kernels meet them too.
        special = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 1e-30], dtype=ctx.dtype).repeat(11)
        cases.append(Case("x infinite, NaN, zero, tiny (NaN where torch CPU gives it)", ctx.t(len(special)),
                          ctx.of(special), *extra))
        if ctx.has("approximate"):
            cases.append(Case("approximate=tanh, the sweep", ctx.t(len(sweep)), ctx.of(sweep), approximate="tanh"))
            cases.append(Case("approximate=tanh, x infinite, NaN, zero, tiny", ctx.t(len(special)), ctx.of(special),
                              approximate="tanh"))
    if ctx.has("approximate"):
        cases.append(Case("approximate=tanh", ctx.t(5, 7, 11), ctx.t(5, 7, 11), approximate="tanh"))
    return cases


def _prelu_operands(ctx):
    """(name, self, weight) for PReLU's kernels: F.prelu passes the weight shaped to
    broadcast against self ([1, C, 1, ...]), or [1] for one shared slope."""
    exact = torch.tensor(_EXACT_VALUES + [float("inf"), float("-inf"), float("nan")], dtype=ctx.dtype)
    return [
        ("2x3x5x7, a slope per channel", ctx.t(2, 3, 5, 7), ctx.t(1, 3, 1, 1)),
        ("5x7, one slope", ctx.t(5, 7), ctx.t(1)),
        ("5x7, a slope per column (dense weight rows)", ctx.t(5, 7), ctx.t(1, 7)),
        ("transposed 7x11, a slope per row", ctx.t(7, 11, layout="transposed"), ctx.t(1, 11)),
        ("sliced 5x7 with gaps", ctx.t(5, 7, layout="sliced"), ctx.t(1, 7)),
        ("zero-size 0x3x4", ctx.t(0, 3, 4), ctx.t(1, 3, 1)),
        ("exact values (0, -0, +-1, +-inf, NaN, ...)", ctx.of(exact), ctx.t(1)),
        ("8x32x16x16 (parallel path)", ctx.t(8, 32, 16, 16), ctx.t(1, 32, 1, 1)),
    ]


@register("_prelu_kernel", grad=True)
def _prelu_cases(ctx):
    """(self, weight): out = self > 0 ? self : weight * self."""
    return [Case(name, x, w) for name, x, w in _prelu_operands(ctx)]


@register("_prelu_kernel_backward")
def _prelu_backward_cases(ctx):
    """(grad_output, self, weight) -> (grad_self, grad_weight), both self's shape."""
    cases = [Case(name, ctx.t(*x.base.shape if x.view is None else x.view(x.base).shape), x, w)
             for name, x, w in _prelu_operands(ctx)]
    # autograd's gradient of a sum: one value expanded to self's shape
    cases.append(Case("expanded 0-dim gradient", T(ctx.values(()), lambda t: t.expand(2, 3, 5, 7)),
                      ctx.t(2, 3, 5, 7), ctx.t(1, 3, 1, 1)))
    return cases

_SELF_LAYOUTS = (
    ("5x7x11", (5, 7, 11), "contiguous"),
    ("transposed 7x11", (7, 11), "transposed"),
    ("sliced with gaps 5x7 (gaps untouched)", (5, 7), "sliced"),
    ("zero-size 0x7", (0, 7), "contiguous"),
    ("0-dim", (), "contiguous"),
)


@register("fill", "zero")
def _fill_cases(ctx):
    """fill_ (Scalar or 0-dim Tensor value) and zero_ on strided selfs."""
    def value():
        if not ctx.has("value"):
            return ()
        return (ctx.number(2.5, 3),) if ctx.kind("value") == "NumberType" else (ctx.t(),)

    return [Case(name, ctx.t(*shape, layout=layout), *value()) for name, shape, layout in _SELF_LAYOUTS]


@register("clone")
def _clone_cases(ctx):
    """clone of strided inputs, and to contiguous_format."""
    cases = [Case(name, ctx.t(*shape, layout=layout)) for name, shape, layout in LAYOUT_CASES]
    if ctx.has("memory_format"):
        cases.append(Case("transposed to contiguous_format", ctx.t(7, 11, layout="transposed"),
                          memory_format=torch.contiguous_format))
    return cases


@register("copy")
def _copy_cases(ctx):
    """copy_ between layouts, with broadcasting and a dtype conversion."""
    other = torch.float64 if ctx.dtype != torch.float64 else torch.float32
    return [
        Case("5x7x11", ctx.t(5, 7, 11), ctx.t(5, 7, 11)),
        Case("from transposed", ctx.t(7, 11), ctx.t(7, 11, layout="transposed")),
        Case("into transposed", ctx.t(7, 11, layout="transposed"), ctx.t(7, 11)),
        Case("sliced into sliced", ctx.t(5, 7, layout="sliced"), ctx.t(5, 7, layout="sliced")),
        Case("broadcast 7x1 into 5x7x11", ctx.t(5, 7, 11), ctx.t(7, 1)),
        Case(f"from {str(other)[6:]}", ctx.t(5, 7), ctx.t(5, 7, dtype=other)),
        Case("zero-size", ctx.t(0, 7), ctx.t(0, 7)),
        Case("0-dim", ctx.t(), ctx.t()),
    ]


# The tensor lists of the _foreach_ ops: (name, ((member shape, layout), ...)).
_FOREACH_LISTS = (
    ("5x7, 11, transposed 13x3, 0x2", (((5, 7), "contiguous"), ((11,), "contiguous"), ((13, 3), "transposed"),
                                       ((0, 2), "contiguous"))),
    ("sliced 5x7 with gaps, 0-dim", (((5, 7), "sliced"), ((), "contiguous"))),
    ("one 37x41", (((37, 41), "contiguous"),)),
    ("40 tensors of 1 to 40 elements", tuple(((n,), "contiguous") for n in range(1, 41))),
)

# Per op: the domain of self's members, and the argument whose members it divides by
# (its Scalars are nonzero anyway).
_FOREACH_SELF_DOMAIN = {"sqrt": "positive", "log": "positive", "reciprocal": "nonzero"}
_FOREACH_DIVISOR = {"div": "other", "addcdiv": "tensor2"}


@register("_foreach_add", "_foreach_sub", "_foreach_mul", "_foreach_div", "_foreach_addcmul", "_foreach_addcdiv",
         "_foreach_lerp", "_foreach_maximum", "_foreach_minimum", "_foreach_sqrt", "_foreach_neg", "_foreach_abs",
         "_foreach_exp", "_foreach_log", "_foreach_reciprocal", "_foreach_zero", grad=True)
def _foreach_cases(ctx):
    """_foreach_<op>[_] overloads (List, Scalar, ScalarList, Tensor), built from the
    schema: every Tensor[] argument a list of members shaped and laid out like self's,
    Scalar[] one number per member, a Tensor a 0-dim one; alpha when the overload
    has it."""
    op = ctx.base[len("_foreach_"):]
    params = [a for a in ctx.schema.arguments[1:] if not a.kwarg_only]

    def member_domain(name):
        if name == _FOREACH_DIVISOR.get(op):
            return "nonzero"
        return "unit" if op == "lerp" and name.startswith("weight") else "any"

    def scalar(i=0):
        if op == "lerp":
            return (0.3, 0.7, -0.5)[i % 3]
        return ctx.number((-0.75, 1.25, 2.0)[i % 3], (-2, 3, 1)[i % 3])

    def case(name, members, **kw):
        self_dom = _FOREACH_SELF_DOMAIN.get(op, "any")
        args = [[ctx.t(*shape, domain=self_dom, layout=layout) for shape, layout in members]]
        for a in params:
            kind = a.type.kind()
            element = a.type.getElementType().kind() if kind == "ListType" else None
            if element == "TensorType":
                args.append([ctx.t(*shape, domain=member_domain(a.name), layout=layout) for shape, layout in members])
            elif element is not None:  # Scalar[]: one per member
                args.append([scalar(i) for i in range(len(members))])
            elif kind == "TensorType":
                args.append(ctx.t(domain=member_domain(a.name)))
            else:
                args.append(scalar())
        return Case(name, *args, **kw)

    cases = [case(name, members) for name, members in _FOREACH_LISTS]
    if ctx.has("alpha"):
        cases.append(case(f"{_FOREACH_LISTS[0][0]}, alpha", _FOREACH_LISTS[0][1], alpha=ctx.number(0.5, 2)))
    return cases
