"""The main job: examples/train.py trains on openreg as well as on CPU."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "examples", "train.py")


def _train(device: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, TRAIN, "--device", device, "--epochs", "5", "--min-accuracy", "0.95"],
        capture_output=True, text=True, timeout=600, env=dict(os.environ),
    )


def _accuracy(out: str) -> float:
    m = re.search(r"test accuracy: ([0-9.]+)%", out)
    assert m, f"no accuracy line in:\n{out}"
    return float(m.group(1))


def test_train_example_matches_cpu_accuracy():
    dev = _train("openreg")
    assert dev.returncode == 0, dev.stderr[-2000:]
    cpu = _train("cpu")
    assert cpu.returncode == 0, cpu.stderr[-2000:]
    acc_dev, acc_cpu = _accuracy(dev.stdout), _accuracy(cpu.stdout)
    assert acc_dev >= 95.0
    # Same seed, same data order: the device may differ from CPU only by rounding.
    assert abs(acc_dev - acc_cpu) <= 1.0, (acc_dev, acc_cpu)
    # The engine summary names the engine that served the ops.
    assert re.search(r"ops by engine: .*\w+=\d+", dev.stdout), dev.stdout
