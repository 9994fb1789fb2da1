"""Where a model's step time goes, op by op and shape by shape: the step under
torch.profiler on torch CPU and on the openreg device, side by side.

    python bench/step_ops.py --engine onednn --model GPT-2 [--mode train] [--steps 10] [--top 30]
    python bench/step_ops.py --engine eigen --model "digits CNN" --by-op
    python bench/step_ops.py --engine onednn --summary [--models GPT-2,BERT]

Models are bench/model_zoo.py's (the ones bench/models.py times). Rows are
keyed by op and input shapes (``--by-op``: by op only), the costliest on either
side first. Columns are microseconds per step of the op itself (self time: an
op's children are not counted in it, so the rows add up to the step) and calls
per step on the device; ``ratio`` is device / CPU, so a row far above 1.0x is
a slow path: a non-contiguous or broadcast operand, or a fallback (the engine
that served the op's device calls is named). The profiler adds its own cost to
both sides alike; bench/models.py gives the step's real ratio.

At one thread the device side runs with OPENREG_LAUNCH_BLOCKING=1, each op where it
is called: asynchronously an op's event on the calling thread would time only its
enqueueing. An op's device time is its own self time plus the engine call it made,
which the profiler records as a nested ``openreg::<engine>::<op>`` event (core/src/
runtime/profiler.h).

At more threads (or with ``--queued``) the device side runs queued, as users run it,
and an op's device time is its engine calls' (and queued copies') events on the
execution queue's worker, by op (those events carry no shapes). Launch blocking
misstates a training step there: backward runs on autograd's device thread, so two
host threads run kernels, each with an OpenMP team; with more team threads than CPUs
libgomp's idle threads sleep instead of spinning, and every parallel region waits for
a wake-up (LLaMA's AdamW step at 2 threads: 3.9 ms blocking, 0.7 ms queued).

``--summary``: for every model (or ``--models``) and both modes, a markdown table
of the device's five costliest ops (self time per step) and the ops that fell back
to the reference engine (aten_ref), the device side only.
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def per_op(model_zoo, model, mode, device, steps, by_op, queued=False):
    """{row key: (self us per step, calls per step, op name)} of `steps` + 1
    profiled steps, and the router's counts of who served what (openreg.stats()).
    `queued`: the device runs asynchronously; rows are its worker's events, by op."""
    import openreg
    from torch.profiler import ProfilerActivity, profile

    step = getattr(model_zoo.build(model, device), mode)
    for _ in range(3):
        step().item()
    openreg.reset_stats()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=not by_op) as prof:
        for _ in range(steps):
            step()
        step().item()
    n = steps + 1
    served = openreg.stats()
    totals = {}  # key -> [us, calls, op]
    for e in prof.events():
        if queued and device != "cpu":
            if e.name.startswith("openreg::"):  # openreg::<engine>::<op>[.overload], or openreg::host::copy_
                op = e.name.split("::", 2)[2].split(".")[0]
                op = op if "::" in op else "aten::" + op
                row = totals.setdefault(op, [0.0, 0, op])
                row[0] += e.cpu_time_total
                row[1] += 1
            continue
        if not e.name.startswith("aten::"):
            continue
        key = e.name if by_op else f"{e.name} {e.input_shapes}"
        engine_us = sum(c.cpu_time_total for c in e.cpu_children if c.name.startswith("openreg::"))
        row = totals.setdefault(key, [0.0, 0, e.name])
        row[0] += e.self_cpu_time_total + engine_us
        row[1] += 1
    rows = {key: (us / n, calls / n, op) for key, (us, calls, op) in totals.items()}
    return rows, served


def summary(model_zoo, models, steps, queued):
    import torch
    import openreg

    chain = openreg.info()["chain"]
    timed = "engine calls' time on the queue's worker" if queued else "self time"
    print(f"openreg engine chain: {' -> '.join(chain)}, {torch.get_num_threads()} threads, "
          f"{steps + 1} profiled steps; {timed} per step on the device")
    print()
    print("| model | mode | five costliest ops (ms per step) | fell back to aten_ref |")
    print("|---|---|---|---|")
    for model in models:
        for mode in ("train", "infer"):
            rows, served = per_op(model_zoo, model, mode, "openreg", steps, by_op=True, queued=queued)
            top = sorted(rows.items(), key=lambda kv: -kv[1][0])[:5]
            top_text = ", ".join(f"{k.removeprefix('aten::')} {v[0] / 1e3:.2f}" for k, v in top)
            fell = sorted(op.removeprefix("aten::") for op, by in served.items()
                          if "aten_ref" in by and chain[0] != "aten_ref")
            print(f"| {model} | {mode} | {top_text} | {', '.join(fell) or 'none'} |", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", default=None, help="OPENREG_ENGINE (name or path)")
    p.add_argument("--model", default="digits CNN", help="one of bench/model_zoo.py's MODELS")
    p.add_argument("--mode", default="train", choices=("train", "infer"))
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--by-op", action="store_true", help="one row per op, all shapes together")
    p.add_argument("--queued", action="store_true",
                   help="time the device queued, by op (the default above one thread; module docstring)")
    p.add_argument("--summary", action="store_true", help="top five ops and fallbacks of every model, markdown")
    p.add_argument("--models", default=None, help="with --summary: comma-separated models (default: all)")
    args = p.parse_args()
    if args.engine:  # before openreg is imported (model_zoo imports it)
        os.environ["OPENREG_ENGINE"] = args.engine
    queued = args.queued or (args.threads or 1) > 1
    # Read at openreg's first use: each op's events time its work (module docstring).
    os.environ["OPENREG_LAUNCH_BLOCKING"] = "0" if queued else "1"
    import model_zoo

    models = args.models.split(",") if args.summary and args.models else [args.model]
    for name in models:
        if name not in model_zoo.MODELS:
            p.error(f"unknown model {name!r} (known: {', '.join(model_zoo.MODELS)})")
    import torch
    import openreg

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.summary:
        summary(model_zoo, models if args.models else list(model_zoo.MODELS), args.steps, queued)
        return
    by_op = args.by_op or queued  # the worker's events carry no shapes
    cpu, _ = per_op(model_zoo, args.model, args.mode, "cpu", args.steps, by_op)
    dev, served = per_op(model_zoo, args.model, args.mode, "openreg", args.steps, by_op, queued)
    chain = openreg.info()["chain"]
    print(f"model {args.model} ({args.mode}), openreg engine chain: {' -> '.join(chain)}, "
          f"{torch.get_num_threads()} threads, {args.steps + 1} profiled steps")
    total_cpu = sum(v[0] for v in cpu.values())
    total_dev = sum(v[0] for v in dev.values())
    dev_timed = "engine calls on the queue's worker" if queued else "self time"
    print(f"time per step: torch CPU {total_cpu / 1e3:.2f} ms (aten self time), "
          f"device {total_dev / 1e3:.2f} ms ({dev_timed})")
    keys = sorted(set(cpu) | set(dev), key=lambda k: -max(dev.get(k, (0,))[0], cpu.get(k, (0,))[0]))
    width = max([len(k) for k in keys[:args.top]] + [10])
    print(f"{'op (input shapes)':{width}s} {'cpu us':>9s} {'device us':>10s} {'ratio':>7s} {'calls':>6s}  served by")
    for k in keys[:args.top]:
        c, d = cpu.get(k, (0, 0, k))[0], dev.get(k, (0, 0, k))[0]
        calls = dev.get(k, (0, 0))[1]
        op = (dev.get(k) or cpu.get(k))[2]
        # the router counts by overload (aten::sum.dim_IntList), the profiler by op name
        by = {e for name, counts in served.items() if name == op or name.startswith(op + ".") for e in counts}
        by_text = ", ".join(sorted(by))
        ratio = f"{d / c:6.2f}x" if c > 0 else "      -"
        print(f"{k:{width}s} {c:9.1f} {d:10.1f} {ratio} {calls:6.1f}  {by_text}")


if __name__ == "__main__":
    main()
