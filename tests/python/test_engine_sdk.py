"""The engine SDK from an engine author's side: the ABI-level conformance tool
(openreg-conformance) catches wrong engines, every engine library exports only its
entry symbol, the third-party example trains, and docs/coverage.md is current."""

import os
import re
import shutil
import subprocess
import sys

import pytest

import openreg

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "third_party_engine")
TOOL = os.path.join(openreg.cmake_prefix_path, "bin", "openreg-conformance")


def _conformance(engine: str, *extra: str) -> subprocess.CompletedProcess:
    assert os.path.isfile(TOOL), f"{TOOL} is not installed (the package was built without GoogleTest)"
    return subprocess.run([TOOL, f"--engine={engine}", "--gtest_brief=1", *extra],
                          capture_output=True, text=True, timeout=600)


@pytest.fixture
def variant(tmp_path, build_engine):
    """``variant(name, {file: [(old, new)]})``: the example engine with text edits,
    built out of tree against the installed SDK; returns the library's path."""
    def make(name: str, edits: dict) -> str:
        src = tmp_path / name
        shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build"))
        for fname, subs in edits.items():
            text = (src / fname).read_text()
            for old, new in subs:
                assert old in text, f"{fname} no longer contains {old!r}; update this test"
                text = text.replace(old, new)
            (src / fname).write_text(text)
        return build_engine(src, src / "build", "my_engine")
    return make


def test_conformance_passes_the_example_engine(third_party_engine):
    r = _conformance(third_party_engine, "--strict")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    for op in ("aten::add.Tensor", "aten::add_.Tensor", "aten::mul.Tensor", "aten::relu", "aten::mm"):
        assert re.search(rf"^{re.escape(op)}\s+float32\s+pass\b", r.stdout, re.M), r.stdout[-3000:]
    assert "0 FAIL" in r.stdout


def test_conformance_catches_wrong_values_and_ignored_output_strides(variant):
    bad = variant("bad", {
        # relu that keeps small negatives: wrong values
        "ops_elementwise.cpp": [("return x > T(0) || x != x ? x : T(0);", "return x > T(-0.5) || x != x ? x : T(0);")],
        # mm that writes a dense output whatever its strides
        "ops_matmul.cpp": [("const int64_t cs0 = out.stride(0), cs1 = out.stride(1);",
                            "const int64_t cs0 = N, cs1 = 1;")],
    })
    r = _conformance(bad)
    assert r.returncode == 1, r.stdout[-3000:]
    assert re.search(r"^aten::relu\s+float32\s+FAIL", r.stdout, re.M), r.stdout[-3000:]
    assert re.search(r"^aten::mm\s+float32\s+FAIL", r.stdout, re.M), r.stdout[-3000:]
    assert "differ from the reference" in r.stdout
    assert "outside the elements of output 0" in r.stdout
    # The ops that are still right keep passing: failures are per op and dtype.
    assert re.search(r"^aten::add\.Tensor\s+float32\s+pass\b", r.stdout, re.M)


def test_conformance_catches_a_kernel_that_writes_its_input(variant):
    bad = variant("writes_input", {
        "ops_elementwise.cpp": [(
            "void relu(const sdk::Call& call) {\n  sdk::Tensor a = call.tensor(0), out = call.output(0);",
            "void relu(const sdk::Call& call) {\n  sdk::Tensor a = call.tensor(0), out = call.output(0);\n"
            "  if (a.numel() > 0) *static_cast<char*>(static_cast<void*>(a.bytes())) ^= 1;")],
    })
    r = _conformance(bad, "--op=relu")
    assert r.returncode == 1, r.stdout[-3000:]
    assert "modified input tensor 0" in r.stdout


def test_declined_calls_are_reported_not_failed(variant):
    picky = variant("picky", {
        "ops_matmul.cpp": [('OPENREG_SDK_REQUIRE(a.dim() == 2 && b.dim() == 2, "mm: 2-d inputs only");',
                            'OPENREG_SDK_REQUIRE(a.is_contiguous() && b.is_contiguous(), "mm: contiguous only");')],
    })
    r = _conformance(picky, "--op=mm")
    assert r.returncode == 0, r.stdout[-3000:]
    assert re.search(r"^aten::mm\s+float32\s+pass\*\s.*unsupported.*contiguous only", r.stdout, re.M), r.stdout[-2000:]


def test_conformance_support_and_perf_modes(third_party_engine):
    r = _conformance(third_party_engine, "--mode=support", "--format=markdown")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("### my_engine")
    assert re.search(r"^\| `aten::mm` \| ✓ \|  \|", r.stdout, re.M), r.stdout
    r = _conformance(third_party_engine, "--mode=perf", "--op=relu", "--reps=1")
    assert r.returncode == 0, r.stderr
    assert re.search(r"^aten::relu\s+float32\s.*\d+\.\d+x$", r.stdout, re.M), r.stdout


def test_conformance_names_a_missing_engine():
    r = _conformance("no_such_engine")
    assert r.returncode == 2
    assert "no engine named 'no_such_engine'" in r.stderr and "OPENREG_ENGINE_PATH" in r.stderr


def _exported(path: str) -> set:
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def test_every_engine_library_exports_only_its_entry_symbol(third_party_engine):
    libs = [os.path.join(openreg.cmake_prefix_path, "lib", f)
            for f in os.listdir(os.path.join(openreg.cmake_prefix_path, "lib"))
            if f.startswith("libopenreg_engine_") and f.endswith(".so")]
    assert any(p.endswith("libopenreg_engine_aten_ref.so") for p in libs)
    libs.append(third_party_engine)
    for lib in libs:
        assert _exported(lib) == {"openreg_engine_entry"}, lib


def test_example_engine_trains_like_cpu(third_party_engine, assert_trains_like_cpu):
    """Per-step losses of a short training run match CPU's, with the example engine
    and aten_ref both serving calls."""
    served = assert_trains_like_cpu({"OPENREG_ENGINE": third_party_engine})
    assert served.get("my_engine", 0) > 0 and served.get("aten_ref", 0) > 0, served


def test_coverage_doc_is_current(third_party_engine):
    env = dict(os.environ, OPENREG_TEST_THIRD_PARTY_ENGINE=third_party_engine)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "coverage.py"), "--check"],
                       capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
