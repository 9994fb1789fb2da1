"""The engines openreg ships with native kernels (eigen, onednn): each one, in
its own process, against torch CPU.

- trains examples/train.py to CPU's accuracy, and serves the share of a training
  epoch's op calls its issue asks for (eigen >= 95%, onednn >= 90%);
- gives the example CNN's gradients within 1e-4 of CPU (float32);
- exports only its entry symbol;
- onednn: runs the oneDNN it was linked with (Debian's), while torch's own CPU
  convolution runs its bundled oneDNN in the same process, both correct, with
  one OpenMP runtime mapped.

The op-by-op comparison with aten_ref (hostile inputs, every advertised op x
dtype) is ctest's conformance.<engine>; the whole device suite runs again per
engine in scripts/test.sh (pytest --engine)."""

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "examples", "train.py")
MIN_SHARE = {"eigen": 0.95, "onednn": 0.90}
DEPENDENCY = {"eigen": "/usr/include/eigen3/Eigen/Core", "onednn": "/usr/include/oneapi/dnnl/dnnl.hpp"}


def _lib_dir():
    import openreg

    return os.path.join(os.path.dirname(openreg.__file__), "lib")


def _engine_path(name):
    return os.path.join(_lib_dir(), f"libopenreg_engine_{name}.so")


@pytest.fixture(params=sorted(MIN_SHARE))
def engine(request):
    name = request.param
    if not os.path.exists(_engine_path(name)):
        # The build skips an engine only when its dependency is missing
        # (OPENREG_ENGINE_<NAME>=AUTO); with it installed, a missing engine is a bug.
        assert not os.path.exists(DEPENDENCY[name]), (
            f"{DEPENDENCY[name]} exists but the package has no {name} engine")
        pytest.skip(f"{name} engine not built ({DEPENDENCY[name]} missing)")
    return name


def test_engines_with_installed_dependencies_are_built():
    for name, header in DEPENDENCY.items():
        if os.path.exists(header):
            assert os.path.exists(_engine_path(name)), f"{header} is installed but {name} was not built"


def _accuracy(out):
    m = re.search(r"test accuracy: ([0-9.]+)%", out)
    assert m, out
    return float(m.group(1))


def test_train_example_reaches_cpu_accuracy(engine, run_command):
    args = [sys.executable, TRAIN, "--epochs", "5"]
    dev = run_command(args, env_extra={"OPENREG_ENGINE": engine})
    assert dev.returncode == 0, dev.stdout[-2000:] + dev.stderr[-2000:]
    cpu = run_command(args + ["--device", "cpu"])
    assert cpu.returncode == 0, cpu.stderr[-2000:]
    # Same seed and data order; float32 rounding in other kernels moves a few of
    # the 360 test images across the decision boundary (2 points = 7 images).
    acc_dev, acc_cpu = _accuracy(dev.stdout), _accuracy(cpu.stdout)
    assert acc_dev >= 95.0 and abs(acc_dev - acc_cpu) <= 2.0, (dev.stdout, cpu.stdout)
    assert re.search(rf"ops by engine: .*{engine}=\d+", dev.stdout), dev.stdout


EPOCH_AND_GRADS = r"""
import copy, json, sys
import torch
import openreg
sys.path.insert(0, {examples!r})
from train import load_data, make_model

x_train, y_train, _, _ = load_data(0)
loss_fn = torch.nn.CrossEntropyLoss()

# One training epoch, as examples/train.py runs it.
torch.manual_seed(0)
model = make_model().to("openreg")
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
perm = torch.randperm(len(y_train), generator=torch.Generator().manual_seed(0))
openreg.reset_stats()
for i in range(0, len(perm), 64):
    idx = perm[i:i + 64]
    xb, yb = x_train[idx].to("openreg"), y_train[idx].to("openreg")
    opt.zero_grad()
    loss = loss_fn(model(xb), yb)
    loss.backward()
    opt.step()
    loss.item()
stats = openreg.stats()

# Gradients of the same CNN on CPU and on the device, float32.
torch.manual_seed(1)
cpu_model = make_model()
dev_model = copy.deepcopy(cpu_model).to("openreg")
x, y = x_train[:64], y_train[:64]
loss_fn(cpu_model(x), y).backward()
loss_fn(dev_model(x.to("openreg")), y.to("openreg")).backward()
grad_diff = {{n: (p.grad.cpu() - q.grad).abs().max().item()
             for (n, p), q in zip(dev_model.named_parameters(), cpu_model.parameters())}}
print(json.dumps({{"stats": stats, "chain": openreg.info()["chain"], "grad_diff": grad_diff}}))
"""


def _epoch_and_grads(run_python, engine):
    proc = run_python(EPOCH_AND_GRADS.format(examples=os.path.join(ROOT, "examples")),
                      env_extra={"OPENREG_ENGINE": engine})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_engine_serves_a_training_epoch(engine, run_python):
    r = _epoch_and_grads(run_python, engine)
    assert r["chain"][0] == engine, r["chain"]
    total = served = 0
    others = {}
    for op, per_engine in r["stats"].items():
        for e, n in per_engine.items():
            total += n
            if e == engine:
                served += n
            else:
                others[op] = others.get(op, 0) + n
    share = served / total
    assert share >= MIN_SHARE[engine], (
        f"{engine} served {served}/{total} op calls ({share:.1%}); others: {sorted(others.items())}")
    worst = max(r["grad_diff"].values())
    assert worst <= 1e-4, r["grad_diff"]


def test_engine_exports_only_its_entry_symbol(engine):
    out = subprocess.run(["nm", "-D", "--defined-only", _engine_path(engine)], capture_output=True, text=True,
                         check=True).stdout
    symbols = [line.split()[-1] for line in out.splitlines() if line.strip()]
    assert symbols == ["openreg_engine_entry"], symbols


TWO_ONEDNNS = r"""
import json, re
import torch
import torch.nn.functional as F
import openreg

torch.manual_seed(0)
x = torch.randn(8, 16, 20, 20)
w = torch.randn(32, 16, 3, 3) * 0.1
b = torch.randn(32)
ref = F.conv2d(x.double(), w.double(), b.double(), padding=1)  # ATen's own double kernel

with torch.backends.mkldnn.flags(enabled=True):
    cpu = F.conv2d(x, w, b, padding=1)          # torch's bundled oneDNN
openreg.reset_stats()
dev = F.conv2d(x.to("openreg"), w.to("openreg"), b.to("openreg"), padding=1).cpu()
stats = openreg.stats()
with torch.backends.mkldnn.flags(enabled=True):
    cpu_again = F.conv2d(x, w, b, padding=1)    # and once more after the engine ran

maps = open("/proc/self/maps").read()
libs = sorted({line.split()[-1] for line in maps.splitlines() if ".so" in line.split()[-1]})
info = openreg.info()
print(json.dumps({
    "cpu_err": (cpu.double() - ref).abs().max().item(),
    "cpu_again_err": (cpu_again.double() - ref).abs().max().item(),
    "dev_err": (dev.double() - ref).abs().max().item(),
    "conv_engines": stats.get("aten::convolution", {}),
    "version": next(e["version"] for e in info["engines"] if e["name"] == "onednn"),
    "torch_config": torch.__config__.show(),
    "libs": libs,
}))
"""


def _header_version():
    text = open("/usr/include/oneapi/dnnl/dnnl_version.h").read()
    parts = [re.search(rf"#define DNNL_VERSION_{k}\s+(\d+)", text).group(1) for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


def test_onednn_engine_and_torch_onednn_share_a_process(run_python):
    if not os.path.exists(_engine_path("onednn")):
        pytest.skip("onednn engine not built")
    proc = run_python(TWO_ONEDNNS, env_extra={"OPENREG_ENGINE": "onednn"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["cpu_err"] < 1e-3 and r["cpu_again_err"] < 1e-3, r
    assert r["dev_err"] < 1e-3, r
    assert r["conv_engines"] == {"onednn": 1}, r["conv_engines"]
    # The engine runs the oneDNN it was built against (Debian's), not torch's.
    linked = _header_version()
    m = re.search(r"oneDNN (\d+\.\d+\.\d+)", r["version"])
    assert m and m.group(1) == linked, (r["version"], linked)
    torch_onednn = re.search(r"MKL-DNN v(\d+\.\d+\.\d+)", r["torch_config"]).group(1)
    assert torch_onednn != linked, "the test needs torch's oneDNN to differ from the engine's"
    assert any(os.path.basename(p).startswith("libdnnl.so") for p in r["libs"]), r["libs"]
    # One OpenMP runtime in the process (torch's libgomp and Debian's share a soname).
    gomps = [p for p in r["libs"] if re.search(r"lib(g|i)omp[^/]*\.so", os.path.basename(p))]
    assert len(gomps) == 1, gomps


# The digits CNN's training step, and batch norm over 3-d and 5-d inputs, with oneDNN
# printing each primitive it runs (ONEDNN_VERBOSE=1 writes "onednn_verbose,exec,..."
# lines to stdout).
ONEDNN_KERNELS = r"""
import torch, torch.nn as nn, openreg
from openreg.workloads import build
build("digits CNN", "openreg").train().item()
for bn, shape in ((nn.BatchNorm1d(16), (8, 16, 10)), (nn.BatchNorm3d(16), (4, 16, 3, 4, 5))):
    bn = bn.to("openreg")
    bn(torch.randn(shape, device="openreg", requires_grad=True)).sum().backward()
torch.accelerator.synchronize()
"""


@pytest.mark.parametrize("isa", [None, "AVX2"])
def test_onednn_runs_jit_kernels_not_reference_ones(isa, run_python):
    # oneDNN falls back to its C++ reference kernels when a layout does not suit the
    # CPU's: batch norm on 16-channel blocks ran bnorm_ref (60x slower) on AVX2.
    if not os.path.exists(_engine_path("onednn")):
        pytest.skip("onednn engine not built")
    env = {"OPENREG_ENGINE": "onednn", "OPENREG_ROUTES": "off", "ONEDNN_VERBOSE": "1", "ONEDNN_MAX_CPU_ISA": isa}
    proc = run_python(ONEDNN_KERNELS, env_extra=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    runs = [line.split(",") for line in proc.stdout.splitlines() if line.startswith("onednn_verbose,exec,")]
    kinds = {r[3] for r in runs}
    assert {"convolution", "batch_normalization", "matmul"} <= kinds, kinds
    slow = sorted({f"{r[3]} ({r[4]}, {r[5]})" for r in runs if "ref" in r[4]})
    assert not slow, f"reference kernels ran with ONEDNN_MAX_CPU_ISA={isa}: {slow}"
