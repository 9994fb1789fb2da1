"""torch.distributed benchmark (issue 15): two processes on this machine, gloo over
loopback, openreg tensors against CPU tensors.

    python bench/collectives.py                     # 64 MB all_reduce, DDP step, 7 rounds
    python bench/collectives.py --rounds 11 --mb 16
    python bench/collectives.py --quick             # a smoke run: checks the script runs

The script starts its two ranks itself (this file with --rank, a FileStore rendezvous in
a temporary directory) and prints rank 0's report. Each rank uses 1 intra-op thread.
Every round runs each side once, both ranks together, the sides' order rotating from
round to round; the median round is kept. The sides:

- all_reduce (SUM) of --mb MB of float32 on CPU tensors and on openreg tensors (the
  same gloo code on the same bytes: openreg hands gloo CPU aliases of device memory);
  bandwidth = bytes / time (for 2 ranks, gloo's bus bandwidth is the same figure);
- all_reduce of 4 KB, where openreg's check that the ranks agree on the collective
  (OPENREG_DIST_CHECK, docs/design.md "Distributed (gloo)") is a visible share of the
  time: openreg with and without it;
- one DistributedDataParallel training step (forward, backward, Adam, loss.item()) of
  examples/train.py's CNN, --batch samples of 8x8 per rank, on CPU tensors and on
  openreg tensors (with and without the check), against the same step in one process
  on the same per-rank batch (rank 0 alone, rank 1 waiting).

This is a benchmark, not a test: it asserts nothing about the timings.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from machine import cpu_description, describe  # noqa: E402

WORLD = 2
SMALL_BYTES = 4096
# side -> (device, openreg's agreement check on). The order is the report's.
ALL_REDUCE_SIDES = {"cpu": ("cpu", True), "openreg": ("openreg", True)}
SMALL_SIDES = {"cpu": ("cpu", True), "openreg": ("openreg", True), "openreg, no check": ("openreg", False)}
STEP_SIDES = {"cpu": ("cpu", True), "openreg": ("openreg", True), "openreg, no check": ("openreg", False),
              "single cpu": ("cpu", None), "single openreg": ("openreg", None)}


# ------------------------------------------------------------------ a rank

def _timed(fn, reps):
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps


def rank_main(args):
    """Both ranks run the same rounds; rank 0 prints {"info", "times"} as JSON."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel

    import openreg

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{args.store}", rank=args.rank, world_size=WORLD)
    rank = args.rank

    def set_check(on):
        os.environ["OPENREG_DIST_CHECK"] = "1" if on else "0"

    def all_reduce_case(nbytes, sides):
        tensors = {d: torch.full((nbytes // 4,), rank + 1.0, device=d) for d in ("cpu", "openreg")}
        expected = float(sum(r + 1 for r in range(WORLD)))

        def run(side):  # the values double each time (inf after ~128 runs: no slower)
            device, check = sides[side]
            set_check(check)
            dist.all_reduce(tensors[device])
        for side in sides:  # warm-up, and the result is the sum every rank put in
            tensors[sides[side][0]].fill_(rank + 1.0)
            run(side)
            assert tensors[sides[side][0]][-1].item() == expected, side
        return run

    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
    from train import make_model

    g = torch.Generator().manual_seed(rank)
    x, y = torch.rand(args.batch, 1, 8, 8, generator=g), torch.randint(0, 10, (args.batch,), generator=g)
    batch = {d: (x.to(d), y.to(d)) for d in ("cpu", "openreg")}
    steps = {}
    for side, (device, check) in STEP_SIDES.items():
        torch.manual_seed(0)
        model = make_model().to(device)
        if check is not None:
            set_check(check)
            model = DistributedDataParallel(model)
        steps[side] = (model, torch.optim.Adam(model.parameters(), lr=1e-3))

    def one_step(model, opt, xy):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xy[0]), xy[1])
        loss.backward()
        opt.step()
        loss.item()

    def step(side):
        device, check = STEP_SIDES[side]
        model, opt = steps[side]
        if check is None:  # one process: rank 0 steps, rank 1 waits
            if rank == 0:
                one_step(model, opt, batch[device])
            return
        set_check(check)
        one_step(model, opt, batch[device])

    cases = {
        "all_reduce": (all_reduce_case(args.mb << 20, ALL_REDUCE_SIDES), list(ALL_REDUCE_SIDES), args.reps),
        "all_reduce small": (all_reduce_case(SMALL_BYTES, SMALL_SIDES), list(SMALL_SIDES), args.small_reps),
        "step": (step, list(STEP_SIDES), args.steps),
    }
    for _ in range(args.warmup):
        for side in STEP_SIDES:
            step(side)
    times = {case: {side: [] for side in sides} for case, (_, sides, _) in cases.items()}
    for r in range(args.rounds):
        for case, (run, sides, reps) in cases.items():
            for k in range(len(sides)):
                side = sides[(r + k) % len(sides)]
                dist.barrier()  # both ranks start the side together
                times[case][side].append(_timed(lambda: run(side), reps))
    dist.barrier()
    if rank == 0:
        info = openreg.info()
        print(json.dumps({"info": {"chain": info["chain"], "torch": torch.__version__}, "times": times}), flush=True)
    dist.destroy_process_group()
    return 0


# ------------------------------------------------------------------ the parent

def measure(args):
    """Starts the two ranks, returns rank 0's JSON answer."""
    env = dict(os.environ)
    if args.engine:
        env["OPENREG_ENGINE"] = args.engine
        env.setdefault("OPENREG_ROUTES", "off")
    with tempfile.TemporaryDirectory(prefix="openreg-bench-collectives-") as tmp:
        forwarded = ["--mb", str(args.mb), "--rounds", str(args.rounds), "--reps", str(args.reps),
                     "--small-reps", str(args.small_reps), "--steps", str(args.steps), "--warmup", str(args.warmup),
                     "--batch", str(args.batch), "--store", os.path.join(tmp, "store")]
        procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank", str(r)] + forwarded,
                                  env=env, stdout=subprocess.PIPE, text=True) for r in range(WORLD)]
        outs = []
        try:
            for p in procs:
                outs.append(p.communicate(timeout=args.timeout)[0])
        except subprocess.TimeoutExpired:
            fail(f"the ranks did not finish within {args.timeout}s")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    for r, p in enumerate(procs):
        if p.returncode != 0:
            fail(f"rank {r} exited with code {p.returncode}")
    return json.loads(outs[0].strip().splitlines()[-1])


def fail(message):
    print(f"collectives.py: {message}", file=sys.stderr)
    sys.exit(2)


def report_lines(result, args, machine):
    times = result["times"]
    med = {case: {side: statistics.median(v) for side, v in sides.items()} for case, sides in times.items()}
    ms = lambda s: f"{s * 1e3:.2f} ms"  # noqa: E731
    gbs = lambda nbytes, s: f"{nbytes / s / 1e9:.2f} GB/s"  # noqa: E731
    big, small, step = med["all_reduce"], med["all_reduce small"], med["step"]
    nbytes = args.mb << 20
    chain = result["info"]["chain"]
    lines = [
        "# bench/collectives.py: torch.distributed over gloo, openreg tensors vs CPU tensors", "",
        describe(machine) + "  ",
        f"torch {result['info']['torch']}; engine {chain[0]} (chain {' -> '.join(chain)}); {WORLD} processes on "
        f"this machine, gloo over loopback, 1 thread each; {args.rounds} rounds, order rotating, median round  ",
        "openreg/CPU = openreg time / CPU-tensor time (above 1.0x openreg is SLOWER).", "",
        "| case | CPU tensors | openreg tensors | openreg/CPU |", "|---|---|---|---|",
        f"| all_reduce {args.mb} MB float32 | {ms(big['cpu'])} ({gbs(nbytes, big['cpu'])}) "
        f"| {ms(big['openreg'])} ({gbs(nbytes, big['openreg'])}) | {big['openreg'] / big['cpu']:.2f}x |",
        f"| all_reduce {SMALL_BYTES // 1024} KB float32 | {ms(small['cpu'])} | {ms(small['openreg'])} "
        f"| {small['openreg'] / small['cpu']:.2f}x |",
        f"| all_reduce {SMALL_BYTES // 1024} KB, openreg without the agreement check | {ms(small['cpu'])} "
        f"| {ms(small['openreg, no check'])} | {small['openreg, no check'] / small['cpu']:.2f}x |",
        f"| DDP step, digits CNN, batch {args.batch} per rank | {ms(step['cpu'])} | {ms(step['openreg'])} "
        f"| {step['openreg'] / step['cpu']:.2f}x |",
        f"| DDP step, openreg without the agreement check | {ms(step['cpu'])} | {ms(step['openreg, no check'])} "
        f"| {step['openreg, no check'] / step['cpu']:.2f}x |",
        f"| single-process step, batch {args.batch} | {ms(step['single cpu'])} | {ms(step['single openreg'])} "
        f"| {step['single openreg'] / step['single cpu']:.2f}x |",
        "",
        f"DDP step / single-process step: CPU tensors {step['cpu'] / step['single cpu']:.2f}x, "
        f"openreg {step['openreg'] / step['single openreg']:.2f}x",
        f"agreement check: {(small['openreg'] - small['openreg, no check']) * 1e3:+.2f} ms per "
        f"{SMALL_BYTES // 1024} KB all_reduce, "
        f"{(step['openreg'] - step['openreg, no check']) * 1e3:+.2f} ms per DDP step "
        f"({(step['openreg'] / step['openreg, no check'] - 1) * 100:+.0f}%)",
    ]
    return lines


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", default=None, help="engine name or library path (default: the default chain)")
    p.add_argument("--mb", type=int, default=None, help="all_reduce MB of float32 (default 64; 1 with --quick)")
    p.add_argument("--rounds", type=int, default=None, help="rounds (default 7; 1 with --quick)")
    p.add_argument("--reps", type=int, default=None,
                   help="large all_reduces per side and round (default 3; 1 with --quick)")
    p.add_argument("--small-reps", type=int, default=None,
                   help="4 KB all_reduces per side and round (default 200; 5 with --quick)")
    p.add_argument("--steps", type=int, default=None,
                   help="training steps per side and round (default 10; 1 with --quick)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed training steps per side first (default 3; 1 with --quick)")
    p.add_argument("--batch", type=int, default=32,
                   help="samples per rank (default 32: examples/train_ddp.py's 64 on 2 ranks)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds before the ranks are killed (default 1800)")
    p.add_argument("--quick", action="store_true", help="a smoke run: 1 MB, one round of one rep")
    p.add_argument("--json", default=None, metavar="PATH", help="write every round's figures here")
    p.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--store", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    pick = 0 if args.quick else 1
    for name, defaults in (("mb", (1, 64)), ("rounds", (1, 7)), ("reps", (1, 3)), ("small_reps", (5, 200)),
                           ("steps", (1, 10)), ("warmup", (1, 3))):
        if getattr(args, name) is None:
            setattr(args, name, defaults[pick])
    if min(args.mb, args.rounds, args.reps, args.small_reps, args.steps, args.batch) < 1 or args.warmup < 0:
        p.error("--mb, --rounds, --reps, --small-reps, --steps and --batch must be >= 1, --warmup >= 0")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.rank is not None:
        return rank_main(args)
    machine = cpu_description()
    result = measure(args)
    lines = report_lines(result, args, machine)
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, **result, "mb": args.mb, "batch": args.batch}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
