"""The optimizer's _foreach_ ops interleaved slice by slice on the execution queue
(core/src/runtime/interleaved_runs.h): the same bits as each op run whole, which the
engine calls in the log show happened; and ops whose lists meet other than element by
element still give CPU's result."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

# AdamW (default: foreach) steps queued behind a busy worker, over parameters larger than
# one slice group (131072 elements) and small ones. The gradients come from the CPU, the
# same bits in both processes, so the step's ops are all the device computes: the two runs
# differ only in whether those ops ran sliced. (With a model's forward and backward in the
# steps, one CI run on record differed here, once, in its aten_ref pass, where torch's own
# CPU kernels compute the model; 30 runs on another machine, each engine, did not again.)
STEPS = textwrap.dedent(
    """
    import sys, torch, openreg
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s).to("openreg")) for s in [(500, 600), (500,), (3, 500), (3,)]]
    opt = torch.optim.AdamW(params, lr=1e-2)
    big = torch.randn(1536, 1536).to("openreg")
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        for p in params:
            p.grad = (torch.randn(p.shape, generator=g) * 1e-3).to("openreg")
        big @ big  # the worker is still on it when the step's ops are all queued
        opt.step()
    torch.save([p.detach().cpu() for p in params], sys.argv[1])
    """
)


def _run_steps(tmp_path, name, interleave):
    out = tmp_path / f"{name}.pt"
    env = dict(os.environ, OPENREG_INTERLEAVE_FOREACH=interleave, OPENREG_VERBOSE="2")
    env.pop("OPENREG_LAUNCH_BLOCKING", None)  # inline ops never queue
    proc = subprocess.run([sys.executable, "-c", STEPS, str(out)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    calls = proc.stderr.count("aten::_foreach_addcdiv_.ScalarList -> ")  # one line per engine call
    return torch.load(out), calls


def test_adamw_interleaved_gives_the_bits_of_whole_ops(tmp_path):
    interleaved, sliced_calls = _run_steps(tmp_path, "interleaved", "131072")
    whole, whole_calls = _run_steps(tmp_path, "whole", "0")
    if whole_calls == 0:
        pytest.skip("no engine of the chain serves _foreach_addcdiv_ (ATen's per-tensor loop runs it)")
    # 300,000 + 500 + 1,500 + 3 elements: three slice groups a step, one call each whole.
    assert whole_calls == 3
    assert sliced_calls == 9, f"{sliced_calls} engine calls of _foreach_addcdiv_ in 3 steps: not interleaved"
    for i, (a, b) in enumerate(zip(interleaved, whole)):
        differ = (a != b).sum().item()
        assert differ == 0, (f"parameter {i} {tuple(a.shape)}: {differ} elements differ, by up to "
                             f"{(a - b).abs().max().item():.3g}")


def test_lists_meeting_other_than_element_by_element_match_cpu(device):
    # The second op's list starts halfway into the first's tensor: interleaved slice by
    # slice it would read elements the first op had not written yet.
    n = 300_000
    ref = torch.randn(2 * n, generator=torch.Generator().manual_seed(3))
    x = ref.to(device)
    torch.mm(torch.randn(512, 512, device=device), torch.randn(512, 512, device=device))  # keeps the worker busy
    torch._foreach_mul_([x[:n]], 2.0)
    torch._foreach_add_([x[n // 2: n // 2 + n]], 1.0)
    torch._foreach_mul_([ref[:n]], 2.0)
    torch._foreach_add_([ref[n // 2: n // 2 + n]], 1.0)
    assert torch.equal(x.cpu(), ref)


@pytest.mark.parametrize("op", ["sqrt", "addcmul", "lerp"])
def test_out_of_place_and_list_ops_interleaved_match_cpu(device, op):
    g = torch.Generator().manual_seed(4)
    shapes = [(400, 600), (7,), (3, 5), (140_000,)]
    a = [torch.rand(s, generator=g) + 0.1 for s in shapes]
    b = [torch.rand(s, generator=g) for s in shapes]
    da, db = [t.to(device) for t in a], [t.to(device) for t in b]
    torch.mm(torch.randn(512, 512, device=device), torch.randn(512, 512, device=device))

    def step(x, y):
        torch._foreach_mul_(x, 0.9)
        if op == "sqrt":
            r = torch._foreach_sqrt(x)
        elif op == "addcmul":
            torch._foreach_addcmul_(x, y, y, 0.1)
            r = x
        else:
            torch._foreach_lerp_(x, y, 0.25)
            r = x
        torch._foreach_add_(r, 1e-3)
        return r

    got, want = step(da, db), step(a, b)
    for g_, w in zip(got, want):
        assert torch.allclose(g_.cpu(), w, rtol=1e-6, atol=1e-7)
