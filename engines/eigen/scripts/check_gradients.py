"""Gradients of examples/train.py's CNN on the openreg device vs torch CPU.

    OPENREG_ENGINE=/path/to/libopenreg_engine_eigen.so python engines/eigen/scripts/check_gradients.py

Builds the example model, runs one forward/backward on the same batch on CPU and on
openreg (float32, training mode), prints the max abs difference of the loss, of
every parameter gradient and of the batch-norm running statistics, the share of
op calls the first engine of the chain served, and exits 1 when a gradient differs
by more than --tol (default 1e-4)."""
import argparse
import copy
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples"))
import train  # noqa: E402  (examples/train.py)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tol", type=float, default=1e-4)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    import openreg

    torch.manual_seed(args.seed)
    x_train, y_train, _, _ = train.load_data(args.seed)
    x, y = x_train[: args.batch], y_train[: args.batch]
    cpu = train.make_model()
    dev = copy.deepcopy(cpu).to("openreg")
    loss_fn = nn.CrossEntropyLoss()

    openreg.reset_stats()
    loss_c = loss_fn(cpu(x), y)
    loss_c.backward()
    loss_d = loss_fn(dev(x.to("openreg")), y.to("openreg"))
    loss_d.backward()

    worst = abs(loss_c.item() - loss_d.item())
    print(f"loss: cpu {loss_c.item():.6f} openreg {loss_d.item():.6f} diff {worst:.3e}")
    grad_worst = 0.0
    for (name, pc), (_, pd) in zip(cpu.named_parameters(), dev.named_parameters()):
        d = (pc.grad - pd.grad.cpu()).abs().max().item()
        grad_worst = max(grad_worst, d)
        print(f"grad {name:12s} {tuple(pc.shape)!s:18s} max abs diff {d:.3e}")
    for (name, bc), (_, bd) in zip(cpu.named_buffers(), dev.named_buffers()):
        if bc.dtype.is_floating_point:
            print(f"buffer {name:20s} max abs diff {(bc - bd.cpu()).abs().max().item():.3e}")
    stats = openreg.stats()
    per_engine = {}
    for engines in stats.values():
        for e, n in engines.items():
            per_engine[e] = per_engine.get(e, 0) + n
    print("ops by engine:", per_engine)
    print(f"max abs gradient diff: {grad_worst:.3e} (tolerance {args.tol:g})")
    return 0 if grad_worst <= args.tol else 1


if __name__ == "__main__":
    sys.exit(main())
