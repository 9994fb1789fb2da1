#!/usr/bin/env bash
# Sets up, then runs every test:
#  1. the GoogleTest suite (ABI, loader, router) and the conformance suite on every
#     built engine, through ctest;
#  2. the third-party example engine, built out of tree against the installed SDK
#     only, then checked by the ABI-level conformance suite;
#  3. the pytest suite on the openreg device (it also runs the end-to-end
#     conformance CLI and train.py on the third-party engine, and compiles the
#     engine authoring guide's snippets in an empty folder);
#  4. the device part of the pytest suite once more, with the third-party engine
#     in front of aten_ref (pytest --engine).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=${PYTHON:-python3}
BUILD_DIR=build/skbuild

echo "== GoogleTest and per-engine conformance (ctest)"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j2

echo "== third-party engine: out-of-tree build against the installed SDK"
TP_BUILD=build/third_party_engine
cmake -S examples/third_party_engine -B "$TP_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$("$PY" -m openreg cmake-prefix-path)" >/dev/null
cmake --build "$TP_BUILD" -j2
TP_ENGINE="$PWD/$TP_BUILD/libopenreg_engine_my_engine.so"
"$PY" -m openreg conformance --abi "$TP_ENGINE" --strict --gtest_brief=1

echo "== pytest"
export OPENREG_TEST_PARTIAL_ENGINE="$PWD/$BUILD_DIR/fixtures/libopenreg_engine_fixture_good.so"
export OPENREG_TEST_THIRD_PARTY_ENGINE="$TP_ENGINE"
"$PY" -m pytest tests/python -q -rs "$@"

echo "== pytest again, on the third-party engine (--engine): the device must behave the same"
"$PY" -m pytest tests/python -q -rs --engine "$TP_ENGINE" \
  --ignore=tests/python/test_engine_sdk.py --ignore=tests/python/test_conformance_cli.py \
  --ignore=tests/python/test_engine_authoring_doc.py "$@"
