#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the whole test suite: unit tests,
# integration tests against the real daemon, the Linux kernel initiator in a QEMU guest
# (tests/interop), libiscsi's conformance suite, Ceph, the static checks and the fuzzers. Exits
# non-zero on any failure.
#
# Stages, each timed (the table at the end; a warning past BUDGET_S):
#   builds first, so that no test holds a lock while compiling: the release tree (build), the
#   ASan/UBSan tree (build/asan, scripts/sanitized.sh) and the fuzzers (build/fuzz, clang,
#   scripts/fuzz.sh), all through ccache; then the guest image; then the tests. Every behaviour
#   runs once, in the strictest build that can run it (ctest labels, tests/CMakeLists.txt): the
#   sanitized tree runs the unit tests, the fuzz seed replays and the functional integration tests;
#   the release tree what the sanitizers distort, the kernel initiator, conformance, Ceph and the
#   static checks. A failing build stops the run; a failing test stage does not stop the next one.
set -euo pipefail
cd "$(dirname "$0")/.."
readonly BUDGET_S=3600
logs=build/test-logs
started=$(date +%s)
stages=()
failed=()

# stage NAME COMMAND...: runs COMMAND, its output to the terminal and to $logs/NAME.log.
stage() {
  local name=$1 t0 rc
  shift
  t0=$(date +%s)
  echo "=== $name"
  set +e
  "$@" 2>&1 | tee "$logs/$name.log"
  rc=${PIPESTATUS[0]}
  set -e
  stages+=("$name $(($(date +%s) - t0)) $rc")
  [ "$rc" -eq 0 ] || failed+=("$name")
  return "$rc"
}

report() {
  # The run's own status stays the script's: nothing here may stop the report or change it.
  set +e
  local total=$(($(date +%s) - started))
  echo
  echo "=== stages"
  printf '%-22s %7s  %s\n' stage seconds result
  local s name secs rc
  for s in "${stages[@]}"; do
    read -r name secs rc <<<"$s"
    printf '%-22s %7d  %s\n' "$name" "$secs" "$([ "$rc" -eq 0 ] && echo ok || echo "FAILED ($rc)")"
  done
  printf '%-22s %7d\n' total "$total"
  echo
  echo "=== slowest tests"
  # ctest's result lines: "  12/40 Test #23: NAME ......   Passed   24.44 sec"
  local f
  for f in "$logs"/tests-*.log; do
    [ -e "$f" ] || continue
    sed -nE \
      's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) \.+\** *([A-Za-z*]+[^0-9]*) +([0-9.]+) sec$/\3 \1 \2/p' \
      "$f" | sed "s/\$/ ($(basename "$f" .log | sed 's/^tests-//'))/"
  done | sort -rn | head -15 |
    awk '{t = $1; n = $2; $1 = $2 = ""; sub(/^ +/, ""); printf "%8.1f  %s %s\n", t, n, $0}'
  if [ -s "${CCACHE_STATSLOG:-}" ]; then
    echo
    echo "=== ccache, this run's compiles"
    ccache --show-log-stats 2>/dev/null | grep -E '^(Cacheable|  (Hits|Misses))'
  fi
  if [ "$total" -gt "$BUDGET_S" ]; then
    echo
    echo "WARNING: the test command took ${total} s, past its budget of ${BUDGET_S} s (half of CI's" \
         "time): see the tables above"
  fi
  if [ "${#failed[@]}" -gt 0 ]; then
    echo
    echo "FAILED: ${failed[*]}"
  fi
}
trap report EXIT

mkdir -p "$logs"
rm -f "$logs"/*.log
# This run's cache statistics, apart from any other run sharing the cache.
export CCACHE_STATSLOG=$PWD/$logs/ccache-stats.log
stage install scripts/install-deps.sh
# The release tree builds no unit tests: they run in the sanitized tree.
stage build-release sh -c 'cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DISCSIGW_FAULT_INJECTION=ON -DISCSIGW_UNIT_TESTS=OFF >build/configure.log 2>&1 \
  || { cat build/configure.log; exit 1; }; cmake --build build'
stage build-sanitized scripts/sanitized.sh --build-dir build/asan --build-only
stage build-fuzzers scripts/fuzz.sh --build-dir build/fuzz --build-only
# The kernel initiator's guest image, built once per machine and cached outside the tree
# (tests/interop/guest_image.sh); minutes the first time, nothing after.
stage guest-image sh -c 'tests/interop/guest_image.sh >/dev/null'
# A test with neither label would run nowhere: refuse it.
stage labels sh -c 'for d in build build/asan; do
  ctest --test-dir "$d" -N -LE "^(release|sanitized)\$" | grep "Test *#" && exit 1
done; exit 0' || true
stage tests-release ctest --test-dir build --output-on-failure --no-tests=error -j "$(nproc)" \
  -L '^release$' || true
stage tests-sanitized scripts/sanitized.sh --build-dir build/asan --no-build || true
stage fuzz scripts/fuzz.sh 20 --build-dir build/fuzz --no-build || true
[ "${#failed[@]}" -eq 0 ]
