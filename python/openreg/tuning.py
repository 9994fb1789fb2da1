"""``python -m openreg tune``: each op to the fastest engine that serves it, on this machine.

Engines differ op by op: one has the faster GEMM, another the faster layer norm
or small elementwise loop, and which one wins depends on the CPU and on the
size of the call. ``tune`` runs the real-model workloads of :mod:`openreg.workloads`
(training steps and inference) once per built engine, each engine in a process
of its own with the chain ``<engine>, aten_ref``, and with route timing on: the
op path times every engine call by (op, dtype, size class) (size class: elements
of the tensor the call is routed by, cut at ``SIZE_CLASS_BOUNDS``). For every
(op, dtype, size class) measured on more than one engine, the fastest engine
becomes the one the router tries first, if it beats the chain's own first choice
by more than ``MARGIN``; otherwise the chain's order stays.

The table is written per machine (``table_path()``: under ``$XDG_CACHE_HOME`` or
``~/.cache``, keyed by the CPU's model and vector features) and used by the
default chain (``OPENREG_ENGINE`` unset or ``auto``), which then holds every
engine the table measured, in the default order, with the table's preferences.
A table made for other engine builds (a file's size or time changed) is
ignored with a warning. ``OPENREG_ROUTES=off`` ignores the table;
``OPENREG_ROUTES=<path>`` reads and writes that file instead.

``import openreg`` reads the table and hands it over; the router applies it when the
device is first used, if ``OPENREG_ENGINE`` is ``auto`` (or unset) and
``OPENREG_ROUTES`` is not ``off`` by then, so a script may set either after the import.
"""

import datetime
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import warnings

TABLE_VERSION = 1
# The tuned chain's order, before aten_ref (the same as `auto`'s preference).
ENGINE_ORDER = ("onednn", "eigen")
REFERENCE = "aten_ref"
# An engine replaces the chain's first choice only when this much faster (noise guard).
MARGIN = 0.10

_state = {"table": None, "ignored": None}


def _cpu():
    model, flags = "?", []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "?":
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = sorted(v for v in value.split() if v.startswith(("avx", "fma", "amx")))
    except OSError:
        pass
    return {"model": model, "vector_features": flags}


def table_path():
    """Where this machine's table lives (``OPENREG_ROUTES`` overrides)."""
    given = os.environ.get("OPENREG_ROUTES", "").strip()
    if given and given != "off":
        return given
    cpu = _cpu()
    key = hashlib.sha1(json.dumps(cpu, sort_keys=True).encode()).hexdigest()[:12]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "openreg", f"routes-{key}.json")


def _fingerprint(name, path):
    st = os.stat(path)
    return {"name": name, "path": os.path.realpath(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _why_stale(table, found):
    """None if the table fits the engines found, else why not."""
    if table.get("version") != TABLE_VERSION:
        return f"it has format version {table.get('version')}, this openreg reads {TABLE_VERSION}"
    paths = {f["name"]: f["path"] for f in found}
    for e in table.get("engines", []):
        if e["name"] not in paths:
            return f"engine {e['name']} is no longer found"
        try:
            now = _fingerprint(e["name"], paths[e["name"]])
        except OSError:
            return f"engine {e['name']} cannot be read"
        if now != e:
            return f"engine {e['name']} changed since (a new build, or another file: {now['path']})"
    return None


def apply_at_import():
    """Hands this machine's table to the router, for the `auto` chain (called by
    ``import openreg``, before any engine loads; the router decides at the device's
    first use whether the chain is `auto`)."""
    from . import _C

    if os.environ.get("OPENREG_ROUTES", "").strip() == "off":
        return
    engine_is_auto = os.environ.get("OPENREG_ENGINE", "auto").strip() in ("", "auto")
    path = table_path()
    if not os.path.exists(path):
        return
    try:
        with open(path) as f:
            table = json.load(f)
        stale = _why_stale(table, _C._engines_found())
    except (OSError, ValueError, KeyError, TypeError) as exc:
        stale = f"it cannot be read ({exc})"
    if stale:
        _state["ignored"] = (path, stale)
        if not engine_is_auto:  # the table would not be used anyway: no warning
            return
        warnings.warn(f"openreg: the tuned routing table {path} is ignored: {stale}. "
                      "Run `python -m openreg tune` again (or set OPENREG_ROUTES=off)", stacklevel=3)
        return
    _C._set_tuned_routes(table["chain"], table["routes"])
    _state["table"] = path


def active_table():
    """The path of the tuned table the router follows, or None (loads the chain)."""
    from . import _C

    return _state["table"] if _state["table"] and _C._tuned_routes_in_use() else None


def ignored_table():
    """(path, reason) of a table found but ignored, or None."""
    return _state["ignored"]


# ------------------------------------------------------------------ measuring

def _child(engine, models, steps, out_path):
    """In a process whose chain is `engine` (then aten_ref): engine-call times of
    every (op, dtype, size class) over the workloads."""
    import torch

    from . import _C, workloads

    torch.ones(1, device="openreg")
    skipped = []
    _C._set_route_timing(True)
    for name in models:
        try:
            w = workloads.build(name, "openreg")
        except ImportError as exc:
            skipped.append(f"{name} ({exc})")
            continue
        for fn in (w.train, w.infer):
            fn().item()  # warm-up: caches, first-touch memory
            _C._reset_route_timings()  # only steady-state calls count ...
            for _ in range(steps):
                out = fn()
            out.item()
            timings = _C._route_timings()  # ... accumulated per model below
            _child.acc.extend(timings)
    _C._set_route_timing(False)
    with open(out_path, "w") as f:
        json.dump({"engine": engine, "timings": _child.acc, "skipped": skipped}, f)


_child.acc = []


def _measure(engine, models, steps):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "timings.json")
        env = {**os.environ, "OPENREG_ENGINE": engine, "OPENREG_ROUTES": "off"}
        argv = [sys.executable, "-m", "openreg", "tune", "--child", engine, "--json", path,
                "--steps", str(steps), "--models", ",".join(models)]
        proc = subprocess.run(argv, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"openreg tune: measuring engine {engine} failed (exit {proc.returncode})")
        with open(path) as f:
            return json.load(f)


# Ops whose calls must reach one engine: the forward's workspace is that engine's own
# record, which only its backward reads (core sends an LSTM layer down the step path
# when the two would be routed apart). They are chosen together, on their summed time.
PAIRED_OPS = (("aten::mkldnn_rnn_layer", "aten::mkldnn_rnn_layer_backward"),)


def _prefer(per_engine, order):
    """The engine to try first in one size class, "" for the chain's own first choice."""
    default = min(per_engine, key=order.index)
    best = min(per_engine, key=per_engine.get)
    return best if best != default and per_engine[best] < (1.0 - MARGIN) * per_engine[default] else ""


def choose(measured, order):
    """measured: {key: {size_class: {engine: mean_ns}}}; order: the chain's engine
    order. -> {key: [engine to try first per size class, "" for the chain's order]}
    for the keys where some class leaves the chain's first choice."""
    from . import _C

    classes = len(_C._size_class_bounds()) + 1
    paired = {}  # key -> the other key of its pair
    for first, second in PAIRED_OPS:
        for key in measured:
            op, dtype = key.split("|")
            other = {first: second, second: first}.get(op)
            if other is not None:
                paired[key] = f"{other}|{dtype}"
    routes = {}
    for key, per_class in measured.items():
        prefer = [""] * classes
        for cls, per_engine in per_class.items():
            partner = measured.get(paired.get(key), {}).get(cls)
            if key in paired:  # both ops' time on the engines that served both, or no preference
                per_engine = {e: t + partner[e] for e, t in per_engine.items() if partner and e in partner}
            if len(per_engine) >= 2:
                prefer[int(cls)] = _prefer(per_engine, order)
        if any(prefer):
            routes[key] = prefer
    return routes


def tune(models=None, steps=3, out=None, log=print):
    """Measures every built engine on the workloads and writes the table; returns it."""
    import torch

    from . import _C, workloads

    found = {f["name"]: f["path"] for f in _C._engines_found()}
    engines = [e for e in ENGINE_ORDER if e in found] + ([REFERENCE] if REFERENCE in found else [])
    if len(engines) < 2:
        raise RuntimeError(f"openreg tune: needs two engines or more to choose between; found {sorted(found)}")
    models = models or workloads.available()
    measured, skipped = {}, set()
    for engine in engines:
        log(f"measuring {engine} on {len(models)} workloads ({steps} steps of each, train and inference) ...")
        result = _measure(engine, models, steps)
        skipped.update(result["skipped"])
        for t in result["timings"]:
            key = f"{t['op']}|{t['dtype']}"
            cell = measured.setdefault(key, {}).setdefault(str(t["size_class"]), {})
            ns, calls = cell.get(t["engine"], (0, 0))
            cell[t["engine"]] = (ns + t["ns"], calls + t["calls"])
    means = {key: {cls: {e: ns / calls for e, (ns, calls) in per_engine.items()}
                   for cls, per_engine in per_class.items()}
             for key, per_class in measured.items()}
    routes = choose(means, engines)
    table = {
        "version": TABLE_VERSION,
        "made": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": _cpu(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "engines": [_fingerprint(e, found[e]) for e in engines],
        "chain": engines,
        "size_class_bounds": _C._size_class_bounds(),
        "models": [m for m in models if not any(s.startswith(m + " ") for s in skipped)],
        "routes": routes,
        "measured_us": {key: {cls: {e: round(v / 1e3, 3) for e, v in per_engine.items()}
                              for cls, per_engine in per_class.items()}
                        for key, per_class in means.items()},
    }
    path = out or table_path()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(table, f, indent=1, sort_keys=True)
    compared = sum(1 for per_class in means.values() for per_engine in per_class.values() if len(per_engine) > 1)
    moved = sum(1 for prefer in routes.values() for e in prefer if e)
    log(f"{compared} (op, dtype, size class) measured on several engines; {moved} routed to another engine "
        f"than the chain's first choice")
    for key in sorted(routes):
        classes = ", ".join(f"class {c}: {e}" for c, e in enumerate(routes[key]) if e)
        log(f"  {key}: {classes}")
    if skipped:
        log("skipped: " + "; ".join(sorted(skipped)))
    log(f"wrote {path}; the default chain ({' -> '.join(engines)}) follows it from the next process on")
    return table


def main(argv):
    import argparse

    from . import workloads

    p = argparse.ArgumentParser(prog="python -m openreg tune", description=__doc__.splitlines()[0])
    p.add_argument("--models", default=None,
                   help="comma-separated workloads (default: every one available): " + ", ".join(workloads.MODELS))
    p.add_argument("--steps", type=int, default=3, help="measured steps of each workload and mode (default 3)")
    p.add_argument("--output", default=None, help="where to write the table (default: " + table_path() + ")")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--json", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    models = [m.strip() for m in args.models.split(",")] if args.models else None
    unknown = [m for m in models or [] if m not in workloads.MODELS]
    if unknown:
        p.error(f"unknown workload(s): {', '.join(unknown)} (known: {', '.join(workloads.MODELS)})")
    if args.steps < 1:
        p.error("--steps must be >= 1")
    if args.child:
        _child(args.child, models, args.steps, args.json)
        return 0
    try:
        tune(models, args.steps, args.output)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0
