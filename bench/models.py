"""Real-model benchmark: one training step and one inference pass of each model
of bench/model_zoo.py on the openreg device against native torch CPU, engine by
engine, with 1 and 2 threads.

    python bench/models.py                              # every built in-tree engine, every model
    python bench/models.py --engine onednn --models GPT-2,BERT --threads 1
    python bench/models.py --json docs/bench.json --markdown docs/bench.md --chart docs/bench.png
    python bench/models.py --quick                      # a smoke run: checks the script runs

ratio = openreg time / torch CPU time: above 1.0x the device is SLOWER (as in
bench/overhead.py). Each side runs in child processes of its own (this script
with --child): torch CPU in processes that never use the device, each engine
(the engine is chosen when the device initialises) in processes of its own,
--passes of each, interleaved, so that a slow spell of this shared machine
does not land on one side; the order rotates by one side each pass
(pass_order; why: docs/design.md, "Bench method"). In a child, for each
thread count, each model is built from the same seed and timed in rounds after
warm-up steps; a side's step time is the median round over all its processes.
A ratio pairs each pass's engine process with that pass's torch CPU process (the
two ran at most minutes apart) and takes the median over passes of their median
rounds' quotient: this machine's speed drifts by up to 2x between passes, and a
quotient of medians pooled over all passes let that drift decide rows (GPT-2
inference at 2 threads: 1.14x pooled, passes 0.66-0.95x). A round is --steps calls
of the step, ended by reading the last result (``.item()``), so the figures
stay right if ops become asynchronous.

Why torch CPU does not share the engines' processes: at 2 threads on a 2-CPU
machine, torch CPU's LSTM training step took 6.7-9.7 ms in a process of its own
and 22-31 ms once the device had run in the process. The cause was libgomp
spinning only ~100 iterations once a process holds more OpenMP team threads than
CPUs (the worker's team beside the Python thread's); openreg now releases an idle
team (docs/design.md, "The host's threads"), which brought that step to 8.9 ms
against 7.0 alone, but a process of its own still leaves nothing to chance.

This is a benchmark, not a test: it asserts nothing about the timings. Issue
12's targets are printed beside the figures; --check exits 1 when one is missed.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from machine import cpu_description, describe  # noqa: E402
from options import step_counts, thread_counts  # noqa: E402

IN_TREE_ENGINES = ("onednn", "eigen", "aten_ref")
# The default chain following this machine's tuned routing table (python -m openreg tune).
TUNED = "tuned"
# The label of torch CPU's own processes.
CPU = "cpu"
MODES = ("train", "infer")

# Issue 12's targets: step time device/CPU, at most, on every model, mode and thread count.
TARGETS = {"onednn": 0.9, "eigen": 1.2, "aten_ref": 1.3}
MODEL_TARGETS = {("onednn", "digits CNN", "train"): 0.8}


def target_for(engine, model, mode):
    return MODEL_TARGETS.get((engine, model, mode), TARGETS.get(engine))


# ------------------------------------------------------------------ child: measure

def measure(fn, rounds, steps, warmup):
    """Seconds per step of each round of `fn` (a round: `steps` calls, then .item())."""
    for _ in range(warmup):
        fn()
    fn().item()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(steps):
            out = fn()
        out.item()
        times.append((time.perf_counter() - start) / steps)
    return times


def child(args):
    """One process's rounds: torch CPU's (--label cpu; the device is never used) or one
    engine's (the chain OPENREG_ENGINE or the tuned default chain)."""
    import torch
    import model_zoo

    on_cpu = args.label == CPU
    if on_cpu:
        out = {"engine": CPU, "threads": {}}
    else:
        import openreg
        torch.ones(1, device="openreg")  # loads the chain
        info = openreg.info()
        engine = info["chain"][0]
        out = {"engine": args.label or engine, "chain": info["chain"], "tuned_routes": info.get("tuned_routes"),
               "version": next((e["version"] for e in info["engines"] if e["name"] == engine), "?"),
               "threads": {}}
    for threads in args.threads:
        torch.set_num_threads(threads)
        per_model = {}
        for name in args.models:
            w = model_zoo.build(name, "cpu" if on_cpu else "openreg")
            per_model[name] = {}
            for mode in args.modes:
                if on_cpu:
                    per_model[name][mode] = {"rounds": measure(getattr(w, mode), args.rounds, args.steps, args.warmup)}
                    continue
                openreg.reset_stats()
                per_model[name][mode] = {"rounds": measure(getattr(w, mode), args.rounds, args.steps, args.warmup)}
                served = openreg.stats()
                # Ops served by a later engine of the chain (for the tuned chain: by aten_ref).
                later = {"aten_ref", "host_ref"} if args.label == TUNED else set(info["chain"][1:]) | {"host_ref"}
                per_model[name][mode]["fallback_ops"] = sorted(
                    op for op, counts in served.items() if any(e in later for e in counts))
            del w
        out["threads"][str(threads)] = per_model
    with open(args.child, "w") as f:
        json.dump(out, f)
    return 0


# ------------------------------------------------------------------ parent: report

def fail(message):
    print(f"models.py: {message}", file=sys.stderr)
    sys.exit(2)


def engines_to_run(arg):
    """The --engine values, or every built in-tree engine and, when this machine has
    a tuned routing table (python -m openreg tune), the tuned default chain."""
    import openreg
    from openreg import tuning
    built = [e["name"] for e in openreg.engines_available()]
    if arg:
        wanted = [e.strip() for e in arg.split(",") if e.strip()]
        unknown = [e for e in wanted if os.sep not in e and e not in built and e != TUNED]
        if unknown:
            fail(f"engine(s) not built: {', '.join(unknown)} (built: {', '.join(built)}; or '{TUNED}')")
        if TUNED in wanted and not os.path.exists(tuning.table_path()):
            fail(f"no tuned routing table at {tuning.table_path()}: run `python -m openreg tune` first")
        return wanted
    engines = [e for e in IN_TREE_ENGINES if e in built]
    if not os.path.exists(tuning.table_path()):
        return engines
    if tuning.ignored_table():  # stale: `tuned` would only be the plain default chain
        print(f"models.py: no '{TUNED}' column: {tuning.ignored_table()[1]}; run `python -m openreg tune` again",
              file=sys.stderr)
        return engines
    return engines + [TUNED]


def run_child(engine, args):
    """engine: an engine, TUNED, or CPU (torch CPU's rounds, in a process that never uses the device)."""
    from openreg import tuning
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "figures.json")
        argv = [sys.executable, os.path.abspath(__file__), "--child", path,
                "--threads", ",".join(map(str, args.threads)), "--rounds", str(args.rounds),
                "--steps", str(args.steps), "--warmup", str(args.warmup),
                "--models", ",".join(args.models), "--modes", ",".join(args.modes)]
        if engine == TUNED:  # the default chain with this machine's table
            env = {k: v for k, v in os.environ.items() if k != "OPENREG_ENGINE"}
            env["OPENREG_ROUTES"] = tuning.table_path()
            argv += ["--label", TUNED]
        elif engine == CPU:
            env = dict(os.environ)
            argv += ["--label", CPU]
        else:
            env = {**os.environ, "OPENREG_ENGINE": engine, "OPENREG_ROUTES": "off"}
        proc = subprocess.run(argv, env=env)
        if proc.returncode != 0:
            fail(f"the run on {'torch CPU' if engine == CPU else f'engine {engine!r}'} failed (exit {proc.returncode})")
        with open(path) as f:
            out = json.load(f)
        if engine == TUNED and not out.get("tuned_routes"):
            fail(f"the tuned routing table {tuning.table_path()} was not followed (made for other engine builds?): "
                 "run `python -m openreg tune` again")
        return out


def pass_order(sides, k):
    """The order of the sides' processes in pass k: rotated by k, so that every side
    holds every position once in len(sides) passes."""
    k %= len(sides)
    return sides[k:] + sides[:k]


def merge(passes):
    """One side's passes (child processes) as one result: every round of every pass."""
    out = passes[0]
    for extra in passes[1:]:
        for t, per_model in extra["threads"].items():
            for name, per_mode in per_model.items():
                for mode, fig in per_mode.items():
                    into = out["threads"][t][name][mode]
                    into["rounds"] += fig["rounds"]
                    if "fallback_ops" in fig:
                        into["fallback_ops"] = sorted(set(into["fallback_ops"]) | set(fig["fallback_ops"]))
    return out


def pass_ratios(dev_rounds, cpu_rounds, passes):
    """Per pass: the engine's median round / torch CPU's median round in that pass.
    Each side's rounds are its passes' rounds, pass after pass."""
    if len(dev_rounds) != len(cpu_rounds) or len(dev_rounds) % passes:
        raise ValueError(f"{len(dev_rounds)} and {len(cpu_rounds)} rounds do not split into {passes} passes")
    n = len(dev_rounds) // passes
    return [statistics.median(dev_rounds[k * n:(k + 1) * n]) / statistics.median(cpu_rounds[k * n:(k + 1) * n])
            for k in range(passes)]



def summarise(cpu, results, passes):
    """Step times: the median round of each side over all its processes (torch CPU's is
    one figure per row: model, mode, thread count); ratios: paired pass by pass."""
    for t, per_model in results[0]["threads"].items():
        for name, per_mode in per_model.items():
            for mode in per_mode:
                cpu_rounds = cpu["threads"][t][name][mode]["rounds"]
                cpu_ms = statistics.median(cpu_rounds) * 1e3
                for r in results:
                    fig = r["threads"][t][name][mode]
                    fig["cpu_ms"] = cpu_ms
                    fig["dev_ms"] = statistics.median(fig["rounds"]) * 1e3
                    fig["pass_ratios"] = pass_ratios(fig["rounds"], cpu_rounds, passes)
                    fig["ratio"] = statistics.median(fig["pass_ratios"])  # pairs each pass's processes


def geomean(values):
    values = list(values)
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else float("nan")


def threads_label(t):
    return f"{t} thread" + ("" if str(t) == "1" else "s")


def report_lines(results, args, machine):
    """The markdown report (also printed) and the list of missed targets."""
    import torch
    lines = ["# bench/models.py: real models, openreg device vs torch CPU", "",
             describe(machine) + "  ",
             f"torch {torch.__version__}; {args.rounds} rounds of {args.steps} steps in each of {args.passes} "
             "processes per side (torch CPU's processes never use the device; all sides' processes interleaved, "
             "the order rotated each pass); "
             "step times: the median round over a side's processes; ratios: the median over passes of "
             "that pass's engine/CPU quotient of median rounds  "]
    for r in results:
        lines.append(f"engine {r['engine']} {r['version']}: chain {' -> '.join(r['chain'])}  ")
    lines.append("ratio = openreg step time / torch CPU step time: below 1.0x the device is faster. "
                 "Train: forward, backward and AdamW; infer: forward under no_grad, eval mode. "
                 "`*`: some ops of the step were served by a later engine of the chain. "
                 "A ratio pairs each pass's processes, so it need not equal the quotient of the ms columns.")
    lines.append("")
    import model_zoo
    for name in args.models:
        lines.append(f"- {name}: {model_zoo.DESCRIPTIONS[name]}")
    missed = []
    for t in map(str, args.threads):
        lines += ["", f"## {threads_label(t)}", ""]
        header = ["model", "mode", "torch CPU ms"] + [f"{r['engine']} ms (ratio)" for r in results]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        for name in args.models:
            for mode in args.modes:
                figs = [r["threads"][t][name][mode] for r in results]
                cells = [name, mode, f"{figs[0]['cpu_ms']:.2f}"]
                best_single = min((f["ratio"] for r, f in zip(results, figs) if r["engine"] != TUNED), default=None)
                for r, fig in zip(results, figs):
                    # The tuned chain's target: at least as fast as the best single engine.
                    target = best_single if r["engine"] == TUNED else target_for(r["engine"], name, mode)
                    ok = target is None or fig["ratio"] <= target
                    if not ok:
                        missed.append(f"{r['engine']} {name} {mode} ({threads_label(t)}): "
                                      f"{fig['ratio']:.2f}x > {target:.2f}x")
                    mark = " *" if fig["fallback_ops"] else ""
                    cells.append(f"{fig['dev_ms']:.2f} ({fig['ratio']:.2f}x{'' if ok else ' !'}){mark}")
                lines.append("| " + " | ".join(cells) + " |")
        cells = ["geomean", "", ""]
        for r in results:
            cells.append(f"{geomean(m[mode]['ratio'] for m in r['threads'][t].values() for mode in args.modes):.2f}x")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Targets (issue 12, at most): " + ", ".join(f"{e} {v}x" for e, v in TARGETS.items())
                 + f"; digits CNN train on onednn 0.8x; {TUNED}: the best single engine's ratio. "
                 "`!` marks a missed target.")
    for r in results:
        fb = {}
        for per_model in r["threads"].values():
            for name, per_mode in per_model.items():
                for fig in per_mode.values():
                    fb.setdefault(name, set()).update(fig["fallback_ops"])
        fb = {k: v for k, v in fb.items() if v}
        if fb:
            lines.append("")
            lines.append(f"Ops served by a later engine of the chain on {r['engine']}:")
            for name, ops in fb.items():
                lines.append(f"- {name}: {', '.join(sorted(ops))}")
    return lines, missed


def draw_chart(results, args, machine, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(name, mode) for name in args.models for mode in args.modes]
    threads = list(map(str, args.threads))
    fig, axes = plt.subplots(1, len(threads), figsize=(6.5 * len(threads), 0.38 * len(rows) + 1.8),
                             sharey=True, squeeze=False)
    height = 0.8 / max(1, len(results))
    for ax, t in zip(axes[0], threads):
        for k, r in enumerate(results):
            ys = [i + (k - (len(results) - 1) / 2) * height for i in range(len(rows))]
            xs = [r["threads"][t][name][mode]["ratio"] for name, mode in rows]
            ax.barh(ys, xs, height=height, label=r["engine"])
        ax.axvline(1.0, color="black", linewidth=1)
        ax.set_title(f"{threads_label(t)}")
        ax.set_xlabel("step time / torch CPU (lower is faster)")
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([f"{name} {mode}" for name, mode in rows])
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].legend(loc="lower right")
    feats = ", ".join(f for f, v in machine["features"].items() if v) or "none of " + ", ".join(machine["features"])
    fig.suptitle(f"openreg vs torch CPU, real models: {machine['model']}, {machine['logical_cpus']} CPUs ({feats})",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def parse_args(argv=None):
    import model_zoo
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", default=None,
                   help="engine name or library path (comma-separated for several); default: every built "
                        "in-tree engine (" + ", ".join(IN_TREE_ENGINES) + ") and, if this machine has a "
                        "tuned routing table, '" + TUNED + "': the default chain following it")
    p.add_argument("--models", default=None,
                   help="comma-separated model names (default: all): " + ", ".join(model_zoo.MODELS))
    p.add_argument("--modes", default=",".join(MODES), help="train, infer or both (default)")
    p.add_argument("--threads", default="1,2", help="comma-separated torch.set_num_threads values (default 1,2)")
    p.add_argument("--rounds", type=int, default=None, help="alternating rounds per side (default 5; 1 with --quick)")
    p.add_argument("--steps", type=int, default=None, help="steps per round (default 3; 1 with --quick)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps per side first (default 3; 1 with --quick)")
    p.add_argument("--passes", type=int, default=None,
                   help="processes per engine, interleaved across engines, their rounds pooled (default 2; "
                        "1 with --quick): the machine's slow spells spread over every engine")
    p.add_argument("--quick", action="store_true",
                   help="one round of one step, the digits CNN only unless --models: checks the script runs")
    p.add_argument("--json", default=None, metavar="PATH", help="write every round's figures here")
    p.add_argument("--markdown", default=None, metavar="PATH", help="write the report as markdown here")
    p.add_argument("--chart", default=None, metavar="PATH", help="draw the ratios here (PNG, matplotlib)")
    p.add_argument("--check", action="store_true", help="exit 1 if one of issue 12's targets is missed")
    p.add_argument("--child", default=None, metavar="PATH", help=argparse.SUPPRESS)
    p.add_argument("--label", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    default_models = "digits CNN" if args.quick else ",".join(model_zoo.MODELS)
    args.models = [m.strip() for m in (args.models or default_models).split(",") if m.strip()]
    unknown = [m for m in args.models if m not in model_zoo.MODELS]
    if unknown:
        p.error(f"unknown model(s): {', '.join(unknown)} (known: {', '.join(model_zoo.MODELS)})")
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not args.modes or any(m not in MODES for m in args.modes):
        p.error(f"--modes: expected some of {', '.join(MODES)}")
    args.threads = thread_counts(p, args.threads)
    step_counts(p, args, rounds=(1, 5), steps=(1, 3), warmup=(1, 3))
    if args.passes is None:
        args.passes = 1 if args.quick else 2
    if args.passes < 1:
        p.error("--passes must be >= 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        return child(args)
    import torch
    machine = {**cpu_description(), "default_threads": torch.get_num_threads()}
    engines = engines_to_run(args.engine)
    if not engines:
        fail("no engine built")
    sides = [CPU] + engines
    passes = {side: [] for side in sides}
    for k in range(args.passes):  # torch CPU's and the engines' processes interleaved
        for side in pass_order(sides, k):
            passes[side].append(run_child(side, args))
    cpu = merge(passes[CPU])
    results = [merge(passes[engine]) for engine in engines]
    summarise(cpu, results, args.passes)
    lines, missed = report_lines(results, args, machine)
    print("\n".join(lines))
    if missed:
        print("\ntargets missed:\n" + "\n".join(f"- {m}" for m in missed))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "torch": torch.__version__, "threads": args.threads,
                       "rounds": args.rounds, "passes": args.passes, "steps": args.steps, "ratio": "device / torch CPU",
                       "targets": TARGETS, "missed": missed, "cpu": cpu, "results": results}, f, indent=1)
    if args.chart:
        draw_chart(results, args, machine, args.chart)
    return 1 if (args.check and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
