"""Steps whose shapes are new: training with a new sequence length every step.

    python bench/new_shapes.py                  # GPT-2 and BERT, 1 thread, 5 rounds
    python bench/new_shapes.py --threads 2 --rounds 3 --steps 10

A model trained on batches padded to their longest sequence (transformers'
DataCollatorWithPadding) meets shapes it has not seen at every step, at first.
bench/models.py repeats one batch, so the device's per-signature caches (Meta
sizing, engine primitives) and its allocator's free lists serve every step there;
here each step of a round has a sequence length no earlier step had, so every op
misses them. Each round runs the same lengths on torch CPU and on the device, each
in a process of its own (this script with --child), the order flipping each
round; a round's figure is the median step of the process. The ratio (device /
torch CPU) is the median over rounds of the round's ratio. Printed besides: the
device's memory reserved after the round, against the peak of its live memory:
the allocator's cache must not grow with every new shape.

A benchmark, not a test: it asserts nothing about the timings.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import cpu_description, describe  # noqa: E402

MODELS = ("GPT-2", "BERT")


def build(name, device):
    import torch
    from openreg.workloads import bert_model, gpt2_model

    torch.manual_seed(0)
    model = (gpt2_model if name == "GPT-2" else bert_model)(max_positions=256).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)

    def step(length):
        ids = torch.randint(1, 1000, (8, length), generator=g)
        opt.zero_grad()
        if name == "GPT-2":
            loss = model(input_ids=ids.to(device), labels=ids.to(device)).loss
        else:
            lengths = torch.randint(length // 2, length + 1, (8,), generator=g)
            mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
            labels = torch.randint(0, 4, (8,), generator=g)
            loss = model(input_ids=(ids * mask).to(device), attention_mask=mask.to(device),
                         labels=labels.to(device)).loss
        loss.backward()
        opt.step()
        return loss.item()

    return step


def child(args):
    import torch

    if args.device == "openreg":
        import openreg  # noqa: F401
    torch.set_num_threads(args.threads)
    step = build(args.model, args.device)
    for length in (8, 9, 10):  # warm-up: first-use costs that are not per shape
        step(length)
    times = []
    for length in json.loads(args.lengths):
        t = time.perf_counter()
        step(length)
        times.append(time.perf_counter() - t)
    out = {"step_ms": statistics.median(times) * 1e3}
    if args.device == "openreg":
        out["reserved_mb"] = torch.openreg.memory_reserved() / 1e6
        out["peak_allocated_mb"] = torch.openreg.max_memory_allocated() / 1e6
    print(json.dumps(out))


def run_child(device, model, threads, lengths):
    argv = [sys.executable, os.path.abspath(__file__), "--child", "--device", device, "--model", model,
            "--threads", str(threads), "--lengths", json.dumps(lengths)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{device} {model} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20, help="steps a round (each a new sequence length)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--device", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--lengths", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)

    print(describe(cpu_description()))
    print(f"engine: {os.environ.get('OPENREG_ENGINE', 'default')}, {args.threads} thread(s), "
          f"{args.rounds} rounds of {args.steps} steps, each step a new sequence length")
    print("model   torch CPU ms  device ms  ratio (rounds)            reserved MB / peak live MB")
    for model in args.models.split(","):
        ratios, cpu_ms, dev_ms, mem = [], [], [], None
        for r in range(args.rounds):
            lengths = [16 + (r * 37 + 11 * i) % 112 for i in range(args.steps)]  # distinct within a round
            sides = ["cpu", "openreg"] if r % 2 == 0 else ["openreg", "cpu"]
            got = {side: run_child(side, model, args.threads, lengths) for side in sides}
            cpu_ms.append(got["cpu"]["step_ms"])
            dev_ms.append(got["openreg"]["step_ms"])
            ratios.append(dev_ms[-1] / cpu_ms[-1])
            mem = got["openreg"]
        spread = ", ".join(f"{x:.2f}" for x in ratios)
        print(f"{model:7s} {statistics.median(cpu_ms):12.1f} {statistics.median(dev_ms):10.1f}  "
              f"{statistics.median(ratios):.2f}x ({spread})  {mem['reserved_mb']:.0f} / {mem['peak_allocated_mb']:.0f}")


if __name__ == "__main__":
    main()
