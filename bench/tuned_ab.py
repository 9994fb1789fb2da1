"""The tuned routing table against the chain's own order, in one process.

    python bench/tuned_ab.py                                # every model, 1 and 2 threads
    python bench/tuned_ab.py --models GPT-2,ViT --threads 2 --rounds 15

bench/models.py runs each chain in processes of its own, and this machine's
speed swings between processes; this script settles whether the table helps or
hurts on a model. In one process of the default chain with this machine's table
(`python -m openreg tune`), the rounds of the table followed ("tuned") and of
the chain's order (the default engine first, "untuned": the table switched off
with openreg._C._set_tuned_routes_followed) alternate, the order flipped every
round, each after a short sleep and an untimed step (openreg.tuning_check.compare,
which `tune` checks its table with). One model serves both sides, so they run the same tensors and the same
engine-side caches. torch CPU is not measured here: it would share the process
with the device, which slows both at 2 threads (see bench/models.py).

Printed per model and mode: median step times and tuned/untuned (below 1.0 the
table helps). A benchmark: it asserts nothing.
"""

import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from machine import cpu_description, describe  # noqa: E402
from options import step_counts, thread_counts  # noqa: E402

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=None, help="comma-separated names (default: every model)")
    p.add_argument("--modes", default="train,infer")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    p.add_argument("--rounds", type=int, default=None, help="rounds per side (default 9; 2 with --quick)")
    p.add_argument("--steps", type=int, default=None, help="steps per round (default 3; 1 with --quick)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps per side (default 2; 1 with --quick)")
    p.add_argument("--quick", action="store_true", help="a smoke run: few rounds")
    args = p.parse_args(argv)
    args.threads = thread_counts(p, args.threads)
    step_counts(p, args, rounds=(2, 9), steps=(1, 3), warmup=(1, 2))
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not set(args.modes) <= {"train", "infer"}:
        p.error(f"--modes: expected train and/or infer, got {','.join(args.modes)}")
    return args


def main(argv=None):
    args = parse_args(argv)
    if os.environ.get("OPENREG_ENGINE", "auto").strip() not in ("", "auto"):
        sys.exit("tuned_ab.py: the tuned table serves only the default chain: unset OPENREG_ENGINE")
    import torch
    import openreg
    from openreg import _C, tuning_check, workloads

    torch.ones(1, device="openreg")  # loads the chain, with the table if there is one
    info = openreg.info()
    if not info.get("tuned_routes"):
        sys.exit("tuned_ab.py: no tuned routing table is in use: run `python -m openreg tune` first")
    models = args.models.split(",") if args.models else workloads.available()
    unknown = [m for m in models if m not in workloads.MODELS]
    if unknown:
        sys.exit(f"tuned_ab.py: unknown model(s) {', '.join(unknown)}; choose from {', '.join(workloads.MODELS)}")

    print(describe(cpu_description()))
    print(f"chain: {' -> '.join(info['chain'])}; table: {info['tuned_routes']}")
    print(f"rounds {args.rounds}, steps {args.steps}, warm-up {args.warmup}; medians in ms; "
          "tuned/untuned below 1.0: the table helps")
    print(f"{'threads':>7}  {'model':<22} {'mode':<5} {'tuned':>8} {'untuned':>8} {'tuned/untuned':>13}")
    ratios = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        for name in models:
            dev = workloads.build(name, "openreg")
            for mode in args.modes:
                t = tuning_check.compare(getattr(dev, mode), args.rounds, args.steps, args.warmup,
                                         _C._set_tuned_routes_followed)
                med = {side: statistics.median(v) * 1e3 for side, v in t.items()}
                ratios.append(med["tuned"] / med["untuned"])
                print(f"{threads:>7}  {name:<22} {mode:<5} {med['tuned']:8.2f} {med['untuned']:8.2f} "
                      f"{ratios[-1]:12.2f}x", flush=True)
            del dev
    geo = statistics.geometric_mean(ratios)
    print(f"geomean tuned/untuned: {geo:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
