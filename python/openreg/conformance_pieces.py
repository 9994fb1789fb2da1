"""The conformance check that an elementwise ``_foreach_`` kernel gives the bits of a
whole call when it is called on pieces of the lists' tensors.

The host runs the queued ``_foreach_`` ops of an optimizer step a group of elements at
a time (core/src/runtime/interleaved_runs.h), each op as calls on 1-d pieces of the
tensors, and whether a step runs whole or in pieces depends on timing: a kernel whose
results depend on where a call starts or ends (a vector loop and a scalar remainder
that round differently) makes a training run's results change from run to run.
docs/engine-authoring.md, section 4.6. Runner.run_case calls :func:`pieces_differ`
for every case of such an op that the engine served and got right."""

import torch

from . import _C


def cut_by_host(overload):
    """Whether the host may run calls of ``overload`` (an openreg.conformance.Overload) in
    pieces: an elementwise ``_foreach_`` op (core's ForeachSlices decides) without out= lists."""
    return not overload.out_args and _C._foreach_op_runs_in_pieces(overload.name)


def piece_lengths(n):
    """Lengths of the pieces a member of n elements is cut into: a 7-element piece
    first, so that the later ones start off any vector boundary, then two halves."""
    if n <= 1:
        return [n]
    first = min(7, n - 1)
    rest = n - first
    if rest <= 2:
        return [first, rest]
    return [first, rest // 2 + 1, rest - rest // 2 - 1]


def _members_fit(args):
    """The lists' member numels when the call is one the host would cut (every tensor
    argument a list of contiguous tensors, the lists alike position by position, no
    single tensor), else None."""
    numels = None
    for a in args:
        if isinstance(a, torch.Tensor):
            return None
        if isinstance(a, (list, tuple)) and a and all(isinstance(t, torch.Tensor) for t in a):
            if not all(t.is_contiguous() for t in a):
                return None
            sizes = [t.numel() for t in a]
            if numels is None:
                numels = sizes
            elif sizes != numels:
                return None
    return numels if numels and max(numels) >= 2 else None


def _cut(args, numels):
    """The arguments with every member of a tensor list replaced by its pieces (views of
    it) and every number of a Scalar list repeated once per piece."""
    out = []
    for a in args:
        if isinstance(a, (list, tuple)) and a and all(isinstance(t, torch.Tensor) for t in a):
            pieces = []
            for t in a:
                flat, at = t.view(-1), 0
                for n in piece_lengths(t.numel()):
                    pieces.append(flat[at:at + n])
                    at += n
            out.append(pieces)
        elif isinstance(a, (list, tuple)) and len(a) == len(numels):
            out.append([v for v, n in zip(a, numels) for _ in piece_lengths(n)])
        else:
            out.append(a)
    return out


_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t):
    """A flat CPU copy of ``t`` whose equality is bitwise (NaNs included)."""
    t = t.detach().cpu().reshape(-1).contiguous()
    return t.view(_INT_OF_SIZE[t.element_size()]) if t.is_floating_point() or t.is_complex() else t


def pieces_differ(overload, make_args, whole, engine, stats_of):
    """Why the call on pieces does not give ``whole``'s bits, or None (also when the
    call is not one the host cuts, or the engine did not serve the pieces).

    ``make_args()``: (args, kwargs) on the device, fresh, the case's values;
    ``whole``: the members the whole call produced (self after an in-place call, the
    returned list otherwise); ``stats_of()``: the calls per engine of the op since the
    last reset (openreg.stats())."""
    args, kwargs = make_args()
    numels = _members_fit(args)
    if numels is None:
        return None
    result = overload.fn(*_cut(args, numels), **kwargs)
    if not stats_of().get(engine):
        return None  # another engine ran the pieces: nothing to say of this one's kernel
    if overload.inplace:
        got = list(args[0])
    else:
        got, at = [], 0
        for member, n in zip(args[0], numels):
            k = len(piece_lengths(n))
            got.append(torch.cat([p.reshape(-1) for p in result[at:at + k]]).view(member.shape))
            at += k
    for i, (g, w) in enumerate(zip(got, whole)):
        if g.shape != w.shape or g.dtype != w.dtype or not torch.equal(_bits(g), _bits(w)):
            differ = int((_bits(g) != _bits(w)).sum()) if g.shape == w.shape and g.dtype == w.dtype else "some"
            return (f"member {i} ({tuple(w.shape)}): {differ} elements differ between the whole call and the same "
                    f"call on 1-d pieces of its tensors (pieces of {piece_lengths(w.numel())} elements): the host "
                    f"runs optimizer steps in pieces, so results must not depend on where a call starts or ends "
                    f"(docs/engine-authoring.md, section 4.6)")
    return None
