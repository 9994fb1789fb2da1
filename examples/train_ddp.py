"""Train examples/train.py's CNN data-parallel on the openreg device: one process per
rank, gradients averaged through gloo (DistributedDataParallel), launched by torchrun.

    torchrun --nproc-per-node 2 examples/train_ddp.py
    torchrun --nproc-per-node 2 examples/train_ddp.py --epochs 5 --min-accuracy 0.95

Each global batch of --batch-size samples (the same batches, in the same order, as
examples/train.py draws) is split between the ranks, so the ranks together take
train.py's steps. Rank r uses device openreg:(LOCAL_RANK % device count). Rank 0
prints the test accuracy. Exit status: 0 on success, 1 if the test accuracy is below
--min-accuracy, 2 if the device or the process group cannot be used.
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from train import import_openreg, load_data, make_model  # examples/train.py, next to this file


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=64, help="global batch, split between the ranks")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-accuracy", type=float, default=0.0,
                   help="exit with status 1 if test accuracy (0..1) is below this")
    return p.parse_args()


def main():
    args = parse_args()
    if "LOCAL_RANK" not in os.environ:
        print("error: run this under torchrun (torchrun --nproc-per-node 2 examples/train_ddp.py)",
              file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)  # every rank starts from the same weights
    import_openreg()  # registers the device (torch's autoload does too)
    device = torch.device("openreg", int(os.environ["LOCAL_RANK"]) % torch.openreg.device_count())
    torch.openreg.set_device(device)
    dist.init_process_group("gloo")  # gloo reads and writes openreg memory in place
    rank, world = dist.get_rank(), dist.get_world_size()

    x_train, y_train, x_test, y_test = load_data(args.seed)
    model = DistributedDataParallel(make_model().to(device))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed)  # the same shuffles on every rank

    n = len(y_train)
    for epoch in range(1, args.epochs + 1):
        model.train()
        perm = torch.randperm(n, generator=gen)
        running, seen = 0.0, 0
        for start in range(0, n, args.batch_size):
            idx = perm[start:start + args.batch_size][rank::world]  # this rank's share
            xb, yb = x_train[idx].to(device), y_train[idx].to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()  # DDP averages the gradients over the ranks here
            optimizer.step()
            running += loss.item() * len(idx)
            seen += len(idx)
        if rank == 0:
            print(f"epoch {epoch}/{args.epochs}: loss {running / seen:.4f} (rank 0's share)")

    status = 0
    if rank == 0:
        model.eval()
        with torch.no_grad():
            pred = model.module(x_test.to(device)).argmax(dim=1)
            accuracy = (pred == y_test.to(device)).sum().item() / len(y_test)
        print(f"test accuracy: {accuracy * 100:.2f}% ({world} ranks)")
        if accuracy < args.min_accuracy:
            print(f"accuracy {accuracy:.4f} is below --min-accuracy {args.min_accuracy}", file=sys.stderr)
            status = 1
    dist.destroy_process_group()
    return status


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
