"""Engine selection errors and strict (no-fallback) mode.

Engine selection happens once per process, at device initialisation, so every
test here runs in a fresh subprocess and reports back through one JSON line.
"""

import json
import os
import re
import sys

import pytest
import torch

# Code run in the child. `attempt` records either the value or the exception.
_PROBE_HEADER = r"""
import json, sys
result = {}
def attempt(name, fn):
    try:
        value = fn()
    except BaseException as e:
        result[name] = {"ok": False, "type": type(e).__name__,
                        "runtime_error": isinstance(e, RuntimeError), "msg": str(e)}
    else:
        result[name] = {"ok": True, "value": value}
import torch
result["import_torch"] = True
import openreg
result["import_openreg"] = True
"""
_PROBE_FOOTER = r"""
print("RESULT " + json.dumps(result))
"""

_CLEAN_ENV = {
    # Keep the child's output to what the code under test prints by default.
    "OPENREG_VERBOSE": None,
    "TORCH_SHOW_CPP_STACKTRACES": None,
    "OPENREG_FALLBACK": None,
}


def probe(run_python, describe, body, env):
    env_all = dict(_CLEAN_ENV)
    env_all.update(env)
    proc = run_python(_PROBE_HEADER + body + _PROBE_FOOTER, env_all)
    assert proc.returncode == 0, describe(proc)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert len(lines) == 1, describe(proc)
    return json.loads(lines[0][len("RESULT ") :]), proc


def assert_failed(result, name, describe_text):
    r = result[name]
    assert not r["ok"], f"{name} should have failed but returned {r.get('value')!r}\n{describe_text}"
    assert r["runtime_error"], f"{name} raised {r['type']}, expected a RuntimeError: {r['msg']}"
    return r["msg"]


# ----------------------------------------------------------- strict mode


def test_strict_mode_with_reference_engine(run_python, describe):
    body = (
        "attempt('add', lambda: (torch.ones(2, device='openreg') + 1).cpu().tolist())\n"
        "attempt('mm', lambda: (torch.arange(6.).reshape(2, 3).to('openreg') @ torch.ones(3, 2, device='openreg')).cpu().tolist())\n"
        "attempt('sum', lambda: torch.arange(10., device='openreg').sum().item())\n"
    )
    result, proc = probe(run_python, describe, body, {"OPENREG_FALLBACK": "none", "OPENREG_ENGINE": "aten_ref"})
    for name in ("add", "mm", "sum"):
        assert result[name]["ok"], f"{name} failed under OPENREG_FALLBACK=none with aten_ref: {result[name]}"
    assert result["add"]["value"] == (torch.ones(2) + 1).tolist()
    assert result["mm"]["value"] == (torch.arange(6.0).reshape(2, 3) @ torch.ones(3, 2)).tolist()
    assert result["sum"]["value"] == torch.arange(10.0).sum().item()


@pytest.fixture
def partial_engine():
    path = os.environ.get("OPENREG_TEST_PARTIAL_ENGINE")
    if not path:
        pytest.skip("OPENREG_TEST_PARTIAL_ENGINE is not set (path of the add-only test engine from the C++ test build)")
    if not os.path.isfile(path):
        pytest.skip(f"OPENREG_TEST_PARTIAL_ENGINE={path!r} does not exist (build the C++ tests first)")
    return path


def test_strict_mode_unsupported_op(run_python, describe, partial_engine):
    # Tensors are moved with copies (host work), so only the arithmetic reaches the engine.
    body = (
        "a = torch.ones(2).to('openreg')\n"
        "attempt('add', lambda: (a + a).cpu().tolist())\n"
        "attempt('mul', lambda: (a * 3).cpu().tolist())\n"
        "attempt('mul_again', lambda: (a * 3).cpu().tolist())\n"
    )
    result, proc = probe(run_python, describe, body, {"OPENREG_FALLBACK": "none", "OPENREG_ENGINE": partial_engine})
    text = describe(proc)
    assert result["add"]["ok"], f"aten::add.Tensor float32 is supported by the partial engine: {result['add']}\n{text}"
    assert result["add"]["value"] == (torch.ones(2) + torch.ones(2)).tolist()
    msg = assert_failed(result, "mul", text)
    assert "aten::mul.Tensor" in msg, msg
    assert re.search(r"float32|Float", msg), msg
    assert "OPENREG_FALLBACK" in msg, msg
    # the failure is an ordinary error: the process keeps working and fails the same way again
    assert_failed(result, "mul_again", text)


# -------------------------------------------------------- engine selection


def test_unknown_engine_name(run_python, describe):
    body = (
        "attempt('ones', lambda: torch.ones(1, device='openreg').cpu().tolist())\n"
        "attempt('ones_again', lambda: torch.ones(1, device='openreg').cpu().tolist())\n"
    )
    result, proc = probe(run_python, describe, body, {"OPENREG_ENGINE": "nope"})
    assert result["import_torch"] is True
    text = describe(proc)
    msg = assert_failed(result, "ones", text)
    assert "nope" in msg, msg
    assert "aten_ref" in msg, f"the error should list the available engines: {msg}"
    assert_failed(result, "ones_again", text)


def test_unknown_engine_import_torch_alone_succeeds(run_python, describe):
    # With backend autoload, `import torch` imports openreg: it must not initialise the device.
    proc = run_python("import torch\nprint('IMPORTED')\n", dict(_CLEAN_ENV, OPENREG_ENGINE="nope"))
    assert proc.returncode == 0, describe(proc)
    assert "IMPORTED" in proc.stdout, describe(proc)


_NOT_AN_ENGINE_REASON = re.compile(
    r"(?i)not an engine|invalid ELF|entry|openreg_engine_entry|cannot|failed|no such file|not found|does not exist"
    r"|not a file"
)


def _not_an_engine_path(kind, tmp_path):
    if kind == "text_file":
        p = tmp_path / "libfake.so"
        p.write_text("this is not a shared library\n")
        return str(p)
    if kind == "library_without_entry":
        return os.path.abspath(torch._C.__file__)
    if kind == "missing_file":
        return str(tmp_path / "libmissing_engine.so")
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["text_file", "library_without_entry", "missing_file"])
def test_path_that_is_not_an_engine(run_python, describe, tmp_path, kind):
    path = _not_an_engine_path(kind, tmp_path)
    body = "attempt('ones', lambda: torch.ones(1, device='openreg').cpu().tolist())\n"
    result, proc = probe(run_python, describe, body, {"OPENREG_ENGINE": path})
    msg = assert_failed(result, "ones", describe(proc))
    assert path in msg or os.path.realpath(path) in msg, f"the error should name {path}: {msg}"
    assert _NOT_AN_ENGINE_REASON.search(msg), f"the error should say why: {msg}"
    if kind == "library_without_entry":
        assert re.search(r"(?i)openreg_engine_entry|entry|not an engine", msg), msg


def test_example_script_with_unknown_engine(run_command, describe, repo_root):
    script = os.path.join(repo_root, "examples", "train.py")
    assert os.path.isfile(script), f"{script} is missing"
    proc = run_command(
        [sys.executable, script],
        dict(_CLEAN_ENV, OPENREG_ENGINE="nope"),
        cwd=repo_root,
    )
    text = describe(proc)
    assert proc.returncode > 0, f"expected a clean non-zero exit (not a signal): {text}"
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, f"stderr should be exactly one line: {text}"
    assert "nope" in lines[0], text
    assert "Traceback" not in proc.stderr + proc.stdout, text
    assert "c10::" not in proc.stderr + proc.stdout, text
