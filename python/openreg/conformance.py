"""``python -m openreg conformance <engine>``: does an engine agree with PyTorch?

For every op and dtype the engine advertises, runs hostile cases (odd prime
shapes, zero-size, 0-dim, transposed, sliced with gaps, broadcast, expanded)
through torch on the ``openreg`` device and the same calls on torch's CPU
kernels, compares the results, and for differentiable ops compares the
gradients too. Prints one row per (op, dtype):

* ``pass``: the engine served at least one case and every result matched;
* ``FAIL``: a result (or a gradient) differed from torch CPU, or the device raised;
* ``unsupported``: the engine declined every case (aten_ref served them);
* ``no case``: this tool has no cases for the op.

Exit status: 0 when nothing FAILs, 1 otherwise (also for ``no case`` with
``--strict``), 2 for usage errors (such as an engine that cannot be loaded).

The comparison runs in a child process (``python -m openreg.conformance
--worker``) with ``OPENREG_ENGINE`` set, so it works whatever the calling
process already did with the device; an engine that crashes the child is
reported as a FAIL of the op it was running, and the run resumes after it.

``--abi`` runs the torch-free ABI-level conformance binary instead
(``<package>/bin/openreg-conformance``), passing the other arguments through.
"""

import argparse
import fnmatch
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import warnings
import zlib

import torch

_PROG = "python -m openreg conformance"
_MARK = "@openreg-conformance "  # prefix of the worker's protocol lines on stdout

PASS, FAIL, UNSUPPORTED, NO_CASE = "pass", "FAIL", "unsupported", "no case"
_SKIP = "skip"  # a row for an "any dtype" op that torch CPU rejects: not shown

#: Dtypes tried for ops whose table entry says "any dtype".
DEFAULT_DTYPES = ("float32", "float64", "bfloat16", "int64")

#: Ops tried on an engine that takes any op (the reference engine), besides its table.
DEFAULT_OPS = (
    "aten::add.Tensor", "aten::add_.Tensor", "aten::add.out", "aten::add.Scalar",
    "aten::sub.Tensor", "aten::mul.Tensor", "aten::div.Tensor", "aten::div.Tensor_mode",
    "aten::relu", "aten::relu_", "aten::sigmoid", "aten::tanh", "aten::gelu", "aten::silu",
    "aten::exp", "aten::log", "aten::sqrt", "aten::rsqrt", "aten::neg", "aten::abs",
    "aten::threshold_backward", "aten::sigmoid_backward", "aten::tanh_backward",
    "aten::gelu_backward", "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
    "aten::sum.dim_IntList", "aten::sum", "aten::mean.dim", "aten::amax", "aten::max.dim",
    "aten::argmax", "aten::_softmax", "aten::_log_softmax", "aten::_softmax_backward_data",
    "aten::_log_softmax_backward_data", "aten::mse_loss", "aten::mse_loss_backward",
    "aten::nll_loss_forward", "aten::nll_loss_backward", "aten::native_layer_norm",
    "aten::native_layer_norm_backward", "aten::convolution", "aten::convolution_backward",
    "aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward",
    "aten::native_batch_norm", "aten::native_batch_norm_backward", "aten::fill_.Scalar",
    "aten::zero_", "aten::clone", "aten::copy_",
)

# (rtol, atol) per dtype: elementwise ops, then ops that accumulate (matmul,
# convolution, reductions, normalisations), whose summation order may differ.
_TOLERANCES = {
    torch.float64: ((1e-7, 1e-7), (1e-9, 1e-9)),
    torch.float32: ((1.3e-6, 1e-5), (1e-4, 1e-4)),
    # Half types: about one unit in the last place of inputs in [-2, 2] absolute, so
    # that computing in the storage type (rounding twice) is not reported.
    torch.float16: ((2e-3, 2e-3), (1e-2, 1e-2)),
    torch.bfloat16: ((1.6e-2, 1e-2), (5e-2, 5e-2)),
}

_GAP_FLOAT = float("nan")  # what fills the gaps of sliced inputs: reading it shows
_GAP_INT = 77

_MAX_AUTOGRAD_CASES = 4


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


class Ctx:
    """What a case generator knows: the op, its schema, the dtype, and seeded
    helpers that build inputs."""

    def __init__(self, op, schema, dtype):
        self.op = op
        self.base = op.split("::", 1)[-1].split(".", 1)[0]
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
        unique (distinct values, exact in bfloat16 up to 256 elements)."""
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
    base = op.split("::", 1)[-1].split(".", 1)[0]
    return FAMILIES.get(base) or FAMILIES.get(base.rstrip("_"))


_LAYOUT_CASES = (  # (name, shape, layout): the common hostile set for elementwise ops
    ("5x7x11", (5, 7, 11), "contiguous"),
    ("5x7x11x13", (5, 7, 11, 13), "contiguous"),
    ("transposed 7x11", (7, 11), "transposed"),
    ("sliced with gaps 5x7", (5, 7), "sliced"),
    ("expanded (stride 0) 5x7", (5, 7), "expanded"),
    ("zero-size 0x7", (0, 7), "contiguous"),
    ("0-dim", (), "contiguous"),
)


@_family("add", "sub", "mul", "div", "maximum", "minimum", "remainder", "pow", grad=True)
def _binary_cases(ctx):
    """Elementwise binary ops, Tensor and Scalar overloads, alpha and rounding modes."""
    dom = "nonzero" if ctx.base in ("div", "remainder") else "any"
    if ctx.base == "pow":
        dom = "positive"
    scalar = ctx.kind("other") == "NumberType"
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


@_family("fill_", "zero_")
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


@_family("copy_")
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


# ================================================================== comparing


# Dtypes whose accumulating results torch CPU may round on the way (see _compare_exact).
_REDUCED_PRECISION = (torch.bfloat16, torch.float16)


def tolerance(dtype, accumulates):
    """(rtol, atol) for results of ``dtype``: exact for integers and bool."""
    pair = _TOLERANCES.get(dtype)
    if pair is None:
        return 0.0, 0.0
    return pair[1] if accumulates else pair[0]


def _max_abs_error(got, ref):
    """Largest |got - ref| (NaN when NaNs differ), as a float."""
    g, r = got.to(torch.float64), ref.to(torch.float64)
    same = (g == r) | (torch.isnan(g) & torch.isnan(r))
    if bool(same.all()):
        return 0.0
    diff = (g - r).abs()
    diff = torch.where(same, torch.zeros_like(diff), diff)
    if bool(torch.isnan(diff).any()):
        return float("nan")
    return float(diff.max())


def compare(got, ref, accumulates):
    """None when ``got`` (from the device) matches ``ref`` (from CPU), else why not."""
    if isinstance(ref, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"got {type(got).__name__}, expected a tensor"
        if got.device.type != "openreg":
            return f"result is on {got.device}, not openreg"
        if tuple(got.shape) != tuple(ref.shape):
            return f"shape {tuple(got.shape)} != {tuple(ref.shape)}"
        if got.dtype != ref.dtype:
            return f"dtype {got.dtype} != {ref.dtype}"
        g, r = got.detach().cpu(), ref.detach()
        rtol, atol = tolerance(r.dtype, accumulates)
        try:
            torch.testing.assert_close(g, r, rtol=rtol, atol=atol, equal_nan=True, check_device=False)
        except AssertionError:
            return f"max abs err {_max_abs_error(g, r):.3g} (rtol {rtol:g}, atol {atol:g})"
        return None
    if isinstance(ref, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(ref):
            return f"got {got!r}, expected {len(ref)} values"
        for i, (g, r) in enumerate(zip(got, ref)):
            why = compare(g, r, accumulates)
            if why:
                return f"item {i}: {why}"
        return None
    return None if got == ref else f"got {got!r}, expected {ref!r}"


def compare_loose(got, ref, accumulates):
    """:func:`compare` for an implementation-defined output: values only, when the
    shapes agree, at the precision of the coarser of the two dtypes."""
    if not (isinstance(got, torch.Tensor) and isinstance(ref, torch.Tensor)) or got.dtype == ref.dtype:
        if isinstance(got, torch.Tensor) and isinstance(ref, torch.Tensor) and got.shape != ref.shape:
            return None
        return compare(got, ref, accumulates)
    if tuple(got.shape) != tuple(ref.shape):
        return None
    coarse = ref.dtype if ref.element_size() <= got.element_size() else got.dtype
    g = got.detach().cpu().to(coarse).to(torch.float64)
    r = ref.detach().to(coarse).to(torch.float64)
    rtol, atol = tolerance(coarse, accumulates)
    try:
        torch.testing.assert_close(g, r, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError:
        return f"max abs err {_max_abs_error(g, r):.3g} (rtol {rtol:g}, atol {atol:g}, in {coarse})"
    return None


# ==================================================================== running


class _Materialized:
    """A case's arguments on one device: leaves (the copied bases), args, kwargs."""

    def __init__(self, case, device, requires_grad=False):
        self.leaves = []  # (label, leaf)
        self.args = [self._make(a, device, requires_grad, f"argument {i}") for i, a in enumerate(case.args)]
        self.kwargs = {k: self._make(v, device, requires_grad, f"argument '{k}'") for k, v in case.kwargs.items()}

    def _make(self, value, device, requires_grad, label):
        if isinstance(value, T):
            leaf, arg = value.make(device, requires_grad and value.differentiable)
            self.leaves.append((label, leaf))
            return arg
        if isinstance(value, (list, tuple)) and any(isinstance(v, T) for v in value):
            return type(value)(self._make(v, device, requires_grad, f"{label}[{i}]") for i, v in enumerate(value))
        return value


class Overload:
    """One advertised op: its torch.ops callable and what kind of overload it is."""

    def __init__(self, name):
        self.name = name
        ns, _, rest = name.partition("::")
        base, _, overload = rest.partition(".")
        self.fn = getattr(getattr(getattr(torch.ops, ns), base), overload or "default")
        self.schema = self.fn._schema
        args = self.schema.arguments
        self.out_args = [a.name for a in args if a.is_out]
        first = args[0] if args else None
        self.inplace = bool(first is not None and not first.is_out and first.alias_info is not None
                            and first.alias_info.is_write)
        self.takes_tensor = bool(first is not None and first.type.kind() == "TensorType")

    @staticmethod
    def resolve(name):
        """The Overload for ``name``, or None when torch has no such op."""
        try:
            return Overload(name)
        except (AttributeError, RuntimeError):
            return None


def _flatten(value, label="output"):
    """[(label, item)] of a result: a tensor, or a tuple/list of them."""
    if isinstance(value, (list, tuple)):
        return [(f"{label} {i}", v) for i, v in enumerate(value)]
    return [(label, value)]


def _first_line(exc):
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


class _StderrCapture:
    """Captures what is written to file descriptor 2 (the host's routing log)."""

    def __enter__(self):
        sys.stderr.flush()
        self._saved = os.dup(2)
        self._file = tempfile.TemporaryFile()
        os.dup2(self._file.fileno(), 2)
        self.text = ""
        return self

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        self.text = self._file.read().decode("utf-8", "replace")
        self._file.close()
        return False


_DECLINE = re.compile(r"^openreg: (\S+): (\S+) declined \((.*)\)\s*$")


def decline_reasons(log, op, engine):
    """The reasons ``engine`` gave for declining ``op`` in a routing log."""
    out = []
    for line in log.splitlines():
        m = _DECLINE.match(line)
        if m and m.group(1) == op and m.group(2) == engine:
            out.append(m.group(3))
    return out


class Outcome:
    """How one case went: pass, fail, declined (not served by the engine), n/a
    (torch CPU rejects the call, so there is nothing to compare)."""

    def __init__(self, status, detail="", served_by=None):
        self.status = status
        self.detail = detail
        self.served_by = served_by or {}
        self.note = None  # a difference found in a case the engine did not serve


class Runner:
    """Runs cases of advertised ops on the device and on CPU, for one engine."""

    def __init__(self, engine, verbose=False):
        import openreg

        self.openreg = openreg
        self.engine = engine
        self.verbose = verbose
        self.on_case = None  # called with each case's name before it runs

    def say(self, text):
        """Prints ``text`` on stderr in verbose mode."""
        if self.verbose:
            print(text, file=sys.stderr, flush=True)

    def _outs(self, overload, case, device, dtype, like=None):
        """Fresh out= tensors: empty (resized by the op), or shaped and transposed like ``like``."""
        outs = {}
        for i, name in enumerate(overload.out_args):
            d = case.out_dtypes[i] if case.out_dtypes and i < len(case.out_dtypes) else dtype
            ref = like[name] if like else None
            if ref is not None and ref.dim() >= 2:
                t = torch.empty(tuple(reversed(ref.shape)), dtype=d, device=device)
                outs[name] = t.permute(tuple(reversed(range(ref.dim()))))
            else:
                outs[name] = torch.empty(0, dtype=d, device=device)
        return outs

    def _call(self, overload, m, outs):
        return overload.fn(*m.args, **m.kwargs, **outs)

    def run_case(self, overload, case, dtype, accumulates, strided_out_like=None):
        """Runs ``case`` on CPU then on the device; returns (Outcome, CPU outs)."""
        if self.on_case:
            self.on_case(case.name)
        try:
            cpu = _Materialized(case, "cpu")
            cpu_outs = self._outs(overload, case, "cpu", dtype, strided_out_like)
            ref = self._call(overload, cpu, cpu_outs)
        except Exception as exc:  # noqa: BLE001 - any rejection means "nothing to compare"
            return Outcome("n/a", f"torch CPU rejects it: {_first_line(exc)}"), None
        dev = _Materialized(case, "openreg")
        dev_outs = self._outs(overload, case, "openreg", dtype, strided_out_like)
        self.openreg.reset_stats()
        error = None
        with _StderrCapture() as log:
            try:
                got = self._call(overload, dev, dev_outs)
            except Exception as exc:  # noqa: BLE001 - reported as a failure
                error = exc
        served_by = dict(self.openreg.stats().get(overload.name, {}))
        if self.verbose and log.text:
            sys.stderr.write(log.text)
        if error is not None:
            return Outcome("fail", f"the device raised: {_first_line(error)}", served_by), cpu_outs
        why = self._compare(case, got, ref, dev, cpu, dev_outs, cpu_outs, accumulates)
        if why and accumulates and dtype in _REDUCED_PRECISION:
            # torch CPU accumulates some reduced-precision results in that precision
            # (bf16 sums): judge the engine against the exact answer instead.
            exact_why = self._compare_exact(overload, case, dtype, got, dev, cpu, dev_outs)
            if exact_why is None:
                why = None
        served = bool(served_by.get(self.engine))
        if why and served:
            return Outcome("fail", why, served_by), cpu_outs
        if served:
            return Outcome("pass", "", served_by), cpu_outs
        outcome = Outcome("declined", self._why_not_served(overload.name, log.text), served_by)
        # The engine took no part: a difference is the host's or the reference's.
        outcome.note = why
        return outcome, cpu_outs

    def _compare(self, case, got, ref, dev, cpu, dev_outs, cpu_outs, accumulates):
        """First difference among returns, every input (leaves, catching writes to
        inputs and gaps) and out= tensors; None when all match."""
        if len(_flatten(got)) != len(_flatten(ref)):
            return f"{len(_flatten(got))} results, expected {len(_flatten(ref))}"
        checks = [(label, g, r, i in case.loose) for i, ((label, g), (_, r)) in
                  enumerate(zip(_flatten(got), _flatten(ref)))]
        checks += [(label, g, r, False) for (label, g), (_, r) in zip(dev.leaves, cpu.leaves)]
        checks += [(f"out= '{k}'", dev_outs[k], cpu_outs[k], i in case.loose) for i, k in enumerate(cpu_outs)]
        for label, g, r, loose in checks:
            why = (compare_loose if loose else compare)(g, r, accumulates)
            if why:
                return f"{label}: {why}"
        return None

    def _compare_exact(self, overload, case, dtype, got, dev, cpu, dev_outs):
        """:meth:`_compare` against the float64 answer: the op on CPU with every
        ``dtype`` tensor widened to float64 (the same values), results judged at
        ``dtype``'s accumulating tolerance. Inputs are still compared with CPU's.
        Returns why not, or None; "n/a" when CPU refuses float64 for the op."""
        m = _Materialized(case, "cpu")

        def widen(v):
            if isinstance(v, torch.Tensor) and v.dtype == dtype:
                return v.to(torch.float64)
            if isinstance(v, (list, tuple)):
                return type(v)(widen(x) for x in v)
            return v

        outs = self._outs(overload, case, "cpu", torch.float64)
        try:
            exact = overload.fn(*[widen(a) for a in m.args], **{k: widen(v) for k, v in m.kwargs.items()}, **outs)
        except Exception:  # noqa: BLE001 - no float64 form: nothing to judge by
            return "n/a"
        rtol, atol = tolerance(dtype, True)
        checks = list(zip(_flatten(got), _flatten(exact))) + [
            ((f"out= '{k}'", dev_outs[k]), (k, outs[k])) for k in outs]
        for (label, g), (_, r) in checks:
            if not (isinstance(g, torch.Tensor) and isinstance(r, torch.Tensor)):
                why = compare(g, r, True)
            elif tuple(g.shape) != tuple(r.shape):
                why = f"shape {tuple(g.shape)} != {tuple(r.shape)}"
            else:
                g64 = g.detach().cpu().to(torch.float64)
                r64 = r.to(dtype).to(torch.float64) if g.dtype == dtype else r.to(g.dtype).to(torch.float64)
                try:
                    torch.testing.assert_close(g64, r64, rtol=rtol, atol=atol, equal_nan=True)
                    why = None
                except AssertionError:
                    why = f"max abs err {_max_abs_error(g64, r64):.3g} against float64"
            if why:
                return f"{label}: {why}"
        for (label, g), (_, r) in zip(dev.leaves, cpu.leaves):
            why = compare(g, r, False)
            if why:
                return f"{label}: {why}"
        return None

    def _why_not_served(self, op, log):
        reasons = decline_reasons(log, op, self.engine)
        if reasons:
            return f"declined: {reasons[0]}"
        stats = self.openreg.stats()
        if op in stats:
            return f"routed to {', '.join(sorted(stats[op]))} without asking {self.engine}"
        if not stats:
            return f"never reaches an engine: the openreg host runs {op} itself"
        calls = [f"{name} ({', '.join(sorted(per))})" for name, per in sorted(stats.items())]
        more = ", ..." if len(calls) > 4 else ""
        return f"never reaches an engine as itself: torch decomposes it into {', '.join(calls[:4])}{more}"

    def run_autograd(self, overload, case, seed, accumulates):
        """Backward through ``case`` on both devices: None (ok), "n/a", or why the
        gradients differ. Backward ops may be served by any engine."""
        cpu = _Materialized(case, "cpu", requires_grad=True)
        if not any(leaf.requires_grad for _, leaf in cpu.leaves):
            return "n/a"
        try:
            ref_outs = self._backward(overload, cpu, seed)
        except Exception:  # noqa: BLE001 - not differentiable on CPU: nothing to compare
            return "n/a"
        if ref_outs is None:
            return "n/a"
        dev = _Materialized(case, "openreg", requires_grad=True)
        try:
            self._backward(overload, dev, seed)
        except Exception as exc:  # noqa: BLE001 - reported as a failure
            return f"backward raised on the device: {_first_line(exc)}"
        for (label, g), (_, r) in zip(dev.leaves, cpu.leaves):
            why = compare(g.grad, r.grad, True) if r.grad is not None else (
                None if g.grad is None else "unexpected gradient")
            if why:
                return f"grad of {label}: {why}"
        return None

    def _backward(self, overload, m, seed):
        """Calls the op with grad-requiring leaves and backpropagates a weighted sum
        of its floating results; returns them, or None when none needs a grad."""
        args = list(m.args)
        if overload.inplace:
            args[0] = args[0].clone()  # in place on a leaf view is not allowed
        result = overload.fn(*args, **m.kwargs)
        outs = [v for _, v in _flatten(result) if isinstance(v, torch.Tensor) and v.requires_grad]
        if not outs:
            return None
        gen = torch.Generator().manual_seed(seed)
        loss = None
        for o in outs:
            w = torch.rand(o.shape, generator=gen, dtype=torch.float64).to(o.dtype).to(o.device)
            term = (o * w).sum()
            loss = term if loss is None else loss + term
        loss.backward()
        return outs


def _grad_seed(op, case_name):
    return zlib.crc32(f"{op}:{case_name}:grad".encode())


def _no_case_reason(op):
    if Overload.resolve(op) is None:
        return f"torch {torch.__version__} has no op {op}"
    return "no cases for this op in openreg.conformance"


def check_row(runner, op, dtype, explicit):
    """Result and detail of one (op, dtype) row."""
    family = family_for(op)
    overload = Overload.resolve(op)
    if family is None or overload is None or not overload.takes_tensor:
        return NO_CASE, _no_case_reason(op)
    ctx = Ctx(op, overload.schema, dtype)
    try:
        cases = [c for c in family.cases(ctx) if c.inplace_ok or not overload.inplace]
    except Exception as exc:  # noqa: BLE001 - the case builder itself hit torch's limits
        return (NO_CASE if explicit else _SKIP), f"cannot build cases for {dtype}: {_first_line(exc)}"
    outcomes = []
    strided_done = not overload.out_args
    for case in cases:
        outcome, cpu_outs = _run_one(runner, overload, family, case, dtype)
        outcomes.append((case, outcome))
        if not strided_done and cpu_outs and any(t.dim() >= 2 for t in cpu_outs.values()):
            # Once per row: out= tensors of the right shape but transposed strides,
            # which the op must write through rather than replace.
            strided = Case(case.name + " (strided out=)", *case.args, out_dtypes=case.out_dtypes,
                           loose=case.loose, **case.kwargs)
            outcomes.append((strided, _run_one(runner, overload, family, strided, dtype, cpu_outs)[0]))
            strided_done = True
    return _summarize(runner, overload, family, dtype, outcomes, explicit)


def _run_one(runner, overload, family, case, dtype, strided_out_like=None):
    outcome, cpu_outs = runner.run_case(overload, case, dtype, family.accumulates, strided_out_like)
    runner.say(f"  {overload.name} {str(dtype)[6:]} '{case.name}': {outcome.status} {outcome.detail}".rstrip())
    return outcome, cpu_outs


def _summarize(runner, overload, family, dtype, outcomes, explicit):
    """Folds the outcomes of a row's cases into (result, detail); runs autograd on
    the cases the engine served."""
    ran = [(c, o) for c, o in outcomes if o.status != "n/a"]
    if not ran:
        why = outcomes[0][1].detail if outcomes else "no case applies"
        return (NO_CASE if explicit else _SKIP), why
    fails = [(c, o) for c, o in ran if o.status == "fail"]
    if fails:
        c, o = fails[0]
        more = f" (+{len(fails) - 1} more failing cases)" if len(fails) > 1 else ""
        return FAIL, f"case '{c.name}': {o.detail}{more}"
    served = [(c, o) for c, o in ran if o.status == "pass"]
    declined = [(c, o) for c, o in ran if o.status == "declined"]
    noted = [(c, o) for c, o in declined if o.note]
    note = ""
    if noted:
        c, o = noted[0]
        note = (f"; without {runner.engine} the device differs from CPU in case '{c.name}': {o.note} "
                "(a host or reference issue)")
    if not served:
        return UNSUPPORTED, declined[0][1].detail + note
    detail = f"{len(served)}/{len(ran)} cases"
    if declined:
        detail += f" ({len(declined)} {declined[0][1].detail})"
    if family.grad and dtype.is_floating_point and not overload.out_args:
        verdict = _autograd_verdict(runner, overload, family, served)
        if verdict is not None and verdict != "ok":
            return FAIL, f"forward ok ({detail}), autograd FAIL: {verdict}"
        if verdict == "ok":
            detail += ", autograd ok"
    return PASS, detail + note


def _autograd_verdict(runner, overload, family, served):
    """"ok", None (not applicable), or the first gradient difference."""
    checked = False
    for case, _ in served[:_MAX_AUTOGRAD_CASES]:
        why = runner.run_autograd(overload, case, _grad_seed(overload.name, case.name), family.accumulates)
        runner.say(f"  {overload.name} '{case.name}' autograd: {why or 'ok'}")
        if why == "n/a":
            continue
        if why:
            return f"case '{case.name}': {why}"
        checked = True
    return "ok" if checked else None


# ===================================================================== worker


def _emit(**event):
    sys.stdout.write(_MARK + json.dumps(event) + "\n")
    sys.stdout.flush()


def _matches(op, pattern):
    if not pattern:
        return True
    if any(ch in pattern for ch in "*?["):
        return fnmatch.fnmatchcase(op, pattern)
    return pattern in op


def plan_rows(engine, op_filter, dtype_filter):
    """[(op, dtype name or "any", explicit)] for the engine's table (and, for an
    engine taking any op, the ops in DEFAULT_OPS)."""
    table = dict(engine["ops"])
    if engine["any_op"]:
        for op in DEFAULT_OPS:
            table.setdefault(op, [])
    rows = []
    for op, dtypes in table.items():
        if not _matches(op, op_filter):
            continue
        explicit = bool(dtypes)
        if not explicit and family_for(op) is None:
            if not dtype_filter:
                rows.append((op, "any", False))
            continue
        for d in (dtypes or DEFAULT_DTYPES):
            if not dtype_filter or d in dtype_filter:
                rows.append((op, d, explicit))
    return rows


def _worker(argv):
    """The child process: loads the chain, plans the rows, runs them from --resume."""
    parser = argparse.ArgumentParser(prog="python -m openreg.conformance --worker")
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--op", default=None)
    parser.add_argument("--dtype", action="append", default=[])
    parser.add_argument("--resume", type=int, default=0)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    import openreg

    try:
        chain = openreg.info()["engines"]
    except RuntimeError as exc:
        _emit(event="error", message=str(exc).strip().splitlines()[0])
        return 2
    engine = chain[0]
    _emit(event="engine", name=engine["name"], version=engine["version"], path=engine["path"],
          chain=[e["name"] for e in chain], torch=torch.__version__)
    rows = plan_rows(engine, args.op, set(args.dtype))
    _emit(event="plan", rows=rows)
    runner = Runner(engine["name"], verbose=args.verbose)
    runner.on_case = lambda name: _emit(event="case", name=name)
    for index in range(args.resume, len(rows)):
        op, dtype_name, explicit = rows[index]
        _emit(event="start", index=index)
        dtype = getattr(torch, dtype_name, None)
        if dtype_name == "any":
            result, detail = NO_CASE, _no_case_reason(op)
        elif not isinstance(dtype, torch.dtype):
            result, detail = NO_CASE, f"torch has no dtype {dtype_name}"
        else:
            result, detail = check_row(runner, op, dtype, explicit)
        _emit(event="row", index=index, op=op, dtype=dtype_name, result=result, detail=detail)
    return 0


# ===================================================================== parent


def _signal_name(code):
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _child_env(engine):
    """The environment of the worker: the engine chosen, the routing log on (for
    decline reasons), the fallback on, and the same openreg package importable."""
    import openreg

    env = dict(os.environ)
    env["OPENREG_ENGINE"] = engine
    env.pop("OPENREG_FALLBACK", None)
    if int(env.get("OPENREG_VERBOSE", "0") or 0) < 1:
        env["OPENREG_VERBOSE"] = "1"
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(openreg.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg_parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


class _Table:
    """Prints rows as they arrive, with widths fixed by the plan."""

    def __init__(self, rows, out=sys.stdout):
        self.op_w = max([len("op")] + [len(r[0]) for r in rows])
        self.dt_w = max([len("dtype")] + [len(r[1]) for r in rows])
        self.out = out
        self.counts = {PASS: 0, FAIL: 0, UNSUPPORTED: 0, NO_CASE: 0}

    def header(self):
        self._line("op", "dtype", "result", "detail")
        self._line("-" * self.op_w, "-" * self.dt_w, "-" * 11, "-" * 6)

    def row(self, op, dtype, result, detail):
        if result == _SKIP:
            return
        self.counts[result] = self.counts.get(result, 0) + 1
        self._line(op, dtype, result, detail)

    def _line(self, op, dtype, result, detail):
        print(f"{op:<{self.op_w}}  {dtype:<{self.dt_w}}  {result:<11}  {detail}".rstrip(), file=self.out, flush=True)


def _run_rounds(engine, args):
    """Runs the worker (again after a crash, past the crashing row). Returns
    (exit status or None, table or None)."""
    cmd = [sys.executable, "-m", "openreg.conformance", "--worker"]
    if args.op:
        cmd += ["--op", args.op]
    for d in args.dtype:
        cmd += ["--dtype", d]
    if args.verbose:
        cmd.append("--verbose")
    env = _child_env(engine)
    state = {"table": None, "rows": None, "case": None}
    resume = 0
    while True:
        status, current, how = _one_round(cmd + ["--resume", str(resume)], env, args.verbose, state)
        if status is not None:
            return status, state["table"]
        if current is None:
            return None, state["table"]
        op, dtype, _ = state["rows"][current]
        where = f" in case '{state['case']}'" if state.get("case") else ""
        state["table"].row(op, dtype, FAIL, f"crashed the worker process ({how}){where}")
        resume = current + 1
        if resume >= len(state["rows"]):
            return None, state["table"]


def _one_round(cmd, env, verbose, state):
    """One worker process. Returns (exit status to stop with or None, index of the row
    it died in or None, how it died)."""
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=None if verbose else err, text=True)
        current = None
        for line in proc.stdout:
            if not line.startswith(_MARK):
                if verbose:
                    sys.stderr.write(line)
                continue
            event = json.loads(line[len(_MARK):])
            kind = event["event"]
            if kind == "error":
                proc.wait()
                print(f"{_PROG}: {event['message']}", file=sys.stderr)
                return 2, None, ""
            if kind == "engine" and state["table"] is None:
                others = ", then ".join(event["chain"][1:]) or "none"
                print(f"engine under test: {event['name']} {event['version']} ({event['path']})")
                print(f"reference: torch {event['torch']} CPU; fallback chain: {others}")
            elif kind == "plan" and state["table"] is None:
                state["rows"] = [tuple(r) for r in event["rows"]]
                state["table"] = _Table(state["rows"])
                print()
                state["table"].header()
            elif kind == "start":
                current = event["index"]
                state["case"] = None
            elif kind == "case":
                state["case"] = event["name"]
            elif kind == "row":
                state["table"].row(event["op"], event["dtype"], event["result"], event["detail"])
                current = None
        code = proc.wait()
        err.seek(0)
        tail = err.read().strip().splitlines()[-5:]
    if code == 0 and current is None:
        return None, None, ""
    how = _signal_name(code) if code < 0 else f"exit status {code}"
    if state["rows"] is None or current is None:
        print(f"{_PROG}: the worker process failed ({how}) outside any op:", file=sys.stderr)
        for line in tail:
            print(f"  {line}", file=sys.stderr)
        return 1, None, how
    return None, current, how


def _abi(engine, args, extra):
    """Runs the ABI-level conformance binary with the arguments passed through."""
    import openreg

    binary = os.path.join(openreg.cmake_prefix_path, "bin", "openreg-conformance")
    if not os.path.isfile(binary):
        print(f"{_PROG}: {binary} is missing: this openreg package was built without GoogleTest "
              "(install libgtest-dev, then rebuild: bash scripts/setup.sh)", file=sys.stderr)
        return 2
    cmd = [binary, f"--engine={engine}"] + ([f"--op={args.op}"] if args.op else []) + list(extra)
    code = subprocess.call(cmd)
    return code if code >= 0 else 128 - code


def _engine_arg(engine):
    """A path to an existing file is made absolute; names are left alone."""
    if os.path.isfile(engine):
        return os.path.abspath(engine)
    return engine


def _parser():
    p = argparse.ArgumentParser(
        prog=_PROG,
        description="Compare an engine's results with torch CPU, op by op, through the openreg device "
                    "(forward and autograd). Exit 0: nothing failed; 1: some op disagrees; 2: usage error.")
    p.add_argument("engine", help="engine name (as in OPENREG_ENGINE) or path to an engine library")
    p.add_argument("--op", default=None, help="only ops whose name contains this (or matches this glob)")
    p.add_argument("--dtype", action="append", default=[],
                   help="only these dtypes (float32, bfloat16, ...; comma-separated or repeated)")
    p.add_argument("--verbose", action="store_true", help="print every case and the routing log on stderr")
    p.add_argument("--strict", action="store_true", help="advertised ops without cases make the run fail")
    p.add_argument("--abi", action="store_true",
                   help="run the ABI-level conformance binary instead (other arguments pass through, "
                        "e.g. --mode=test|support|perf)")
    return p


def main(argv=None):
    """``python -m openreg conformance``; returns the exit status."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    engine = _engine_arg(args.engine)
    if args.abi:
        return _abi(engine, args, extra)
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.dtype = [d for item in args.dtype for d in item.split(",") if d]
    for d in args.dtype:
        if not isinstance(getattr(torch, d, None), torch.dtype):
            parser.error(f"unknown dtype '{d}' (use torch's names: float32, float64, bfloat16, int64, ...)")
    status, table = _run_rounds(engine, args)
    if status is not None and table is None:
        return status
    counts = table.counts if table else {}
    total = sum(counts.values())
    print()
    print(f"{total} row{'' if total == 1 else 's'}: {counts.get(PASS, 0)} pass, {counts.get(FAIL, 0)} FAIL, "
          f"{counts.get(UNSUPPORTED, 0)} unsupported, {counts.get(NO_CASE, 0)} no case")
    if status is not None:
        return status
    if counts.get(FAIL) or (args.strict and counts.get(NO_CASE)):
        return 1
    return 0


if __name__ == "__main__":
    if "--worker" in sys.argv[1:]:
        sys.exit(_worker(sys.argv[1:]))
    sys.exit(main())
