"""Train a small CNN on scikit-learn's handwritten digits with the openreg device.

The digits set (1797 8x8 grayscale images, 10 classes) ships with scikit-learn,
so nothing is downloaded. The model exercises conv2d, batch norm, relu,
max-pool, linear, cross-entropy and Adam.

Usage:
    python examples/train.py                          # openreg, default engine
    OPENREG_ENGINE=onednn python examples/train.py    # openreg, oneDNN engine
    python examples/train.py --device cpu             # plain PyTorch CPU
    python examples/train.py --epochs 5 --seed 1 --min-accuracy 0.95

On the openreg device the script ends with a summary of how many ops each
engine ran (training + evaluation). Exit status: 0 on success, 1 if the test
accuracy is below --min-accuracy, 2 if the device cannot be used.
"""

import argparse
import sys

import torch
import torch.nn as nn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from tqdm import tqdm


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="openreg", help="torch device string (default: openreg)")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-accuracy", type=float, default=0.0,
                   help="exit with status 1 if test accuracy (0..1) is below this")
    return p.parse_args()


def load_data(seed):
    """Return (x_train, y_train, x_test, y_test) as CPU tensors, pixels in [0, 1]."""
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0  # N x 1 x 8 x 8
    y = torch.tensor(digits.target, dtype=torch.long)
    idx_train, idx_test = train_test_split(
        torch.arange(len(y)).numpy(), test_size=0.2, random_state=seed, stratify=y.numpy())
    idx_train, idx_test = torch.from_numpy(idx_train), torch.from_numpy(idx_test)
    return x[idx_train], y[idx_train], x[idx_test], y[idx_test]


def make_model():
    return nn.Sequential(
        nn.Conv2d(1, 16, kernel_size=3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(2),                                   # 16 x 4 x 4
        nn.Conv2d(16, 32, kernel_size=3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.MaxPool2d(2),                                   # 32 x 2 x 2
        nn.Flatten(),
        nn.Linear(32 * 2 * 2, 10),
    )


def import_openreg():
    """Import the openreg extension, or exit with a clear message."""
    try:
        import openreg
    except ImportError as e:
        print(f"error: cannot import openreg ({e}); is the extension built and installed?",
              file=sys.stderr)
        sys.exit(2)
    return openreg


def print_engine_stats(stats, top=10):
    """Summarise openreg.stats(): {op_name: {engine_name: count}}."""
    per_engine = {}
    for engines in stats.values():
        for engine, count in engines.items():
            per_engine[engine] = per_engine.get(engine, 0) + count
    summary = ", ".join(f"{e}={n}" for e, n in sorted(per_engine.items()))
    print(f"ops by engine: {summary or '(none)'}")
    ranked = sorted(stats.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    print(f"top {min(top, len(ranked))} ops:")
    for op, engines in ranked[:top]:
        detail = ", ".join(f"{e}={n}" for e, n in sorted(engines.items()))
        print(f"  {op:<40} {sum(engines.values()):>8}  ({detail})")


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    # Importing openreg registers the "openreg" device type, so do it first.
    openreg = import_openreg() if args.device.split(":")[0] == "openreg" else None
    device = torch.device(args.device)

    x_train, y_train, x_test, y_test = load_data(args.seed)
    model = make_model().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed)  # CPU RNG: shuffling is device independent

    if openreg is not None:
        openreg.reset_stats()

    n = len(y_train)
    for epoch in range(1, args.epochs + 1):
        model.train()
        perm = torch.randperm(n, generator=gen)
        batches = [perm[i:i + args.batch_size] for i in range(0, n, args.batch_size)]
        running, seen = 0.0, 0
        bar = tqdm(batches, desc=f"epoch {epoch}/{args.epochs}", leave=True)
        for idx in bar:
            xb, yb = x_train[idx].to(device), y_train[idx].to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            running += loss.item() * len(idx)
            seen += len(idx)
            bar.set_postfix(loss=f"{running / seen:.4f}")

    model.eval()
    with torch.no_grad():
        pred = model(x_test.to(device)).argmax(dim=1)
        correct = (pred == y_test.to(device)).sum().item()
    accuracy = correct / len(y_test)
    print(f"test accuracy: {accuracy * 100:.2f}%")

    if openreg is not None:
        print_engine_stats(openreg.stats())

    if accuracy < args.min_accuracy:
        print(f"accuracy {accuracy:.4f} is below --min-accuracy {args.min_accuracy}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
