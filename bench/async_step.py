"""Asynchronous execution benchmark (issue 13): one training step (forward, backward,
AdamW) of tiny GPT-2 and of the digits CNN on the openreg device, run asynchronously
(the default) and with OPENREG_LAUNCH_BLOCKING=1, against torch CPU, with 1 and 2
intra-op threads.

    python bench/async_step.py                          # GPT-2 and digits CNN, 1 and 2 threads
    python bench/async_step.py --engine onednn --threads 1 --rounds 9
    python bench/async_step.py --markdown out.md --json out.json
    python bench/async_step.py --quick                  # a smoke run: checks the script runs

The models are bench/model_zoo.py's (the same as bench/models.py). Every step ends
with ``loss.item()``, a synchronisation, so the asynchronous time includes the queued
work. OPENREG_LAUNCH_BLOCKING is read when the device is first used, so each mode has
a process of its own (this script with --child): both stay alive and the parent asks
them for one round at a time, rotating the order of the three sides (asynchronous,
launch-blocking, torch CPU; CPU in the asynchronous process) each round, after
warm-up steps; the median round of each side is kept.

ratio columns: async speed-up = launch-blocking time / asynchronous time (above 1.0x
queuing pays); async/CPU = asynchronous time / torch CPU time (below 1.0x the device is
faster). This is a benchmark, not a test: it asserts nothing about the timings. The
issue's target is printed below the table; --check exits 1 when it is missed.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from machine import cpu_description, describe  # noqa: E402
from options import step_counts, thread_counts  # noqa: E402

MODELS = ("GPT-2", "digits CNN")
SIDES = ("async", "blocking", "cpu")  # blocking runs in the second process, the others in the first
# Issue 13's target: asynchronous at least this much faster than launch-blocking.
TARGET = {"model": "GPT-2", "threads": 1, "speedup": 1.15}


# ------------------------------------------------------------------ child: one mode

def child():
    """Answers one JSON line per request read from stdin: build the workloads, then
    time rounds. Requests: {"threads", "model", "device" ("openreg"|"cpu"), "steps",
    "warmup"}; answer: {"seconds": per step} or {"error": text}."""
    out, sys.stdout = sys.stdout, sys.stderr  # stdout carries the answers only
    import torch
    import openreg
    import model_zoo

    torch.ones(1, device="openreg")  # initialises the device: OPENREG_LAUNCH_BLOCKING is read now
    info = openreg.info()
    hello = {"chain": info["chain"],
             "version": next((e["version"] for e in info["engines"] if e["name"] == info["chain"][0]), "?")}
    print(json.dumps(hello), file=out, flush=True)
    workloads, warmed = {}, set()
    for line in sys.stdin:
        req = json.loads(line)
        try:
            torch.set_num_threads(req["threads"])
            key = (req["model"], req["device"])
            if key not in workloads:
                workloads[key] = model_zoo.build(req["model"], req["device"])
            step = workloads[key].train
            if key + (req["threads"],) not in warmed:
                for _ in range(req["warmup"]):
                    step().item()
                warmed.add(key + (req["threads"],))
            start = time.perf_counter()
            for _ in range(req["steps"]):
                step().item()
            answer = {"seconds": (time.perf_counter() - start) / req["steps"]}
        except Exception as e:  # reported by the parent, which stops
            answer = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(answer), file=out, flush=True)
    return 0


# ------------------------------------------------------------------ parent: drive, report

def fail(message):
    print(f"async_step.py: {message}", file=sys.stderr)
    sys.exit(2)


class Child:
    """One measuring process, in launch-blocking mode or not."""

    def __init__(self, blocking, engine):
        env = {**os.environ, "OPENREG_LAUNCH_BLOCKING": "1" if blocking else "0"}
        if engine:
            env["OPENREG_ENGINE"] = engine
            env.setdefault("OPENREG_ROUTES", "off")
        self.name = "launch-blocking" if blocking else "async"
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child"], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.info = self._read()

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            fail(f"the {self.name} process exited (code {self.proc.wait()})")
        return json.loads(line)

    def round(self, **req):
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        answer = self._read()
        if "error" in answer:
            fail(f"{req['model']} on {req['device']} in the {self.name} process: {answer['error']}")
        return answer["seconds"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def measure(args):
    """{threads: {model: {side: [seconds per step, one per round]}}}, plus the children's info."""
    children = {"async": Child(False, args.engine), "blocking": Child(True, args.engine)}
    where = {"async": (children["async"], "openreg"), "blocking": (children["blocking"], "openreg"),
             "cpu": (children["async"], "cpu")}
    times = {}
    try:
        for threads in args.threads:
            for model in args.models:
                per_side = {side: [] for side in SIDES}
                for r in range(args.rounds):
                    for k in range(len(SIDES)):
                        side = SIDES[(r + k) % len(SIDES)]  # each side leads in turn
                        child, device = where[side]
                        per_side[side].append(child.round(threads=threads, model=model, device=device,
                                                          steps=args.steps, warmup=args.warmup))
                times.setdefault(threads, {})[model] = per_side
    finally:
        for c in children.values():
            c.close()
    return times, {name: c.info for name, c in children.items()}


def report_lines(times, info, args, machine):
    """The markdown report and the target's line (speed-up, met)."""
    import torch
    lines = ["# bench/async_step.py: one training step, asynchronous vs launch-blocking vs torch CPU", "",
             describe(machine) + "  ",
             f"torch {torch.__version__}; engine {info['async']['chain'][0]} {info['async']['version']} "
             f"(chain {' -> '.join(info['async']['chain'])}); {args.rounds} rounds of {args.steps} steps per side, "
             "order rotating, median round; every step ends with loss.item()  ",
             "async speed-up = launch-blocking ms / async ms (above 1.0x the queue pays); "
             "async/CPU = async ms / torch CPU ms (below 1.0x the device is faster).", ""]
    import model_zoo
    for name in args.models:
        lines.append(f"- {name}: {model_zoo.DESCRIPTIONS[name]}")
    lines += ["", "| model | threads | torch CPU ms | async ms | launch-blocking ms | async speed-up | async/CPU |",
              "|---|---|---|---|---|---|---|"]
    target = None
    for threads in args.threads:
        for model in args.models:
            med = {side: statistics.median(times[threads][model][side]) * 1e3 for side in SIDES}
            speedup = med["blocking"] / med["async"]
            lines.append(f"| {model} | {threads} | {med['cpu']:.2f} | {med['async']:.2f} | {med['blocking']:.2f} "
                         f"| {speedup:.2f}x | {med['async'] / med['cpu']:.2f}x |")
            if model == TARGET["model"] and threads == TARGET["threads"]:
                target = (speedup, speedup >= TARGET["speedup"])
    lines.append("")
    if target:
        lines.append(f"Target (issue 13): {TARGET['model']}, {TARGET['threads']} thread, async at least "
                     f"{TARGET['speedup']}x faster than launch-blocking: {target[0]:.2f}x "
                     f"({'met' if target[1] else 'MISSED'})")
    return lines, target


def parse_args(argv=None):
    import model_zoo
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", default=None, help="engine name or library path (default: the default chain)")
    p.add_argument("--models", default=None,
                   help="comma-separated model names (default: " + ", ".join(MODELS) + "): any of "
                        + ", ".join(model_zoo.MODELS))
    p.add_argument("--threads", default="1,2", help="comma-separated torch.set_num_threads values (default 1,2)")
    p.add_argument("--rounds", type=int, default=None, help="rounds per side (default 7; 1 with --quick)")
    p.add_argument("--steps", type=int, default=None, help="steps per round (default 5; 1 with --quick)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps per side first (default 3; 1 with --quick)")
    p.add_argument("--quick", action="store_true", help="one round of one step, the digits CNN only unless --models")
    p.add_argument("--json", default=None, metavar="PATH", help="write every round's figures here")
    p.add_argument("--markdown", default=None, metavar="PATH", help="write the report as markdown here")
    p.add_argument("--check", action="store_true", help="exit 1 if issue 13's target is missed")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return args
    default_models = "digits CNN" if args.quick else ",".join(MODELS)
    args.models = [m.strip() for m in (args.models or default_models).split(",") if m.strip()]
    unknown = [m for m in args.models if m not in model_zoo.MODELS]
    if not args.models or unknown:
        p.error(f"unknown model(s): {', '.join(unknown)} (known: {', '.join(model_zoo.MODELS)})")
    args.threads = thread_counts(p, args.threads)
    step_counts(p, args, rounds=(1, 7), steps=(1, 5), warmup=(1, 3))
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        return child()
    import torch
    machine = {**cpu_description(), "default_threads": torch.get_num_threads()}
    times, info = measure(args)
    lines, target = report_lines(times, info, args, machine)
    print("\n".join(lines))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "torch": torch.__version__, "engine": info["async"]["chain"],
                       "rounds": args.rounds, "steps": args.steps, "target": TARGET,
                       "speedup": target[0] if target else None,
                       "seconds_per_step": {str(t): m for t, m in times.items()}}, f, indent=1)
    return 1 if (args.check and target and not target[1]) else 0


if __name__ == "__main__":
    sys.exit(main())
