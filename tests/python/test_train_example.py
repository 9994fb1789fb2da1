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


def _ranks_output(stderr: str) -> str:
    """What the ranks wrote to stderr before torchrun's report of a failed rank (that
    report, a long traceback of torchrun's own, would otherwise crowd out the rank's
    last words), then the report's first lines."""
    report = stderr.find("ChildFailedError")
    start = stderr.rfind("Traceback (most recent call last)", 0, report) if report >= 0 else -1
    if start < 0:
        return stderr[-3000:]
    return stderr[max(0, start - 4000):start] + "\n[torchrun's report]\n" + stderr[report:report + 1500]


def test_train_example_trains_on_the_device():
    """The main job end to end: train.py reaches its accuracy on the device and names
    the engine that served it."""
    dev = _train("openreg")
    assert dev.returncode == 0, dev.stderr[-2000:]
    assert _accuracy(dev.stdout) >= 95.0
    assert re.search(r"ops by engine: .*\w+=\d+", dev.stdout), dev.stdout


def test_train_example_steps_match_cpu(assert_trains_like_cpu):
    """Same weights, same batches: each step's loss is CPU's up to float32 rounding."""
    assert_trains_like_cpu()


def test_data_parallel_example_reaches_the_single_process_accuracy():
    """examples/train_ddp.py under torchrun, 2 ranks over gloo: the ranks split each of
    train.py's batches, and the model reaches train.py's accuracy (within a point:
    batch norm's statistics are per rank)."""
    single = _train("openreg")
    assert single.returncode == 0, single.stderr[-2000:]
    ddp = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         os.path.join(ROOT, "examples", "train_ddp.py"), "--epochs", "5", "--min-accuracy", "0.95"],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONFAULTHANDLER="1"),  # a rank that dies prints its threads' stacks
    )
    assert ddp.returncode == 0, ddp.stdout[-2000:] + _ranks_output(ddp.stderr)
    assert "(2 ranks)" in ddp.stdout, ddp.stdout
    assert _accuracy(ddp.stdout) >= _accuracy(single.stdout) - 1.0
