"""Op sweep: ops the model suite does not run, each on mid-size inputs, device against
torch CPU, with the engine that served each of the op's calls.

    python bench/op_sweep.py                          # the default chain, forward
    python bench/op_sweep.py --backward               # forward and backward
    python bench/op_sweep.py --engine eigen --threads 2 --ops leaky_relu,amax
    python bench/op_sweep.py --quick                  # a smoke run: checks the script runs

bench/models.py and bench/step_ops.py time what the model suite's models call; an
engine's slow path on anything else (a LeakyReLU, x.amax(-1), torch.maximum) stays
out of sight there, and a tuned chain sends an op that its first engine declines to
the next one, measured or not. Each op here runs alone on a [8, 64, 512] float32
tensor (or an image batch, a sequence, an index tensor), in rounds alternating with
torch CPU in one process; a row shows the medians of both, their ratio (above 1.0x
the device is SLOWER; `<<<` past SLOW) and which engine ran each op of the call
(router counters). This is a benchmark: it asserts nothing about the timings.
"""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import cpu_description, describe  # noqa: E402

SLOW = 1.5


def inputs():
    g = torch.Generator().manual_seed(0)
    return {
        "x": torch.randn(8, 64, 512, generator=g), "y": torch.randn(8, 64, 512, generator=g),
        "p": torch.rand(8, 64, 512, generator=g) + 0.1,  # positive
        "idx": torch.randint(0, 512, (8, 64, 64), generator=g),
        "img": torch.randn(8, 32, 32, 32, generator=g), "w3": torch.randn(32, 32, 3, 3, generator=g),
        "emb": torch.randn(1000, 128, generator=g), "ids": torch.randint(0, 1000, (8, 64), generator=g),
        "slope": torch.full((32,), 0.2),
    }


# name -> f(inputs) -> tensor. Differentiable in x (and y, p, img, emb) for --backward.
OPS = {
    "leaky_relu": lambda d: F.leaky_relu(d["x"]), "elu": lambda d: F.elu(d["x"]),
    "softplus": lambda d: F.softplus(d["x"]), "mish": lambda d: F.mish(d["x"]),
    "hardswish": lambda d: F.hardswish(d["x"]), "hardtanh": lambda d: F.hardtanh(d["x"]),
    "prelu": lambda d: F.prelu(d["img"], d["slope"]), "glu": lambda d: F.glu(d["x"]),
    "clamp": lambda d: d["x"].clamp(-1, 1), "maximum": lambda d: torch.maximum(d["x"], d["y"]),
    "where": lambda d: torch.where(d["x"].detach() > 0, d["x"], d["y"]),
    "masked_fill": lambda d: d["x"].masked_fill(d["x"].detach() > 1, 0.0),
    "pow_tensor": lambda d: torch.pow(d["p"], d["y"]), "remainder": lambda d: torch.remainder(d["x"], 0.7),
    "expm1": lambda d: torch.expm1(d["x"]), "log1p": lambda d: torch.log1p(d["p"]), "log2": lambda d: d["p"].log2(),
    "sin": lambda d: torch.sin(d["x"]), "atan": lambda d: d["x"].atan(), "floor": lambda d: d["x"].floor(),
    "reciprocal": lambda d: d["p"].reciprocal(), "sign": lambda d: d["x"].sign(),
    "amax(-1)": lambda d: d["x"].amax(-1), "amin(0)": lambda d: d["x"].amin(0),
    "max(-1)": lambda d: d["x"].max(-1)[0], "argmax(-1)": lambda d: d["x"].argmax(-1),
    "max()": lambda d: d["x"].max(), "var(-1)": lambda d: d["x"].var(-1), "norm(-1)": lambda d: d["x"].norm(dim=-1),
    "logsumexp(-1)": lambda d: d["x"].logsumexp(-1), "cumsum(-1)": lambda d: d["x"].cumsum(-1),
    "topk(8)": lambda d: d["x"].topk(8, -1)[0], "gather": lambda d: d["x"].gather(-1, d["idx"]),
    "tril": lambda d: d["x"].tril(), "flip": lambda d: d["x"].flip(-1), "roll": lambda d: d["x"].roll(3, -1),
    "pad": lambda d: F.pad(d["x"], (1, 1)), "stack": lambda d: torch.stack([d["x"], d["y"]]),
    "embedding_bag": lambda d: F.embedding_bag(d["ids"], d["emb"]),
    "avg_pool2d": lambda d: F.avg_pool2d(d["img"], 2), "adaptive_avg_pool2d": lambda d: F.adaptive_avg_pool2d(d["img"], 1),
    "interpolate": lambda d: F.interpolate(d["img"], scale_factor=2), "group_norm": lambda d: F.group_norm(d["img"], 8),
    "conv_transpose2d": lambda d: F.conv_transpose2d(d["img"], d["w3"], stride=2),
    "smooth_l1_loss": lambda d: F.smooth_l1_loss(d["x"], d["y"]),
    "bce_with_logits": lambda d: F.binary_cross_entropy_with_logits(d["x"], d["p"].detach().clamp(0, 1)),
    "kl_div": lambda d: F.kl_div(d["x"], d["p"].detach(), reduction="batchmean"),
}
DIFFERENTIABLE = ("x", "y", "p", "img", "emb", "w3", "slope")


def on(device, data, grad):
    return {k: v.to(device).requires_grad_(grad and k in DIFFERENTIABLE) for k, v in data.items()}


def timed(fn, device, calls):
    """Mean microseconds per call over `calls` calls, the device synchronised at the end."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    if device == "openreg":
        torch.openreg.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", help="OPENREG_ENGINE (name, path or chain); default: the default chain")
    parser.add_argument("--ops", help="comma-separated names of OPS (default: all)")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    parser.add_argument("--backward", action="store_true", help="time forward and backward (sum of the output)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per side (default 5)")
    parser.add_argument("--calls", type=int, default=20, help="calls per round (default 20)")
    parser.add_argument("--quick", action="store_true", help="one round of two calls of three ops")
    args = parser.parse_args()
    if args.engine:
        os.environ["OPENREG_ENGINE"] = args.engine
    import openreg

    names = args.ops.split(",") if args.ops else list(OPS)
    if args.quick:
        names, args.rounds, args.calls = names[:3] if args.ops else ["leaky_relu", "amax(-1)", "maximum"], 1, 2
    unknown = [n for n in names if n not in OPS]
    if unknown:
        parser.error(f"unknown ops {unknown}; known: {', '.join(OPS)}")
    torch.set_num_threads(args.threads)
    data = inputs()
    sides = {"cpu": on("cpu", data, args.backward), "openreg": on("openreg", data, args.backward)}
    print("# bench/op_sweep.py: ops outside the model suite, openreg device vs torch CPU\n")
    print(describe(cpu_description()) + "  ")
    print(f"torch {torch.__version__}; chain {' -> '.join(openreg.info()['chain'])}; {args.threads} thread(s); "
          f"{'forward and backward' if args.backward else 'forward'}; {args.rounds} rounds of {args.calls} calls "
          f"per side, alternating; medians  ")
    print(f"ratio = device / torch CPU: above 1.0x the device is SLOWER; `<<<` above {SLOW}x\n")
    print("| op | torch CPU us | device us (ratio) | served by |")
    print("|---|---|---|---|")
    slow = []
    for name in names:
        # An op with an integer result (argmax) has no backward: timed forward only.
        backward = args.backward and OPS[name](sides["cpu"]).requires_grad

        def call(device, op=OPS[name], backward=backward):
            out = op(sides[device])
            if backward:
                out.sum().backward()
        for device in sides:  # warm-up (and the device's first calls' allocations)
            timed(lambda: call(device), device, 2)
        openreg.reset_stats()
        times = {"cpu": [], "openreg": []}
        for r in range(args.rounds):
            for device in (("cpu", "openreg") if r % 2 == 0 else ("openreg", "cpu")):
                times[device].append(timed(lambda: call(device), device, args.calls))
        cpu, dev = statistics.median(times["cpu"]), statistics.median(times["openreg"])
        served = ", ".join(f"{op.replace('aten::', '')}: {'/'.join(engines)}"
                           for op, engines in sorted(openreg.stats().items()))
        flag = " <<<" if dev / cpu > SLOW else ""
        if flag:
            slow.append(name)
        label = name if backward == args.backward else f"{name} (forward only: no gradient)"
        print(f"| {label} | {cpu:.1f} | {dev:.1f} ({dev / cpu:.2f}x{flag}) | {served or '(no engine call)'} |", flush=True)
    print(f"\nabove {SLOW}x: {', '.join(slow) if slow else 'none'}")


if __name__ == "__main__":
    main()
