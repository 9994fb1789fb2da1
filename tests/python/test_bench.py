"""bench/engines.py, bench/overhead.py and the other benchmarks run (smoke runs: tiny sizes, one
round): they are benchmarks, so nothing here looks at the timings, only that
every case ran on the device and was compared with torch CPU."""

import os
import re
import sys

import pytest


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


# Issue 11's fixed list of small ops, each a row of bench/overhead.py's tables.
OVERHEAD_OPS = ("add", "mul_", "relu", "sum", "mm", "linear", "softmax", "layer_norm", "gelu",
                "embedding", "index_select", "cat", "where")


def test_overhead_benchmark_smoke(run_command, repo_root, openreg):
    # The engine this suite runs on (bench/overhead.py alone would run every built one).
    engine = os.environ.get("OPENREG_ENGINE") or openreg.info()["chain"][0]
    script = os.path.join(repo_root, "bench", "overhead.py")
    proc = run_command([sys.executable, script, "--quick", "--rounds", "1", "--engine", engine])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "above 1.0x the device is SLOWER" in out, out
    assert re.search(r"vector features: avx2 (yes|no), avx512f (yes|no), avx512_bf16 (yes|no)", out), out
    tables = re.split(r"^## (\d+) threads?$", out, flags=re.M)
    assert tables[1::2] == ["1", "2"], out
    for threads, table in zip(tables[1::2], tables[2::2]):
        rows = [l for l in table.splitlines() if l.startswith("| ")]
        columns = [c.strip() for c in rows[0].strip("|").split("|")]
        assert columns[:2] == ["op", "torch CPU us"], rows[0]
        assert re.fullmatch(r"\S+ us \(ratio\)", columns[-1]), rows[0]
        for op in OVERHEAD_OPS:
            row = next((r for r in rows[1:] if r.startswith(f"| {op} ")), None)
            assert row is not None, f"no row for {op!r} with {threads} threads in:\n{out}"
            assert re.search(r"\| \d+\.\d+ \(\d+\.\d+x", row), row
        assert rows[-1].startswith("| geomean") and re.search(r"\d+\.\d+x", rows[-1]), rows[-1]
    assert re.search(r"^geomean device/CPU: .*\d+\.\d+x", out.strip().splitlines()[-1]), out


def test_models_benchmark_smoke(run_command, repo_root, openreg, tmp_path):
    engine = os.environ.get("OPENREG_ENGINE") or openreg.info()["chain"][0]
    script = os.path.join(repo_root, "bench", "models.py")
    paths = {k: str(tmp_path / f"bench.{k}") for k in ("json", "md", "png")}
    proc = run_command([sys.executable, script, "--quick", "--engine", engine, "--models", "digits CNN,GPT-2",
                        "--json", paths["json"], "--markdown", paths["md"], "--chart", paths["png"]])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"vector features: avx2 (yes|no), avx512f (yes|no), avx512_bf16 (yes|no)", proc.stdout)
    import json
    with open(paths["json"]) as f:
        figures = json.load(f)
    (result,) = figures["results"]
    assert figures["threads"] == [1, 2] and sorted(result["threads"]) == ["1", "2"]
    for per_model in result["threads"].values():
        assert sorted(per_model) == ["GPT-2", "digits CNN"]
        for per_mode in per_model.values():
            for mode in ("train", "infer"):
                fig = per_mode[mode]
                assert fig["cpu_ms"] > 0 and fig["dev_ms"] > 0
                assert abs(fig["ratio"] - fig["dev_ms"] / fig["cpu_ms"]) < 1e-9
    with open(paths["md"]) as f:
        table = f.read()
    for threads in ("1 thread", "2 threads"):
        assert f"## {threads}" in table, table
    for model in ("digits CNN", "GPT-2"):
        for mode in ("train", "infer"):
            assert re.search(rf"^\| {re.escape(model)} \| {mode} \| \d+\.\d+ \| \d+\.\d+ \(\d+\.\d+x", table, re.M), table
    with open(paths["png"], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_op_sweep_smoke(run_command, repo_root, openreg):
    engine = os.environ.get("OPENREG_ENGINE") or openreg.info()["chain"][0]
    script = os.path.join(repo_root, "bench", "op_sweep.py")
    proc = run_command([sys.executable, script, "--quick", "--backward", "--engine", engine])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert re.search(r"vector features: avx2 (yes|no), avx512f (yes|no), avx512_bf16 (yes|no)", out), out
    for op in ("leaky_relu", "amax(-1)", "maximum"):
        row = next((l for l in out.splitlines() if l.startswith(f"| {op} |")), None)
        assert row is not None, f"no row for {op!r} in:\n{out}"
        # Both sides timed, and the device's calls reached an engine (counted by op).
        assert re.search(r"\| \d+\.\d+ \| \d+\.\d+ \(\d+\.\d+x", row), row
        assert "(no engine call)" not in row, row
    assert "leaky_relu_backward: " in next(l for l in out.splitlines() if l.startswith("| leaky_relu |")), out


def test_op_sweep_backward_of_an_integer_result(run_command, repo_root, openreg):
    # argmax has no gradient: --backward times its forward and says so instead of failing.
    engine = os.environ.get("OPENREG_ENGINE") or openreg.info()["chain"][0]
    script = os.path.join(repo_root, "bench", "op_sweep.py")
    proc = run_command([sys.executable, script, "--quick", "--backward", "--engine", engine, "--ops", "argmax(-1)"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| argmax(-1) (forward only: no gradient) |" in proc.stdout, proc.stdout


def test_async_benchmark_smoke(run_command, repo_root, openreg, tmp_path):
    engine = os.environ.get("OPENREG_ENGINE") or openreg.info()["chain"][0]
    script = os.path.join(repo_root, "bench", "async_step.py")
    md = str(tmp_path / "async.md")
    proc = run_command([sys.executable, script, "--quick", "--engine", engine, "--models", "digits CNN",
                        "--markdown", md])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"vector features: avx2 (yes|no), avx512f (yes|no), avx512_bf16 (yes|no)", proc.stdout)
    with open(md) as f:
        table = f.read()
    assert "digits CNN" in table and "launch" in table.lower(), table


def test_new_shapes_benchmark_smoke(run_command, repo_root, openreg):
    pytest.importorskip("transformers")
    script = os.path.join(repo_root, "bench", "new_shapes.py")
    proc = run_command([sys.executable, script, "--rounds", "1", "--steps", "2", "--models", "GPT-2"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"vector features: avx2 (yes|no), avx512f (yes|no), avx512_bf16 (yes|no)", proc.stdout)
    row = re.search(r"^GPT-2 +([\d.]+) +([\d.]+) +([\d.]+)x .* (\d+) / (\d+)$", proc.stdout, re.M)
    assert row, proc.stdout
    reserved, peak = int(row.group(4)), int(row.group(5))
    assert 0 < peak <= reserved, proc.stdout  # the cache holds at least what was live at the peak


def test_compile_benchmark_smoke(run_command, repo_root, openreg, tmp_path):
    engine = os.environ.get("OPENREG_ENGINE") or openreg.info()["chain"][0]
    script = os.path.join(repo_root, "bench", "compile_step.py")
    md = str(tmp_path / "compile.md")
    proc = run_command([sys.executable, script, "--quick", "--engine", engine, "--markdown", md])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"vector features: avx2 (yes|no), avx512f (yes|no), avx512_bf16 (yes|no)", proc.stdout)
    with open(md) as f:
        table = f.read()
    assert "digits CNN" in table and "compiled" in table.lower(), table


def test_collectives_benchmark_smoke(run_command, repo_root, tmp_path):
    # Two ranks of bench/collectives.py over gloo: every row present, with figures.
    script = os.path.join(repo_root, "bench", "collectives.py")
    path = str(tmp_path / "collectives.json")
    proc = run_command([sys.executable, script, "--quick", "--json", path])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert re.search(r"vector features: avx2 (yes|no), avx512f (yes|no), avx512_bf16 (yes|no)", out), out
    ms = r"\d+\.\d+ ms"
    for row in (rf"\| all_reduce 1 MB float32 \| {ms} \(\d+\.\d+ GB/s\) \| {ms} \(\d+\.\d+ GB/s\) \| \d+\.\d+x \|",
                rf"\| all_reduce 4 KB float32 \| {ms} \| {ms} \| \d+\.\d+x \|",
                rf"\| all_reduce 4 KB, openreg without the agreement check \| {ms} \| {ms} \| \d+\.\d+x \|",
                rf"\| DDP step, digits CNN, batch 32 per rank \| {ms} \| {ms} \| \d+\.\d+x \|",
                rf"\| single-process step, batch 32 \| {ms} \| {ms} \| \d+\.\d+x \|",
                r"DDP step / single-process step: CPU tensors \d+\.\d+x, openreg \d+\.\d+x",
                r"agreement check: [+-]\d+\.\d+ ms per 4 KB all_reduce"):
        assert re.search(row, out), f"no line matching {row!r} in:\n{out}"
    import json
    with open(path) as f:
        times = json.load(f)["times"]
    assert set(times["all_reduce"]) == {"cpu", "openreg"}, times
    assert all(len(v) == 1 and v[0] > 0 for case in times.values() for v in case.values()), times


def test_tuned_ab_benchmark_smoke(run_command, repo_root, openreg, tmp_path):
    # A table from a short tune, then bench/tuned_ab.py's rows against it.
    built = {f["name"] for f in openreg.engines_available()}
    if len(built & {"onednn", "eigen", "aten_ref"}) < 2:
        import pytest
        pytest.skip("one engine built: no table to compare")
    table = str(tmp_path / "routes.json")
    env = {"OPENREG_ENGINE": None, "OPENREG_ROUTES": table}
    tune = run_command([sys.executable, "-m", "openreg", "tune", "--models", "digits CNN", "--steps", "1",
                        "--threads", "1,2"], env_extra=env)
    assert tune.returncode == 0, tune.stdout + tune.stderr
    script = os.path.join(repo_root, "bench", "tuned_ab.py")
    proc = run_command([sys.executable, script, "--quick", "--models", "digits CNN"], env_extra=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert re.search(r"vector features: avx2 (yes|no), avx512f (yes|no), avx512_bf16 (yes|no)", out), out
    assert f"table: {table}" in out, out
    for threads in (1, 2):
        for mode in ("train", "infer"):
            assert re.search(rf"^\s+{threads}  digits CNN\s+{mode}(\s+\d+\.\d+){{2}}\s+\d+\.\d+x$", out, re.M), out
    assert re.search(r"^geomean tuned/untuned: \d+\.\d+x$", out.strip().splitlines()[-1]), out


def test_collectives_report_signs_a_negative_check_cost(repo_root):
    # On a noisy machine the run without the agreement check can be the slower one: the report
    # then prints "-0.89 ms", not "+-0.89 ms" (CI's quick run once did, and the smoke test failed).
    import argparse
    import importlib.util
    spec = importlib.util.spec_from_file_location("collectives", os.path.join(repo_root, "bench", "collectives.py"))
    collectives = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(collectives)
    times = {"all_reduce": {"cpu": [1e-3], "openreg": [1e-3]},
             "all_reduce small": {"cpu": [1e-4], "openreg": [2e-4], "openreg, no check": [3e-4]},
             "step": {"cpu": [5e-3], "openreg": [6e-3], "openreg, no check": [7e-3],
                      "single cpu": [4e-3], "single openreg": [4e-3]}}
    result = {"times": times, "info": {"chain": ["onednn", "aten_ref"], "torch": "2.13.0"}}
    args = argparse.Namespace(mb=1, batch=32, rounds=1)
    lines = collectives.report_lines(result, args, collectives.cpu_description())
    check = next(l for l in lines if l.startswith("agreement check:"))
    assert check == "agreement check: -0.10 ms per 4 KB all_reduce, -1.00 ms per DDP step (-14%)", check


def _models_bench(repo_root):
    """bench/models.py as a module (bench/ is not a package)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("models_bench", os.path.join(repo_root, "bench", "models.py"))
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    return models


def test_models_benchmark_pairs_each_round_with_torch_cpus_round_of_the_same_turn(repo_root):
    # The machine's speed drifts between rounds: a ratio is the median of the rounds'
    # quotients (1/2, 3/4, 5/2.5 -> 0.75), not the quotient of the medians (3/2.5 = 1.2).
    import pytest
    models = _models_bench(repo_root)
    assert models.paired_ratio([1.0, 3.0, 5.0], [2.0, 4.0, 2.5]) == 0.75
    assert models.paired_ratio([3.0], [2.0]) == 1.5
    with pytest.raises(ValueError, match="2 engine rounds against 3 torch CPU rounds"):
        models.paired_ratio([1.0, 2.0], [1.0, 2.0, 3.0])


def test_models_benchmark_rotates_the_order_of_its_rounds(repo_root):
    # Over as many rounds as there are sides, each side runs once in every position
    # (a fixed order would keep one side right after torch CPU's round every time).
    models = _models_bench(repo_root)
    sides = ["cpu", "onednn", "eigen", "aten_ref", "tuned"]
    orders = [models.round_order(sides, k) for k in range(len(sides))]
    for order in orders:
        assert sorted(order) == sorted(sides)
    for side in sides:
        assert sorted(order.index(side) for order in orders) == list(range(len(sides)))
    assert models.round_order(sides, len(sides)) == sides


def _step_ops_rows(out):
    """{op: (cpu us, device us)} of bench/step_ops.py's table."""
    rows = {}
    for line in out.splitlines():
        m = re.match(r"(aten::\S+)(?: \[.*\])?\s+(\d+\.\d)\s+(\d+\.\d)\s", line)
        if m:
            cpu, dev = rows.get(m.group(1), (0.0, 0.0))
            rows[m.group(1)] = (cpu + float(m.group(2)), dev + float(m.group(3)))
    return rows


def test_step_ops_times_the_device_blocking_and_queued(run_command, repo_root, openreg):
    # One thread: launch blocking, rows by op and shape; two: queued, rows by op from the
    # worker's engine events. Either way the convolution's device time is counted.
    engine = os.environ.get("OPENREG_ENGINE") or openreg.info()["chain"][0]
    script = os.path.join(repo_root, "bench", "step_ops.py")
    for threads, timed in (("1", "self time"), ("2", "engine calls on the queue's worker")):
        proc = run_command([sys.executable, script, "--engine", engine, "--model", "digits CNN",
                            "--steps", "2", "--threads", threads], env_extra={"OPENREG_ROUTES": "off"})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"{threads} threads" in proc.stdout and f"({timed})" in proc.stdout, proc.stdout
        rows = _step_ops_rows(proc.stdout)
        assert rows.get("aten::convolution", (0, 0))[1] > 0, proc.stdout
        assert rows.get("aten::convolution", (0, 0))[0] > 0, proc.stdout
        if threads == "2":
            assert not re.search(r"^aten::\S+ \[", proc.stdout, re.M), "queued rows carry no shapes"
