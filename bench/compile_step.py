"""torch.compile benchmark (issue 14): one training step (forward, backward, AdamW) of
tiny GPT-2 and of the digits CNN, compiled with ``torch.compile(model)`` (the default
backend, Inductor) and eager, on the openreg device and on torch CPU, with 1 and 2
intra-op threads.

    python bench/compile_step.py                          # GPT-2 and digits CNN, 1 and 2 threads
    python bench/compile_step.py --engine onednn --threads 1 --rounds 9
    python bench/compile_step.py --markdown out.md --json out.json
    python bench/compile_step.py --quick                  # a smoke run: checks the script runs

The models are bench/model_zoo.py's (the same as bench/models.py and async_step.py);
the compiled sides wrap the same model in ``torch.compile`` before the optimizer is
made. Every step ends with ``loss.item()``, a synchronisation. The four sides live in
one process; each round runs them in a rotating order, after warm-up steps (the first
compiles: not timed), and the median round of each side is kept.

ratio columns: compiled/eager on each device (below 1.0x compiling pays) and
openreg/CPU for the compiled sides (below 1.0x the device is faster). This is a
benchmark, not a test: it asserts nothing about the timings.
"""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from machine import cpu_description, describe  # noqa: E402
from options import step_counts, thread_counts  # noqa: E402

MODELS = ("GPT-2", "digits CNN")
SIDES = (("openreg", False), ("openreg", True), ("cpu", False), ("cpu", True))  # (device, compiled)


def side_name(side):
    return f"{side[0]} {'compiled' if side[1] else 'eager'}"


def build(name, device, compiled):
    """model_zoo's workload for ``name``; compiled: its model wrapped in torch.compile."""
    import torch
    from openreg import workloads

    import model_zoo

    if not compiled:
        return model_zoo.build(name, device)
    plain = workloads.workload

    def compiled_workload(model, inputs, loss_fn, device, lr=1e-3):
        return plain(torch.compile(model), inputs, loss_fn, device, lr)

    workloads.workload = compiled_workload  # the builders look it up in the module
    try:
        return model_zoo.build(name, device)
    finally:
        workloads.workload = plain


def measure(args):
    """{threads: {model: {side name: [seconds per step, one per round]}}}."""
    import torch

    built, warmed, times = {}, set(), {}
    for threads in args.threads:
        torch.set_num_threads(threads)
        for model in args.models:
            per_side = {side_name(s): [] for s in SIDES}
            for r in range(args.rounds):
                for k in range(len(SIDES)):
                    side = SIDES[(r + k) % len(SIDES)]  # each side leads in turn
                    key = (model,) + side
                    if key not in built:
                        built[key] = build(model, *side)
                    step = built[key].train
                    if key + (threads,) not in warmed:
                        for _ in range(args.warmup):
                            step().item()
                        warmed.add(key + (threads,))
                    start = time.perf_counter()
                    for _ in range(args.steps):
                        step().item()
                    per_side[side_name(side)].append((time.perf_counter() - start) / args.steps)
            times.setdefault(threads, {})[model] = per_side
    return times


def report_lines(times, args, machine, chain, version):
    import torch

    import model_zoo

    lines = ["# bench/compile_step.py: one training step, torch.compile vs eager, openreg vs torch CPU", "",
             describe(machine) + "  ",
             f"torch {torch.__version__}; engine {chain[0]} {version} (chain {' -> '.join(chain)}); "
             f"{args.rounds} rounds of {args.steps} steps per side, order rotating, median round; "
             "every step ends with loss.item(); compiled = torch.compile(model), the default backend  ",
             "compiled/eager below 1.0x: compiling pays; openreg/CPU below 1.0x: the device is faster.", ""]
    for name in args.models:
        lines.append(f"- {name}: {model_zoo.DESCRIPTIONS[name]}")
    lines += ["", "| model | threads | CPU eager ms | CPU compiled ms | openreg eager ms | openreg compiled ms "
              "| compiled/eager CPU | compiled/eager openreg | openreg/CPU compiled |",
              "|---|---|---|---|---|---|---|---|---|"]
    for threads in args.threads:
        for model in args.models:
            med = {s: statistics.median(v) * 1e3 for s, v in times[threads][model].items()}
            ce, cc = med["cpu eager"], med["cpu compiled"]
            oe, oc = med["openreg eager"], med["openreg compiled"]
            lines.append(f"| {model} | {threads} | {ce:.2f} | {cc:.2f} | {oe:.2f} | {oc:.2f} "
                         f"| {cc / ce:.2f}x | {oc / oe:.2f}x | {oc / cc:.2f}x |")
    return lines


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", default=None, help="engine name or library path (default: the default chain)")
    p.add_argument("--models", default=None,
                   help="comma-separated model names (default: " + ", ".join(MODELS) + "): any of "
                        "bench/model_zoo.py's")
    p.add_argument("--threads", default="1,2", help="comma-separated torch.set_num_threads values (default 1,2)")
    p.add_argument("--rounds", type=int, default=None, help="rounds per side (default 7; 1 with --quick)")
    p.add_argument("--steps", type=int, default=None, help="steps per round (default 5; 1 with --quick)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed steps per side and thread count first, the compile included (default 3; 1 with --quick)")
    p.add_argument("--quick", action="store_true", help="one round of one step, the digits CNN only unless --models")
    p.add_argument("--json", default=None, metavar="PATH", help="write every round's figures here")
    p.add_argument("--markdown", default=None, metavar="PATH", help="write the report as markdown here")
    args = p.parse_args(argv)
    if args.engine:  # before openreg is imported (model_zoo imports it) and the device used
        os.environ["OPENREG_ENGINE"] = args.engine
        os.environ.setdefault("OPENREG_ROUTES", "off")
    import model_zoo

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
    import torch
    import openreg

    machine = {**cpu_description(), "default_threads": torch.get_num_threads()}
    torch.ones(1, device="openreg")
    info = openreg.info()
    chain = info["chain"]
    version = next((e["version"] for e in info["engines"] if e["name"] == chain[0]), "?")
    times = measure(args)
    lines = report_lines(times, args, machine, chain, version)
    print("\n".join(lines))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "torch": torch.__version__, "engine": chain,
                       "rounds": args.rounds, "steps": args.steps,
                       "seconds_per_step": {str(t): m for t, m in times.items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
