"""python -m openreg tune and the tuned routing table (python/openreg/tuning.py):
the choice rule, the router following a table, stale tables ignored, and one
real (short) tuning run. The chains' correctness is the conformance suite's:
the table only reorders engines that each pass it."""

import json
import os
import sys

import pytest


def _table(openreg, routes, chain=("onednn", "eigen", "aten_ref"), shapes=None, more_threads=None):
    """A table whose choices are `routes` and `shapes` for every thread count, or, given
    more_threads=(routes, shapes), those for one thread and more_threads' for two."""
    from openreg import tuning

    found = {f["name"]: f["path"] for f in openreg.engines_available()}
    missing = [e for e in chain if e not in found]
    if missing:
        pytest.skip(f"engines not built: {missing}")
    choices = {"1": {"routes": routes, "shapes": shapes or {}}}
    if more_threads:
        choices["2"] = {"routes": more_threads[0], "shapes": more_threads[1]}
    return {"version": tuning.TABLE_VERSION, "made": "test", "chain": list(chain), "choices": choices,
            "engines": [tuning._fingerprint(e, found[e]) for e in chain]}


def _run_with_table(run_python, tmp_path, table, script, engine=None):
    """Writes `table`, runs `script` with OPENREG_ROUTES pointing at it (and
    OPENREG_ENGINE=`engine`, None: the default chain); returns (the JSON of the
    script's last line, the process)."""
    path = tmp_path / "routes.json"
    path.write_text(json.dumps(table))
    proc = run_python(script, env_extra={"OPENREG_ENGINE": engine, "OPENREG_ROUTES": str(path)})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc


def test_choose_keeps_the_chain_order_unless_another_engine_is_clearly_faster(openreg):
    from openreg.tuning import MARGIN, choose

    order = ["onednn", "eigen", "aten_ref"]
    measured = {
        "aten::relu|float32": {"0": {"onednn": 10.0, "eigen": 5.0}, "3": {"onednn": 100.0, "eigen": 95.0}},
        "aten::mm|float32": {"2": {"onednn": 10.0, "eigen": 30.0, "aten_ref": 12.0}},
        "aten::tril|float32": {"1": {"eigen": 10.0, "aten_ref": 4.0}},  # onednn does not serve it
        "aten::cat|float32": {"0": {"aten_ref": 3.0}},  # one engine only: nothing to choose
    }
    routes = choose(measured, order)
    assert routes == {"aten::relu|float32": ["eigen", "", "", ""], "aten::tril|float32": ["", "aten_ref", "", ""]}
    # exactly at the margin: not faster enough
    edge = {"aten::add.Tensor|float32": {"0": {"onednn": 10.0, "eigen": 10.0 * (1 - MARGIN)}}}
    assert choose(edge, order) == {}


def test_choose_routes_a_forward_and_its_backward_together(openreg):
    """An LSTM layer's training calls must reach one engine (the forward's workspace is
    that engine's own): they are chosen on their summed time, never apart."""
    from openreg.tuning import choose

    order = ["onednn", "eigen", "aten_ref"]
    fwd, bwd = "aten::mkldnn_rnn_layer|float32", "aten::mkldnn_rnn_layer_backward|float32"
    # Alone, the forward would go to aten_ref and the backward stay on onednn.
    split = {fwd: {"1": {"onednn": 100.0, "aten_ref": 50.0}}, bwd: {"1": {"onednn": 100.0, "aten_ref": 200.0}}}
    assert choose(split, order) == {}  # together onednn is faster: 200 against 250
    both = {fwd: {"1": {"onednn": 100.0, "aten_ref": 50.0}}, bwd: {"1": {"onednn": 100.0, "aten_ref": 120.0}}}
    assert choose(both, order) == {fwd: ["", "aten_ref", "", ""], bwd: ["", "aten_ref", "", ""]}
    # A class where only one of the pair was measured: no preference for either.
    alone = {fwd: {"2": {"onednn": 100.0, "aten_ref": 10.0}}}
    assert choose(alone, order) == {}


def test_a_workload_keeps_its_routes_only_where_the_table_makes_its_step_faster(openreg):
    from openreg.tuning_check import MARGIN, keeps_routes

    assert keeps_routes(0.90) and keeps_routes(1.0 - MARGIN)
    # Within the margin of no change, or slower: back to the chain's order.
    assert not keeps_routes(1.0 - MARGIN / 2) and not keeps_routes(1.0) and not keeps_routes(1.05)


def test_the_check_on_whole_steps_puts_a_slowed_workloads_routes_back_in_the_chains_order(openreg):
    """tune's last stage (tuning_check): where the table made a workload's step slower,
    the routes that workload called at that thread count go back to the chain's order;
    other workloads' routes, and its own at the other thread count, stay."""
    from openreg.tuning_check import drop_routes, used_routes

    def timing(workload, threads, op, size_class, sizes):
        return {"workload": workload, "threads": threads, "op": op, "dtype": "float32", "size_class": size_class,
                "sizes": sizes, "engine": "eigen", "ns": 1.0, "calls": 1}

    timings = [timing("digits CNN train", 2, "aten::relu", 1, [64, 16, 8, 8]),
               timing("digits CNN train", 2, "aten::native_batch_norm", 1, [64, 16, 8, 8]),
               timing("digits CNN train", 1, "aten::mm", 0, [64, 10]),  # another thread count
               timing("GPT-2 train", 2, "aten::relu", 2, [8, 64, 512])]
    choices = {"routes": {"aten::relu|float32": ["", "eigen", "eigen", ""],
                          "aten::mm|float32": ["eigen", "", "", ""]},
               "shapes": {"aten::native_batch_norm|float32": [[[64, 16, 8, 8], "eigen"], [[8, 128, 8, 8], "eigen"]]}}
    used = used_routes(timings, "digits CNN train", 2)
    assert used == {"aten::relu|float32": ({1}, {"64x16x8x8"}),
                    "aten::native_batch_norm|float32": ({1}, {"64x16x8x8"})}
    dropped = drop_routes(choices, used)
    assert sorted(dropped) == ["aten::native_batch_norm|float32 64x16x8x8", "aten::relu|float32 class 1"]
    assert choices == {"routes": {"aten::relu|float32": ["", "", "eigen", ""], "aten::mm|float32": ["eigen", "", "", ""]},
                       "shapes": {"aten::native_batch_norm|float32": [[[8, 128, 8, 8], "eigen"]]}}
    # A key whose every choice goes back leaves the table.
    assert drop_routes(choices, used_routes(timings, "GPT-2 train", 2)) == ["aten::relu|float32 class 2"]
    assert "aten::relu|float32" not in choices["routes"]


def test_choose_shapes_gives_a_shape_its_own_engine_only_when_clearly_faster(openreg):
    """A size class mixes shapes: [64, 16, 8, 8] and [8, 128, 8, 8] are both 65,536
    elements, and a batch norm over them favours different engines."""
    from openreg.tuning import MIN_SAVING_US, choose, choose_shapes

    order = ["onednn", "eigen", "aten_ref"]
    key = "aten::native_batch_norm|float32"
    per_class = {key: {"2": {"onednn": 160e3, "eigen": 120e3}}}  # the class goes to eigen
    routes = choose(per_class, order)
    assert routes == {key: ["", "", "eigen", ""]}
    per_shape = {key: {
        "8x128x8x8": (2, {"onednn": 200e3, "eigen": 100e3}, 4),  # agrees with its class
        "64x16x8x8": (2, {"onednn": 40e3, "eigen": 60e3}, 2),    # onednn: clearly faster
        "64x8x16x8": (2, {"onednn": 57e3, "eigen": 60e3}, 2),    # faster, but within the margin
        "4x4x4x4": (0, {"onednn": 1e3, "eigen": 5e3}, 2),        # its class kept the chain's order
    }}
    assert choose_shapes(per_shape, {key: {**per_class[key], "0": {"onednn": 1e3, "eigen": 5e3}}}, routes,
                         order) == {key: [[[64, 16, 8, 8], "onednn"]]}
    # A saving under MIN_SAVING_US a call is not worth a table entry.
    tiny = {key: {"64x16x8x8": (2, {"onednn": 0.5 * MIN_SAVING_US * 1e3, "eigen": 0.9 * MIN_SAVING_US * 1e3}, 2)}}
    assert choose_shapes(tiny, per_class, routes, order) == {}
    # The forward and backward of a pair keep their class's choice (one engine for both).
    rnn = "aten::mkldnn_rnn_layer|float32"
    assert choose_shapes({rnn: {"8x32x64": (1, {"onednn": 100e3, "aten_ref": 10e3}, 2)}},
                         {rnn: {"1": {"onednn": 100e3, "aten_ref": 100e3}}}, {}, order) == {}


def test_choose_shapes_keeps_a_shape_off_an_engine_never_measured_on_it(openreg):
    """An LSTM's per-step GEMMs ([8, 128] by [128, 512]) run on onednn's and eigen's
    chains only (aten_ref's chain runs the layer as one call): the class's choice of
    aten_ref, won on other models' small GEMMs, must not take them."""
    from openreg.tuning import choose, choose_shapes

    order = ["onednn", "eigen", "aten_ref"]
    key = "aten::mm|float32"
    per_class = {key: {"0": {"onednn": 10e3, "eigen": 12e3, "aten_ref": 5e3}}}
    routes = choose(per_class, order)
    assert routes == {key: ["aten_ref", "", "", ""]}
    per_shape = {key: {
        "8x128": (0, {"onednn": 9e3, "eigen": 12e3}, 64),              # aten_ref never ran it
        "8x10": (0, {"onednn": 11e3, "eigen": 12e3, "aten_ref": 4e3}, 2),  # the class's choice holds
        "8x512": (0, {"eigen": 8e3}, 64),                               # only eigen ran it
    }}
    assert choose_shapes(per_shape, per_class, routes, order) == {key: [[[8, 128], "onednn"], [[8, 512], "eigen"]]}


ROUTER_CHECK = r"""
import json, sys, torch, openreg
info = openreg.info()
small = torch.randn(100, device="openreg")       # size class 0 (< 4096 elements)
large = torch.randn(200, 100, device="openreg")  # size class 1
openreg.reset_stats()
torch.relu(small)
small_by = openreg.stats()["aten::relu"]
openreg.reset_stats()
torch.relu(large)
large_by = openreg.stats()["aten::relu"]
ok = torch.equal(torch.relu(small).cpu(), torch.relu(small.cpu()))
print(json.dumps({"chain": info["chain"], "table": info["tuned_routes"], "small": small_by, "large": large_by,
                  "ok": ok}))
"""


def test_default_chain_follows_the_table_per_size_class(openreg, run_python, tmp_path):
    table = _table(openreg, {"aten::relu|float32": ["eigen", "", "", ""]})
    out, _ = _run_with_table(run_python, tmp_path, table, ROUTER_CHECK)
    assert out["chain"] == ["onednn", "eigen", "aten_ref"] and out["table"] == str(tmp_path / "routes.json")
    assert out["small"] == {"eigen": 1}, out   # the table's choice for class 0
    assert out["large"] == {"onednn": 1}, out  # class 1: the chain's order
    assert out["ok"]


SHAPE_CHECK = r"""
import json, torch, openreg
routed, other = torch.randn(64, 16, device="openreg"), torch.randn(16, 64, device="openreg")  # one size class
by = {}
for threads in (1, 2):
    torch.set_num_threads(threads)
    for name, t in (("routed", routed), ("other", other)):
        openreg.reset_stats()
        torch.relu(t)
        by[f"{name}@{threads}"] = openreg.stats()["aten::relu"]
print(json.dumps(by))
"""


def test_the_router_follows_a_shapes_choice_and_the_calls_thread_setting(openreg, run_python, tmp_path):
    table = _table(openreg, {"aten::relu|float32": ["", "", "", ""]},
                   shapes={"aten::relu|float32": [[[64, 16], "eigen"]]},  # one thread
                   more_threads=({"aten::relu|float32": ["aten_ref", "", "", ""]}, {}))
    out, _ = _run_with_table(run_python, tmp_path, table, SHAPE_CHECK)
    assert out == {"routed@1": {"eigen": 1}, "other@1": {"onednn": 1},
                   "routed@2": {"aten_ref": 1}, "other@2": {"aten_ref": 1}}, out


FOLLOW_CHECK = r"""
import json, torch, openreg
from openreg import _C
small = torch.randn(8, 8, device="openreg")
by = {}
for followed in (False, True):
    _C._set_tuned_routes_followed(followed)
    openreg.reset_stats()
    torch.relu(small)
    by[str(followed)] = openreg.stats()["aten::relu"]
print(json.dumps(by))
"""


def test_the_table_can_be_set_aside_in_process_for_a_comparison(openreg, run_python, tmp_path):
    # bench/tuned_ab.py compares the table with the chain's order in one process.
    table = _table(openreg, {"aten::relu|float32": ["eigen", "", "", ""]})
    out, _ = _run_with_table(run_python, tmp_path, table, FOLLOW_CHECK)
    assert out == {"False": {"onednn": 1}, "True": {"eigen": 1}}, out


PIN_CHECK = r"""
import json, torch, openreg
from openreg import _C
x = torch.randn(8, 8, device="openreg")
ops = {"aten::relu": torch.relu, "aten::neg": torch.neg, "aten::exp": torch.exp, "aten::sqrt": torch.sqrt,
       "aten::sigmoid": torch.sigmoid, "aten::tanh": torch.tanh}
def served(pin=None):
    if pin:
        _C._pin_engine(*pin)
    openreg.reset_stats()
    for fn in ops.values():
        fn(x)
    stats = openreg.stats()
    _C._pin_engine("")
    return {op: sorted(stats[op]) for op in ops}
out = {"none": served(), "all": served(("eigen",)),
       "groups": [served(("eigen", g, 2)) for g in range(2)]}
try:
    _C._pin_engine("no_such_engine")
except RuntimeError as exc:
    out["error"] = str(exc)
print(json.dumps(out))
"""


def test_tuning_pins_an_engine_for_one_group_of_routes_at_a_time(openreg, run_python):
    proc = run_python(PIN_CHECK, env_extra={"OPENREG_ENGINE": "onednn,eigen,aten_ref", "OPENREG_ROUTES": "off"})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    ops = list(out["none"])
    assert all(out["none"][op] == ["onednn"] for op in ops), out["none"]
    assert all(out["all"][op] == ["eigen"] for op in ops), out["all"]
    # Two groups: each op's route is pinned in exactly one of them, onednn's in the other.
    for op in ops:
        assert sorted(g[op][0] for g in out["groups"]) == ["eigen", "onednn"], (op, out["groups"])
    assert "no engine 'no_such_engine' in the chain (onednn, eigen, aten_ref)" in out["error"], out["error"]


def test_an_explicit_engine_ignores_the_table(openreg, run_python, tmp_path):
    table = _table(openreg, {"aten::relu|float32": ["eigen", "eigen", "eigen", "eigen"]})
    out, _ = _run_with_table(run_python, tmp_path, table, ROUTER_CHECK, engine="onednn")
    assert out["chain"] == ["onednn", "aten_ref"] and out["table"] is None
    assert out["small"] == {"onednn": 1} and out["large"] == {"onednn": 1}


@pytest.mark.parametrize("setting", [("OPENREG_ENGINE", "onednn"), ("OPENREG_ROUTES", "off")], ids=lambda s: s[0])
def test_the_environment_counts_when_the_device_is_first_used(openreg, run_python, tmp_path, setting):
    # A script that sets OPENREG_ENGINE (or turns the table off) after `import
    # openreg` but before using the device gets what it asked for.
    name, value = setting
    script = f"import os, openreg\nos.environ[{name!r}] = {value!r}\n" + ROUTER_CHECK
    out, _ = _run_with_table(run_python, tmp_path,
                             _table(openreg, {"aten::relu|float32": ["eigen", "eigen", "eigen", "eigen"]}), script)
    assert out["table"] is None and out["small"] == {"onednn": 1}, out
    expected = ["onednn", "aten_ref"]
    assert out["chain"] == expected, out


def test_a_table_for_other_engine_builds_is_ignored_with_a_warning(openreg, run_python, tmp_path):
    table = _table(openreg, {"aten::relu|float32": ["eigen", "eigen", "eigen", "eigen"]})
    table["engines"][1]["mtime_ns"] += 1  # eigen rebuilt since
    out, proc = _run_with_table(run_python, tmp_path, table, ROUTER_CHECK)
    assert out["table"] is None and out["chain"][0] == "onednn" and out["small"] == {"onednn": 1}
    assert "tuned routing table" in proc.stderr and "ignored" in proc.stderr and "eigen changed" in proc.stderr


def test_tune_measures_the_engines_and_writes_a_table_the_chain_loads(openreg, run_command, tmp_path):
    from openreg import tuning

    built = {f["name"] for f in openreg.engines_available()}
    engines = [e for e in tuning.ENGINE_ORDER if e in built] + ["aten_ref"]
    if len(engines) < 2:
        pytest.skip("one engine built: nothing to tune")
    path = tmp_path / "routes.json"
    proc = run_command([sys.executable, "-m", "openreg", "tune", "--models", "nn.TransformerEncoder,digits CNN",
                        "--steps", "1", "--threads", "1,2", "--output", str(path)], env_extra={"OPENREG_ENGINE": None})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = json.loads(path.read_text())
    assert table["chain"] == engines and [e["name"] for e in table["engines"]] == engines
    assert table["models"] == ["nn.TransformerEncoder", "digits CNN"]
    assert sorted(table["choices"]) == ["1", "2"]
    # Checked on whole steps: every workload, mode and thread count, followed against set aside.
    checked = {(c["workload"], c["threads"]) for c in table["checked"]}
    assert checked == {(f"{m} {mode}", t) for m in table["models"] for mode in ("train", "infer") for t in (1, 2)}
    assert all(c["tuned_ms"] > 0 and c["untuned_ms"] > 0 for c in table["checked"]), table["checked"]
    for choices in table["choices"].values():
        # Every engine was measured on the ops it serves: addmm (a linear layer's) on each.
        mm = choices["measured_us"]["aten::addmm|float32"]
        assert set().union(*(set(per_engine) for per_engine in mm.values())) == set(engines), mm
        for key, prefer in choices["routes"].items():
            assert len(prefer) == 4 and all(e in ("",) + tuple(engines) for e in prefer), (key, prefer)
            for cls, engine in enumerate(prefer):
                if engine:  # chosen only where it was measured faster than the chain's first choice
                    per_engine = choices["measured_us"][key][str(cls)]
                    default = min(per_engine, key=engines.index)
                    assert per_engine[engine] < per_engine[default], (key, cls, per_engine)
        for key, per_shape in choices["shapes"].items():
            for sizes, engine in per_shape:  # as measured: that shape's fastest engine
                per_engine = choices["measured_shapes_us"][key]["x".join(map(str, sizes))]
                assert engine in engines and per_engine[engine] == min(per_engine.values()), (key, sizes, per_engine)
    info = run_command([sys.executable, "-m", "openreg", "info"],
                       env_extra={"OPENREG_ENGINE": None, "OPENREG_ROUTES": str(path)})
    assert info.returncode == 0 and f"tuned routing table: {path}" in info.stdout, info.stdout + info.stderr
