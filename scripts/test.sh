#!/usr/bin/env bash
# Sets up, then runs every test: the GoogleTest suite (ABI, loader, router) through
# ctest, and the pytest suite on the openreg device.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=${PYTHON:-python3}
BUILD_DIR=build/skbuild

echo "== GoogleTest (ctest)"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j2

echo "== pytest"
export OPENREG_TEST_PARTIAL_ENGINE="$PWD/$BUILD_DIR/fixtures/libopenreg_engine_fixture_good.so"
"$PY" -m pytest tests/python -q -rs "$@"
