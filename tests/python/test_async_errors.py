"""Errors of queued device work, as on CUDA: an op whose kernel fails (an index out of
range) returns at its call; the error is raised at the next synchronisation point,
naming the op, the engine and the Python line that enqueued it; later
work of that stream is not run; the error is reported once and the device works
afterwards. OPENREG_LAUNCH_BLOCKING=1 (read at first use, so set in a subprocess)
raises it at the call itself.

The error keeps the Python class of the engine's status (core/src/aten/engine_error.h):
an index out of range is an IndexError, as the same call raises on CPU. (CUDA raises
torch.AcceleratorError, a RuntimeError, for every device-side error.)"""

import os
import re
import textwrap

import pytest
import torch
import torch.nn.functional as F

THIS_FILE = os.path.abspath(__file__)

asynchronous = pytest.mark.skipif(
    os.environ.get("OPENREG_LAUNCH_BLOCKING", "") not in ("", "0"),
    reason="OPENREG_LAUNCH_BLOCKING=1 raises at the call (test_launch_blocking_raises_at_the_call)",
)


def _line_of(marker):
    """Line number in this file of the line that ends with the comment ``# <marker>``."""
    with open(THIS_FILE) as f:
        for number, line in enumerate(f, 1):
            if line.rstrip().endswith(f"# {marker}"):
                return number
    raise AssertionError(f"no line marked {marker}")


def _bad_lookup(kind, device="openreg"):
    """An index op whose index is out of range (checked by the kernel, not when sized)."""
    weight = torch.randn(5, 3, device=device)
    index = torch.tensor([0, 7, 2], device=device)
    if kind == "embedding":
        return F.embedding(index, weight)  # bad-embedding
    return torch.index_select(weight, 0, index)  # bad-index-select


def _cpu_error_class(kind):
    try:
        _bad_lookup(kind, "cpu")
    except Exception as e:  # noqa: BLE001 - its class is the reference
        return type(e)
    raise AssertionError("the bad lookup does not fail on CPU")


# The device's report keeps the class the same call raises on CPU.
ASYNC_ERROR = _cpu_error_class("index_select")


def _assert_names_the_failure(openreg, err, kind, marker):
    msg = str(err.value)
    assert "index_select" in msg or kind in msg, f"the op is not named: {msg}"
    engines = openreg.info()["chain"]
    named = re.findall(r"engine '(\w+)'", msg)
    assert named and set(named) <= set(engines), f"no engine of the chain {engines} is named: {msg}"
    assert "out of range" in msg
    where = f"{THIS_FILE}:{_line_of(marker)}"
    assert where in msg, f"the enqueueing line {where} is not named: {msg}"


@asynchronous
@pytest.mark.parametrize("kind,marker", [("embedding", "bad-embedding"), ("index_select", "bad-index-select")])
@pytest.mark.parametrize("sync", ["synchronize", "item", "cpu", "stream"])
def test_error_surfaces_at_the_next_sync_point(openreg, kind, marker, sync):
    out = _bad_lookup(kind)  # no error here: the kernel is queued
    assert out.shape == (3, 3)
    with pytest.raises(_cpu_error_class(kind)) as err:
        if sync == "synchronize":
            torch.openreg.synchronize()
        elif sync == "item":
            torch.ones(2, device="openreg").sum().item()  # any sync point of the device
        elif sync == "cpu":
            out.cpu()
        else:
            torch.openreg.current_stream().synchronize()
    _assert_names_the_failure(openreg, err, kind, marker)


@asynchronous
def test_error_is_reported_once_and_the_device_works_after(openreg, assert_close_cpu):
    _bad_lookup("index_select")
    with pytest.raises(ASYNC_ERROR, match="out of range"):
        torch.openreg.synchronize()
    torch.openreg.synchronize()  # reported: not again
    x = torch.arange(12.0).reshape(3, 4)
    assert_close_cpu(x.to("openreg") * 2 + 1, x * 2 + 1)
    assert torch.ones(3, device="openreg").sum().item() == 3.0


@asynchronous
def test_later_work_of_the_failed_stream_is_skipped(openreg):
    y = torch.zeros(4, device="openreg")
    torch.openreg.synchronize()
    _bad_lookup("index_select")
    y.add_(1)  # enqueued after the failing op on the same stream: not run
    with pytest.raises(ASYNC_ERROR, match="out of range"):
        torch.openreg.synchronize()
    assert y.cpu().tolist() == [0.0] * 4
    y.add_(1)  # after the report, the stream runs again
    assert y.cpu().tolist() == [1.0] * 4


@asynchronous
def test_error_on_a_side_stream(openreg):
    s = torch.openreg.Stream()
    with torch.openreg.stream(s):
        _bad_lookup("embedding")
    with pytest.raises(ASYNC_ERROR, match="out of range"):
        s.synchronize()
    s.synchronize()
    assert s.query()


@asynchronous
def test_error_on_another_device(openreg):
    with torch.openreg.device(1):
        _bad_lookup("index_select")
    with pytest.raises(ASYNC_ERROR, match="out of range"):
        torch.openreg.synchronize(1)
    assert torch.ones(2, device="openreg:1").sum().item() == 2.0


@asynchronous
def test_event_synchronize_reports_the_error(openreg):
    _bad_lookup("index_select")
    e = torch.openreg.Event()
    e.record()
    with pytest.raises(ASYNC_ERROR, match="out of range"):
        e.synchronize()
    torch.openreg.synchronize()


# ------------------------------------------------------- launch blocking


_SCRIPT = textwrap.dedent(
    """
    import torch, torch.nn.functional as F
    import openreg
    weight = torch.randn(5, 3, device="openreg")
    index = torch.tensor([0, 7, 2], device="openreg")
    try:
        F.embedding(index, weight)  # LINE
    except (RuntimeError, IndexError) as e:
        import traceback
        frames = traceback.extract_tb(e.__traceback__)
        print("RAISED AT", frames[0].lineno, type(e).__name__, str(e).splitlines()[0])
    else:
        print("NOT RAISED AT THE CALL")
    torch.openreg.synchronize()  # nothing left to report
    s = torch.openreg.Stream()
    with torch.openreg.stream(s):
        x = torch.ones(4, device="openreg") * 2
    print("QUERY", s.query(), x.cpu().tolist())
    """
)


@pytest.mark.parametrize("blocking", ["1", None])
def test_launch_blocking_raises_at_the_call(openreg, run_python, describe, blocking):
    proc = run_python(_SCRIPT, env_extra={"OPENREG_LAUNCH_BLOCKING": blocking})
    line = next(n for n, text in enumerate(_SCRIPT.splitlines(), 1) if text.endswith("# LINE"))
    if blocking:
        assert proc.returncode == 0, describe(proc)
        assert f"RAISED AT {line} " in proc.stdout, describe(proc)
        assert "out of range" in proc.stdout
        assert "QUERY True [2.0, 2.0, 2.0, 2.0]" in proc.stdout, describe(proc)
    else:  # asynchronous: the call returns, the script's synchronize raises
        assert "NOT RAISED AT THE CALL" in proc.stdout, describe(proc)
        assert proc.returncode != 0 and "out of range" in proc.stderr, describe(proc)
        assert f"enqueued at <string>:{line}" in proc.stderr, describe(proc)
