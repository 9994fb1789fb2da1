#!/usr/bin/env bash
# The torch-free runtime's C++ tests (the execution queue, the block pool, the recycling pool) built with
# ThreadSanitizer and run; any data race or lock-order inversion fails the run.
# tests/cpp is configured on its own in a temporary build directory (libtorch, which is
# not instrumented, never enters it); OPENREG_TSAN_BUILD_DIR keeps and reuses one instead.
# Extra arguments go to both test binaries (e.g. --gtest_filter=...).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD=${OPENREG_TSAN_BUILD_DIR:-}
if [ -z "$BUILD" ]; then
  BUILD=$(mktemp -d "${TMPDIR:-/tmp}/openreg-tsan.XXXXXX")
  trap 'rm -rf "$BUILD"' EXIT
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)

echo "== ThreadSanitizer build of tests/cpp in $BUILD"
cmake -S tests/cpp -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOPENREG_TSAN=ON -Wno-deprecated "${launcher[@]}" >/dev/null
TESTS=(openreg_test_execution_queue openreg_test_interleaved_runs openreg_test_block_pool openreg_test_recycling_pool)
cmake --build "$BUILD" -j2 --target "${TESTS[@]}"

export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
# TSAN's shadow memory layout needs at most 28 bits of mmap randomisation (newer
# kernels default to more): run without address randomisation when there are more.
run=()
if [ "$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 28)" -gt 28 ]; then
  run=(setarch "$(uname -m)" -R)
fi
for t in "${TESTS[@]}"; do
  echo "== $t (TSAN_OPTIONS=$TSAN_OPTIONS)"
  "${run[@]}" "$BUILD/$t" --gtest_brief=1 "$@"
done
echo "== ThreadSanitizer: clean"
