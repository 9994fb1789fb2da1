"""Per-op overhead benchmark: the cost of one call of a small op on the openreg
device against the same call on native torch CPU, engine by engine.

    python bench/overhead.py                       # every built in-tree engine, 1 and 2 threads
    python bench/overhead.py --engine onednn --rounds 11 --json before.json
    python bench/overhead.py --quick --rounds 1    # a smoke run: checks the script runs

ratio = openreg time / torch CPU time: above 1.0x the device is SLOWER. This is
issue 11's direction, the inverse of bench/engines.py's.

The ops (OPS below) are small enough that their kernels take about as long as
the path around them, so the ratio shows what the device adds to each call.
The engine is chosen once, when the device initialises, so each engine runs in
a child process of its own (this script with --child). In it, for each thread
count (torch.set_num_threads), every op alternates torch CPU and device rounds
(the order flips each round; the ops take turns, round by round) and keeps the
median of each side. A round is a loop of N calls timed with
time.perf_counter_ns, N chosen so that the slower side's loop takes about
--round-ms; the device's loop ends with torch.openreg.synchronize(), so the
figures stay right if ops become asynchronous. The geometric mean of the
ratios is printed last.

This is a benchmark, not a test: it asserts nothing about the timings. Issue
11's targets are printed beside the figures; --check exits 1 when one is missed.
"""

import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

from machine import cpu_description, describe
from options import thread_counts

IN_TREE_ENGINES = ("onednn", "eigen", "aten_ref")

# Issue 11's targets, ratio device/CPU (at most), for every thread count measured.
GEOMEAN_TARGETS = {"onednn": 1.05, "aten_ref": 1.25}
OP_TARGETS = {("onednn", "add 16x16"): 1.15}


# ------------------------------------------------------------------------ ops

class Inputs:
    """Seeded random inputs made on the CPU, then moved to `device`: the torch CPU
    and the device builders of an op get the same values."""

    def __init__(self, device, seed):
        self.device = device
        self.gen = torch.Generator().manual_seed(seed)

    def randn(self, *shape):
        return torch.randn(*shape, generator=self.gen).to(self.device)

    def signs(self, *shape):
        # +-1: multiplying by it in place, call after call, keeps the values finite
        # and away from denormals (which would slow torch CPU and the device alike).
        return torch.randint(0, 2, shape, generator=self.gen).mul_(2).sub_(1).float().to(self.device)

    def randint(self, high, *shape):
        return torch.randint(0, high, shape, generator=self.gen).to(self.device)


OPS = []  # (name, the call with its shapes, builder(Inputs) -> fn), in table order


def op(name, call):
    def register(builder):
        OPS.append((name, call, builder))
        return builder
    return register


@op("add 16x16", "a + b; a, b: 16x16")
def _add(r):
    a, b = r.randn(16, 16), r.randn(16, 16)
    return lambda: a + b


@op("mul_ 64x64", "x.mul_(s); x, s: 64x64, s of +-1")
def _mul_(r):
    x, s = r.randn(64, 64), r.signs(64, 64)
    return lambda: x.mul_(s)


@op("relu 64x64", "torch.relu(x); x: 64x64")
def _relu(r):
    x = r.randn(64, 64)
    return lambda: torch.relu(x)


@op("sum 64x64", "x.sum(); x: 64x64")
def _sum(r):
    x = r.randn(64, 64)
    return lambda: x.sum()


@op("mm 64", "torch.mm(a, b); a, b: 64x64")
def _mm(r):
    a, b = r.randn(64, 64), r.randn(64, 64)
    return lambda: torch.mm(a, b)


@op("linear 32x64->128", "F.linear(x, w, b); x: 32x64, w: 128x64, b: 128")
def _linear(r):
    x, w, b = r.randn(32, 64), r.randn(128, 64), r.randn(128)
    return lambda: F.linear(x, w, b)


@op("softmax 32x128", "torch.softmax(x, -1); x: 32x128")
def _softmax(r):
    x = r.randn(32, 128)
    return lambda: torch.softmax(x, -1)


@op("layer_norm 32x128", "F.layer_norm(x, (128,), w, b); x: 32x128")
def _layer_norm(r):
    x, w, b = r.randn(32, 128), r.randn(128), r.randn(128)
    return lambda: F.layer_norm(x, (128,), w, b)


@op("gelu 32x128", "F.gelu(x); x: 32x128")
def _gelu(r):
    x = r.randn(32, 128)
    return lambda: F.gelu(x)


@op("embedding 64 of 1000x128", "F.embedding(i, w); i: 64 int64 in [0, 1000), w: 1000x128")
def _embedding(r):
    i, w = r.randint(1000, 64), r.randn(1000, 128)
    return lambda: F.embedding(i, w)


@op("index_select 32 of 256x64", "torch.index_select(x, 0, i); x: 256x64, i: 32 int64")
def _index_select(r):
    x, i = r.randn(256, 64), r.randint(256, 32)
    return lambda: torch.index_select(x, 0, i)


@op("cat 2 x 32x64", "torch.cat([a, b]); a, b: 32x64")
def _cat(r):
    a, b = r.randn(32, 64), r.randn(32, 64)
    return lambda: torch.cat([a, b])


@op("where 64x64", "torch.where(c, a, b); c: 64x64 bool, a, b: 64x64")
def _where(r):
    c, a, b = r.randn(64, 64) > 0, r.randn(64, 64), r.randn(64, 64)
    return lambda: torch.where(c, a, b)


@op("sdpa 2x4x128x32", "F.scaled_dot_product_attention(q, k, v); q, k, v: 2x4x128x32")
def _sdpa(r):
    q, k, v = r.randn(2, 4, 128, 32), r.randn(2, 4, 128, 32), r.randn(2, 4, 128, 32)
    return lambda: F.scaled_dot_product_attention(q, k, v)


# --------------------------------------------------------- child: measuring

def loop_ns(fn, n, sync):
    """Nanoseconds per call of a loop of n calls, ended by sync()."""
    start = time.perf_counter_ns()
    for _ in range(n):
        fn()
    sync()
    return (time.perf_counter_ns() - start) / n


def calls_per_round(cpu, dev, round_ns):
    """N such that a loop of N calls on the slower side takes about round_ns.
    Each side's best of three loops: one stalled loop (a descheduled thread on a
    busy machine) must not make N tiny."""
    n = 1
    while True:
        per_call = max(min(loop_ns(cpu, n, _no_sync) for _ in range(3)),
                       min(loop_ns(dev, n, torch.openreg.synchronize) for _ in range(3)))
        if per_call * n >= round_ns / 10:
            return max(1, round(round_ns / per_call))
        n *= 2


def _no_sync():
    pass


def served_by(fn):
    """{aten op: {engine: calls}} for one call of fn on the device."""
    import openreg
    openreg.reset_stats()
    fn()
    torch.openreg.synchronize()
    return openreg.stats()


def prepare_op(builder, seed, round_ns, warmup):
    """The op's torch CPU and device callables, checked alike, warm, and its N."""
    cpu = builder(Inputs("cpu", seed))
    dev = builder(Inputs("openreg", seed))
    # Same inputs, same answer: guards against timing something else than meant.
    torch.testing.assert_close(dev().cpu(), cpu(), rtol=1e-4, atol=1e-4)
    for _ in range(warmup):  # caches (primitives, Meta sizing, allocator) filled on both sides
        cpu()
        dev()
    torch.openreg.synchronize()
    return {"cpu": cpu, "dev": dev, "calls_per_round": calls_per_round(cpu, dev, round_ns)}


def measure_ops(rounds, round_ns, warmup):
    """Raw figures of every op at the current thread count. Round r of every op
    runs before round r + 1 of any, so a burst of load on the machine lands on
    one round of many ops rather than on every round of one op."""
    prepared = {name: prepare_op(builder, seed, round_ns, warmup) for seed, (name, _, builder) in enumerate(OPS)}
    figures = {name: {"calls_per_round": p["calls_per_round"], "cpu_ns": [], "dev_ns": []}
               for name, p in prepared.items()}
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds):
            for name, p in prepared.items():
                sides = [(p["cpu"], _no_sync, "cpu_ns"), (p["dev"], torch.openreg.synchronize, "dev_ns")]
                for fn, sync, key in (sides if r % 2 == 0 else sides[::-1]):
                    figures[name][key].append(loop_ns(fn, p["calls_per_round"], sync))
    finally:
        gc.enable()
    for name, p in prepared.items():
        figures[name]["served_by"] = served_by(p["dev"])
    return figures


def child(args):
    import openreg
    torch.ones(1, device="openreg")  # initialises the device: the engine chain is fixed from here
    info = openreg.info()
    if not hasattr(torch.openreg, "synchronize"):
        raise RuntimeError("torch.openreg.synchronize is missing: the device loops could not be ended by it")
    engine = info["chain"][0]
    out = {"engine": engine, "requested": os.environ.get("OPENREG_ENGINE"), "chain": info["chain"],
           "version": next((e["version"] for e in info["engines"] if e["name"] == engine), "?"),
           "threads": {}}
    for threads in args.threads:
        torch.set_num_threads(threads)
        out["threads"][str(threads)] = measure_ops(args.rounds, args.round_ms * 1e6, args.warmup)
    with open(args.child, "w") as f:
        json.dump(out, f)
    return 0


# ----------------------------------------------------------- parent: report

def fail(message):
    """Exit 2 (1 means a missed target under --check)."""
    print(f"overhead.py: {message}", file=sys.stderr)
    sys.exit(2)


def engines_to_run(arg):
    """The --engine values (names or library paths), or every built in-tree engine."""
    import openreg
    built = [e["name"] for e in openreg.engines_available()]
    if arg:
        wanted = [e.strip() for e in arg.split(",") if e.strip()]
        unknown = [e for e in wanted if os.sep not in e and e not in built]
        if unknown:
            fail(f"engine(s) not built: {', '.join(unknown)} (built: {', '.join(built)})")
        return wanted
    return [e for e in IN_TREE_ENGINES if e in built]


def run_child(engine, args):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "figures.json")
        argv = [sys.executable, os.path.abspath(__file__), "--child", path,
                "--threads", ",".join(map(str, args.threads)), "--rounds", str(args.rounds),
                "--round-ms", str(args.round_ms), "--warmup", str(args.warmup)]
        proc = subprocess.run(argv, env={**os.environ, "OPENREG_ENGINE": engine})
        if proc.returncode != 0:
            fail(f"the run on engine {engine!r} failed (exit {proc.returncode})")
        with open(path) as f:
            return json.load(f)


def summarise(result):
    """Adds medians, ratios and geomeans to a child's raw figures."""
    for per_op in result["threads"].values():
        for fig in per_op.values():
            fig["cpu_us"] = statistics.median(fig["cpu_ns"]) / 1e3
            fig["dev_us"] = statistics.median(fig["dev_ns"]) / 1e3
            fig["ratio"] = fig["dev_us"] / fig["cpu_us"]
            fig["fallback"] = sorted({e for counts in fig["served_by"].values() for e in counts}
                                     - {result["engine"]})
    result["geomean"] = {
        t: math.exp(statistics.fmean(math.log(fig["ratio"]) for fig in per_op.values()))
        for t, per_op in result["threads"].items()}


def iqr_share(values):
    """Interquartile range / median: how much the middle half of the rounds
    disagree. A lone stalled round does not move it; a noisy stretch does."""
    if len(values) < 2:
        return 0.0
    q1, q2, q3 = statistics.quantiles(values, n=4)
    return (q3 - q1) / q2


def threads_label(t):
    return f"{t} thread" + ("" if str(t) == "1" else "s")


def target_cell(value, target):
    if target is None:
        return ""
    return f", target <= {target:.2f}x: {'ok' if value <= target else 'MISSED'}"


def print_report(results, args, machine):
    print("# bench/overhead.py: per-op cost of small ops, openreg device vs torch CPU")
    print(describe(machine))
    print(f"torch {torch.__version__} (CPU capability {torch.backends.cpu.get_cpu_capability()}), "
          f"{machine['default_threads']} threads by default; measured with "
          + " and ".join(f"torch.set_num_threads({t})" for t in args.threads))
    for r in results:
        print(f"engine {r['engine']} {r['version']}: chain {' -> '.join(r['chain'])}")
    print(f"{args.rounds} alternating torch CPU / device rounds per op, each a loop of N calls "
          f"(~{args.round_ms:g} ms on the slower side), median of each side; one process per engine")
    print("ratio = openreg time / torch CPU time: above 1.0x the device is SLOWER (issue 11's direction)")
    print("torch CPU column: measured in the first engine's process; each ratio is against torch CPU "
          "measured in its own process")
    print()
    print("ops:")
    for name, call, _ in OPS:
        print(f"- {name}: {call}")
    missed, noisy = [], set()
    for t in map(str, args.threads):
        print()
        print(f"## {threads_label(t)}")
        print()
        header = ["op", "torch CPU us", "torch CPU IQR"] + [f"{r['engine']} us (ratio)" for r in results]
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for name, _, _ in OPS:
            figs = [r["threads"][t][name] for r in results]
            rounds = [ns for fig in figs for ns in fig["cpu_ns"]]
            spread = iqr_share(rounds)
            if spread > args.noise:
                noisy.add(name)
            cells = [name, f"{figs[0]['cpu_us']:.2f}", f"{spread * 100:.0f}%"]
            for r, fig in zip(results, figs):
                target = OP_TARGETS.get((r["engine"], name))
                if target is not None and fig["ratio"] > target:
                    missed.append(f"{r['engine']} {name} ({threads_label(t)})")
                mark = " *" if fig["fallback"] else ""
                cells.append(f"{fig['dev_us']:.2f} ({fig['ratio']:.2f}x{target_cell(fig['ratio'], target)}){mark}")
            print("| " + " | ".join(cells) + " |")
        cells = [f"geomean ({len(OPS)} ops)", "", ""]
        for r in results:
            g, target = r["geomean"][t], GEOMEAN_TARGETS.get(r["engine"])
            if target is not None and g > target:
                missed.append(f"{r['engine']} geomean ({threads_label(t)})")
            cells.append(f"{g:.2f}x{target_cell(g, target)}")
        print("| " + " | ".join(cells) + " |")
    print()
    for r in results:
        fallbacks = sorted({name for per_op in r["threads"].values()
                            for name, fig in per_op.items() if fig["fallback"]})
        if fallbacks:
            print(f"* {r['engine']}: some calls served by a later engine of the chain: {', '.join(fallbacks)}")
    if noisy:
        print(f"torch CPU's rounds (all processes) have an interquartile range above {args.noise * 100:.0f}% "
              f"of their median on: {', '.join(sorted(noisy))}; "
              "the machine is noisy, measure again before trusting these rows")
    if missed:
        print("targets missed: " + "; ".join(missed))
    print("geomean device/CPU: " + "; ".join(
        f"{r['engine']} " + ", ".join(f"{r['geomean'][t]:.2f}x ({threads_label(t)})" for t in map(str, args.threads))
        for r in results))
    return missed


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", default=None,
                   help="engine name or library path (comma-separated for several); default: every built "
                        "in-tree engine (" + ", ".join(IN_TREE_ENGINES) + ")")
    p.add_argument("--threads", default="1,2", help="comma-separated torch.set_num_threads values (default 1,2)")
    p.add_argument("--rounds", type=int, default=None, help="alternating rounds per op (default 7; 2 with --quick)")
    p.add_argument("--round-ms", type=float, default=None, help="length of one round on the slower side (default 30)")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls per side before timing (default 50)")
    p.add_argument("--quick", action="store_true", help="short rounds and few of them: checks the script runs")
    p.add_argument("--noise", type=float, default=0.15,
                   help="warn when the interquartile range of torch CPU's rounds of an op (all processes) "
                        "exceeds this share of their median (default 0.15)")
    p.add_argument("--json", default=None, metavar="PATH", help="write the raw figures (every round) here")
    p.add_argument("--check", action="store_true", help="exit 1 if one of issue 11's targets is missed")
    p.add_argument("--child", default=None, metavar="PATH", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.threads = thread_counts(p, args.threads)
    args.rounds = args.rounds if args.rounds is not None else (2 if args.quick else 7)
    args.round_ms = args.round_ms if args.round_ms is not None else (2.0 if args.quick else 30.0)
    args.warmup = args.warmup if args.warmup is not None else (5 if args.quick else 50)
    if args.rounds < 1 or args.round_ms <= 0 or args.warmup < 0:
        p.error("--rounds must be >= 1, --round-ms > 0, --warmup >= 0")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        return child(args)
    machine = {**cpu_description(), "default_threads": torch.get_num_threads()}
    engines = engines_to_run(args.engine)
    if not engines:
        fail("no engine built")
    results = []
    for engine in engines:
        result = run_child(engine, args)
        summarise(result)
        results.append(result)
    missed = print_report(results, args, machine)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "torch": torch.__version__, "threads": args.threads,
                       "rounds": args.rounds, "round_ms": args.round_ms, "ratio": "device / torch CPU",
                       "ops": {name: call for name, call, _ in OPS},
                       "targets": {"geomean": GEOMEAN_TARGETS,
                                   "ops": [{"engine": e, "op": o, "max_ratio": v} for (e, o), v in OP_TARGETS.items()]},
                       "missed": missed, "results": results}, f, indent=1)
    return 1 if (args.check and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
