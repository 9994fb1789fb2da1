#!/usr/bin/env bash
# Sets up, then runs every test:
#  1. the GoogleTest suite (ABI, loader, router, execution queue, block pool) and the
#     conformance suite on every built engine, through ctest; the queue and block pool
#     tests once more under ThreadSanitizer (scripts/tsan.sh);
#  2. the gate: both conformance modes (ABI and through torch) with --strict for
#     every in-tree engine, on this CPU, capped at AVX2 when it has more, and at the
#     baseline ISA (the engines side by side);
#  3. the third-party example engine, built out of tree against the installed SDK
#     only, then checked by the ABI-level conformance suite;
#  4. the pytest suite on the openreg device (in two processes: run_pytest below), the
#     model suite (tests/python/models) included (it also runs the end-to-end
#     conformance CLI and train.py on the third-party engine, and compiles the engine
#     authoring guide's snippets in an empty folder);
#  5. the device part of the pytest suite once more on every other engine (the
#     default is the best built one: onednn, then eigen), aten_ref and the
#     third-party engine included (pytest --engine); the model suite on every
#     engine but the third-party one, which reruns the files its five ops change
#     (below); the files no engine takes part in (core's device module, allocator,
#     fork and exit handling) are not rerun per engine;
#  6. the device part once more with OPENREG_LAUNCH_BLOCKING=1 (every op inline).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each section's heading says how long the run has taken so far (CI aims at 30 minutes).
section() { echo "== $* [$((SECONDS / 60)) min $((SECONDS % 60)) s in]"; }
bash scripts/setup.sh
PY=${PYTHON:-python3}
BUILD_DIR=build/skbuild

section "GoogleTest and per-engine conformance (ctest)"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j2

# The execution queue and the block pool again, built with ThreadSanitizer (about a minute).
bash scripts/tsan.sh

# The in-tree engines: the list the rest of this script walks, the ones built here.
BUILT_ENGINES=()
for engine in onednn eigen; do
  if "$PY" -c "import sys, openreg
sys.exit(0 if any(e['name'] == sys.argv[1] for e in openreg.info()['available']) else 1)" "$engine"; then
    BUILT_ENGINES+=("$engine")
  else
    echo "== (engine $engine not built: skipped)"
  fi
done

# The gate: an in-tree engine never advertises an op x dtype that fails either
# conformance mode (--strict: nor one without cases), on this CPU and on one without
# AVX-512 (oneDNN honours ONEDNN_MAX_CPU_ISA; eigen's kernel choice honours
# OPENREG_EIGEN_ISA), whatever machine CI lands on; and on a CPU without AVX2 (an old
# or emulated x86-64): the engines' baseline builds (SSE4.1 for oneDNN, the generic
# SSE2 kernels for eigen) serve what the wider ones do and must match torch too.
# On a CPU with nothing above AVX2 (no AVX-512, nor AVX-VNNI, which oneDNN ranks above
# it) the AVX2 cap changes nothing: the capped runs would repeat ctest's ABI run and the
# run through torch (about two minutes on a 2-core AVX2 machine).
ABOVE_AVX2=0
grep -qwE "avx512f|avx_vnni" /proc/cpuinfo 2>/dev/null && ABOVE_AVX2=1
gate() {  # one engine's runs, in order; the first failure ends them
  local engine=$1
  section "conformance through torch, $engine (--strict)"
  "$PY" -m openreg conformance "$engine" --strict
  if [ "$ABOVE_AVX2" = 0 ]; then
    echo "== (nothing above AVX2 on this CPU: ctest's ABI run and the run above were the AVX2 ones)"
  else
    section "conformance capped at AVX2, $engine (--strict, both modes)"
    ONEDNN_MAX_CPU_ISA=AVX2 OPENREG_EIGEN_ISA=avx2 "$PY" -m openreg conformance --abi "$engine" --strict --gtest_brief=1
    ONEDNN_MAX_CPU_ISA=AVX2 OPENREG_EIGEN_ISA=avx2 "$PY" -m openreg conformance "$engine" --strict
  fi
  section "conformance at the baseline ISA, $engine (--strict, both modes)"
  ONEDNN_MAX_CPU_ISA=SSE41 OPENREG_EIGEN_ISA=generic "$PY" -m openreg conformance --abi "$engine" --strict --gtest_brief=1
  ONEDNN_MAX_CPU_ISA=SSE41 OPENREG_EIGEN_ISA=generic "$PY" -m openreg conformance "$engine" --strict
}
# The engines' gates run side by side, each printed whole when it ends: a run is one
# mostly single-threaded Python process of small kernels, so on 2 cores the two took
# about 3 minutes side by side instead of 6 one after the other. Idle OpenMP threads
# sleep (OMP_WAIT_POLICY=passive, as for pytest below) rather than spin on the core
# the other gate needs.
section "conformance gate: ${BUILT_ENGINES[*]} side by side"
GATE_LOGS=$(mktemp -d)
gate_pids=()
for engine in "${BUILT_ENGINES[@]}"; do
  ( set -euo pipefail; OMP_WAIT_POLICY=passive gate "$engine" ) >"$GATE_LOGS/$engine.log" 2>&1 &
  gate_pids+=($!)
done
gate_failed=()
for i in "${!BUILT_ENGINES[@]}"; do
  engine=${BUILT_ENGINES[$i]}
  wait "${gate_pids[$i]}" || gate_failed+=("$engine")
  cat "$GATE_LOGS/$engine.log"
done
rm -rf "$GATE_LOGS"
if [ ${#gate_failed[@]} -gt 0 ]; then
  echo "== conformance gate FAILED for: ${gate_failed[*]} (its log above ends at the failing run)"
  exit 1
fi

section "third-party engine: out-of-tree build against the installed SDK"
TP_BUILD=build/third_party_engine
cmake -S examples/third_party_engine -B "$TP_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$("$PY" -m openreg cmake-prefix-path)" >/dev/null
cmake --build "$TP_BUILD" -j2
TP_ENGINE="$PWD/$TP_BUILD/libopenreg_engine_my_engine.so"
"$PY" -m openreg conformance --abi "$TP_ENGINE" --strict --gtest_brief=1

# Every pytest run below is two: the suite in two processes (pytest-xdist: most of its
# time is child processes and single-threaded Python, so on 2 cores the first pass took
# 9 minutes instead of 15), each file's tests in one process and in order as in a serial
# run (--dist loadfile), their OpenMP threads sleeping when idle (OMP_WAIT_POLICY=passive:
# libgomp's idle threads otherwise spin for milliseconds after each parallel region,
# on the cores the other worker needs; an engine's rerun took 168 s instead of 200);
# then, alone and as users run, the files that count the CPU time of the process's
# threads, which a second worker's load would change.
JOBS=${OPENREG_TEST_JOBS:-2}
ALONE=(tests/python/test_host_threads.py)
run_pytest() {  # pytest options (no paths); the extra ones given to this script come last
  local not_alone=() alone=() status=0 f
  for f in "${ALONE[@]}"; do
    not_alone+=(--ignore="$f")
    [[ " $* " == *" --ignore=$f "* ]] || alone+=("$f")  # a path given outright is collected anyway
  done
  OMP_WAIT_POLICY=passive "$PY" -m pytest tests/python -n "$JOBS" --dist loadfile "${not_alone[@]}" "$@"
  [ ${#alone[@]} -gt 0 ] || return 0
  "$PY" -m pytest "${alone[@]}" "$@" || status=$?
  [ "$status" = 0 ] || [ "$status" = 5 ]  # 5: the options selected none of them
}

section "pytest"
export OPENREG_TEST_PARTIAL_ENGINE="$PWD/$BUILD_DIR/fixtures/libopenreg_engine_fixture_good.so"
export OPENREG_TEST_CRASHING_ENGINE="$PWD/$BUILD_DIR/fixtures/libopenreg_engine_fixture_crashes.so"
export OPENREG_TEST_THIRD_PARTY_ENGINE="$TP_ENGINE"
run_pytest -q -rs "$@"

# The device suite once more per engine, each in front of aten_ref (pytest --engine):
# the device must behave the same whatever computes. The files left out test the
# SDK, the package's engines and the benchmark by name, whatever --engine says.
RERUN_SKIP=(--ignore=tests/python/test_engine_sdk.py --ignore=tests/python/test_conformance_cli.py
            --ignore=tests/python/test_engine_authoring_doc.py --ignore=tests/python/test_native_engines.py
            --ignore=tests/python/test_bench.py --ignore=tests/python/test_crash.py
            --ignore=tests/python/test_tuning.py)
# What no engine takes part in runs once (above) and with OPENREG_LAUNCH_BLOCKING=1
# (below: the execution mode is part of it), not again per engine: the device module,
# the caching allocator, device properties, fork and interpreter-exit handling, and
# torch.distributed's failure handling are core's, whichever engine computes. They
# are mostly child processes (about 95 s a pass), which kept CI over 30 minutes. The
# host-threads checks name the engine of each child process themselves (45 s a pass).
CORE_ONLY=(--ignore=tests/python/test_device.py --ignore=tests/python/test_memory.py
           --ignore=tests/python/test_device_properties.py --ignore=tests/python/test_fork.py
           --ignore=tests/python/test_exit.py --ignore=tests/python/test_distributed_failures.py
           --ignore=tests/python/test_host_threads.py)
DEFAULT_ENGINE=$("$PY" -c "import torch, openreg; torch.ones(1, device='openreg'); print(openreg.info()['chain'][0])")
for engine in "${BUILT_ENGINES[@]}" aten_ref "$TP_ENGINE"; do
  [ "$engine" = "$DEFAULT_ENGINE" ] && continue  # the run above used it
  skip=("${RERUN_SKIP[@]}" "${CORE_ONLY[@]}")
  # The example engine serves five ops (add, add_, mul, relu; mm in float32 only): on the
  # model suite and the whole-feature files (distributed and FSDP, torch.compile, the
  # profiler, the training example, fused attention) its chain runs what aten_ref's
  # rerun runs but for those five, which the files kept here exercise (routing,
  # declines, autograd, views, queued operands, streams, errors). 1 minute, not 3.
  [ "$engine" = "$TP_ENGINE" ] && skip+=(--ignore=tests/python/models --ignore=tests/python/test_distributed.py
    --ignore=tests/python/test_fsdp.py --ignore=tests/python/test_compile.py --ignore=tests/python/test_profiler.py
    --ignore=tests/python/test_train_example.py --ignore=tests/python/test_attention.py)
  section "pytest again, on engine $engine (--engine)"
  run_pytest -q -rs --engine "$engine" "${skip[@]}" "$@"
done

# Every run above enqueued ops (asynchronous execution, the default); this one runs
# each op where it is called, the debugging mode, which must behave the same.
section "pytest again, default engine, OPENREG_LAUNCH_BLOCKING=1"
OPENREG_LAUNCH_BLOCKING=1 run_pytest -q -rs "${RERUN_SKIP[@]}" "$@"
