"""The cases of ``python -m openreg conformance``: for each op family, the calls that
exercise it on hostile inputs (odd prime shapes, zero-size, 0-dim, transposed,
sliced with gaps, broadcast, expanded, Scalar overloads).

This module holds what cases are made of (:class:`T`, :class:`Case`, :class:`Ctx`)
and the registry. A family is a function ``Ctx -> [Case]`` registered with
:func:`register` under the ops' base names, in
:mod:`openreg.conformance_cases_elementwise` and
:mod:`openreg.conformance_cases_reducing`; :func:`family_for` finds it for an op
name (in-place ``add_`` and out= ``add.out`` use ``add``'s, filtered or extended
by the runner in :mod:`openreg.conformance`). Cases follow the op's schema, so a
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
    not): their values are compared when the shapes agree, in the coarser dtype.
    ``aten_reference=True`` computes the expected values with torch's bundled
    oneDNN switched off (``torch.backends.mkldnn``), on ATen's own kernel: for
    inputs where that oneDNN's answer depends on the CPU it runs on. ``relative=True``
    compares floating results by relative tolerance alone (no absolute one): for
    results near 0 whose relative accuracy is the point (log near 1)."""

    def __init__(self, name, *args, inplace_ok=True, out_dtypes=None, loose=(), aten_reference=False,
                 relative=False, **kwargs):
        self.name = name
        self.args = args
        self.kwargs = kwargs
        self.inplace_ok = inplace_ok
        self.out_dtypes = out_dtypes
        self.loose = loose  # outputs whose dtype and shape PyTorch leaves open (saved statistics)
        self.aten_reference = aten_reference
        self.relative = relative


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


def register(*bases, grad=False, accumulates=False):
    """Registers a case generator for ops named ``aten::<base>[_][.overload]``."""

    def add(fn):
        for b in bases:
            FAMILIES[b] = Family(fn, grad, accumulates)
        return fn

    return add


def family_for(op):
    """The :class:`Family` for an op name, or None (in-place ``add_`` uses ``add``'s)."""
    # The families register themselves on import (here: they import this module).
    from . import conformance_cases_elementwise, conformance_cases_indexing, conformance_cases_reducing  # noqa: F401
    from . import conformance_cases_misc  # noqa: F401
    from . import conformance_cases_optim  # noqa: F401
    from . import conformance_cases_rnn  # noqa: F401
    from . import conformance_cases_attention  # noqa: F401

    return FAMILIES.get(_root(op))


LAYOUT_CASES = (  # (name, shape, layout): the common hostile set for elementwise ops
    ("5x7x11", (5, 7, 11), "contiguous"),
    ("5x7x11x13", (5, 7, 11, 13), "contiguous"),
    ("transposed 7x11", (7, 11), "transposed"),
    ("sliced with gaps 5x7", (5, 7), "sliced"),
    ("expanded (stride 0) 5x7", (5, 7), "expanded"),
    ("zero-size 0x7", (0, 7), "contiguous"),
    ("0-dim", (), "contiguous"),
)
