"""The machine a benchmark ran on, as every benchmark of bench/ reports it: CPU
model, logical CPUs and the vector features the engines' kernels depend on."""

import os

CPU_FEATURES = ("avx2", "avx512f", "avx512_bf16")


def cpu_description():
    model, flags = "?", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "?":
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return {"model": model, "logical_cpus": os.cpu_count(),
            "features": {f: f in flags for f in CPU_FEATURES}}


def describe(machine):
    """One line: 'CPU: <model>, N logical CPUs; vector features: avx2 yes, ...'."""
    feats = ", ".join(f"{f} {'yes' if v else 'no'}" for f, v in machine["features"].items())
    line = f"CPU: {machine['model']}, {machine['logical_cpus']} logical CPUs; vector features: {feats}"
    if "ONEDNN_MAX_CPU_ISA" in os.environ:
        line += f"; ONEDNN_MAX_CPU_ISA={os.environ['ONEDNN_MAX_CPU_ISA']}"
    if "OPENREG_EIGEN_ISA" in os.environ:
        line += f"; OPENREG_EIGEN_ISA={os.environ['OPENREG_EIGEN_ISA']}"
    return line
