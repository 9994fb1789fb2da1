"""Real-model benchmark: one training step and one inference pass of each model
of bench/model_zoo.py on the openreg device against native torch CPU, engine by
engine, with 1 and 2 threads.

    python bench/models.py                              # every built in-tree engine, every model
    python bench/models.py --engine onednn --models GPT-2,BERT --threads 1
    python bench/models.py --json docs/bench.json --markdown docs/bench.md --chart docs/bench.png
    python bench/models.py --quick                      # a smoke run: checks the script runs

ratio = openreg time / torch CPU time: above 1.0x the device is SLOWER (as in
bench/overhead.py). Each side has a process of its own (this script with
--serve), all alive together: torch CPU's never uses the device, and each
engine's (the engine is chosen when the device initialises) runs only that
engine or chain. For each thread count, model and mode every side builds the
model from the same seed and warms up; then the sides take turns, one round
each, the order rotated by one side each round (round_order), with a pause
before each round; that is one pass, and --passes repeats it with new processes.
A round is one untimed step (the caches warm again after the other sides'
turns), then --steps calls ended by reading the last result (``.item()``, so
the figures stay right if ops become asynchronous). A side's step time is its
median round; a ratio is the median over rounds of the engine's round / torch
CPU's round of the same turn, which ran seconds apart: this machine's speed
drifts by up to 2x within minutes (why: docs/design.md, "Bench method").

Why torch CPU does not share the engines' processes: at 2 threads on a 2-CPU
machine, torch CPU's LSTM training step took 6.7-9.7 ms in a process of its own
and 22-31 ms once the device had run in the process (docs/design.md, "Bench
method").

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
# The pause before each round: longer than an idle OpenMP thread of the side that ran
# before spins (GOMP_SPINCOUNT's default: 5-8 ms here; docs/design.md, "The host's threads").
SETTLE_SECONDS = 0.02


def target_for(engine, model, mode):
    return MODEL_TARGETS.get((engine, model, mode), TARGETS.get(engine))


# ------------------------------------------------------------------ side: measure

def timed_round(fn, steps):
    """Seconds per step of one round: one untimed step (the caches warm again after the
    other sides' rounds), then `steps` calls, ended by reading the last result."""
    fn().item()
    start = time.perf_counter()
    for _ in range(steps):
        out = fn()
    out.item()
    return (time.perf_counter() - start) / steps


def serve(args):
    """A side's process: torch CPU's (--label cpu; the device is never used) or one
    engine's (the chain OPENREG_ENGINE or the tuned default chain). It answers the
    parent's requests, a JSON line each way; the replies go to the stdout it started
    with, anything else printed (by Python or C++) to stderr."""
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    import torch
    import model_zoo

    on_cpu = args.label == CPU
    if on_cpu:
        hello = {"engine": CPU}
    else:
        import openreg
        torch.ones(1, device="openreg")  # loads the chain
        info = openreg.info()
        engine = info["chain"][0]
        hello = {"engine": args.label or engine, "chain": info["chain"], "tuned_routes": info.get("tuned_routes"),
                 "version": next((e["version"] for e in info["engines"] if e["name"] == engine), "?")}
        # Ops served by a later engine of the chain (for the tuned chain: by aten_ref).
        later = {"aten_ref", "host_ref"} if args.label == TUNED else set(info["chain"][1:]) | {"host_ref"}
    reply.write(json.dumps(hello) + "\n")
    built = None  # ((threads, model), workload)
    for line in sys.stdin:
        req = json.loads(line)
        key = (req["threads"], req["model"])
        if built is None or built[0] != key:
            built = None  # the previous model goes before the next is built
            torch.set_num_threads(req["threads"])
            built = (key, model_zoo.build(req["model"], "cpu" if on_cpu else "openreg"))
        fn = getattr(built[1], req["mode"])
        if "warmup" in req:
            for _ in range(req["warmup"]):
                fn()
            fn().item()
            reply.write("{}\n")
            continue
        if on_cpu:
            reply.write(json.dumps({"seconds": timed_round(fn, req["steps"])}) + "\n")
            continue
        openreg.reset_stats()
        seconds = timed_round(fn, req["steps"])
        served = openreg.stats()
        reply.write(json.dumps({"seconds": seconds, "fallback_ops": sorted(
            op for op, counts in served.items() if any(e in later for e in counts))}) + "\n")
    return 0


# ------------------------------------------------------------------ parent: run the sides

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


class Side:
    """One side's process (bench/models.py --serve): an engine, TUNED, or CPU (torch
    CPU's rounds, in a process that never uses the device)."""

    def __init__(self, name):
        from openreg import tuning
        self.name = name
        argv = [sys.executable, os.path.abspath(__file__), "--serve"]
        if name == TUNED:  # the default chain with this machine's table
            env = {k: v for k, v in os.environ.items() if k != "OPENREG_ENGINE"}
            env["OPENREG_ROUTES"] = tuning.table_path()
            argv += ["--label", TUNED]
        elif name == CPU:
            env = dict(os.environ)
            argv += ["--label", CPU]
        else:
            env = {**os.environ, "OPENREG_ENGINE": name, "OPENREG_ROUTES": "off"}
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.hello = self._reply()
        if name == TUNED and not self.hello.get("tuned_routes"):
            fail(f"the tuned routing table {tuning.table_path()} was not followed (made for other engine builds?): "
                 "run `python -m openreg tune` again")

    def _reply(self):
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            fail(f"the process of {'torch CPU' if self.name == CPU else f'engine {self.name!r}'} ended "
                 f"(exit {code}); its stderr is above")
        return json.loads(line)

    def ask(self, **request):
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def close(self):
        self.proc.stdin.close()
        if self.proc.wait() != 0:
            fail(f"the process of {self.name!r} exited with {self.proc.returncode}")


def round_order(sides, k):
    """The order of the sides' rounds in round k: rotated by k, so that every side
    holds every position once in len(sides) rounds."""
    k %= len(sides)
    return sides[k:] + sides[:k]


def run_pass(sides, args, first_round):
    """One process per side, alive together; for each thread count, model and mode each
    side warms up, then the sides take rounds in turn (round_order), each after a pause
    that lets the previous side's idle OpenMP threads stop spinning. Returns each side's
    figures: hello plus threads -> model -> mode -> rounds (and fallback_ops)."""
    procs = {name: Side(name) for name in sides}
    out = {name: {**p.hello, "threads": {}} for name, p in procs.items()}
    for threads in args.threads:
        for model in args.models:
            for mode in args.modes:
                where = {"threads": threads, "model": model, "mode": mode}
                figs = {}
                for name, p in procs.items():
                    p.ask(**where, warmup=args.warmup)
                    figs[name] = out[name]["threads"].setdefault(str(threads), {}).setdefault(model, {})[mode] = \
                        {"rounds": []} if name == CPU else {"rounds": [], "fallback_ops": []}
                for k in range(args.rounds):
                    for name in round_order(sides, first_round + k):
                        time.sleep(SETTLE_SECONDS)
                        r = procs[name].ask(**where, steps=args.steps)
                        figs[name]["rounds"].append(r["seconds"])
                        if "fallback_ops" in r:
                            figs[name]["fallback_ops"] = sorted(set(figs[name]["fallback_ops"]) | set(r["fallback_ops"]))
    for p in procs.values():
        p.close()
    return out


def merge(passes):
    """One side's passes (processes) as one result: every round of every pass, in order."""
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


def paired_ratio(dev_rounds, cpu_rounds):
    """The median over rounds of the engine's round / torch CPU's round of the same
    index (the two ran a few seconds apart at most): the machine's speed drifts by up to
    2x within minutes, and a quotient of medians let that drift decide rows."""
    if len(dev_rounds) != len(cpu_rounds):
        raise ValueError(f"{len(dev_rounds)} engine rounds against {len(cpu_rounds)} torch CPU rounds")
    return statistics.median(d / c for d, c in zip(dev_rounds, cpu_rounds))


def summarise(cpu, results):
    """Step times: the median round of each side over all its processes (torch CPU's is
    one figure per row: model, mode, thread count); ratios: paired round by round."""
    for t, per_model in results[0]["threads"].items():
        for name, per_mode in per_model.items():
            for mode in per_mode:
                cpu_rounds = cpu["threads"][t][name][mode]["rounds"]
                cpu_ms = statistics.median(cpu_rounds) * 1e3
                for r in results:
                    fig = r["threads"][t][name][mode]
                    fig["cpu_ms"] = cpu_ms
                    fig["dev_ms"] = statistics.median(fig["rounds"]) * 1e3
                    fig["ratio"] = paired_ratio(fig["rounds"], cpu_rounds)
                singles = [r for r in results if r["engine"] != TUNED]
                tuned = [r for r in results if r["engine"] == TUNED]
                if singles and tuned:
                    # The tuned chain's target, compared round by round with the best single engine.
                    best = min(singles, key=lambda r: r["threads"][t][name][mode]["ratio"])
                    fig = tuned[0]["threads"][t][name][mode]
                    fig["best_single"] = best["engine"]
                    fig["vs_best_single"] = paired_ratio(fig["rounds"], best["threads"][t][name][mode]["rounds"])


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
             f"torch {torch.__version__}; {args.passes} pass(es) of one process per side, alive together "
             "(torch CPU's never uses the device); in each, per row, the sides take "
             f"{args.rounds} rounds in turn, the order rotated each round; a round: one untimed step, then "
             f"{args.steps} timed; step times: a side's median round; ratios: the median over rounds of "
             "the engine's round / torch CPU's round of the same turn  "]
    for r in results:
        lines.append(f"engine {r['engine']} {r['version']}: chain {' -> '.join(r['chain'])}  ")
    lines.append("ratio = openreg step time / torch CPU step time: below 1.0x the device is faster. "
                 "Train: forward, backward and AdamW; infer: forward under no_grad, eval mode. "
                 "`*`: some ops of the step were served by a later engine of the chain. "
                 "A ratio pairs rounds run side by side, so it need not equal the quotient of the ms columns.")
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
                for r, fig in zip(results, figs):
                    mark = " *" if fig["fallback_ops"] else ""
                    if "vs_best_single" in fig:  # the tuned chain: at least as fast as the best single engine
                        ok = fig["vs_best_single"] <= 1.0
                        versus = f"; {fig['vs_best_single']:.2f} of {fig['best_single']}"
                        if not ok:
                            missed.append(f"{r['engine']} {name} {mode} ({threads_label(t)}): "
                                          f"{fig['vs_best_single']:.2f}x {fig['best_single']}'s step time")
                    else:
                        target = target_for(r["engine"], name, mode)
                        ok, versus = target is None or fig["ratio"] <= target, ""
                        if not ok:
                            missed.append(f"{r['engine']} {name} {mode} ({threads_label(t)}): "
                                          f"{fig['ratio']:.2f}x > {target:.2f}x")
                    cells.append(f"{fig['dev_ms']:.2f} ({fig['ratio']:.2f}x{versus}{'' if ok else ' !'}){mark}")
                lines.append("| " + " | ".join(cells) + " |")
        cells = ["geomean", "", ""]
        for r in results:
            cells.append(f"{geomean(m[mode]['ratio'] for m in r['threads'][t].values() for mode in args.modes):.2f}x")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Targets (issue 12, at most): " + ", ".join(f"{e} {v}x" for e, v in TARGETS.items())
                 + f"; digits CNN train on onednn 0.8x; {TUNED}: the best single engine's step time (its "
                 "'of <engine>' figure: the median over rounds of its round / that engine's round of the same "
                 "turn, at most 1.00). `!` marks a missed target.")
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
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].invert_yaxis()  # the first row on top; once: the panels share the y axis
    handles, labels = axes[0][0].get_legend_handles_labels()  # below the panels: not over a bar
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    feats = ", ".join(f for f, v in machine["features"].items() if v) or "none of " + ", ".join(machine["features"])
    fig.suptitle(f"openreg vs torch CPU, real models: {machine['model']}, {machine['logical_cpus']} CPUs ({feats})",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
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
    p.add_argument("--rounds", type=int, default=None,
                   help="rounds per side and pass, the sides taking turns (default 9; 1 with --quick)")
    p.add_argument("--steps", type=int, default=None, help="steps per round (default 3; 1 with --quick)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed steps per side before a row's rounds (default 3; 1 with --quick)")
    p.add_argument("--passes", type=int, default=None,
                   help="processes per side, one after the other, their rounds pooled (default 2; 1 with --quick): "
                        "a process's own luck (where its memory landed) spreads over several")
    p.add_argument("--quick", action="store_true",
                   help="one round of one step, the digits CNN only unless --models: checks the script runs")
    p.add_argument("--json", default=None, metavar="PATH", help="write every round's figures here")
    p.add_argument("--markdown", default=None, metavar="PATH", help="write the report as markdown here")
    p.add_argument("--chart", default=None, metavar="PATH", help="draw the ratios here (PNG, matplotlib)")
    p.add_argument("--check", action="store_true", help="exit 1 if one of issue 12's targets is missed")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
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
    step_counts(p, args, rounds=(1, 9), steps=(1, 3), warmup=(1, 3))
    if args.passes is None:
        args.passes = 1 if args.quick else 2
    if args.passes < 1:
        p.error("--passes must be >= 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.serve:
        return serve(args)
    import torch
    machine = {**cpu_description(), "default_threads": torch.get_num_threads()}
    engines = engines_to_run(args.engine)
    if not engines:
        fail("no engine built")
    sides = [CPU] + engines
    passes = [run_pass(sides, args, first_round=k * args.rounds) for k in range(args.passes)]
    cpu = merge([p[CPU] for p in passes])
    results = [merge([p[engine] for p in passes]) for engine in engines]
    summarise(cpu, results)
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
