"""A Python number as an operand of a half-precision op gives CPU's bits.

CPU's kernels do not all treat the number alike: mul and div compute with it in
float (the dtype's opmath type, unrounded), add, sub and rsub round it to the
tensor's dtype first; comparisons and clamp are checked alike. Dropout's
`input * mask * scale` is one such product: a kernel rounding the scale to
bfloat16 first was one bit off CPU's on most kept elements. Each case runs on the
device and on torch CPU and must match exactly (the same rounding, not a tolerance).
add with alpha is left out: CPU's vectorised loop computes it with one rounding
(a fused multiply-add), the loop for the last elements of a row with two.
"""
import pytest
import torch

NUMBERS = [1.0 / 0.6, 0.1, 3.3333333, 1e-3, -2.7]

CASES = {
    "mul": lambda x, s: x * s,
    "mul_": lambda x, s: x.clone().mul_(s),
    "div": lambda x, s: x / s,
    "div_": lambda x, s: x.clone().div_(s),
    "add": lambda x, s: x + s,
    "sub": lambda x, s: x - s,
    "rsub": lambda x, s: s - x,
    "number_first_mul": lambda x, s: torch.mul(s, x),
    "rdiv": lambda x, s: s / x,
    "maximum": lambda x, s: torch.clamp_min(x, s),
    "clamp": lambda x, s: torch.clamp(x, -abs(s), abs(s)),
    "gt": lambda x, s: x > s,
    "eq": lambda x, s: x == x.flatten()[3].item(),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("op", sorted(CASES))
def test_number_operand_rounds_as_cpu(device, op, dtype):
    x = torch.randn(4099, generator=torch.Generator().manual_seed(7)).to(dtype)
    x_dev = x.to(device)
    for s in NUMBERS:
        want = CASES[op](x, s)
        got = CASES[op](x_dev, s).cpu()
        assert got.dtype == want.dtype
        mismatched = (got != want) & ~(got.isnan() & want.isnan())
        assert not bool(mismatched.any()), (
            f"{op}({dtype}, {s!r}): {int(mismatched.sum())} of {want.numel()} elements differ from "
            f"CPU's, e.g. {got[mismatched][:3].tolist()} vs {want[mismatched][:3].tolist()}")
