"""``python -m openreg tune``: each op to the fastest engine that serves it, on this machine.

Engines differ op by op: one has the faster GEMM, another the faster layer norm
or small elementwise loop, and which one wins depends on the CPU and on the
size of the call. ``tune`` runs the real-model workloads of :mod:`openreg.workloads`
(training steps and inference) in one process whose chain is every built engine,
with route timing on: the op path times every engine call by (op, dtype, size
class) (size class: elements of the tensor the call is routed by, cut at
``SIZE_CLASS_BOUNDS``) and by that tensor's shape. Each step pins one engine other
than the chain's first for one ``PIN_GROUPS``-th of the routes, in turn: every
engine runs every route, next to ops that mostly run on the chain's first engine as
they will once tuned (an op costs more among another engine's ops than among its
own), and all engines meet the same spells of this shared machine. A call's time is
the median over the steps of its mean in each step (a step that ran a call at several
times its cost, its thread descheduled, does not decide).
For every (op, dtype, size class) measured on more than one
engine, the fastest engine over the class's calls becomes the one the router
tries first, if it beats the chain's own first choice by more than ``MARGIN``;
otherwise the chain's order stays. A class mixes shapes that favour different
engines (a batch norm over [64, 16, 8, 8] and one over [8, 128, 8, 8] have the
same size), so a single shape whose fastest engine beats its class's choice by
``MARGIN`` and ``MIN_SAVING_US`` a call gets an entry of its own (at most
``MAX_SHAPES`` per op and dtype, the most time at stake first), which the router
checks before the class; so does a shape that the class's engine never ran in
the workloads while others did (it declined it: the class's choice, measured on
other shapes, says nothing about it). Engines
also rank differently with one thread and with several (a GEMM that wins on
two cores may lose on one), so all of this is measured and chosen twice: with
one thread and with torch's default thread count; a call made with one thread
(``torch.get_num_threads()``) follows the first set of choices, a call made
with more the second.

Last, the table is checked on whole steps (:mod:`openreg.tuning_check`): a call's
own time misses what it costs the calls around it (threads it leaves spinning), so
each workload runs with the table followed and set aside, alternating in a process
for each thread count, and a workload the table does not make at least
``tuning_check.MARGIN`` faster gets the routes it used back to the chain's order, at
that thread count; the check
runs ``tuning_check.PASSES`` times, each on the table the pass before left.

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
import statistics
import subprocess
import sys
import tempfile
import warnings

from . import tuning_check

TABLE_VERSION = 2
# The tuned chain's order, before aten_ref (the same as `auto`'s preference).
ENGINE_ORDER = ("onednn", "eigen")
REFERENCE = "aten_ref"
# An engine replaces the chain's first choice only when this much faster (noise guard).
MARGIN = 0.10
# A single shape leaves its class's choice only when it also saves this much a call ...
MIN_SAVING_US = 2.0
# ... and the router checks at most this many shapes per (op, dtype) before the class.
MAX_SHAPES = 16
# While measuring, each step moves one in this many routes off the chain's first engine.
PIN_GROUPS = 3

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
        choices = None if stale else _choices_by_thread_setting(table)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        stale = f"it cannot be read ({exc})"
    if stale:
        _state["ignored"] = (path, stale)
        if not engine_is_auto:  # the table would not be used anyway: no warning
            return
        warnings.warn(f"openreg: the tuned routing table {path} is ignored: {stale}. "
                      "Run `python -m openreg tune` again (or set OPENREG_ROUTES=off)", stacklevel=3)
        return
    _C._set_tuned_routes(table["chain"], choices)
    _state["table"] = path


def _choices_by_thread_setting(table):
    """The table's choices as the router takes them: [(routes, shapes) for calls made
    with one thread, the same for calls made with more]. A table measured at one
    thread count only (a one-core machine) serves both."""
    sets = sorted(table["choices"].items(), key=lambda kv: int(kv[0]))
    one = next((c for t, c in sets if int(t) == 1), sets[0][1])
    more = next((c for t, c in reversed(sets) if int(t) > 1), one)

    def arg(c):
        return c["routes"], {key: [(sizes, engine) for sizes, engine in per_shape]
                             for key, per_shape in c["shapes"].items()}
    return [arg(one), arg(more)]


def active_table():
    """The path of the tuned table the router follows, or None (loads the chain)."""
    from . import _C

    return _state["table"] if _state["table"] and _C._tuned_routes_in_use() else None


def ignored_table():
    """(path, reason) of a table found but ignored, or None."""
    return _state["ignored"]


# ------------------------------------------------------------------ measuring

def _child(engines, models, steps, threads, out_path):
    """In a process whose chain is `engines`: engine-call times of every (op, dtype,
    shape) over the workloads, at each thread count. Each step pins one engine other
    than the chain's first for one PIN_GROUPS-th of the routes (a route's group: a hash
    of its op and dtype), in turn, so that every engine runs every route while most of
    the ops around it run on the chain's first engine, as they will when tuned, and
    every engine meets the same spells of this machine and the same tensors."""
    import torch

    from . import _C, workloads

    torch.ones(1, device="openreg")
    pins = [(engine, group) for group in range(PIN_GROUPS) for engine in engines[1:]]
    skipped, acc = set(), []
    _C._set_route_timing(True)
    try:
        for t in threads:
            torch.set_num_threads(t)
            for name in models:
                try:
                    w = workloads.build(name, "openreg")
                except ImportError as exc:
                    skipped.add(f"{name} ({exc})")
                    continue
                for mode in ("train", "infer"):
                    fn = getattr(w, mode)
                    for engine in engines:  # warm-up: each engine's caches, first-touch memory
                        _C._pin_engine(engine)
                        fn().item()
                    per_step = {}  # (op, dtype, engine, sizes) -> [(ns a call, calls) per step]
                    for _ in range(steps):
                        for engine, group in pins:
                            _C._pin_engine(engine, group, PIN_GROUPS)
                            _C._reset_route_timings()
                            fn().item()
                            for x in _C._route_timings():
                                key = (x["op"], x["dtype"], x["engine"], tuple(x["sizes"]), x["size_class"])
                                per_step.setdefault(key, []).append((x["ns"] / x["calls"], x["calls"]))
                    acc.extend(_median_timings(per_step, t, f"{name} {mode}"))
    finally:
        _C._pin_engine("")
        _C._set_route_timing(False)
    with open(out_path, "w") as f:
        json.dump({"engines": engines, "timings": acc, "skipped": sorted(skipped)}, f)


def _median_timings(per_step, threads, workload):
    """One timing per (op, dtype, engine, shape) of `workload` (model and mode): the
    median over the steps of a call's mean time in each step, times all the steps' calls. On this kind of shared machine
    a step now and then runs a call at several times its usual cost (a thread
    descheduled mid-call); a mean over a handful of steps let one such step decide."""
    import statistics

    out = []
    for (op, dtype, engine, sizes, size_class), steps in per_step.items():
        calls = sum(c for _, c in steps)
        ns = statistics.median(per_call for per_call, _ in steps) * calls
        out.append({"op": op, "dtype": dtype, "engine": engine, "sizes": list(sizes), "size_class": size_class,
                    "calls": calls, "ns": ns, "threads": threads, "workload": workload})
    return out


def _measure(engines, models, steps, threads):
    """Runs _child in a process of its own: the chain is `engines`, the table off."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "timings.json")
        env = {**os.environ, "OPENREG_ENGINE": ",".join(engines), "OPENREG_ROUTES": "off"}
        argv = [sys.executable, "-m", "openreg", "tune", "--child", ",".join(engines), "--json", path,
                "--steps", str(steps), "--models", ",".join(models), "--threads", ",".join(map(str, threads))]
        proc = subprocess.run(argv, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"openreg tune: measuring the engines {', '.join(engines)} failed "
                               f"(exit {proc.returncode})")
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


def _pairs(keys):
    """key -> the other key of its PAIRED_OPS pair, for the keys given."""
    paired = {}
    for first, second in PAIRED_OPS:
        for key in keys:
            op, dtype = key.split("|")
            other = {first: second, second: first}.get(op)
            if other is not None:
                paired[key] = f"{other}|{dtype}"
    return paired


def choose(measured, order):
    """measured: {key: {size_class: {engine: mean_ns}}}; order: the chain's engine
    order. -> {key: [engine to try first per size class, "" for the chain's order]}
    for the keys where some class leaves the chain's first choice."""
    from . import _C

    classes = len(_C._size_class_bounds()) + 1
    paired = _pairs(measured)
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


def choose_shapes(per_shape, per_class, routes, order):
    """per_shape: {key: {shape: (size_class, {engine: mean_ns}, calls)}} (shape: sizes
    joined by "x"); per_class and routes: choose()'s input and output. -> {key: [[sizes,
    engine], ...]}, the shapes that leave their class's first choice:
    - the class's choice was not measured on the shape (the workloads' calls of that
      shape reached other engines only: a layer that runs as one call on the reference
      engine's chain and step by step on the others) but others were: the fastest of those;
    - the shape's fastest engine beats the class's choice by MARGIN and MIN_SAVING_US a call.
    At most MAX_SHAPES per key, the most time at stake first. PAIRED_OPS keep their
    class's choice."""
    paired = _pairs(per_shape)
    out = {}
    for key, shapes in per_shape.items():
        if key in paired:
            continue
        found = []
        for shape, (cls, per_engine, calls) in shapes.items():
            served = per_class[key][str(cls)]
            chosen = routes.get(key, [""] * (int(cls) + 1))[int(cls)] or min(served, key=order.index)
            best = min(per_engine, key=per_engine.get)
            if best == chosen:
                continue
            if chosen not in per_engine:
                found.append((per_engine[best] * calls, shape, best))
                continue
            saving = per_engine[chosen] - per_engine[best]
            if per_engine[best] < (1.0 - MARGIN) * per_engine[chosen] and saving >= MIN_SAVING_US * 1e3:
                found.append((saving * calls, shape, best))
        found.sort(reverse=True)
        if found:
            out[key] = [[[int(s) for s in shape.split("x") if s], best] for _, shape, best in found[:MAX_SHAPES]]
    return out


def _shape_name(sizes):
    return "x".join(str(s) for s in sizes)


def _choose_at(timings, engines):
    """The choices for one thread count from its engine-call timings."""
    measured, by_shape = {}, {}
    for t in timings:
        key = f"{t['op']}|{t['dtype']}"
        for cell in (measured.setdefault(key, {}).setdefault(str(t["size_class"]), {}),
                     by_shape.setdefault(key, {}).setdefault(_shape_name(t["sizes"]), (t["size_class"], {}))[1]):
            ns, calls = cell.get(t["engine"], (0, 0))
            cell[t["engine"]] = (ns + t["ns"], calls + t["calls"])

    def mean(per_engine):
        return {e: ns / calls for e, (ns, calls) in per_engine.items()}

    def us(per_engine):
        return {e: round(v / 1e3, 3) for e, v in per_engine.items()}

    means = {key: {cls: mean(per_engine) for cls, per_engine in per_class.items()}
             for key, per_class in measured.items()}
    shape_means = {key: {shape: (cls, mean(per_engine), max(calls for _, calls in per_engine.values()))
                         for shape, (cls, per_engine) in shapes.items()}
                   for key, shapes in by_shape.items()}
    routes = choose(means, engines)
    shapes = choose_shapes(shape_means, means, routes, engines)
    return {
        "routes": routes,
        "shapes": shapes,
        "measured_us": {key: {cls: us(per_engine) for cls, per_engine in per_class.items()}
                        for key, per_class in means.items()},
        # the single shapes routed on their own, as measured
        "measured_shapes_us": {key: {_shape_name(sizes): us(shape_means[key][_shape_name(sizes)][1])
                                     for sizes, _ in per_shape}
                               for key, per_shape in shapes.items()},
    }


def default_threads():
    """The thread counts tune measures: one, and torch's default when more."""
    import torch

    return sorted({1, torch.get_num_threads()})


def tune(models=None, steps=5, out=None, log=print, threads=None):
    """Measures every built engine on the workloads and writes the table; returns it."""
    import torch

    from . import _C, workloads

    found = {f["name"]: f["path"] for f in _C._engines_found()}
    engines = [e for e in ENGINE_ORDER if e in found] + ([REFERENCE] if REFERENCE in found else [])
    if len(engines) < 2:
        raise RuntimeError(f"openreg tune: needs two engines or more to choose between; found {sorted(found)}")
    models = models or workloads.available()
    threads = threads or default_threads()
    log(f"measuring {', '.join(engines)} on {len(models)} workloads ({steps} steps on each engine, train and "
        f"inference; threads {', '.join(map(str, threads))}) ...")
    result = _measure(engines, models, steps, threads)
    timings, skipped = result["timings"], set(result["skipped"])
    choices = {str(t): _choose_at([x for x in timings if x["threads"] == t], engines) for t in threads}
    table = {
        "version": TABLE_VERSION,
        "made": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": _cpu(),
        "torch": torch.__version__,
        "engines": [_fingerprint(e, found[e]) for e in engines],
        "chain": engines,
        "size_class_bounds": _C._size_class_bounds(),
        "models": [m for m in models if not any(s.startswith(m + " ") for s in skipped)],
        "choices": choices,  # thread count -> routes, shapes and what they were chosen from
    }
    path = out or table_path()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    _write(table, path)
    table["checked"] = []
    for n in range(1, tuning_check.PASSES + 1):
        table["checked"] += _check_on_whole_steps(table, path, timings, threads, log, n)
        _write(table, path)
    for t, c in choices.items():
        routes, shapes, means = c["routes"], c["shapes"], c["measured_us"]
        compared = sum(1 for per_class in means.values() for per_engine in per_class.values() if len(per_engine) > 1)
        moved = sum(1 for prefer in routes.values() for e in prefer if e)
        log(f"{t} thread(s): {compared} (op, dtype, size class) measured on several engines; {moved} routed to "
            f"another engine than the chain's first choice, and {sum(map(len, shapes.values()))} single shapes "
            "to another than their class's")
        for key in sorted(set(routes) | set(shapes)):
            picked = [f"class {k}: {e}" for k, e in enumerate(routes.get(key, [])) if e]
            picked += [f"{_shape_name(sizes)}: {e}" for sizes, e in shapes.get(key, [])]
            log(f"  {key}: {', '.join(picked)}")
    if skipped:
        log("skipped: " + "; ".join(sorted(skipped)))
    log(f"wrote {path}; the default chain ({' -> '.join(engines)}) follows it from the next process on")
    return table


def _write(table, path):
    with open(path, "w") as f:
        json.dump(table, f, indent=1, sort_keys=True)


def _check_on_whole_steps(table, path, timings, threads, log, n):
    """tuning_check's pass `n`: every workload's step with the table at `path` followed
    and set aside; a workload the table does not make tuning_check.MARGIN faster gets its
    routes at that thread count back to the chain's order (in table["choices"]). Returns
    what was measured."""
    log(f"checking the table on whole steps, pass {n} of {tuning_check.PASSES} (followed and set aside, "
        "alternating in a process for each thread count) ...")
    checked = tuning_check.measure(path, table["models"], threads)
    for c in checked:
        c["pass"] = n
        if tuning_check.keeps_routes(c["ratio"]):
            continue
        used = tuning_check.used_routes(timings, c["workload"], c["threads"])
        dropped = tuning_check.drop_routes(table["choices"][str(c["threads"])], used)
        c["dropped"] = dropped
        if not dropped:
            continue
        log(f"  {c['workload']}, {c['threads']} thread(s): {c['tuned_ms']:.2f} ms a step on the table against "
            f"{c['untuned_ms']:.2f} in the chain's order: its {len(dropped)} routes that left the chain's order "
            "go back to it")
    ratios = [c["ratio"] for c in checked]
    if ratios:
        log(f"  on the table before this pass: {min(ratios):.2f}x-{max(ratios):.2f}x of the chain's order's step "
            f"time (geomean {statistics.geometric_mean(ratios):.2f}x)")
    return checked


def main(argv):
    import argparse

    from . import workloads

    p = argparse.ArgumentParser(prog="python -m openreg tune", description=__doc__.splitlines()[0])
    p.add_argument("--models", default=None,
                   help="comma-separated workloads (default: every one available): " + ", ".join(workloads.MODELS))
    p.add_argument("--steps", type=int, default=5, help="measured steps of each workload and mode (default 5)")
    p.add_argument("--output", default=None, help="where to write the table (default: " + table_path() + ")")
    p.add_argument("--threads", default=None,
                   help="comma-separated thread counts to measure and choose for (default: 1 and torch's default, "
                        f"here {','.join(map(str, default_threads()))}); calls made with one thread follow the "
                        "choices for 1, calls made with more those for the largest count")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--check-child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--json", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    models = [m.strip() for m in args.models.split(",")] if args.models else None
    unknown = [m for m in models or [] if m not in workloads.MODELS]
    if unknown:
        p.error(f"unknown workload(s): {', '.join(unknown)} (known: {', '.join(workloads.MODELS)})")
    if args.steps < 1:
        p.error("--steps must be >= 1")
    try:
        threads = sorted({int(t) for t in args.threads.split(",")}) if args.threads else None
    except ValueError:
        p.error(f"--threads takes comma-separated whole numbers, got {args.threads!r}")
    if threads and threads[0] < 1:
        p.error("--threads: thread counts must be >= 1")
    if args.child:
        _child(args.child.split(","), models, args.steps, threads, args.json)
        return 0
    if args.check_child:
        tuning_check._child(models, threads, args.json)
        return 0
    try:
        tune(models, args.steps, args.output, threads=threads)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0
