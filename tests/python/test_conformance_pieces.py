"""The conformance check that an elementwise _foreach_ kernel gives a whole call's bits on
pieces of its tensors (python/openreg/conformance_pieces.py): which ops it covers, how it
cuts, that a served op passes and that one differing element fails it."""

import pytest
import torch

import openreg
from openreg.conformance import Overload
from openreg.conformance_pieces import cut_by_host, piece_lengths, pieces_differ


def test_ops_the_host_cuts():
    assert cut_by_host(Overload("aten::_foreach_addcdiv_.ScalarList"))
    assert cut_by_host(Overload("aten::_foreach_sqrt"))
    assert cut_by_host(Overload("aten::_foreach_zero_"))
    assert not cut_by_host(Overload("aten::_foreach_norm.Scalar"))  # a reduction per member
    assert not cut_by_host(Overload("aten::_foreach_add.List_out"))  # out= lists: not cut
    assert not cut_by_host(Overload("aten::add_.Tensor"))


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 8, 9, 10, 1517])
def test_pieces_cover_the_member_and_start_off_vector_boundaries(n):
    lengths = piece_lengths(n)
    assert sum(lengths) == n and all(k > 0 for k in lengths if n > 0)
    if n >= 10:
        assert len(lengths) == 3 and lengths[0] == 7  # later pieces start at odd offsets


def _addcdiv_case(device, shapes=((37, 41), (5,), (1,))):
    g = torch.Generator().manual_seed(5)
    lists = [[torch.randn(s, generator=g) for s in shapes] for _ in range(3)]
    for t in lists[2]:
        t.add_(3.0)  # divisors away from 0
    scalars = [-0.5, 1.25, 2.0][:len(shapes)]
    return lambda: ([[t.to(device) for t in lst] for lst in lists] + [scalars], {})


def _whole(op, make_args):
    args, kwargs = make_args()
    op.fn(*args, **kwargs)
    return list(args[0])


def _served_stats(op):
    return lambda: openreg.stats().get(op.name, {})


def _counted_afresh(make_args):
    """make_args with the engines' counts reset first, as the conformance runner calls it."""
    def fresh():
        openreg.reset_stats()
        return make_args()
    return fresh


def _engine_serving(op, make_args):
    openreg.reset_stats()
    _whole(op, make_args)
    served = {e: n for e, n in openreg.stats().get(op.name, {}).items() if n}
    if not served:
        pytest.skip(f"no engine of the chain serves {op.name}")
    return next(iter(served))


def test_the_engines_kernel_passes(device):
    op = Overload("aten::_foreach_addcdiv_.ScalarList")
    make_args = _addcdiv_case(device)
    engine = _engine_serving(op, make_args)
    whole = _whole(op, make_args)

    assert pieces_differ(op, _counted_afresh(make_args), whole, engine, _served_stats(op)) is None


def test_one_differing_element_fails_the_check(device):
    op = Overload("aten::_foreach_addcdiv_.ScalarList")
    make_args = _addcdiv_case(device)
    engine = _engine_serving(op, make_args)
    whole = [t.cpu() for t in _whole(op, make_args)]
    # What a kernel rounding the last element of a call its own way would have given whole.
    whole[0].view(-1)[100] = torch.nextafter(whole[0].view(-1)[100], torch.tensor(float("inf")))

    why = pieces_differ(op, _counted_afresh(make_args), whole, engine, _served_stats(op))
    assert why is not None and why.startswith("member 0 ((37, 41)): 1 elements differ"), why
    assert "section 4.6" in why


def test_calls_the_host_would_not_cut_are_not_judged(device):
    op = Overload("aten::_foreach_addcdiv_.ScalarList")
    make_args = _addcdiv_case(device)
    engine = _engine_serving(op, make_args)

    def transposed():
        args, kwargs = make_args()
        return [[t.t() if t.dim() == 2 else t for t in lst] if isinstance(lst[0], torch.Tensor) else lst
                for lst in args], kwargs

    wrong = [torch.full((41, 37), float("nan"))] + [torch.zeros(5), torch.zeros(1)]
    assert pieces_differ(op, transposed, wrong, engine, _served_stats(op)) is None
