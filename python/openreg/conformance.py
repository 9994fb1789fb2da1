"""``python -m openreg conformance <engine>``: does an engine agree with PyTorch?

For every op and dtype the engine advertises, runs hostile cases (odd prime
shapes, zero-size, 0-dim, transposed, sliced with gaps, broadcast, expanded)
through torch on the ``openreg`` device and the same calls on torch's CPU
kernels, compares the results, and for differentiable ops compares the
gradients too (the cases: :mod:`openreg.conformance_cases`). Prints one row per
(op, dtype):

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

from .conformance_cases import Case, Ctx, T, family_for
from .conformance_pieces import cut_by_host, pieces_differ

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
    "aten::_scaled_dot_product_fused_attention_overrideable",
    "aten::_scaled_dot_product_fused_attention_overrideable_backward",
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


_MAX_AUTOGRAD_CASES = 4


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


def compare(got, ref, accumulates, relative=False):
    """None when ``got`` (from the device) matches ``ref`` (from CPU), else why not.
    ``relative``: no absolute tolerance (a result near 0 must be near in relative terms)."""
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
        atol = 0.0 if relative else atol
        try:
            torch.testing.assert_close(g, r, rtol=rtol, atol=atol, equal_nan=True, check_device=False)
        except AssertionError:
            return f"max abs err {_max_abs_error(g, r):.3g} (rtol {rtol:g}, atol {atol:g})"
        return None
    if isinstance(ref, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(ref):
            return f"got {got!r}, expected {len(ref)} values"
        for i, (g, r) in enumerate(zip(got, ref)):
            why = compare(g, r, accumulates, relative)
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


def _is_tensor_type(jit_type):
    """True for Tensor and Tensor[] (the self of the _foreach_ ops)."""
    if jit_type.kind() == "ListType":
        jit_type = jit_type.getElementType()
    return jit_type.kind() == "TensorType"


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
        # arange.start_out's only tensor is its out= argument: any tensor argument counts
        self.takes_tensor = any(_is_tensor_type(a.type) for a in args)

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


# The worker's capture file, named by the parent, so that what a crashing call wrote
# (the host's fatal-signal line) can still be read after the worker died.
_CAPTURE_ENV = "_OPENREG_CONFORMANCE_CAPTURE"


class _StderrCapture:
    """Captures what is written to file descriptor 2 (the host's routing log)."""

    def __enter__(self):
        sys.stderr.flush()
        self._saved = os.dup(2)
        path = os.environ.get(_CAPTURE_ENV)
        self._file = open(path, "w+b") if path else tempfile.TemporaryFile()
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

    def reference(self, overload, case, dtype, strided_out_like=None):
        """(result, arguments, out= tensors) of ``case`` on torch CPU; raises what CPU raises."""
        cpu = _Materialized(case, "cpu")
        cpu_outs = self._outs(overload, case, "cpu", dtype, strided_out_like)
        with torch.backends.mkldnn.flags(enabled=not case.aten_reference):
            return self._call(overload, cpu, cpu_outs), cpu, cpu_outs

    def run_case(self, overload, case, dtype, accumulates, strided_out_like=None):
        """Runs ``case`` on CPU then on the device; returns (Outcome, CPU outs)."""
        if self.on_case:
            self.on_case(case.name)
        try:
            ref, cpu, cpu_outs = self.reference(overload, case, dtype, strided_out_like)
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
        if served and not why and cut_by_host(overload):
            why = self._compare_pieces(overload, case, got, dev)
        if why and served:
            return Outcome("fail", why, served_by), cpu_outs
        if served:
            return Outcome("pass", "", served_by), cpu_outs
        outcome = Outcome("declined", self._why_not_served(overload.name, log.text), served_by)
        # The engine took no part: a difference is the host's or the reference's.
        outcome.note = why
        return outcome, cpu_outs

    def _compare_pieces(self, overload, case, got, dev):
        """The case once more on pieces of its tensors, as the host runs optimizer
        steps: why its bits differ from the whole call's, or None (conformance_pieces)."""
        def make_args():
            m = _Materialized(case, "openreg")
            self.openreg.reset_stats()
            return m.args, m.kwargs

        whole = list(dev.args[0]) if overload.inplace else list(got)
        try:
            return pieces_differ(overload, make_args, whole, self.engine,
                                 lambda: self.openreg.stats().get(overload.name, {}))
        except Exception as exc:  # noqa: BLE001 - the whole call ran: so must its pieces
            return f"the call on 1-d pieces of its tensors raised: {_first_line(exc)}"

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
            why = compare_loose(g, r, accumulates) if loose else compare(g, r, accumulates, case.relative)
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
            # In place on a leaf view is not allowed (self is a list for _foreach_ ops).
            self_ = args[0]
            args[0] = [t.clone() for t in self_] if isinstance(self_, (list, tuple)) else self_.clone()
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


class NoCases(Exception):
    """Why a row has no cases. ``skippable``: the case builder hit torch's limits for
    the dtype (such rows are not shown for ops whose table entry says "any dtype")."""

    def __init__(self, why, skippable=False):
        super().__init__(why)
        self.skippable = skippable


def row_cases(op, dtype):
    """(Overload, Family, cases) of one (op, dtype) row; raises :class:`NoCases`."""
    family = family_for(op)
    overload = Overload.resolve(op)
    if family is None or overload is None or not overload.takes_tensor:
        raise NoCases(_no_case_reason(op))
    ctx = Ctx(op, overload.schema, dtype)
    try:
        cases = [c for c in family.cases(ctx) if c.inplace_ok or not overload.inplace]
    except Exception as exc:  # noqa: BLE001 - the case builder itself hit torch's limits
        raise NoCases(f"cannot build cases for {dtype}: {_first_line(exc)}", skippable=True) from exc
    return overload, family, cases


def missing_cases(engine):
    """[(op, dtype, why)]: the rows of ``engine`` (an entry of openreg.info()["engines"])
    that would be "no case", found on torch CPU alone: no case family, or torch CPU
    rejects every case of the row."""
    runner = Runner(engine["name"])
    missing = []
    for op, dtype_name, explicit in plan_rows(engine, None, set()):
        dtype = getattr(torch, dtype_name, None)
        if not isinstance(dtype, torch.dtype):
            missing.append((op, dtype_name, _no_case_reason(op)))
            continue
        try:
            overload, _, cases = row_cases(op, dtype)
        except NoCases as why:
            if explicit or not why.skippable:
                missing.append((op, dtype_name, str(why)))
            continue
        if explicit and not any(_cpu_accepts(runner, overload, case, dtype) for case in cases):
            missing.append((op, dtype_name, "torch CPU rejects every case"))
    return missing


def _cpu_accepts(runner, overload, case, dtype):
    try:
        runner.reference(overload, case, dtype)
    except Exception:  # noqa: BLE001 - a rejection is the answer
        return False
    return True


def check_row(runner, op, dtype, explicit):
    """Result and detail of one (op, dtype) row."""
    try:
        overload, family, cases = row_cases(op, dtype)
    except NoCases as why:
        return (_SKIP if why.skippable and not explicit else NO_CASE), str(why)
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
    with tempfile.TemporaryFile(mode="w+") as err, tempfile.NamedTemporaryFile() as capture:
        env = dict(env, **{_CAPTURE_ENV: capture.name})
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
        with open(capture.name, "rb") as f:
            lines = tail + f.read().decode("utf-8", "replace").splitlines()
    if code == 0 and current is None:
        return None, None, ""
    how = _signal_name(code) if code < 0 else f"exit status {code}"
    # The host's fatal-signal line names the engine, op and arguments that crashed.
    fatal = [line for line in lines if line.startswith("openreg: fatal signal")]
    if fatal:
        how += ": " + fatal[-1][len("openreg: "):]
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
