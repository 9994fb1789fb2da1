"""Random number generation on openreg: seeding, state, generators, statistics.

The device's random streams need not equal CPU's, so the references are
reproducibility (same seed -> same numbers) and distribution statistics, plus
CPU-computed facts (e.g. what a permutation of range(n) sorts to).
"""

import pytest
import torch
import torch.nn.functional as F

N = 10000


def test_manual_seed_reproducible(device):
    torch.manual_seed(0)
    a = torch.randn(100, device=device)
    torch.manual_seed(0)
    b = torch.randn(100, device=device)
    assert a.device.type == "openreg"
    assert torch.equal(a.cpu(), b.cpu())


def test_consecutive_draws_differ(device):
    torch.manual_seed(0)
    a = torch.randn(100, device=device)
    b = torch.randn(100, device=device)
    assert not torch.equal(a.cpu(), b.cpu()), "the generator state must advance between calls"


def test_different_seed_differs(device):
    torch.manual_seed(0)
    a = torch.randn(100, device=device)
    torch.manual_seed(1)
    b = torch.randn(100, device=device)
    assert not torch.equal(a.cpu(), b.cpu())


def test_openreg_manual_seed(device):
    torch.openreg.manual_seed(5)
    a = torch.rand(50, device=device)
    torch.openreg.manual_seed(5)
    b = torch.rand(50, device=device)
    torch.openreg.manual_seed(6)
    c = torch.rand(50, device=device)
    assert torch.equal(a.cpu(), b.cpu())
    assert not torch.equal(a.cpu(), c.cpu())


def test_get_set_rng_state(device):
    torch.openreg.manual_seed(11)
    torch.randn(7, device=device)  # advance a little
    state = torch.openreg.get_rng_state()
    assert isinstance(state, torch.Tensor)
    assert state.dtype == torch.uint8
    assert state.device.type == "cpu"
    a = torch.randn(100, device=device)
    b = torch.randn(100, device=device)
    torch.openreg.set_rng_state(state)
    a2 = torch.randn(100, device=device)
    b2 = torch.randn(100, device=device)
    assert torch.equal(a.cpu(), a2.cpu())
    assert torch.equal(b.cpu(), b2.cpu())
    assert not torch.equal(a.cpu(), b.cpu())


def test_rng_state_is_a_copy(device):
    torch.openreg.manual_seed(12)
    state = torch.openreg.get_rng_state()
    saved = state.clone()
    torch.randn(10, device=device)
    assert torch.equal(state, saved), "get_rng_state() must return a snapshot"


def test_generator_object(device):
    g = torch.Generator(device=device)
    assert g.device.type == "openreg"
    g.manual_seed(3)
    a = torch.randn(100, device=device, generator=g)
    g.manual_seed(3)
    b = torch.randn(100, device=device, generator=g)
    assert torch.equal(a.cpu(), b.cpu())
    assert g.initial_seed() == 3


def test_generator_independent_of_default(device):
    g = torch.Generator(device=device)
    g.manual_seed(3)
    a = torch.randn(100, device=device, generator=g)
    g.manual_seed(3)
    torch.randn(1000, device=device)  # draws from the default generator
    b = torch.randn(100, device=device, generator=g)
    assert torch.equal(a.cpu(), b.cpu())


@pytest.mark.parametrize(
    "draw",
    [
        lambda x, g: x.uniform_(generator=g),
        lambda x, g: x.uniform_(-2.0, 5.0, generator=g),
        lambda x, g: x.normal_(generator=g),
        lambda x, g: x.normal_(3.0, 0.5, generator=g),
    ],
    ids=["uniform_", "uniform_bounds", "normal_", "normal_params"],
)
def test_inplace_random_with_generator(device, draw):
    g = torch.Generator(device=device)
    g.manual_seed(3)
    x = draw(torch.empty(200, device=device), g).cpu()
    g.manual_seed(3)
    y = draw(torch.empty(200, device=device), g).cpu()
    g.manual_seed(4)
    z = draw(torch.empty(200, device=device), g).cpu()
    assert torch.equal(x, y)
    assert not torch.equal(x, z)


def test_generator_state_roundtrip(device):
    g = torch.Generator(device=device)
    g.manual_seed(21)
    state = g.get_state()
    a = torch.rand(50, device=device, generator=g)
    g.set_state(state)
    b = torch.rand(50, device=device, generator=g)
    assert torch.equal(a.cpu(), b.cpu())


def test_randn_statistics(device):
    torch.manual_seed(0)
    x = torch.randn(N, device=device).cpu().double()
    assert abs(x.mean().item()) < 0.05  # standard error 0.01
    assert abs(x.std().item() - 1.0) < 0.05
    assert torch.isfinite(x).all()
    # roughly 68% within one standard deviation
    assert abs((x.abs() < 1).double().mean().item() - 0.6827) < 0.03


def test_rand_statistics(device):
    torch.manual_seed(0)
    x = torch.rand(N, device=device).cpu()
    assert x.dtype == torch.float32
    assert (x >= 0).all() and (x < 1).all()
    assert abs(x.double().mean().item() - 0.5) < 0.02  # standard error ~0.003
    # fills the whole interval
    hist = torch.histc(x, bins=10, min=0, max=1)
    assert (hist > N / 10 * 0.8).all(), hist


def test_uniform_bounds_statistics(device):
    torch.manual_seed(0)
    x = torch.empty(N, device=device).uniform_(-2.0, 5.0).cpu()
    assert (x >= -2.0).all() and (x < 5.0).all()
    assert abs(x.double().mean().item() - 1.5) < 0.1


def test_normal_params_statistics(device):
    torch.manual_seed(0)
    x = torch.empty(N, device=device).normal_(3.0, 0.5).cpu().double()
    assert abs(x.mean().item() - 3.0) < 0.03
    assert abs(x.std().item() - 0.5) < 0.03


def test_randint(device):
    torch.manual_seed(0)
    x = torch.randint(0, 10, (2000,), device=device)
    assert x.device.type == "openreg"
    assert x.dtype == torch.int64
    c = x.cpu()
    assert (c >= 0).all() and (c < 10).all()
    assert torch.equal(torch.unique(c), torch.arange(10)), "every value of [0, 10) should appear"
    y = torch.randint(-5, 5, (3, 4), device=device, dtype=torch.int32).cpu()
    assert y.shape == (3, 4) and y.dtype == torch.int32
    assert (y >= -5).all() and (y < 5).all()


@pytest.mark.parametrize("n", [1, 10, 1000])
def test_randperm(device, n):
    torch.manual_seed(0)
    p = torch.randperm(n, device=device)
    assert p.device.type == "openreg"
    assert p.dtype == torch.int64
    assert torch.equal(torch.sort(p.cpu()).values, torch.arange(n))
    if n >= 10:
        assert not torch.equal(p.cpu(), torch.arange(n)), "a random permutation should not be the identity"


@pytest.mark.parametrize("p", [0.2, 0.5])
def test_dropout_train(device, p):
    torch.manual_seed(0)
    x = torch.ones(N, device=device)
    y = F.dropout(x, p=p, training=True).cpu()
    zero_frac = (y == 0).double().mean().item()
    assert abs(zero_frac - p) < 0.03, f"dropped fraction {zero_frac}, expected ~{p}"
    # kept elements are scaled by 1/(1-p), exactly like on CPU
    kept_ref = torch.ones(1) / (1 - p)
    kept = y[y != 0]
    assert kept.numel() > 0
    torch.testing.assert_close(kept, kept_ref.expand_as(kept))


def test_dropout_module_eval_is_identity(device):
    m = torch.nn.Dropout(0.5).eval()
    x = torch.randn(100)
    assert torch.equal(m(x.to(device)).cpu(), m(x))


def test_bernoulli(device):
    torch.manual_seed(0)
    probs = torch.full((N,), 0.3, device=device)
    s = torch.bernoulli(probs).cpu()
    assert set(torch.unique(s).tolist()) <= {0.0, 1.0}
    assert abs(s.double().mean().item() - 0.3) < 0.03


# Arguments and dtypes CPU's random fills refuse; the device must raise the same
# (its sizing skips their Meta kernels, which check only some of these).
_BAD_FILLS = {
    "normal_ std < 0": (torch.float32, lambda x: x.normal_(0.0, -1.0)),
    "normal_ std nan": (torch.float32, lambda x: x.normal_(0.0, float("nan"))),
    "normal_ on int64": (torch.int64, lambda x: x.normal_()),
    "uniform_ from > to": (torch.float32, lambda x: x.uniform_(2.0, 1.0)),
    "uniform_ to = inf": (torch.float32, lambda x: x.uniform_(0.0, float("inf"))),
    "uniform_ to - from overflows": (torch.float32, lambda x: x.uniform_(-3e38, 3e38)),
    "uniform_ on int64": (torch.int64, lambda x: x.uniform_()),
    "uniform_ float16 bound": (torch.float16, lambda x: x.uniform_(0.0, 1e5)),
    "bernoulli_ p > 1": (torch.float32, lambda x: x.bernoulli_(1.5)),
    "random_ from >= to": (torch.float32, lambda x: x.random_(5, 3)),
    "random_ to beyond uint8": (torch.uint8, lambda x: x.random_(300)),
    "random_ to beyond bool": (torch.bool, lambda x: x.random_(0, 10)),
    "exponential_ lambda < 0": (torch.float32, lambda x: x.exponential_(-1.0)),
    "exponential_ on int64": (torch.int64, lambda x: x.exponential_()),
    "geometric_ p = 0": (torch.float32, lambda x: x.geometric_(0.0)),
    "geometric_ on bool": (torch.bool, lambda x: x.geometric_(0.5)),
    "log_normal_ std = 0": (torch.float32, lambda x: x.log_normal_(0.0, 0.0)),
    "log_normal_ on int32": (torch.int32, lambda x: x.log_normal_()),
    "cauchy_ sigma < 0": (torch.float32, lambda x: x.cauchy_(0.0, -1.0)),
    "cauchy_ on uint8": (torch.uint8, lambda x: x.cauchy_()),
}


@pytest.mark.parametrize("name", sorted(_BAD_FILLS))
def test_random_fills_refuse_what_cpu_refuses(device, name):
    dtype, fill = _BAD_FILLS[name]
    with pytest.raises(Exception) as on_cpu:
        fill(torch.empty(4, dtype=dtype))
    x = torch.zeros(4, dtype=dtype, device=device)
    with pytest.raises(type(on_cpu.value)) as on_device:
        fill(x)
    assert str(on_device.value).splitlines()[0] == str(on_cpu.value).splitlines()[0]
    assert torch.equal(x.cpu(), torch.zeros(4, dtype=dtype)), "a refused fill must leave self as it was"


@pytest.mark.parametrize("fill", [lambda x: x.normal_(), lambda x: x.uniform_(-1.0, 1.0), lambda x: x.bernoulli_(0.3),
                                  lambda x: x.random_(0, 7), lambda x: x.exponential_(), lambda x: x.geometric_(0.4),
                                  lambda x: x.log_normal_(), lambda x: x.cauchy_(),
                                  lambda x: F.dropout(x, 0.3, training=True)])
def test_random_fills_leave_cpu_stream_alone(device, fill):
    """Checking a device fill's arguments must not draw from torch CPU's generator, and
    dropout (native_dropout, no generator argument) draws from the device's."""
    torch.manual_seed(3)
    want = torch.rand(5)
    torch.manual_seed(3)
    fill(torch.empty(1000, device=device)).cpu()
    assert torch.equal(torch.rand(5), want)


def test_dropout_mask_follows_the_device_generator(device):
    """native_dropout takes no generator: its mask comes from the device's default
    generator, as CUDA's from CUDA's (it came from torch CPU's generator before)."""
    x = torch.ones(1000, device=device)
    torch.openreg.manual_seed(5)
    a = F.dropout(x, 0.5, training=True).cpu()
    torch.rand(10)  # torch CPU's stream moves; the device's does not
    torch.openreg.manual_seed(5)
    b = F.dropout(x, 0.5, training=True).cpu()
    assert torch.equal(a, b)
    state = torch.openreg.get_rng_state()
    c = F.dropout(x, 0.5, training=True).cpu()
    assert not torch.equal(a, c), "the device generator must advance between dropouts"
    torch.openreg.set_rng_state(state)
    assert torch.equal(F.dropout(x, 0.5, training=True).cpu(), c)


_DROPOUT_INPUTS = {
    "float32": lambda: torch.randn(6, 5),
    "transposed": lambda: torch.randn(5, 7).t(),
    "permuted 3-d": lambda: torch.randn(4, 3, 5).permute(2, 0, 1),
    "bfloat16": lambda: torch.randn(6, 5).to(torch.bfloat16),
    "empty": lambda: torch.randn(0, 3),
}


@pytest.mark.parametrize("train", [True, None, False])
@pytest.mark.parametrize("p", [0.0, 0.4, 1.0])
@pytest.mark.parametrize("name", sorted(_DROPOUT_INPUTS))
def test_native_dropout_as_cpus_kernel(device, name, p, train):
    """Outputs as CPU's kernel gives them (dtypes, sizes, strides), and the output is
    CPU's input * mask * scale for the device's own mask."""
    x = _DROPOUT_INPUTS[name]()
    want_out, want_mask = torch.native_dropout(x, p, train)
    out, mask = torch.native_dropout(x.to(device), p, train)
    for got, want in ((out, want_out), (mask, want_mask)):
        assert (got.dtype, got.shape, got.stride()) == (want.dtype, want.shape, want.stride())
    if x.numel() == 0:
        return
    if train is False or p == 0.0:
        assert bool(mask.all())
    if train is False:
        assert torch.equal(out.cpu(), x)
        return
    scale = 0.0 if p == 1.0 else 1.0 / (1.0 - p)
    assert torch.equal(out.cpu(), x.mul(mask.cpu()).mul_(scale))


def test_native_dropout_of_integers_raises_cpus_error(device):
    with pytest.raises(RuntimeError) as on_cpu:
        torch.native_dropout(torch.arange(4), 0.5, True)
    with pytest.raises(RuntimeError) as on_device:
        torch.native_dropout(torch.arange(4, device=device), 0.5, True)
    assert str(on_device.value).splitlines()[0] == str(on_cpu.value).splitlines()[0]


@pytest.mark.parametrize("use_reentrant", [False, True])
@pytest.mark.parametrize("noise", ["dropout", "randn_like"])
def test_checkpoint_recomputes_the_same_random_numbers(device, use_reentrant, noise):
    """torch.utils.checkpoint stashes the device's random state (torch.openreg._initialized,
    as torch.cuda's) and restores it to recompute: gradients equal those without it."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 16).to(device)
    x = torch.randn(8, 16, device=device, requires_grad=True)

    def block(t):
        h = lin(t)
        h = F.dropout(h, 0.5, training=True) if noise == "dropout" else h * torch.randn_like(h)
        return h.relu()

    torch.openreg.manual_seed(1)
    block(x).square().sum().backward()
    want = x.grad.cpu()
    x.grad = None
    torch.openreg.manual_seed(1)
    checkpoint(block, x, use_reentrant=use_reentrant).square().sum().backward()
    assert torch.equal(x.grad.cpu(), want)
