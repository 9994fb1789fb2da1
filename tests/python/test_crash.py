"""Crash attribution: a kernel that crashes names its engine, the op and the inputs,
then the process dies of the same signal; the ABI conformance runner reports the
crashing case and goes on.

The engine is ``fixture_crashes`` from the C++ test build (tests/cpp/fixture_engine.c):
a correct float32 ``aten::add`` whose kernel crashes when both inputs are 4-D
(``add.out``: SIGSEGV on the calling thread; ``add.Tensor``: on a thread of the
engine's own), 5-D (stack overflow) or 6-D (abort). Every crash runs in a child
process.
"""

import math
import os
import re
import signal
import sys

import pytest

LINE = "openreg: fatal signal"
# The crashing children dump no core (a machine with core dumps on would write one per test).
NO_CORE = "import resource\nresource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"


@pytest.fixture
def crashing_engine():
    path = os.environ.get("OPENREG_TEST_CRASHING_ENGINE")
    if not path:
        pytest.skip("OPENREG_TEST_CRASHING_ENGINE is not set (path of fixture_crashes from the C++ test build)")
    if not os.path.isfile(path):
        pytest.skip(f"OPENREG_TEST_CRASHING_ENGINE={path!r} does not exist (build the C++ tests first)")
    return path


def inputs(*shape):
    """Child code: float32 inputs a, b and an output buffer of this shape on the device."""
    return (
        "import torch\n"
        f"a = torch.arange(float({math.prod(shape)})).reshape{shape}.to('openreg')\n"
        "b = (a.cpu() * 0.5).to('openreg')\n"
        "out = torch.empty_like(a)\n"
    )


def run_crash(run_python, engine, code, faulthandler=False, launch_blocking=True):
    """Runs code in a child on the crashing engine. With launch blocking (the default here)
    the kernel crashes during the Python line that called it, which the tests check;
    otherwise on the execution queue's worker, at the latest at the synchronize."""
    env = {"OPENREG_ENGINE": engine, "PYTHONFAULTHANDLER": "1" if faulthandler else None,
           "OPENREG_LAUNCH_BLOCKING": "1" if launch_blocking else "0"}
    return run_python(NO_CORE + code + "torch.openreg.synchronize()\nprint('survived', flush=True)\n", env)


def crash_lines(proc):
    return [line for line in proc.stderr.splitlines() if line.startswith(LINE)]


def assert_died_of(proc, sig, describe):
    assert proc.returncode == -sig, f"expected death by {sig.name}\n{describe(proc)}"
    assert "survived" not in proc.stdout, describe(proc)


def test_segfault_in_kernel_names_engine_op_and_inputs(run_python, describe, crashing_engine):
    code = (
        inputs(2, 3)
        + "assert torch.equal(torch.add(a, b, alpha=2).cpu(), torch.add(a.cpu(), b.cpu(), alpha=2))\n"
        + "print('2-D add ok', flush=True)\n"
        + inputs(2, 3, 4, 5)
        + "torch.add(a, b, alpha=2, out=out)\n"
    )
    proc = run_crash(run_python, crashing_engine, code)
    assert_died_of(proc, signal.SIGSEGV, describe)
    assert "2-D add ok" in proc.stdout, describe(proc)
    assert crash_lines(proc) == [
        f"openreg: fatal signal SIGSEGV in engine 'fixture_crashes' ({crashing_engine}) running aten::add.out "
        "(float32 [2, 3, 4, 5], float32 [2, 3, 4, 5], 2, float32 [2, 3, 4, 5]); fault address 0x0"
    ], describe(proc)


def test_segfault_on_the_queue_worker_names_engine_op_and_inputs(run_python, describe, crashing_engine):
    # Asynchronous execution: the kernel runs on the execution queue's worker, after
    # the call returned; the crash line still names the engine, the op and its inputs.
    code = inputs(2, 3, 4, 5) + "torch.add(a, b, alpha=2, out=out)\n"
    proc = run_crash(run_python, crashing_engine, code, launch_blocking=False)
    assert_died_of(proc, signal.SIGSEGV, describe)
    assert crash_lines(proc) == [
        f"openreg: fatal signal SIGSEGV in engine 'fixture_crashes' ({crashing_engine}) running aten::add.out "
        "(float32 [2, 3, 4, 5], float32 [2, 3, 4, 5], 2, float32 [2, 3, 4, 5]); fault address 0x0"
    ], describe(proc)


def test_segfault_on_the_engines_own_thread_names_the_running_call(run_python, describe, crashing_engine):
    proc = run_crash(run_python, crashing_engine, inputs(2, 3, 4, 5) + "c = a + b\n")
    assert_died_of(proc, signal.SIGSEGV, describe)
    lines = crash_lines(proc)
    pattern = (
        r"openreg: fatal signal SIGSEGV on thread (\d+) \(outside any engine call\) while engine "
        rf"'fixture_crashes' \({re.escape(crashing_engine)}\) was running aten::add\.Tensor "
        r"\(float32 \[2, 3, 4, 5\], float32 \[2, 3, 4, 5\], 1\) on thread (\d+); fault address 0x0"
    )
    assert len(lines) == 1 and re.fullmatch(pattern, lines[0]), describe(proc)
    crash_tid, call_tid = re.fullmatch(pattern, lines[0]).groups()
    assert crash_tid != call_tid


def test_stack_overflow_in_kernel_is_named(run_python, describe, crashing_engine):
    proc = run_crash(run_python, crashing_engine, inputs(1, 2, 3, 4, 5) + "c = a + b\n")
    assert_died_of(proc, signal.SIGSEGV, describe)
    lines = crash_lines(proc)
    assert len(lines) == 1, describe(proc)
    assert lines[0].startswith(
        f"openreg: fatal signal SIGSEGV in engine 'fixture_crashes' ({crashing_engine}) running aten::add.Tensor "
        "(float32 [1, 2, 3, 4, 5], float32 [1, 2, 3, 4, 5], 1); fault address 0x"
    ), describe(proc)


def test_abort_in_kernel_is_named_and_still_aborts(run_python, describe, crashing_engine):
    proc = run_crash(run_python, crashing_engine, inputs(1, 1, 2, 1, 2, 3) + "torch.add(a, b, out=out)\n")
    assert_died_of(proc, signal.SIGABRT, describe)
    assert crash_lines(proc) == [
        f"openreg: fatal signal SIGABRT in engine 'fixture_crashes' ({crashing_engine}) running aten::add.out "
        "(float32 [1, 1, 2, 1, 2, 3], float32 [1, 1, 2, 1, 2, 3], 1, float32 [1, 1, 2, 1, 2, 3])"
    ], describe(proc)


@pytest.mark.parametrize("when", ["before", "after"])
def test_faulthandler_traceback_is_still_printed(run_python, describe, crashing_engine, when):
    # "before": faulthandler is on from the start (the handler chains to it);
    # "after": enabled once the engine is loaded (faulthandler chains to the handler).
    code = inputs(2, 3, 4, 5) + "a + 1\n"  # loads the engine
    if when == "after":
        code += "import faulthandler\nfaulthandler.enable()\n"
    code += "torch.add(a, b, out=out)\n"
    proc = run_crash(run_python, crashing_engine, code, faulthandler=when == "before")
    assert_died_of(proc, signal.SIGSEGV, describe)
    assert len(crash_lines(proc)) == 1, describe(proc)
    assert "in engine 'fixture_crashes'" in crash_lines(proc)[0]
    assert "Fatal Python error: Segmentation fault" in proc.stderr, describe(proc)
    last_line = len((NO_CORE + code).splitlines())
    assert f'File "<string>", line {last_line} in <module>' in proc.stderr, describe(proc)


def test_crash_outside_engine_calls_names_no_engine(run_python, describe, crashing_engine):
    code = inputs(2, 3) + "c = (a + b).cpu()\nimport ctypes\nctypes.string_at(0)\n"
    proc = run_crash(run_python, crashing_engine, code)
    assert_died_of(proc, signal.SIGSEGV, describe)
    assert LINE not in proc.stderr, describe(proc)


def abi_conformance(run_command, engine, *args):
    """python -m openreg conformance --abi, its crashing workers dumping no core."""
    return run_command([sys.executable, "-c", NO_CORE + "import runpy, sys\nsys.argv[0] = 'openreg'\n"
                        "runpy.run_module('openreg', run_name='__main__')\n", "conformance", "--abi", engine, *args])


def test_abi_conformance_reports_crashing_cases_and_goes_on(run_command, describe, crashing_engine):
    proc = abi_conformance(run_command, crashing_engine, "--strict")
    assert proc.returncode == 1, describe(proc)
    crashed = re.findall(r"^\[  CRASHED \] (aten::add\.\w+) float32 \[([^\]]+)\] crashed \(SIGSEGV\)", proc.stdout,
                         re.M)
    assert sorted(op for op, _ in crashed) == ["aten::add.Tensor", "aten::add.out"], describe(proc)
    for op, label in crashed:
        # The summary row: the crash is a FAIL, and the op's other cases ran and passed.
        row = re.search(rf"^{re.escape(op)}\s+float32\s+FAIL\s+(\d+) passed, 1 failed, 0 unsupported; "
                        rf"crashed \(SIGSEGV\) in case '{re.escape(label)}'$", proc.stdout, re.M)
        assert row and int(row.group(1)) > 0, describe(proc)
        # The handler's line, from the worker, names the op too.
        assert any(f"engine 'fixture_crashes'" in line and f"{op} (float32 [" in line
                   for line in crash_lines(proc)), describe(proc)
    assert re.search(r"^summary: 0 pass, 2 FAIL \(2 case\(s\) crashed\), 0 unsupported, 0 no case", proc.stdout,
                     re.M), describe(proc)


def test_abi_coverage_table_survives_a_crashing_case(run_command, describe, crashing_engine):
    proc = abi_conformance(run_command, crashing_engine, "--mode=support")
    assert proc.returncode == 1, describe(proc)
    for op in ("aten::add.Tensor", "aten::add.out"):
        # Its row is printed once, with the crashing case counted as a failure.
        assert len(re.findall(rf"^{re.escape(op)}\s+FAIL\s*$", proc.stdout, re.M)) == 1, describe(proc)
        assert re.search(rf"^FAIL: {re.escape(op)} float32 \[[^\]]+\] crashed \(SIGSEGV\)$", proc.stdout,
                         re.M), describe(proc)
    assert proc.stdout.count("float32   float64") == 1, "the header is printed once\n" + describe(proc)


def test_torch_level_conformance_names_the_crash_in_its_row(run_command, describe, crashing_engine):
    """The torch-level mode isolates crashing rows in a worker too; the row carries the
    host's fatal-signal line (written while the call's log was being captured)."""
    proc = run_command([sys.executable, "-c", NO_CORE + "import runpy, sys\nsys.argv[0] = 'openreg'\n"
                        "runpy.run_module('openreg', run_name='__main__')\n", "conformance", crashing_engine,
                        "--op", "aten::add.out"])
    assert proc.returncode == 1, describe(proc)
    row = re.search(r"^aten::add\.out\s+float32\s+FAIL\s+crashed the worker process \(SIGSEGV: fatal signal SIGSEGV "
                    r"in engine 'fixture_crashes' .* running aten::add\.out \(float32 \[", proc.stdout, re.M)
    assert row, describe(proc)
