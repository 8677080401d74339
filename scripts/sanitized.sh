#!/usr/bin/env bash
# Builds everything with AddressSanitizer and UndefinedBehaviorSanitizer (gcc,
# -DISCSIGW_SANITIZE=ON) in its own directory, and runs the unit tests, the integration tests
# against the sanitized daemon and the fuzz corpus replays there. A sanitizer report fails the test
# that provoked it: ASan and UBSan abort the process (UBSan built without recovery), and a leak
# makes the daemon's exit status non-zero, which every integration test checks.
#
#   scripts/sanitized.sh [--build-dir DIR] [--build-only | --no-build]     (default DIR: build-asan)
#
# The tests are those labelled `sanitized` (tests/CMakeLists.txt). scripts/test.sh builds and
# tests in stages of their own: --build-only, then --no-build.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-asan
build=1
test=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) dir=$2; shift 2 ;;
    --build-only) test=0; shift ;;
    --no-build) build=0; shift ;;
    *) echo "usage: $0 [--build-dir DIR] [--build-only | --no-build]" >&2; exit 2 ;;
  esac
done
if [ "$build" = 1 ]; then
  scripts/install-deps.sh
  mkdir -p "$dir"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DISCSIGW_FAULT_INJECTION=ON \
    -DISCSIGW_SANITIZE=ON -DISCSIGW_UNIT_TESTS=ON -DISCSIGW_UNITY_BUILD=ON -DISCSIGW_WERROR=ON \
    >"$dir/configure.log" 2>&1 \
    || { cat "$dir/configure.log"; exit 1; }
  cmake --build "$dir"
fi
[ "$test" = 1 ] || exit 0
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir "$dir" --output-on-failure --no-tests=error -j "$(nproc)" -L '^sanitized$'
