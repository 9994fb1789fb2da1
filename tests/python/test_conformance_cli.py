"""``python -m openreg conformance <engine>``: engine vs torch CPU through the device.

Runs the CLI in subprocesses on the third-party example engine (must pass), on a
deliberately wrong engine built here against the installed SDK (must be caught),
and on an engine that does not exist (a usage error).
"""

import json
import os
import re
import sys

import pytest

WRONG_ENGINE_CMAKE = """\
cmake_minimum_required(VERSION 3.18)
project(wrong_engine LANGUAGES CXX)
find_package(openreg REQUIRED)
openreg_add_engine(wrong_engine SOURCES engine.cpp)
"""

# relu keeps negative values; add ignores alpha. Both advertise float32 only.
WRONG_ENGINE_CPP = """\
#include <openreg/sdk.hpp>

namespace sdk = openreg::sdk;

namespace {
void relu(const sdk::Call& call) {
  sdk::Tensor a = call.tensor(0), out = call.output(0);
  sdk::unary_map<float>(call.host(), out, a, [](float x) { return x; });
}

void add(const sdk::Call& call) {
  sdk::Tensor a = call.tensor(0), b = call.tensor(1), out = call.output(0);
  OPENREG_SDK_REQUIRE(sdk::same_dtype(a.dtype(), out.dtype()) && sdk::same_dtype(b.dtype(), out.dtype()),
                      "wrong_engine: float32 operands only");
  sdk::binary_map<float>(call.host(), out, a, b, [](float x, float y) { return x + y; });
}
}  // namespace

extern "C" OPENREG_ENGINE_EXPORT const openreg_engine* openreg_engine_entry(int32_t, int32_t) {
  static sdk::EngineDef engine = [] {
    sdk::EngineDef e("wrong_engine", "0.0.1");
    e.op("aten::relu", {sdk::dtypes::float32}, relu);
    e.op("aten::add.Tensor", {sdk::dtypes::float32}, add);
    return e;
  }();
  return engine.table();
}
"""

# _foreach_mul_.Scalar that rounds the last element of each tensor of a call up by one
# ulp: within torch CPU's tolerance, but a call on pieces of a tensor (as the host runs
# optimizer steps) rounds other elements than the whole call.
EDGES_ENGINE_CPP = """\
#include <openreg/sdk.hpp>

#include <cmath>
#include <vector>

namespace sdk = openreg::sdk;

namespace {
void foreach_mul_(const sdk::Call& call) {
  const float s = static_cast<float>(call.scalar(1));
  for (const sdk::Tensor& t : call.tensor_list(0)) {
    float* p = t.data<float>();
    const int64_t n = t.numel();
    std::vector<int64_t> index(static_cast<size_t>(t.dim()), 0);
    for (int64_t k = 0; k < n; ++k) {  // any strides, in row-major order
      int64_t at = 0;
      for (int64_t d = 0; d < t.dim(); ++d) at += index[d] * t.stride(d);
      p[at] = k + 1 < n ? p[at] * s : std::nextafter(p[at] * s, INFINITY);
      for (int64_t d = t.dim() - 1; d >= 0 && ++index[d] == t.size(d); --d) index[d] = 0;
    }
  }
}
}  // namespace

extern "C" OPENREG_ENGINE_EXPORT const openreg_engine* openreg_engine_entry(int32_t, int32_t) {
  static sdk::EngineDef engine = [] {
    sdk::EngineDef e("edges_engine", "0.0.1");
    e.op("aten::_foreach_mul_.Scalar", {sdk::dtypes::float32}, foreach_mul_);
    return e;
  }();
  return engine.table();
}
"""

RESULTS = {"pass", "FAIL", "unsupported", "no case"}


def parse_table(stdout):
    """{(op, dtype): (result, detail)} from the CLI's table."""
    rows = {}
    for line in stdout.splitlines():
        parts = re.split(r"\s{2,}", line.strip(), maxsplit=3)
        if len(parts) >= 3 and parts[0].startswith("aten::") and parts[2] in RESULTS:
            rows[(parts[0], parts[1])] = (parts[2], parts[3] if len(parts) > 3 else "")
    return rows


def conformance(run_command, *args):
    return run_command([sys.executable, "-m", "openreg", "conformance", *args])


@pytest.fixture(scope="module")
def wrong_engine(tmp_path_factory, build_engine):
    """A tiny engine whose relu and add are wrong, built with find_package(openreg)."""
    src = tmp_path_factory.mktemp("wrong_engine_src")
    (src / "CMakeLists.txt").write_text(WRONG_ENGINE_CMAKE)
    (src / "engine.cpp").write_text(WRONG_ENGINE_CPP)
    return build_engine(src, src / "build", "wrong_engine")


@pytest.fixture(scope="module")
def edges_engine(tmp_path_factory, build_engine):
    """An engine whose _foreach_mul_ depends on where a call's tensors end."""
    src = tmp_path_factory.mktemp("edges_engine_src")
    (src / "CMakeLists.txt").write_text(WRONG_ENGINE_CMAKE.replace("wrong_engine", "edges_engine"))
    (src / "engine.cpp").write_text(EDGES_ENGINE_CPP)
    return build_engine(src, src / "build", "edges_engine")


def test_example_engine_passes(third_party_engine, run_command, describe):
    proc = conformance(run_command, third_party_engine)
    assert proc.returncode == 0, describe(proc)
    rows = parse_table(proc.stdout)
    assert rows[("aten::add.Tensor", "float32")][0] == "pass", describe(proc)
    assert rows[("aten::mm", "float32")][0] == "pass", describe(proc)
    assert "autograd ok" in rows[("aten::mm", "float32")][1], describe(proc)
    assert {result for result, _ in rows.values()} <= {"pass", "unsupported"}, describe(proc)
    # Every op x dtype of the table has its row.
    for op in ("aten::add.Tensor", "aten::add_.Tensor", "aten::mul.Tensor", "aten::relu"):
        for dtype in ("float32", "float64"):
            assert (op, dtype) in rows, describe(proc)
    assert re.search(r"\b0 FAIL\b", proc.stdout), describe(proc)


def test_wrong_engine_is_caught(wrong_engine, run_command, describe):
    proc = conformance(run_command, wrong_engine)
    assert proc.returncode == 1, describe(proc)
    rows = parse_table(proc.stdout)
    result, detail = rows[("aten::relu", "float32")]
    assert result == "FAIL" and "max abs err" in detail, describe(proc)
    result, detail = rows[("aten::add.Tensor", "float32")]
    assert result == "FAIL" and "alpha" in detail, describe(proc)


def test_a_kernel_that_depends_on_where_a_call_ends_is_caught(edges_engine, run_command, describe):
    proc = conformance(run_command, edges_engine, "--op", "_foreach_mul_.Scalar")
    assert proc.returncode == 1, describe(proc)
    result, detail = parse_table(proc.stdout)[("aten::_foreach_mul_.Scalar", "float32")]
    assert result == "FAIL" and "differ between the whole call and the same call on 1-d pieces" in detail, \
        describe(proc)


def test_filters_select_rows(third_party_engine, run_command, describe):
    proc = conformance(run_command, third_party_engine, "--op", "aten::mm", "--dtype", "float32,float64")
    assert proc.returncode == 0, describe(proc)
    assert list(parse_table(proc.stdout)) == [("aten::mm", "float32")], describe(proc)


def test_unknown_engine_is_a_usage_error(run_command, describe):
    proc = conformance(run_command, "no_such_engine")
    assert proc.returncode == 2, describe(proc)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, describe(proc)
    assert "no_such_engine" in lines[0] and "Traceback" not in proc.stderr, describe(proc)
    assert "available" in lines[0], describe(proc)  # the remedy: the engines one can name


def test_abi_mode_without_the_binary(openreg, monkeypatch, tmp_path, capsys):
    from openreg import conformance as cli

    monkeypatch.setattr(openreg, "cmake_prefix_path", str(tmp_path))
    assert cli.main(["--abi", "aten_ref", "--mode=support"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "GoogleTest" in err[0] and "libgtest-dev" in err[0]
    assert os.path.join("bin", "openreg-conformance") in err[0]


def test_reduced_precision_results_can_be_judged_against_the_exact_answer(openreg):
    """Accumulating bfloat16 results that disagree with torch CPU get a second
    judge: the op in float64 on the same values (torch CPU accumulates some of them,
    layer norm's grad_bias among them, in bfloat16 steps). The exact answer rounded
    once passes it; a wrong answer fails it."""
    import torch
    from openreg import conformance as c
    from openreg import conformance_cases as cases

    values = torch.linspace(0.5, 1.5, 4096).to(torch.bfloat16).reshape(64, 64)
    case = cases.Case("column sums", cases.T(values), [0])
    overload = c.Overload("aten::sum.dim_IntList")
    exact = values.double().sum(0)
    runner = c.Runner("any")
    dev = c._Materialized(case, "openreg")
    cpu = c._Materialized(case, "cpu")

    rounded_once = exact.to(torch.bfloat16).to("openreg")
    assert runner._compare_exact(overload, case, torch.bfloat16, rounded_once, dev, cpu, {}) is None
    wrong = (exact + 4.0).to(torch.bfloat16).to("openreg")
    why = runner._compare_exact(overload, case, torch.bfloat16, wrong, dev, cpu, {})
    assert why and "against float64" in why


IN_TREE_ENGINES = ("aten_ref", "eigen", "onednn")


def test_every_op_the_in_tree_engines_advertise_has_cases(openreg, run_python, describe):
    """CI runs the tool with --strict on the in-tree engines: an op one of them
    advertises without a case family (or with cases torch CPU rejects for an
    advertised dtype) is caught here, on torch CPU alone."""
    from openreg import conformance as cli

    built = {e["name"] for e in openreg.engines_available()}
    checked = []
    for name in IN_TREE_ENGINES:
        if name not in built:
            continue  # optional engines whose dependency is missing (test_native_engines checks that)
        proc = run_python("import json, openreg; print(json.dumps(openreg.info()['engines'][0]))",
                          env_extra={"OPENREG_ENGINE": name})
        assert proc.returncode == 0, describe(proc)
        engine = json.loads(proc.stdout.strip().splitlines()[-1])
        assert engine["name"] == name and (engine["ops"] or engine["any_op"]), engine
        assert cli.missing_cases(engine) == [], name
        checked.append(name)
    assert "aten_ref" in checked


def test_missing_cases_are_found(openreg):
    """The check above can fail: an op without a family, an advertised dtype torch
    CPU rejects for every case, and an op torch does not have are each reported."""
    from openreg import conformance as cli

    engine = {"name": "made_up", "any_op": False, "ops": {
        "aten::addcmul": ["float32"], "aten::igamma": ["float32"], "aten::lerp.Scalar": ["float32", "int64"],
        "aten::no_such_op": ["float32"]}}
    missing = {(op, dtype): why for op, dtype, why in cli.missing_cases(engine)}
    assert set(missing) == {("aten::igamma", "float32"), ("aten::lerp.Scalar", "int64"),
                            ("aten::no_such_op", "float32")}, missing
    assert "rejects every case" in missing[("aten::lerp.Scalar", "int64")]
    assert "has no op" in missing[("aten::no_such_op", "float32")]
