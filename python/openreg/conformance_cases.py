"""The cases of ``python -m openreg conformance``: for each op family, the calls that
exercise it on hostile inputs (odd prime shapes, zero-size, 0-dim, transposed,
sliced with gaps, broadcast, expanded, Scalar overloads).

A family is a function ``Ctx -> [Case]`` registered with :func:`_family` under
the ops' base names; :func:`family_for` finds it for an op name (in-place
``add_`` and out= ``add.out`` use ``add``'s, filtered or extended by the runner
in :mod:`openreg.conformance`). Cases are built from the op's schema, so a
family covers the overloads (Tensor, Scalar, List) its ops have.
"""

import zlib

import torch

_GAP_FLOAT = float("nan")  # what fills the gaps of sliced inputs: reading it shows
_GAP_INT = 77


# =============================================================== case building


class T:
    """A tensor argument: a CPU ``base`` and the view of it the op receives.

    The base is copied to each device and the view is taken there, so the op
    sees the same strides (transposed, gaps, stride 0) on both devices."""

    def __init__(self, base, view=None, grad=True):
        self.base = base
        self.view = view
        self.grad = grad  # may be marked requires_grad for the autograd check

    def make(self, device, requires_grad=False):
        """(leaf, argument) on ``device``: the copied base and its view."""
        leaf = self.base.clone() if device == "cpu" else self.base.to(device)
        if requires_grad:
            leaf.requires_grad_()
        return leaf, (self.view(leaf) if self.view else leaf)

    @property
    def differentiable(self):
        return self.grad and (self.base.is_floating_point() or self.base.is_complex())


class Case:
    """One call: positional ``args`` in schema order and keyword ``kwargs``.

    ``inplace_ok=False`` leaves the case out for in-place overloads (a broadcast
    self). ``out_dtypes`` gives the dtypes of out= tensors when they are not the
    case dtype (indices). ``loose`` lists outputs whose dtype and shape torch's own
    kernels disagree on (the Meta kernel, which sizes device outputs, says float32
    saved statistics for bfloat16 and sizes them in eval mode; the CPU kernel does
    not): their values are compared when the shapes agree, in the coarser dtype."""

    def __init__(self, name, *args, inplace_ok=True, out_dtypes=None, loose=(), **kwargs):
        self.name = name
        self.args = args
        self.kwargs = kwargs
        self.inplace_ok = inplace_ok
        self.out_dtypes = out_dtypes
        self.loose = loose  # outputs whose dtype and shape PyTorch leaves open (saved statistics)


def _root(op):
    """The op's name without namespace, overload and in-place underscore:
    "aten::add_.Tensor" -> "add", "aten::_foreach_zero_" -> "_foreach_zero"."""
    base = op.split("::", 1)[-1].split(".", 1)[0]
    return base[:-1] if base.endswith("_") and not base.endswith("__") else base


class Ctx:
    """What a case generator knows: the op, its schema, the dtype, and seeded
    helpers that build inputs."""

    def __init__(self, op, schema, dtype):
        self.op = op
        self.base = _root(op)  # "addmm" for aten::addmm_ too: families treat forms alike
        self.schema = schema
        self.dtype = dtype
        self.arguments = {a.name: a for a in schema.arguments}
        self.gen = torch.Generator().manual_seed(zlib.crc32(f"{op}:{dtype}".encode()))

    # ---- the schema
    @property
    def floating(self):
        return self.dtype.is_floating_point

    def has(self, name):
        """True when the overload has an argument called ``name``."""
        return name in self.arguments

    def kind(self, name):
        """The JIT type kind of argument ``name`` ("NumberType", "IntType", ...)."""
        return self.arguments[name].type.kind()

    def number(self, real, integer):
        """A Python number of the case dtype's kind."""
        if self.dtype == torch.bool:
            return True
        return real if (self.floating or self.dtype.is_complex) else integer

    # ---- values
    def values(self, shape, domain="any", dtype=None):
        """A CPU tensor of ``shape``: values from ``domain``, of ``dtype`` (default: the case's).

        Domains: any ([-2, 2]; ints [-5, 5]), positive ([0.25, 3]; [1, 5]),
        unit ((0, 1)), signed_unit ((-1, 1)), nonzero (|x| in [0.5, 2]; [1, 5]),
        unique (distinct values, exact in bfloat16 up to 256 elements), ties
        (multiples of 0.5 in [-1.5, 1.5]; ints [-3, 3]: equal pairs are common)."""
        dtype = dtype or self.dtype
        shape = tuple(shape)
        if domain == "unique":
            n = 1
            for s in shape:
                n *= s
            perm = torch.randperm(n, generator=self.gen).to(torch.float64) - n // 2
            scale = 0.25 if dtype.is_floating_point else 1
            return (perm * scale).reshape(shape).to(dtype)
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, generator=self.gen).bool()
        if domain == "ties":
            x = torch.randint(-3, 4, shape, generator=self.gen).to(torch.float64)
            if dtype == torch.uint8:
                x = x + 3
            return (x * 0.5 if dtype.is_floating_point else x).to(dtype)
        if not dtype.is_floating_point:
            lo, hi = {"positive": (1, 5), "unit": (0, 1), "nonzero": (1, 5)}.get(domain, (-5, 5))
            if dtype == torch.uint8:
                lo = max(lo, 0)
            x = torch.randint(lo, hi + 1, shape, generator=self.gen)
            if domain == "nonzero":
                x = x * self._signs(shape).long()
            return x.to(dtype)
        lo, hi = {"positive": (0.25, 3.0), "unit": (0.05, 0.95), "signed_unit": (-0.95, 0.95),
                  "nonzero": (0.5, 2.0)}.get(domain, (-2.0, 2.0))
        x = torch.rand(shape, generator=self.gen, dtype=torch.float64) * (hi - lo) + lo
        if domain == "nonzero":
            x = x * self._signs(shape)
        return x.to(dtype)

    def _signs(self, shape):
        return torch.randint(0, 2, shape, generator=self.gen).to(torch.float64) * 2 - 1

    def t(self, *shape, domain="any", layout="contiguous", dtype=None, grad=True):
        """A tensor argument of ``shape`` laid out as ``layout`` (see :meth:`of`)."""
        return self.of(self.values(shape, domain, dtype), layout, grad)

    def of(self, values, layout="contiguous", grad=True):
        """A tensor argument holding ``values``, laid out in memory as ``layout``:

        contiguous; transposed (last two dims swapped in memory); sliced (every
        other element of a wider base, from offset 1, the gaps holding NaN or
        77); channels_last (dim 1 last in memory); expanded (stride 0 on dim 0,
        keeping only the first slice of ``values``)."""
        values = values.detach()
        if layout == "transposed" and values.dim() >= 2:
            return T(values.transpose(-1, -2).contiguous(), lambda x: x.transpose(-1, -2), grad)
        if layout == "sliced" and values.dim() >= 1:
            base = torch.empty(values.shape[:-1] + (2 * values.shape[-1] + 1,), dtype=values.dtype)
            base.fill_(_GAP_FLOAT if values.is_floating_point() else (True if values.dtype == torch.bool else _GAP_INT))
            base[..., 1::2] = values
            return T(base, lambda x: x[..., 1::2], grad)
        if layout == "channels_last" and values.dim() >= 3:
            order = (0,) + tuple(range(2, values.dim())) + (1,)
            back = (0, values.dim() - 1) + tuple(range(1, values.dim() - 1))
            return T(values.permute(order).contiguous(), lambda x: x.permute(back), grad)
        if layout == "expanded" and values.dim() >= 1:
            shape = tuple(values.shape)
            return T(values[:1].clone(), lambda x: x.expand(shape), grad)
        return T(values.clone(), None, grad)


# ==================================================================== families


class Family:
    """Case generator for a group of ops, and how to judge them."""

    def __init__(self, cases, grad, accumulates):
        self.cases = cases              # Ctx -> [Case]
        self.grad = grad                # has a differentiable functional form
        self.accumulates = accumulates  # looser tolerances


FAMILIES = {}


def _family(*bases, grad=False, accumulates=False):
    """Registers a case generator for ops named ``aten::<base>[_][.overload]``."""

    def register(fn):
        for b in bases:
            FAMILIES[b] = Family(fn, grad, accumulates)
        return fn

    return register


def family_for(op):
    """The :class:`Family` for an op name, or None (in-place ``add_`` uses ``add``'s)."""
    return FAMILIES.get(_root(op))


_LAYOUT_CASES = (  # (name, shape, layout): the common hostile set for elementwise ops
    ("5x7x11", (5, 7, 11), "contiguous"),
    ("5x7x11x13", (5, 7, 11, 13), "contiguous"),
    ("transposed 7x11", (7, 11), "transposed"),
    ("sliced with gaps 5x7", (5, 7), "sliced"),
    ("expanded (stride 0) 5x7", (5, 7), "expanded"),
    ("zero-size 0x7", (0, 7), "contiguous"),
    ("0-dim", (), "contiguous"),
)


@_family("add", "sub", "mul", "div", "maximum", "minimum", "remainder", grad=True)
def _binary_cases(ctx):
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
             for name, shape, layout in _LAYOUT_CASES]
    if not scalar:
        other = torch.float64 if ctx.dtype != torch.float64 else torch.float32
        cases += [
            Case("broadcast 5x7x11 with 7x1", ctx.t(5, 7, 11, domain=lhs_dom), rhs(7, 1)),
            Case("broadcast 7x1 with 5x1x11", ctx.t(7, 1, domain=lhs_dom), rhs(5, 1, 11), inplace_ok=False),
            Case("both strided: sliced with transposed", ctx.t(5, 7, domain=lhs_dom, layout="sliced"),
                 rhs(5, 7, layout="transposed")),
            Case("0-dim other", ctx.t(5, 7, domain=lhs_dom), rhs()),
            Case("python number other", ctx.t(5, 7, domain=lhs_dom), ctx.number(2.5, 3)),
            Case(f"mixed dtypes ({str(other)[6:]} other)", ctx.t(5, 7, domain=lhs_dom),
                 ctx.t(5, 7, domain=dom, dtype=other)),
        ]
    if ctx.has("alpha"):
        cases.append(Case("alpha", ctx.t(5, 7, 11), rhs(5, 7, 11), alpha=ctx.number(0.5, 2)))
    if ctx.has("rounding_mode"):
        for mode in ("trunc", "floor"):
            cases.append(Case(f"rounding_mode={mode}", ctx.t(5, 7, 11), rhs(5, 7, 11), rounding_mode=mode))
    return cases


# Scalar exponents of pow.Tensor_Scalar (kernels special-case some: square, sqrt,
# reciprocal) and the domain of the base each needs; integers take the integral ones.
_POW_EXPONENTS = ((2, "any"), (3, "any"), (0.5, "positive"), (-1, "nonzero"), (-2, "nonzero"),
                  (1.7, "positive"), (0, "any"), (1, "any"))


@_family("pow", grad=True)
def _pow_cases(ctx):
    """pow.Tensor_Scalar: each exponent of _POW_EXPONENTS, and the hostile layouts with
    exponent 3; pow.Tensor_Tensor is a binary op."""
    if ctx.kind("exponent") != "NumberType":
        return _binary_cases(ctx)
    exponents = [(e, dom) for e, dom in _POW_EXPONENTS if ctx.floating or (isinstance(e, int) and e >= 0)]
    cases = [Case(f"{name}, exponent 3", ctx.t(*shape, layout=layout), 3, inplace_ok=layout != "expanded")
             for name, shape, layout in _LAYOUT_CASES]
    cases += [Case(f"exponent {e}", ctx.t(5, 7, 11, domain=dom), e) for e, dom in exponents]
    if ctx.floating:
        exact = ctx.of(torch.tensor(_EXACT_VALUES, dtype=ctx.dtype))
        cases.append(Case("exact values (0, -0, +-1, ...), exponent 2", exact, 2))
    return cases


@_family("eq", "ne", "lt", "le", "gt", "ge")
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
             for name, shape, layout in _LAYOUT_CASES]
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
_EXACT_VALUES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 3.0, -3.0, 0.125, -7.0]


@_family("relu", "sigmoid", "tanh", "gelu", "silu", "exp", "log", "sqrt", "rsqrt", "neg", "abs",
         "sin", "cos", "erf", "log1p", "expm1", "reciprocal", "hardtanh", "leaky_relu", "elu",
         "hardswish", "hardsigmoid", "mish", "softplus", "log2", "log10", "sign", "floor",
         "ceil", "round", "trunc", grad=True)
def _unary_cases(ctx):
    """Elementwise unary ops (positive inputs for log/sqrt/rsqrt), their parameters."""
    dom = "positive" if ctx.base in _POSITIVE_DOMAIN else ("nonzero" if ctx.base == "reciprocal" else "any")
    cases = [Case(name, ctx.t(*shape, domain=dom, layout=layout)) for name, shape, layout in _LAYOUT_CASES]
    if ctx.floating and dom == "any":
        cases.append(Case("exact values (0, -0, +-1, ...)", ctx.of(torch.tensor(_EXACT_VALUES, dtype=ctx.dtype))))
    if ctx.has("approximate"):
        cases.append(Case("approximate=tanh", ctx.t(5, 7, 11), approximate="tanh"))
    if ctx.has("negative_slope"):
        cases.append(Case("negative_slope=0.2", ctx.t(5, 7, 11), 0.2))
    if ctx.has("min_val"):
        cases.append(Case("min_val=-0.5, max_val=1.5", ctx.t(5, 7, 11), -0.5, 1.5))
    return cases


@_family("addcmul", "addcdiv", grad=True)
def _addc_cases(ctx):
    """addcmul/addcdiv(self, tensor1, tensor2, *, value): self in each hostile layout,
    strided and broadcast tensor1/tensor2, the default value, value 0 and negative;
    addcdiv divides by nonzero values."""
    den = "nonzero" if ctx.base == "addcdiv" else "any"
    v = ctx.number(-0.5, -2)
    cases = [Case(name, ctx.t(*shape, layout=layout), ctx.t(*shape), ctx.t(*shape, domain=den), value=v,
                  inplace_ok=layout != "expanded")
             for name, shape, layout in _LAYOUT_CASES]
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


@_family("lerp", grad=True)
def _lerp_cases(ctx):
    """lerp(self, end, weight): Scalar weights on both sides of 0.5 (kernels switch
    formulas there), at 0 and 1 and outside [0, 1]; Tensor weights strided,
    broadcast, 0-dim and outside [0, 1]."""
    tensor_weight = ctx.kind("weight") == "TensorType"

    def weight(*shape, layout="contiguous"):
        return ctx.t(*shape, domain="unit", layout=layout) if tensor_weight else 0.3

    cases = [Case(name, ctx.t(*shape, layout=layout), ctx.t(*shape), weight(*shape), inplace_ok=layout != "expanded")
             for name, shape, layout in _LAYOUT_CASES]
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


@_family("clamp", "clamp_min", "clamp_max", grad=True)
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
             for name, shape, layout in _LAYOUT_CASES]
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
}


@_family(*_ACTIVATION_BACKWARD)
def _activation_backward_cases(ctx):
    """threshold/sigmoid/tanh/gelu... backward: (grad_output, self or output, extras)."""
    dom, extras = _ACTIVATION_BACKWARD[ctx.base]
    extra = extras(ctx)
    cases = [Case(name, ctx.t(*shape, layout=layout), ctx.t(*shape, domain=dom), *extra)
             for name, shape, layout in _LAYOUT_CASES]
    cases.append(Case("sliced input", ctx.t(5, 7), ctx.t(5, 7, domain=dom, layout="sliced"), *extra))
    if ctx.floating and dom == "any":
        exact = torch.tensor(_EXACT_VALUES, dtype=ctx.dtype)
        cases.append(Case("exact values (0, -0, +-1, ...)", ctx.t(len(_EXACT_VALUES)), ctx.of(exact), *extra))
    if ctx.base == "threshold_backward":
        cases.append(Case("threshold=0.5", ctx.t(5, 7, 11), ctx.t(5, 7, 11), ctx.number(0.5, 1)))
    if ctx.has("approximate"):
        cases.append(Case("approximate=tanh", ctx.t(5, 7, 11), ctx.t(5, 7, 11), approximate="tanh"))
    return cases


@_family("mm", "addmm", "bmm", "baddbmm", grad=True, accumulates=True)
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
        elif bias == "nan":
            c = ctx.of(torch.full(batch + (m, n), float("nan"), dtype=ctx.dtype))
        else:
            c = ctx.t(*batch, m, n)
        return Case(name, c, a, b, inplace_ok=bias != "row", **kw)

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
        cases.append(case("beta=0.5, alpha=2", 5, 7, 11, beta=ctx.number(0.5, 2), alpha=ctx.number(2.0, 3)))
        if ctx.floating:
            cases.append(case("beta=0 ignores a NaN bias", 5, 7, 11, bias="nan", beta=0))
    return cases


_ARG_REDUCTIONS = {"max", "min", "amax", "amin", "argmax", "argmin"}


@_family("sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "prod",
         grad=True, accumulates=True)
def _reduction_cases(ctx):
    """Reductions over dims (lists, a single dim, None, keepdim) and full reductions.
    max/min/arg*: distinct values, so that indices are unambiguous."""
    if ctx.has("other"):  # max.other / min.other are binary elementwise ops
        return _binary_cases(ctx)
    dom = "unique" if ctx.base in _ARG_REDUCTIONS else "any"
    out_dtypes = (ctx.dtype, torch.int64) if ctx.base in ("max", "min") else None
    if ctx.base in ("argmax", "argmin"):
        out_dtypes = (torch.int64,)

    def case(name, shape, *args, layout="contiguous", **kw):
        return Case(name, ctx.t(*shape, domain=dom, layout=layout), *args, out_dtypes=out_dtypes, **kw)

    if not ctx.has("dim"):
        return [case(name, shape if dom == "any" else _small(shape), layout=layout)
                for name, shape, layout in _LAYOUT_CASES]
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
    return cases


def _small(shape):
    """A shape with at most 256 elements (distinct values stay exact in bfloat16)."""
    return (3, 5, 11) if len(shape) > 2 else shape


@_family("_softmax", "_log_softmax", grad=True, accumulates=True)
def _softmax_cases(ctx):
    """_softmax/_log_softmax over each dim, strided inputs, large logits, width 1."""
    def case(name, x, dim):
        return Case(name, x, dim, False)

    return [
        case("5x7x11 dim=-1", ctx.t(5, 7, 11), -1),
        case("5x7x11 dim=1", ctx.t(5, 7, 11), 1),
        case("5x7x11 dim=0", ctx.t(5, 7, 11), 0),
        case("transposed 7x11 dim=-1", ctx.t(7, 11, layout="transposed"), -1),
        case("sliced with gaps 5x7 dim=1", ctx.t(5, 7, layout="sliced"), 1),
        case("large logits (x30)", ctx.of(ctx.values((5, 11)) * 30), 1),
        case("width 1", ctx.t(5, 1), 1),
        case("zero-size 0x7 dim=1", ctx.t(0, 7), 1),
        case("0-dim", ctx.t(), 0),
    ]


@_family("_softmax_backward_data", "_log_softmax_backward_data", accumulates=True)
def _softmax_backward_cases(ctx):
    """(grad_output, output of the forward on CPU, dim, input dtype)."""
    forward = torch.ops.aten._log_softmax if ctx.base.startswith("_log") else torch.ops.aten._softmax

    def case(name, shape, dim, layout="contiguous"):
        out = forward.default(ctx.values(shape), dim, False)
        return Case(name, ctx.t(*shape, layout=layout), ctx.of(out, layout), dim, ctx.dtype)

    return [
        case("5x7x11 dim=-1", (5, 7, 11), -1),
        case("5x7x11 dim=1", (5, 7, 11), 1),
        case("transposed 7x11 dim=-1", (7, 11), -1, "transposed"),
        case("sliced with gaps 5x7 dim=1", (5, 7), 1, "sliced"),
        case("zero-size 0x7 dim=1", (0, 7), 1),
        case("0-dim", (), 0),
    ]


_REDUCTIONS = (("none", 0), ("mean", 1), ("sum", 2))


@_family("mse_loss", grad=True, accumulates=True)
def _mse_loss_cases(ctx):
    """mse_loss for each reduction, strided input, zero-size, 0-dim."""
    cases = [Case(f"5x7x11 reduction={name}", ctx.t(5, 7, 11), ctx.t(5, 7, 11), r) for name, r in _REDUCTIONS]
    cases += [
        Case("transposed input, mean", ctx.t(7, 11, layout="transposed"), ctx.t(7, 11), 1),
        Case("sliced target, sum", ctx.t(5, 7), ctx.t(5, 7, layout="sliced"), 2),
        Case("zero-size, sum", ctx.t(0, 7), ctx.t(0, 7), 2),
        Case("0-dim, mean", ctx.t(), ctx.t(), 1),
    ]
    return cases


@_family("mse_loss_backward", accumulates=True)
def _mse_loss_backward_cases(ctx):
    """(grad_output, self, target, reduction)."""
    cases = []
    for name, r in _REDUCTIONS:
        grad = ctx.t(5, 7, 11) if r == 0 else ctx.t()
        cases.append(Case(f"5x7x11 reduction={name}", grad, ctx.t(5, 7, 11), ctx.t(5, 7, 11), r))
    cases.append(Case("transposed input, mean", ctx.t(), ctx.t(7, 11, layout="transposed"), ctx.t(7, 11), 1))
    cases.append(Case("zero-size, sum", ctx.t(), ctx.t(0, 7), ctx.t(0, 7), 2))
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


@_family("nll_loss_forward", grad=True, accumulates=True)
def _nll_loss_forward_cases(ctx):
    """(self, target, weight, reduction, ignore_index) -> (output, total_weight)."""
    return [Case(name, ctx.of(logp), T(target, grad=False), ctx.of(w, grad=False) if w is not None else None,
                 r, ignore, out_dtypes=(ctx.dtype, ctx.dtype))
            for name, logp, target, w, r, ignore in _nll_cases(ctx)]


@_family("nll_loss_backward", accumulates=True)
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


@_family("native_layer_norm", grad=True, accumulates=True)
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
        case("zero-size batch", ctx.t(0, 11), [11], ctx.t(11), ctx.t(11)),
    ]


@_family("native_layer_norm_backward", accumulates=True)
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
        case("no weight, no bias", (5, 7, 11), (11,), affine=False, mask=(True, False, False)),
        case("grad_input only", (5, 7, 11), (11,), mask=(True, False, False)),
        case("transposed input", (5, 11, 7), (7,), layout="transposed"),
        case("zero-size batch", (0, 11), (11,)),
    ]


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
    ("zero batch", (0, 3, 11, 13), (5, 3, 3, 3), True, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, "contiguous"),
)


def _conv_bias_size(w_shape, transposed, groups):
    return w_shape[1] * groups if transposed else w_shape[0]


@_family("convolution", grad=True, accumulates=True)
def _convolution_cases(ctx):
    """aten::convolution: padding, stride, dilation, groups, 1-d, transposed, channels-last."""
    cases = []
    for name, xs, ws, bias, stride, pad, dil, tr, opad, groups, layout in _CONVOLUTIONS:
        b = ctx.t(_conv_bias_size(ws, tr, groups)) if bias else None
        cases.append(Case(name, ctx.t(*xs, layout=layout), ctx.t(*ws), b, stride, pad, dil, tr, opad, groups))
    return cases


@_family("convolution_backward", accumulates=True)
def _convolution_backward_cases(ctx):
    """(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    output_padding, groups, output_mask), grad_output shaped by the CPU forward."""
    cases = []
    for name, xs, ws, bias, stride, pad, dil, tr, opad, groups, layout in _CONVOLUTIONS:
        x, w = ctx.values(xs), ctx.values(ws)
        out = torch.ops.aten.convolution.default(x, w, None, stride, pad, dil, tr, opad, groups)
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
)


@_family("max_pool2d_with_indices", grad=True)
def _max_pool_cases(ctx):
    """(self, kernel_size, stride, padding, dilation, ceil_mode) -> (out, indices)."""
    return [Case(name, ctx.t(*shape, domain="unique", layout=layout), k, s, p, d, ceil,
                 out_dtypes=(ctx.dtype, torch.int64))
            for name, shape, k, s, p, d, ceil, layout in _POOLS]


@_family("max_pool2d_with_indices_backward", accumulates=True)
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
    ("divisor_override=5", (2, 3, 11, 13), [3, 3], [2, 2], [1, 1], False, True, 5, "contiguous"),
    ("default stride", (2, 3, 11, 13), [2, 2], [], [0, 0], False, True, None, "contiguous"),
    ("2x3 kernel, stride 1x2, padding 0x1", (2, 1, 7, 13), [2, 3], [1, 2], [0, 1], False, True, None, "contiguous"),
    ("no batch dim", (3, 11, 13), [3, 3], [2, 2], [1, 1], False, True, None, "contiguous"),
    ("channels-last input", (2, 3, 11, 13), [3, 3], [2, 2], [1, 1], False, True, None, "channels_last"),
    ("sliced input with gaps", (2, 3, 7, 11), [2, 2], [2, 2], [0, 0], False, True, None, "sliced"),
    ("zero batch", (0, 3, 7, 7), [3, 3], [2, 2], [1, 1], False, True, None, "contiguous"),
)


@_family("avg_pool2d", grad=True, accumulates=True)
def _avg_pool_cases(ctx):
    """(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)."""
    return [Case(name, ctx.t(*shape, layout=layout), k, s, p, ceil, include_pad, divisor)
            for name, shape, k, s, p, ceil, include_pad, divisor, layout in _AVG_POOLS]


@_family("avg_pool2d_backward", accumulates=True)
def _avg_pool_backward_cases(ctx):
    """(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
    divisor_override), grad_output shaped by the CPU forward."""
    cases = []
    for name, shape, k, s, p, ceil, include_pad, divisor, layout in _AVG_POOLS:
        x = ctx.values(shape)
        out = torch.ops.aten.avg_pool2d.default(x, k, s, p, ceil, include_pad, divisor)
        cases.append(Case(name, ctx.t(*out.shape), ctx.of(x, layout), k, s or k, p, ceil, include_pad, divisor))
    return cases


@_family("native_batch_norm", grad=True, accumulates=True)
def _batch_norm_cases(ctx):
    """(input, weight, bias, running_mean, running_var, training, momentum, eps); the
    running statistics it updates are compared too."""
    def stats(c):
        return ctx.t(c, grad=False), ctx.t(c, domain="positive", grad=False)

    def case(name, shape, training, affine=True, running=True, layout="contiguous"):
        c = shape[1]
        w, b = (ctx.t(c), ctx.t(c)) if affine else (None, None)
        rm, rv = stats(c) if running else (None, None)
        return Case(name, ctx.t(*shape, layout=layout), w, b, rm, rv, training, 0.1, 1e-5, loose=(1, 2))

    return [
        case("4x3x5x7 training", (4, 3, 5, 7), True),
        case("training without running stats", (4, 3, 5, 7), True, running=False),
        case("eval", (4, 3, 5, 7), False),
        case("no affine", (4, 3, 5, 7), True, affine=False),
        case("2-d input", (7, 3), True),
        case("channels-last input", (4, 3, 5, 7), True, layout="channels_last"),
    ]


@_family("native_batch_norm_backward", accumulates=True)
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
        case("channels-last input", (4, 3, 5, 7), True, layout="channels_last"),
    ]


_SELF_LAYOUTS = (
    ("5x7x11", (5, 7, 11), "contiguous"),
    ("transposed 7x11", (7, 11), "transposed"),
    ("sliced with gaps 5x7 (gaps untouched)", (5, 7), "sliced"),
    ("zero-size 0x7", (0, 7), "contiguous"),
    ("0-dim", (), "contiguous"),
)


@_family("fill", "zero")
def _fill_cases(ctx):
    """fill_ (Scalar or 0-dim Tensor value) and zero_ on strided selfs."""
    def value():
        if not ctx.has("value"):
            return ()
        return (ctx.number(2.5, 3),) if ctx.kind("value") == "NumberType" else (ctx.t(),)

    return [Case(name, ctx.t(*shape, layout=layout), *value()) for name, shape, layout in _SELF_LAYOUTS]


@_family("clone")
def _clone_cases(ctx):
    """clone of strided inputs, and to contiguous_format."""
    cases = [Case(name, ctx.t(*shape, layout=layout)) for name, shape, layout in _LAYOUT_CASES]
    if ctx.has("memory_format"):
        cases.append(Case("transposed to contiguous_format", ctx.t(7, 11, layout="transposed"),
                          memory_format=torch.contiguous_format))
    return cases


@_family("copy")
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

# Per op: the domain of self's members, and of the tensor (or Scalar) it divides by.
_FOREACH_SELF_DOMAIN = {"sqrt": "positive", "log": "positive", "reciprocal": "nonzero"}
_FOREACH_DIVISOR = {"div": "other", "addcdiv": "tensor2"}


@_family("_foreach_add", "_foreach_sub", "_foreach_mul", "_foreach_div", "_foreach_addcmul", "_foreach_addcdiv",
         "_foreach_lerp", "_foreach_maximum", "_foreach_minimum", "_foreach_sqrt", "_foreach_neg", "_foreach_abs",
         "_foreach_exp", "_foreach_log", "_foreach_reciprocal", "_foreach_zero", grad=True)
def _foreach_cases(ctx):
    """_foreach_<op>[_] overloads (List, Scalar, ScalarList, Tensor), built from the
    schema: every Tensor[] argument a list of members shaped like self's, Scalar[]
    one number per member, a Tensor a 0-dim one; alpha when the overload has it."""
    op = ctx.base[len("_foreach_"):]
    params = [a for a in ctx.schema.arguments[1:] if not a.kwarg_only]

    def member_domain(name):
        if name == _FOREACH_DIVISOR.get(op):
            return "nonzero"
        return "unit" if op == "lerp" and name.startswith("weight") else "any"

    def scalar(name, i=0):
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
                args.append([ctx.t(*shape, domain=member_domain(a.name), layout="contiguous") for shape, _ in members])
            elif element is not None:  # Scalar[]: one per member
                args.append([scalar(a.name, i) for i in range(len(members))])
            elif kind == "TensorType":
                args.append(ctx.t(domain=member_domain(a.name)))
            else:
                args.append(scalar(a.name))
        return Case(name, *args, **kw)

    cases = [case(name, members) for name, members in _FOREACH_LISTS]
    if ctx.has("alpha"):
        cases.append(case(f"{_FOREACH_LISTS[0][0]}, alpha", _FOREACH_LISTS[0][1], alpha=ctx.number(0.5, 2)))
    return cases
