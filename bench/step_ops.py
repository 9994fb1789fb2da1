"""Where a training step's time goes, op by op: examples/train.py's step (batch 64,
Adam) under torch.profiler on torch CPU and on the openreg device, side by side.

    python bench/step_ops.py --engine eigen [--steps 50] [--top 30]

Columns are microseconds per step (an op's total including its children, so
aten::conv2d contains aten::convolution) and calls per step on the device. The
profiler adds its own cost to both sides alike; use bench/engines.py for the
step's real ratio."""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", default=None, help="OPENREG_ENGINE (name or path)")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args()
    if args.engine:
        os.environ["OPENREG_ENGINE"] = args.engine
    import torch
    import openreg
    from torch.profiler import ProfilerActivity, profile

    from train_step import make_train_step

    def per_op(device):
        step = make_train_step(device)
        for _ in range(10):
            step().item()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.steps):
                step()
            step().item()
        n = args.steps + 1
        return {e.key: (e.cpu_time_total / n, e.count / n) for e in prof.key_averages() if e.key.startswith("aten::")}

    cpu, dev = per_op("cpu"), per_op("openreg")
    print(f"openreg engine chain: {' -> '.join(openreg.info()['chain'])}")
    keys = sorted(set(cpu) | set(dev), key=lambda k: -max(dev.get(k, (0, 0))[0], cpu.get(k, (0, 0))[0]))
    print(f"{'op':48s} {'cpu us':>9s} {'openreg us':>11s} {'calls':>6s}")
    for k in keys[:args.top]:
        print(f"{k:48s} {cpu.get(k, (0, 0))[0]:9.1f} {dev.get(k, (0, 0))[0]:11.1f} {dev.get(k, (0, 0))[1]:6.1f}")


if __name__ == "__main__":
    main()
