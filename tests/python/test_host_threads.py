"""Engines that thread through the host's parallel_for (eigen, the SDK's loops) get
torch's intra-op threads: at torch.set_num_threads(2) the work of one large op is
split over two threads. ATen's at::parallel_for is an OpenMP template compiled into
its caller, so core must be built with OpenMP for this (core/CMakeLists.txt);
without it the parallel region silently ran on one thread.

The check counts the threads whose CPU time grew while the op ran (from
/proc/self/task), not wall time, so a busy machine does not change the answer."""

import json
import os
import sys

import pytest
from queued_work import launch_blocking

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")

# The CPU time of each thread of the process, by thread id (from /proc/self/task).
CPU_TICKS = """
import json, os, threading, torch, openreg

def cpu_ticks():
    ticks = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ticks[int(tid)] = int(fields[11]) + int(fields[12])  # utime + stime
        except OSError:
            pass
    return ticks
"""

CODE = CPU_TICKS + """
torch.set_num_threads(THREADS)
x = torch.rand(1 << 23, device="openreg")
x.exp(); torch.openreg.synchronize()
before = cpu_ticks()
for _ in range(300):
    x.exp()
torch.openreg.synchronize()
after = cpu_ticks()
grew = sorted((after[t] - before.get(t, 0) for t in after), reverse=True)
print(json.dumps(grew))
"""


@pytest.mark.parametrize("threads", [1, 2])
def test_eigen_kernels_use_torchs_thread_count(run_python, threads):
    proc = run_python(CODE.replace("THREADS", str(threads)), env_extra={"OPENREG_ENGINE": "eigen"})
    assert proc.returncode == 0, proc.stderr
    grew = json.loads(proc.stdout.strip().splitlines()[-1])
    assert grew[0] >= 20, f"the op ran too briefly to tell ({grew[0]} ticks)"
    # A thread took part when it did at least a third of the busiest thread's work.
    busy = [g for g in grew if g >= grew[0] / 3]
    assert len(busy) == threads, f"{len(busy)} threads did the work at torch.set_num_threads({threads}): {grew[:4]}"


TEAMS = """
import json, os, time, torch, openreg
torch.set_num_threads(2)

def threads():
    return len(os.listdir("/proc/self/task"))

def settles_at(n):
    # A released team's threads exit after the call that released them returns.
    until = time.monotonic() + 5
    while threads() != n and time.monotonic() < until:
        time.sleep(0.001)
    return threads()

small = torch.ones(8, device="openreg")
big = torch.rand(1 << 22, device="openreg")
small.add(1).cpu()
time.sleep(0.1)  # the worker, idle, released whatever team it had
base = threads()
cpu = torch.rand(1 << 22)
cpu.exp()  # a torch CPU op on two threads: this thread now owns a team
with_cpu_team = threads()
small.add(1)  # enqueueing device work releases it
after_enqueue = settles_at(base)
for _ in range(50):
    big.exp()  # on the worker's team of two, while this thread waits below
with_worker_team = settles_at(base + 1)
torch.openreg.synchronize()
time.sleep(0.1)
after_idle = settles_at(base)
print(json.dumps([base, with_cpu_team, after_enqueue, with_worker_team, after_idle]))
"""


def test_a_threads_idle_openmp_team_is_released_for_the_other(run_python):
    # libgomp's team threads spin between parallel regions only while the process holds
    # no more of them than CPUs: the Python thread's team (from torch CPU ops) and the
    # worker's would exceed that on a 2-core machine, and every device op at 2 threads
    # then waited for a sleeping thread. Each side lets its idle team go.
    if launch_blocking():
        pytest.skip("with OPENREG_LAUNCH_BLOCKING=1 the calling thread runs every kernel in its own team")
    proc = run_python(TEAMS, env_extra={"OPENREG_ENGINE": "eigen"})
    assert proc.returncode == 0, proc.stderr
    base, with_cpu_team, after_enqueue, with_worker_team, after_idle = json.loads(proc.stdout.strip().splitlines()[-1])
    assert with_cpu_team == base + 1, "the torch CPU op did not start a team of two"
    assert after_enqueue == base, "enqueueing device work left the Python thread's team in place"
    assert with_worker_team == base + 1, "the device op did not run on a team of two"
    assert after_idle == base, "the idle worker kept its team"


ALTERNATING = """
import json, os, torch, openreg
torch.set_num_threads(2)
small = torch.ones(8, device="openreg")
cpu = torch.rand(1 << 16)
cpu.exp(); small.add(1)
before = set(os.listdir("/proc/self/task"))
for _ in range(100):
    cpu.exp()  # this thread's own parallel region
    small.add(1)  # right after it, a device op
torch.openreg.synchronize()
print(json.dumps(len(set(os.listdir("/proc/self/task")) - before)))
"""


def test_a_thread_alternating_cpu_and_device_ops_keeps_its_team(run_python):
    # Releasing on every enqueue would start a new team (a new thread) for each CPU op:
    # torch.compile's generated kernels run on the calling thread between device ops,
    # and a compiled training step ran 2.5-4x slower that way.
    proc = run_python(ALTERNATING, env_extra={"OPENREG_ENGINE": "eigen"})
    assert proc.returncode == 0, proc.stderr
    new_threads = json.loads(proc.stdout.strip().splitlines()[-1])
    # One may appear if this thread was descheduled for milliseconds between two calls.
    assert new_threads <= 3, f"{new_threads} new threads in 100 alternations"


DYNAMIC = CPU_TICKS + """
torch.set_num_threads(1)
x = torch.rand(1 << 23, device="openreg")
keep = x > 0.5
torch.masked_select(x, keep); torch.openreg.synchronize()
me = threading.get_native_id()
before = cpu_ticks()
for _ in range(40):
    torch.masked_select(x, keep)  # its output's size depends on the data
after = cpu_ticks()
grew = {tid: after[tid] - before.get(tid, 0) for tid in after}
print(json.dumps([grew.get(me, 0), max(v for tid, v in grew.items() if tid != me)]))
"""


def test_an_op_sized_by_its_kernel_runs_on_the_worker(run_python):
    # Such an op makes the caller wait (as CUDA's nonzero does); its kernel still runs
    # on the worker, in the worker's OpenMP team: run on the calling thread, it started
    # a second team, and two teams on two CPUs make each other's threads sleep.
    if launch_blocking():
        pytest.skip("with OPENREG_LAUNCH_BLOCKING=1 every op runs on the calling thread")
    proc = run_python(DYNAMIC, env_extra={"OPENREG_ENGINE": "aten_ref"})
    assert proc.returncode == 0, proc.stderr
    caller, busiest_other = json.loads(proc.stdout.strip().splitlines()[-1])
    assert busiest_other >= 20, f"the ops ran too briefly to tell ({busiest_other} ticks)"
    assert caller < busiest_other / 3, f"the calling thread did the work: {caller} ticks against {busiest_other}"


SPREAD = CPU_TICKS + """
torch.set_num_threads(2)
x = torch.rand(512, 128, device="openreg")
w = torch.rand(128, 128, device="openreg")
# 64K elements: one thread for data one thread wrote, two for data written by two
# (the product: 16.8 MFLOP, two threads).
h = x @ w if FROM_PRODUCT else x * 1.0
(x @ w).sum().item()  # either way the worker's team of two has run
me = threading.get_native_id()  # enqueues; the worker and its team do the work
before = cpu_ticks()
for _ in range(100000):
    h.mul_(1.0)
torch.openreg.synchronize()
after = cpu_ticks()
grew = sorted((after[t] - before.get(t, 0) for t in after if t != me), reverse=True)
print(json.dumps(grew))
"""


@pytest.mark.parametrize("from_product", [False, True])
def test_onednn_keeps_data_several_threads_wrote_on_them(run_python, from_product):
    # engines/onednn/data_placement.hpp: a 64K-element op takes two threads when it
    # reads data two threads wrote (a matmul's output), so that data stays where the
    # next matmul's threads read it, and one thread otherwise.
    if launch_blocking():
        pytest.skip("with OPENREG_LAUNCH_BLOCKING=1 the calling thread runs every kernel in its own team")
    # Up to three processes: on a 2-core AVX2 VM about one process in six ran the loop
    # without the worker's team thread at all (3 threads listed, not 4), with this
    # build and with the one before it alike (not root-caused; docs/design.md, "Data
    # several threads wrote keeps several threads"). A build without the rule gives 1
    # every time, so the check still fails there.
    expected = 2 if from_product else 1
    seen = []
    for _ in range(3):
        proc = run_python(SPREAD.replace("FROM_PRODUCT", str(from_product)), env_extra={"OPENREG_ENGINE": "onednn"})
        assert proc.returncode == 0, proc.stderr
        grew = json.loads(proc.stdout.strip().splitlines()[-1])
        assert grew[0] >= 20, f"the ops ran too briefly to tell ({grew[0]} ticks)"
        busy = [g for g in grew if g >= grew[0] / 3]
        if len(busy) == expected:
            return
        seen.append(grew[:4])
    raise AssertionError(f"threads that did the work on data {'two' if from_product else 'one'} wrote, in 3 processes: {seen}")


PLACEMENT = """
import json, os, torch, openreg
usable = sorted(os.sched_getaffinity(0))
torch.set_num_threads(THREADS)
x = torch.rand(1 << 16, device="openreg")
x.add(1).cpu()  # the worker has started, with every usable CPU
os.sched_setaffinity(0, {usable[0]})  # this thread (Linux: pid 0 is the calling thread)
for _ in range(20):
    x.add_(1)
x.cpu()

def allowed(tid):
    with open(f"/proc/self/task/{tid}/status") as f:
        line = next(l for l in f if l.startswith("Cpus_allowed_list:"))
    cpus = set()
    for part in line.split(":", 1)[1].strip().split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return sorted(cpus)

others = [c for c in usable if c != usable[0]]
print(json.dumps(sum(allowed(t) == others for t in os.listdir("/proc/self/task"))))
"""


@pytest.mark.parametrize("threads", [1, 2])
def test_a_one_thread_worker_keeps_off_the_enqueuing_threads_cpu(run_python, threads):
    # core/src/runtime/worker_placement.h: after a pause Linux woke the worker on the
    # Python thread's CPU and kept both there, the other CPU idle. At one intra-op
    # thread the worker may use every usable CPU but the enqueuing thread's; at more,
    # every CPU (its OpenMP team's threads inherit its mask).
    if launch_blocking():
        pytest.skip("with OPENREG_LAUNCH_BLOCKING=1 there is no worker")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one usable CPU")
    proc = run_python(PLACEMENT.replace("THREADS", str(threads)), env_extra={"OPENREG_ENGINE": "eigen"})
    assert proc.returncode == 0, proc.stderr
    kept_off = json.loads(proc.stdout.strip().splitlines()[-1])
    assert kept_off == (1 if threads == 1 else 0), f"{kept_off} thread(s) kept off the Python thread's CPU"
