"""The distributed tests' harness: start a test file's ranks as processes on this
machine and collect what they print, killing them past a time limit so that a hang
fails the test instead of stalling the suite (test_distributed.py,
test_distributed_failures.py, test_fsdp.py)."""

import os
import subprocess
import sys
import time

import pytest


def start(script, args_of_rank, world, env_extra=None):
    """``python script *args_of_rank(rank)`` for each rank, importing the test process's
    openreg, without a tuned routing table unless the environment names one."""
    env = dict(os.environ)
    env.setdefault("OPENREG_ROUTES", "off")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.update(env_extra or {})
    return [
        subprocess.Popen([sys.executable, os.path.abspath(script), *map(str, args_of_rank(rank))],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for rank in range(world)
    ]


def finish(procs, what, kill_after, stop_after_first=False):
    """Each rank's (exit code, output), all within kill_after seconds, else the test
    fails. stop_after_first: once rank 0 is done, kill the others (a rank told to hang)."""
    deadline = time.monotonic() + kill_after
    results = []
    try:
        for rank, p in enumerate(procs):
            if stop_after_first and rank > 0 and p.poll() is None:
                p.kill()
            out = p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0]
            results.append((p.returncode, out))
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what}: the ranks did not finish within {kill_after}s")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results
