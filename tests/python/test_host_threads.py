"""Engines that thread through the host's parallel_for (eigen, the SDK's loops) get
torch's intra-op threads: at torch.set_num_threads(2) the work of one large op is
split over two threads. ATen's at::parallel_for is an OpenMP template compiled into
its caller, so core must be built with OpenMP for this (core/CMakeLists.txt);
without it the parallel region silently ran on one thread.

The check counts the threads whose CPU time grew while the op ran (from
/proc/self/task), not wall time, so a busy machine does not change the answer."""

import json
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")

CODE = """
import json, os, torch, openreg
torch.set_num_threads(THREADS)

def cpu_ticks():
    ticks = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ticks[tid] = int(fields[11]) + int(fields[12])  # utime + stime
        except OSError:
            pass
    return ticks

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
