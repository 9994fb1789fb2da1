"""Case families of ``python -m openreg conformance`` for the fused optimizer steps
(``_fused_adam_``, ``_fused_adamw_``, ``_fused_sgd_`` and their ``.tensor_lr``
overloads): every option of the schema, several tensors of different sizes in one
list, AMP's grad_scale and found_inf (1.0 skips the step), strided members (which
CPU's kernels walk as flat memory). See :mod:`openreg.conformance_cases`."""

import torch

from .conformance_cases import Case, register

# Members of one list: different sizes, a 0-dim one, an odd prime length.
_SHAPES = ((5, 7), (11,), (), (37, 41))


def _scalar(ctx, value):
    """A one-element float32 tensor argument (state steps, grad_scale, found_inf, lr)."""
    return ctx.of(torch.tensor(value, dtype=torch.float32), grad=False)


def _lr(ctx, value):
    return _scalar(ctx, value) if ctx.kind("lr") == "TensorType" else value


@register("_fused_adam", "_fused_adamw")
def fused_adam_cases(ctx):
    """_fused_adam[w]_: state_steps are read (not incremented) as CPU does."""

    def case(name, shapes=_SHAPES, layout="contiguous", amsgrad=False, maximize=False, weight_decay=0.0,
             grad_scale=None, found_inf=None, step=3.0):
        members = lambda domain="any": [ctx.t(*s, domain=domain, layout=layout) for s in shapes]  # noqa: E731
        args = (members(), members(), members(), members("positive"), members("positive") if amsgrad else [],
                [_scalar(ctx, step + i) for i in range(len(shapes))])
        kwargs = dict(lr=_lr(ctx, 0.01), beta1=0.9, beta2=0.999, weight_decay=weight_decay, eps=1e-8,
                      amsgrad=amsgrad, maximize=maximize)
        if grad_scale is not None:
            kwargs["grad_scale"] = _scalar(ctx, grad_scale)
        if found_inf is not None:
            kwargs["found_inf"] = _scalar(ctx, found_inf)
        return Case(name, *args, **kwargs)

    return [
        case("4 tensors of different sizes"),
        case("first step", step=1.0),
        case("weight_decay 0.1", weight_decay=0.1),
        case("amsgrad", amsgrad=True),
        case("maximize, amsgrad, weight_decay", amsgrad=True, maximize=True, weight_decay=0.05),
        case("grad_scale 4, found_inf 0", grad_scale=4.0, found_inf=0.0),
        case("found_inf 1: nothing changes", grad_scale=4.0, found_inf=1.0),
        case("one tensor", shapes=((300,),)),
        case("empty lists", shapes=()),
        case("transposed members", shapes=((5, 7), (13, 3)), layout="transposed"),
    ]


@register("_fused_sgd")
def fused_sgd_cases(ctx):
    """_fused_sgd_: plain, momentum (first step and later), nesterov, dampening."""

    def case(name, shapes=_SHAPES, layout="contiguous", momentum=0.9, dampening=0.0, nesterov=False, maximize=False,
             weight_decay=0.0, first=False, grad_scale=None, found_inf=None):
        members = lambda: [ctx.t(*s, layout=layout) for s in shapes]  # noqa: E731
        args = (members(), members(), members() if momentum else [])
        kwargs = dict(weight_decay=weight_decay, momentum=momentum, lr=_lr(ctx, 0.1), dampening=dampening,
                      nesterov=nesterov, maximize=maximize, is_first_step=first)
        if grad_scale is not None:
            kwargs["grad_scale"] = _scalar(ctx, grad_scale)
        if found_inf is not None:
            kwargs["found_inf"] = _scalar(ctx, found_inf)
        return Case(name, *args, **kwargs)

    return [
        case("no momentum", momentum=0.0),
        case("momentum, first step", first=True),
        case("momentum, later step"),
        case("nesterov, weight_decay", nesterov=True, weight_decay=0.01),
        case("dampening, maximize", dampening=0.3, maximize=True),
        case("grad_scale 2, found_inf 0", grad_scale=2.0, found_inf=0.0),
        case("found_inf 1: nothing changes", grad_scale=2.0, found_inf=1.0),
        case("empty lists", shapes=()),
        case("transposed members", shapes=((5, 7), (13, 3)), layout="transposed"),
    ]
