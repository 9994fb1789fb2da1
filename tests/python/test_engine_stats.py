"""openreg.info() / openreg.stats() / `python -m openreg info`."""

import json
import os
import re
import sys

import pytest
import torch


@pytest.fixture
def initialised(openreg):
    torch.ones(1, device="openreg")  # engine loading happens at device initialisation
    return openreg


def _total(stats, op):
    return sum(stats.get(op, {}).values())


def test_stats_counts_add(initialised):
    openreg = initialised
    x = torch.ones(3, device="openreg")
    openreg.reset_stats()
    y = x + 1
    stats = openreg.stats()
    assert isinstance(stats, dict)
    assert "aten::add.Tensor" in stats, f"aten::add.Tensor missing from {sorted(stats)}"
    per_engine = stats["aten::add.Tensor"]
    assert isinstance(per_engine, dict)
    for engine, count in per_engine.items():
        assert isinstance(engine, str) and isinstance(count, int), per_engine
    chain = openreg.info()["chain"]
    assert set(per_engine) <= set(chain), f"counted under engines {set(per_engine)} not in chain {chain}"
    assert per_engine.get(chain[0], 0) > 0, f"the active engine {chain[0]!r} did not run add: {per_engine}"
    torch.testing.assert_close(y.cpu(), torch.ones(3) + 1, atol=0, rtol=0)


def test_stats_count_scales_with_calls(initialised):
    openreg = initialised
    x = torch.ones(3, device="openreg")
    openreg.reset_stats()
    x + 1
    once = _total(openreg.stats(), "aten::add.Tensor")
    assert once > 0
    x + 1
    x + 1
    assert _total(openreg.stats(), "aten::add.Tensor") == 3 * once


def test_reset_stats_empties(initialised):
    openreg = initialised
    torch.ones(3, device="openreg") + 1
    assert _total(openreg.stats(), "aten::add.Tensor") > 0
    assert openreg.reset_stats() is None
    stats = openreg.stats()
    assert sum(sum(per.values()) for per in stats.values()) == 0, stats


def test_stats_returns_a_snapshot(initialised):
    openreg = initialised
    openreg.reset_stats()
    torch.ones(3, device="openreg") + 1
    snap = openreg.stats()
    before = _total(snap, "aten::add.Tensor")
    torch.ones(3, device="openreg") + 1
    assert _total(snap, "aten::add.Tensor") == before
    assert _total(openreg.stats(), "aten::add.Tensor") > before


def test_info(initialised):
    openreg = initialised
    info = openreg.info()
    assert isinstance(info, dict)
    for key in ("engines", "chain", "devices"):
        assert key in info, f"info() lacks {key!r}: {info}"
    assert info["devices"] == torch.openreg.device_count()
    engines = info["engines"]
    assert isinstance(engines, list) and engines
    for e in engines:
        for key in ("name", "version", "path", "abi_version", "num_ops"):
            assert key in e, f"engine entry lacks {key!r}: {e}"
        assert re.fullmatch(r"[a-z0-9_]+", e["name"]), e
        assert isinstance(e["version"], str)
        assert isinstance(e["path"], str)
        assert isinstance(e["num_ops"], int) and e["num_ops"] >= 0, e
        assert re.fullmatch(r"1\.\d+", e["abi_version"]), e  # OPENREG_ABI_VERSION_MAJOR is 1
    names = [e["name"] for e in engines]
    assert len(names) == len(set(names)), names
    assert "aten_ref" in names
    ref = engines[names.index("aten_ref")]
    assert os.path.isfile(ref["path"]), f"aten_ref path {ref['path']!r} does not exist"
    chain = info["chain"]
    assert isinstance(chain, list) and chain
    assert all(name in names for name in chain), (chain, names)
    assert len(chain) == len(set(chain)), chain


def test_info_chain_follows_openreg_engine(initialised):
    """The first engine of the chain is the one OPENREG_ENGINE selects (default: the
    best built engine, onednn, then eigen, then aten_ref)."""
    selected = os.environ.get("OPENREG_ENGINE")
    info = initialised.info()
    chain = info["chain"]
    if not selected or selected == "auto":
        built = {e["name"] for e in info["available"]}
        best = next(name for name in ("onednn", "eigen", "aten_ref") if name in built)
        assert chain[0] == best, (chain, sorted(built))
        assert chain[-1] == "aten_ref", chain
    elif os.sep in selected or selected.endswith(".so"):
        by_path = {os.path.realpath(e["path"]): e["name"] for e in info["engines"]}
        assert by_path.get(os.path.realpath(selected)) == chain[0], (selected, info["engines"], chain)
    else:
        assert chain[0] == selected, chain


def test_info_is_json_serialisable(initialised):
    json.dumps(initialised.info())


def test_cli_info(run_command, describe):
    proc = run_command([sys.executable, "-m", "openreg", "info"], {"OPENREG_VERBOSE": None})
    assert proc.returncode == 0, describe(proc)
    assert "aten_ref" in proc.stdout, describe(proc)
    assert "chain" in proc.stdout.lower(), describe(proc)


def test_routing_with_partial_engine_and_fallback(run_python, describe):
    """With the default fallback, ops the first engine lacks go to aten_ref."""
    path = os.environ.get("OPENREG_TEST_PARTIAL_ENGINE")
    if not path or not os.path.isfile(path):
        pytest.skip("OPENREG_TEST_PARTIAL_ENGINE is unset or missing (add-only test engine from the C++ test build)")
    code = (
        "import json, torch, openreg\n"
        "a = torch.ones(2).to('openreg')\n"
        "openreg.reset_stats()\n"
        "s = (a + a).cpu().tolist()\n"
        "m = (a * 3).cpu().tolist()\n"
        "print('RESULT ' + json.dumps({'add': s, 'mul': m, 'stats': openreg.stats(), 'chain': openreg.info()['chain']}))\n"
    )
    proc = run_python(code, {"OPENREG_ENGINE": path, "OPENREG_FALLBACK": None, "OPENREG_VERBOSE": None})
    assert proc.returncode == 0, describe(proc)
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert len(line) == 1, describe(proc)
    r = json.loads(line[0][len("RESULT ") :])
    assert r["add"] == (torch.ones(2) + torch.ones(2)).tolist()
    assert r["mul"] == (torch.ones(2) * 3).tolist()
    chain = r["chain"]
    assert len(chain) >= 2 and chain[0] != "aten_ref" and "aten_ref" in chain, chain
    assert r["stats"]["aten::add.Tensor"].get(chain[0], 0) > 0, r["stats"]
    assert r["stats"]["aten::mul.Tensor"].get("aten_ref", 0) > 0, r["stats"]
    assert chain[0] not in r["stats"]["aten::mul.Tensor"], r["stats"]
