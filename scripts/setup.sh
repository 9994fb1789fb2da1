#!/usr/bin/env bash
# Installs what openreg needs on a fresh Debian machine (system packages, the
# pinned torch, build tools), then builds and installs openreg itself. Safe to
# re-run: every step checks first, so a machine that has everything takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
BUILD_DIR=build/skbuild   # must match tool.scikit-build.build-dir in pyproject.toml
STAMP=$BUILD_DIR/.installed

# 1. Debian packages (oneDNN, Eigen, GoogleTest, Google Benchmark, ccache).
apt_pkgs=(libdnnl-dev libeigen3-dev libgtest-dev libbenchmark-dev ccache)
missing=()
for p in "${apt_pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
fi

# 2. Python packages. torch is pinned: the CPU wheel of 2.13.0 (never an unpinned
#    torch, which would pull several GB of CUDA packages). transformers is for the
#    model suite (tests/python/models), expecttest for PyTorch's OpInfo database
#    (tests/python/test_bad_input.py), matplotlib for bench/models.py's chart
#    (docs/bench.png), pytest-xdist for scripts/test.sh's two pytest processes;
#    torch pinned in the same command keeps pip from resolving it to another torch.
need_pip=()
"$PY" - <<'PYEOF' || need_pip=(1)
import importlib.metadata as m, sys
want = {"torch": "2.13.0", "scikit-build-core": None, "pybind11": None, "cmake": None,
        "ninja": None, "pytest": None, "scikit-learn": None, "tqdm": None, "transformers": None,
        "expecttest": None, "matplotlib": None, "pytest-xdist": None}
for name, version in want.items():
    try:
        have = m.version(name)
    except m.PackageNotFoundError:
        sys.exit(1)
    if version and not have.startswith(version):
        sys.exit(1)
PYEOF
if [ ${#need_pip[@]} -gt 0 ]; then
  echo "setup: installing Python packages"
  "$PY" -m pip install -q torch==2.13.0 scikit-build-core pybind11 cmake ninja pytest scikit-learn tqdm transformers \
    expecttest matplotlib pytest-xdist
fi

# 3. openreg, built by scikit-build-core without build isolation (isolation would
#    fetch another torch). Skipped when nothing changed since the last install.
if [ -f "$STAMP" ] && "$PY" -c "import openreg" >/dev/null 2>&1 &&
   [ -z "$(find core engines python cmake tests/cpp tests/conformance CMakeLists.txt pyproject.toml -newer "$STAMP" -type f 2>/dev/null | head -n 1)" ]; then
  echo "setup: openreg is up to date"
  exit 0
fi
echo "setup: building and installing openreg (two jobs, ccache)"
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
export OPENREG_BUILD_TESTS=${OPENREG_BUILD_TESTS:-ON}
"$PY" -m pip install -q --no-build-isolation --no-deps .
touch "$STAMP"
