"""bench/engines.py runs (a smoke run with tiny sizes): it is a benchmark, so
nothing here looks at the timings, only that every case ran on the device and
was compared with torch CPU."""

import os
import re
import sys


def test_engine_benchmark_smoke(run_command, repo_root):
    script = os.path.join(repo_root, "bench", "engines.py")
    proc = run_command([sys.executable, script, "--quick", "--rounds", "1"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert re.search(r"^openreg engine: \S+", out, re.M), out
    for case in ("GEMM 64x64x64", "GEMM 128x128x128", "conv2d fwd", "conv2d bwd", "add 65536", "training step"):
        row = next((l for l in out.splitlines() if l.startswith(case)), None)
        assert row is not None, f"no row for {case!r} in:\n{out}"
        assert re.search(r"\d+\.\d+x", row), row
