"""Where the host waits for queued device work, as on CUDA: .item(), copies to the
CPU (.cpu(), .tolist(), printing), ops whose output shape depends on the data,
torch.openreg.synchronize and torch.accelerator.synchronize; and where it does not:
non_blocking copies into pinned memory. Copies from pageable host memory to the
device behave as cudaMemcpy: the source may be reused at once.

Each test queues slow work first, so that the sync point has something to wait for;
"the stream is idle afterwards" shows the host waited, the CPU reference shows the
value read is the finished one."""


import pytest
import torch
from queued_work import SIZE, STEPS, launch_blocking as _launch_blocking, slow as _slow, make_input as _input  # noqa: F401


@pytest.fixture
def queued():
    """(device result, CPU reference) of slow work just enqueued on the current stream."""
    a_cpu = _input()
    ref = _slow(a_cpu)  # first: computing it later would let the queued work finish meanwhile
    a = a_cpu.to("openreg")
    torch.openreg.synchronize()
    out = _slow(a)
    assert torch.openreg.current_stream().query() is _launch_blocking(), "the slow work should still be queued"
    return out, ref


def _idle():
    return torch.openreg.current_stream().query()


TOL = dict(atol=1e-4, rtol=1e-4)


# ------------------------------------------------------- the host reads data


def test_item(openreg, queued):
    out, ref = queued
    value = out[3, 5].item()
    assert _idle()
    assert value == pytest.approx(ref[3, 5].item(), abs=1e-4)


def test_item_of_a_reduction(openreg, queued):
    out, ref = queued
    assert out.abs().sum().item() == pytest.approx(ref.abs().sum().item(), rel=1e-4)
    assert _idle()


def test_cpu(openreg, queued, assert_close_cpu):
    out, ref = queued
    host = out.cpu()
    assert _idle()
    torch.testing.assert_close(host, ref, **TOL)


def test_to_cpu_blocking(openreg, queued):
    out, ref = queued
    host = out.to("cpu")
    assert _idle()
    torch.testing.assert_close(host, ref, **TOL)


def test_tolist(openreg, queued):
    out, ref = queued
    rows = out[:2, :3].tolist()
    assert _idle()
    torch.testing.assert_close(torch.tensor(rows), ref[:2, :3], **TOL)


def test_numpy_after_cpu(openreg, queued):
    out, ref = queued
    arr = out.cpu().numpy()
    torch.testing.assert_close(torch.from_numpy(arr), ref, **TOL)


@pytest.mark.parametrize("show", [repr, str, print])
def test_printing(openreg, queued, show, capsys):
    out, ref = queued
    # Values exact in binary, so the text cannot differ from CPU's by rounding; they
    # depend on `out`, so they exist only once the slow work ran.
    dev, cpu = (out[:2, :3] > -2) * 2.5, (ref[:2, :3] > -2) * 2.5
    text = show(dev)
    if show is print:
        text = capsys.readouterr().out.rstrip("\n")
    assert _idle()
    assert text == repr(cpu)[:-1] + ", device='openreg:0')"


def _robust_threshold(ref):
    """A threshold in the widest gap between the middle values of ``ref``: no value is
    near it, so engines' rounding cannot move an element across it."""
    v = ref.flatten().sort().values
    lo, hi = v.numel() // 4, 3 * v.numel() // 4
    gaps = v[lo + 1 : hi] - v[lo : hi - 1]
    k = int(gaps.argmax())
    assert gaps[k] > 1e-4 * v.abs().max(), "no clear gap: pick another slice"
    return float((v[lo + k] + v[lo + k + 1]) / 2)


@pytest.mark.parametrize("op", ["nonzero", "masked_select", "unique", "bool_index"])
def test_data_dependent_shapes(openreg, queued, op):
    out, ref = queued
    out, ref = out[:24, :24], ref[:24, :24]
    threshold = _robust_threshold(ref)

    def run(t):
        mask = t > threshold
        if op == "nonzero":
            return torch.nonzero(mask)
        if op == "masked_select":
            return torch.masked_select(t, mask)
        if op == "unique":
            return torch.unique(mask, return_counts=True)[1]
        return t[mask]

    got, want = run(out), run(ref)
    assert _idle(), "an op whose output shape depends on the data waits for the queued work"
    assert got.shape == want.shape
    if op in ("nonzero", "unique"):
        assert torch.equal(got.cpu(), want)
    else:
        torch.testing.assert_close(got.cpu(), want, **TOL)


# ----------------------------------------------------------- explicit waits


def test_openreg_synchronize(openreg, queued):
    out, ref = queued
    side = torch.openreg.Stream()
    with torch.openreg.stream(side):
        side_out = out + 1  # not ordered after `out` on purpose: it waits on nothing
    torch.openreg.synchronize()
    assert _idle() and side.query(), "synchronize() waits for every stream of the device"
    torch.testing.assert_close(out.cpu(), ref, **TOL)
    del side_out


@pytest.mark.parametrize("how", ["openreg", "accelerator"])
def test_synchronize_another_device(openreg, how):
    a_cpu = _input(1)
    with torch.openreg.device(1):
        out = _slow(a_cpu.to("openreg"))
        assert torch.openreg.current_stream().query() is _launch_blocking()
    if how == "openreg":
        torch.openreg.synchronize(1)
    else:
        torch.accelerator.synchronize("openreg:1")
    assert torch.openreg.current_stream(1).query()
    torch.testing.assert_close(out.cpu(), _slow(a_cpu), **TOL)


def test_accelerator_synchronize(openreg, queued):
    out, ref = queued
    torch.accelerator.synchronize()
    assert _idle()
    torch.testing.assert_close(out.cpu(), ref, **TOL)


def test_synchronize_bad_device_raises(openreg):
    with pytest.raises((ValueError, RuntimeError)):
        torch.openreg.synchronize(64)
    with pytest.raises(ValueError):
        torch.openreg.synchronize("cpu")


# ----------------------------------------------------- copies and pinned memory


def test_non_blocking_copy_into_pinned_memory(openreg, queued):
    out, ref = queued
    host = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
    assert host.is_pinned()
    host.copy_(out, non_blocking=True)
    # Returns at once, ordered on the stream, as on CUDA.
    assert _idle() is _launch_blocking(), "a non_blocking copy into pinned memory must not wait"
    torch.openreg.current_stream().synchronize()
    torch.testing.assert_close(host, ref, **TOL)


def test_non_blocking_to_cpu_then_event(openreg, queued):
    out, ref = queued
    host = out.to("cpu", non_blocking=True)
    copied = torch.openreg.Event()
    copied.record()
    copied.synchronize()
    torch.testing.assert_close(host, ref, **TOL)


def test_non_blocking_copy_into_pageable_memory_waits(openreg, queued):
    out, ref = queued
    host = torch.empty(out.shape, dtype=out.dtype)
    host.copy_(out, non_blocking=True)
    # cudaMemcpyAsync into pageable memory is synchronous: the data is there at return.
    torch.testing.assert_close(host, ref, **TOL)


def test_h2d_from_pageable_memory_may_reuse_the_source_at_once(openreg, queued):
    out, _ = queued
    src = _input(2)
    want = src.clone()
    dev = src.to("openreg")  # queued behind the slow work
    src.fill_(-7.0)  # as with cudaMemcpy: the copy already took the data
    torch.testing.assert_close(dev.cpu(), want, atol=0, rtol=0)
    del out


def test_h2d_copy_into_existing_tensor_from_pageable_memory(openreg, queued):
    out, _ = queued
    src = _input(3)
    want = src.clone()
    dev = torch.empty_like(src, device="openreg")
    dev.copy_(src, non_blocking=True)  # pageable: non_blocking changes nothing
    src.zero_()
    torch.testing.assert_close(dev.cpu(), want, atol=0, rtol=0)
    del out


def test_h2d_non_blocking_from_pinned_memory(openreg, queued, assert_close_cpu):
    out, ref = queued
    src = _input(4).pin_memory()
    want = src.clone()
    dev = src.to("openreg", non_blocking=True)
    torch.openreg.current_stream().synchronize()
    assert_close_cpu(dev, want, atol=0, rtol=0)
    assert_close_cpu(dev @ out, want @ ref, **TOL)
