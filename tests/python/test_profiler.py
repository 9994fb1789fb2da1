"""torch.profiler on the device (docs/design.md, "Profiler").

One training step of the tiny GPT-2 (openreg.workloads) is profiled in a child process,
so that its stderr (where PyTorch logs failing profiler callbacks) is captured and
OPENREG_LAUNCH_BLOCKING can differ, under each way of profiling a PrivateUse1 device:
torch.profiler with the CPU activity only, with the device's activity too, and the
autograd profiler's device mode (use_device="openreg", use_kineto=False), which calls the
PrivateUse1 profiler stubs at every op. Checked against facts the profiler does not
produce: openreg.stats() (the route table's counters) for which engine ran each op, the
allocator's statistics for the memory events, the wall clock for the times.
"""

import json
import os
import sys

import pytest
import torch

from conftest import _run, describe_process

# Prints one JSON object: the profiled step's key_averages, its Chrome trace (parsed),
# the wall time of the step, and openreg.stats() and the allocator's allocated bytes
# before and after it.
CHILD = r"""
import json, os, sys, tempfile, time
import torch
import openreg
from openreg import workloads

how = sys.argv[1]  # cpu, device (both torch.profiler) or fallback
torch.manual_seed(0)
step = workloads.gpt2("openreg").train
step().item()  # warm-up: engines loaded, output sizes cached
torch.openreg.synchronize()
if how == "fallback":
    ctx = torch.autograd.profiler.profile(use_device="openreg", use_kineto=False, profile_memory=True)
else:
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.PrivateUse1] if how == "device" else [])
    ctx = profile(activities=acts, profile_memory=True)
stats_before = openreg.stats()
mem_before = torch.openreg.memory_allocated()
t0 = time.perf_counter()
with ctx as prof:
    step().item()
    torch.openreg.synchronize()  # the CPU activity alone would not wait for the kernels
wall_us = (time.perf_counter() - t0) * 1e6
mem_after = torch.openreg.memory_allocated()
stats_after = openreg.stats()
path = os.path.join(tempfile.mkdtemp(), "trace.json")
prof.export_chrome_trace(path)
with open(path) as f:
    trace = json.load(f)["traceEvents"]
rows = [dict(key=e.key, count=e.count, cpu=e.cpu_time_total, self_cpu=e.self_cpu_time_total,
             device=e.device_time_total, self_device=e.self_device_time_total,
             device_memory=e.self_device_memory_usage) for e in prof.key_averages()]
print(json.dumps(dict(rows=rows, trace=trace, wall_us=wall_us, stats_before=stats_before,
                      stats_after=stats_after, mem_before=mem_before, mem_after=mem_after)))
"""

PRIVATEUSE1 = 20  # c10::DeviceType::PrivateUse1, the "Device Type" of a memory event


def _served_by_engines(before, after):
    """{(op, engine): calls} that engines served between two openreg.stats() (the
    reference path, host_ref, runs no engine call)."""
    served = {}
    for op, engines in after.items():
        for engine, n in engines.items():
            delta = n - before.get(op, {}).get(engine, 0)
            if delta and engine != "host_ref":
                served[(op, engine)] = delta
    return served


def _by_name(rows):
    """key_averages() rows summed by name: PyTorch splits a name into two rows when some of
    its events got device time and others none (is_legacy differs)."""
    merged = {}
    for r in rows:
        m = merged.setdefault(r["key"], dict.fromkeys(r, 0) | {"key": r["key"]})
        for field, value in r.items():
            if field != "key":
                m[field] += value
    return merged


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    """profiles(how, blocking) -> (the child's CompletedProcess, its JSON), one child per
    mode for the whole module."""
    pytest.importorskip("transformers")
    cwd = str(tmp_path_factory.mktemp("profiler_cwd"))
    cache = {}

    def get(how, blocking):
        if (how, blocking) not in cache:
            env = {"OPENREG_LAUNCH_BLOCKING": "1" if blocking else "0"}
            proc = _run([sys.executable, "-c", CHILD, how], env, cwd)
            assert proc.returncode == 0, describe_process(proc)
            cache[(how, blocking)] = (proc, json.loads(proc.stdout.strip().splitlines()[-1]))
        return cache[(how, blocking)]

    return get


MODES = [("cpu", False), ("device", False), ("fallback", False), ("device", True), ("fallback", True)]
IDS = [f"{how}-{'blocking' if blocking else 'async'}" for how, blocking in MODES]


@pytest.mark.parametrize("how,blocking", MODES, ids=IDS)
def test_profile_of_a_gpt2_step(profiles, how, blocking):
    proc, p = profiles(how, blocking)

    # Clean: no failing profiler callback, no "PrivateUse1 used in profiler but not enabled".
    assert "not enabled" not in proc.stderr, proc.stderr[:3000]
    assert "Exception in RecordFunction callback" not in proc.stderr, proc.stderr[:3000]

    # Times are positive, and the engine calls took no more than the step's wall time.
    rows = _by_name(p["rows"])
    for r in p["rows"]:
        for field in ("cpu", "self_cpu", "device", "self_device"):
            assert r[field] >= 0, (r["key"], field, r[field])
    engine_rows = {k: r for k, r in rows.items() if k.startswith("openreg::")}
    assert engine_rows, sorted(rows)
    for k, r in engine_rows.items():
        assert r["cpu"] > 0, (k, r)
    kernels_us = sum(r["self_cpu"] for r in engine_rows.values())
    assert kernels_us <= p["wall_us"], (kernels_us, p["wall_us"])

    # Each engine call is an event "openreg::<engine>::<op>": as many as the route table
    # counted for that op and engine during the step.
    served = _served_by_engines(p["stats_before"], p["stats_after"])
    assert served
    for (op, engine), calls in served.items():
        key = f"openreg::{engine}::{op}"
        assert key in rows, (key, sorted(engine_rows))
        assert rows[key]["count"] == calls, (key, rows[key]["count"], calls)

    # The same events in the exported Chrome trace, with positive durations, on the
    # thread where they ran: the queue's worker, or the caller with launch blocking.
    events = [e for e in p["trace"] if e.get("name", "").startswith("openreg::") and e.get("ph") == "X"]
    names = {e["name"] for e in events}
    assert {f"openreg::{engine}::{op}" for op, engine in served} <= names
    assert all(e["dur"] > 0 for e in events)
    threads = {e["tid"] for e in events}
    # .item() runs on the main thread (tids are system ids or the profiler's own numbering)
    main = {e["tid"] for e in p["trace"] if e.get("name") == "aten::_local_scalar_dense"}
    assert len(main) == 1, main
    if blocking:
        assert main <= threads, (main, threads)
    else:
        assert len(threads) == 1 and not main & threads, (main, threads)


@pytest.mark.parametrize("how,blocking", MODES, ids=IDS)
def test_device_memory_in_the_memory_profile(profiles, how, blocking):
    _, p = profiles(how, blocking)
    memory = [e["args"] for e in p["trace"] if e.get("name") == "[memory]"]
    device = [m for m in memory if m.get("Device Type") == PRIVATEUSE1]
    assert device, memory[:5]
    assert all(m["Device Id"] == 0 for m in device)
    assert any(m["Bytes"] > 0 for m in device) and any(m["Bytes"] < 0 for m in device)
    # Every allocation and free of the step was reported: they add up to the change in
    # the allocator's allocated bytes.
    assert sum(m["Bytes"] for m in device) == p["mem_after"] - p["mem_before"]
    # key_averages attributes device memory to ops.
    assert any(r["device_memory"] != 0 for r in p["rows"])


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "blocking"])
def test_device_time_is_where_the_kernels_ran(profiles, blocking):
    # The device mode times each op with two markers on the queue, stamped by the worker:
    # an op's device time covers its kernels there, so it is at least their time.
    _, p = profiles("fallback", blocking)
    rows = _by_name(p["rows"])
    mm_kernels = [r for k, r in rows.items() if k.startswith("openreg::") and k.endswith("::aten::mm")]
    assert mm_kernels
    kernel_us = sum(r["cpu"] for r in mm_kernels)
    if blocking:  # the kernel event is the op's child on the same thread
        device_us = sum(r["device"] for r in mm_kernels)
    else:  # the kernel ran on the worker; the caller's aten::mm carries the device time
        device_us = rows["aten::mm"]["device"]
        assert rows["aten::mm"]["self_cpu"] < kernel_us  # the caller only enqueued it
    assert 0.9 * kernel_us <= device_us <= p["wall_us"], (kernel_us, device_us, p["wall_us"])


def test_a_profile_that_stops_with_work_still_queued(openreg, device):
    # torch.profiler with the CPU activity only does not synchronise the device when it
    # stops: kernels still queued then run after the profile, and are left out of it
    # (rather than recorded into a profile being collected). Those that ran are in.
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(256, 256, device=device)
    for _ in range(2):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            y = x
            for i in range(40):
                y = torch.mm(y, x) * (1 / 16)
                if i == 19:
                    torch.openreg.synchronize()
        kernels = [e for e in prof.events() if e.name.startswith("openreg::")]
        assert 40 <= len(kernels) <= 80, len(kernels)
        assert all(e.cpu_time_total > 0 for e in kernels)
    torch.openreg.synchronize()  # the late kernels ran, with no profiler to record into


def test_queued_copies_are_events_of_the_host(openreg, device):
    # Copies into the device are queued work without an engine: "openreg::host::copy_",
    # timed on the worker. With launch blocking they run inside the caller's aten::copy_.
    from torch.profiler import ProfilerActivity, profile

    src = torch.randn(512, 512)
    dst = torch.empty(512, 512, device=device)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            dst.copy_(src)
        torch.openreg.synchronize()
    copies = [e for e in prof.events() if e.name == "openreg::host::copy_"]
    if os.environ.get("OPENREG_LAUNCH_BLOCKING", "0") not in ("", "0"):
        assert copies == []
    else:
        assert len(copies) == 3 and all(e.cpu_time_total > 0 for e in copies)
        caller = {e.thread for e in prof.events() if e.name == "aten::copy_" and e.cpu_parent is None}
        assert not caller & {e.thread for e in copies}
    torch.testing.assert_close(dst.cpu(), src)
