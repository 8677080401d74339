#!/usr/bin/env bash
# Builds every libFuzzer target (tests/fuzz; clang-14 with ASan and UBSan) and runs each for
# SECONDS (default 60) from its seed corpus. Prints "N targets, M crashes" and exits non-zero on
# any crash; each crashing input is left in BUILD_DIR/crashes. Make it a regression test by copying
# it into tests/fuzz/regressions/TARGET/ once fixed: ctest replays that directory on every run.
#
#   scripts/fuzz.sh [SECONDS] [--build-dir DIR] [--build-only | --no-build]   (default DIR: build-fuzz)
#
# scripts/test.sh builds and runs in stages of their own: --build-only, then --no-build.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=60
dir=build-fuzz
build=1
run=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) dir=$2; shift 2 ;;
    --build-only) run=0; shift ;;
    --no-build) build=0; shift ;;
    *) seconds=$1; shift ;;
  esac
done
if [ "$build" = 1 ]; then
  scripts/install-deps.sh
  mkdir -p "$dir"
  # Only the fuzzers: the seed replays are the sanitized tree's tests.
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DISCSIGW_FUZZ=ON -DISCSIGW_UNIT_TESTS=OFF -DISCSIGW_UNITY_BUILD=ON -DISCSIGW_WERROR=ON \
    >"$dir/configure.log" 2>&1 \
    || { cat "$dir/configure.log"; exit 1; }
  cmake --build "$dir" --target fuzzers
fi
[ "$run" = 1 ] || exit 0
mkdir -p "$dir/crashes" "$dir/corpus"
targets=0
crashes=0
for bin in "$dir"/bin/fuzz_*; do
  [ -x "$bin" ] || continue
  # The seed replays (fuzz_replay_*, ctest's) are not fuzzers, even when a full build made them.
  case "${bin##*/}" in fuzz_replay_*) continue ;; esac
  name=${bin##*/fuzz_}
  targets=$((targets + 1))
  # New inputs go to the build directory's corpus; the committed seeds are only read.
  mkdir -p "$dir/corpus/$name"
  before=$(find "$dir/crashes" -name "$name-*" | wc -l)
  set +e
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$dir/crashes/$name-" "$dir/corpus/$name" "tests/fuzz/corpus/$name" \
    >"$dir/$name.log" 2>&1
  rc=$?
  set -e
  after=$(find "$dir/crashes" -name "$name-*" | wc -l)
  found=$((after - before))
  if [ "$rc" -ne 0 ] && [ "$found" -eq 0 ]; then found=1; fi
  crashes=$((crashes + found))
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/$name.log")
  echo "fuzz_$name: ${runs:-?} runs in ${seconds}s, $found crash(es)$([ "$found" -gt 0 ] && echo " (log: $dir/$name.log)")"
  if [ "$found" -gt 0 ]; then grep -A30 -m1 "ERROR" "$dir/$name.log" | head -40; fi
done
echo "$targets targets, $crashes crashes"
[ "$targets" -gt 0 ] || { echo "no fuzzer in $dir/bin: build them first (without --no-build)" >&2; exit 1; }
[ "$crashes" -eq 0 ]
