#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the whole test suite: unit tests,
# integration tests against the real daemon, the Linux kernel initiator in a QEMU guest
# (tests/interop), libiscsi's conformance suite, Ceph, the static checks and the fuzzers. Exits
# non-zero on any failure.
#
# Stages, each timed (the table at the end; a warning past BUDGET_S):
#   builds first, so that no test holds a lock while compiling: the release tree (build), the
#   ASan/UBSan tree (build/asan, scripts/sanitized.sh) and the fuzzers (build/fuzz, clang,
#   scripts/fuzz.sh), all through ccache and in unity batches (cmake/unity_build.cmake), every
#   compiler warning an error (ISCSIGW_WERROR); the kernel initiator's guest image beside them (it
#   is debootstrap and dpkg, mostly waiting).
#   Every behaviour runs once, in the strictest build that can run it (ctest labels,
#   tests/CMakeLists.txt): the sanitized tree runs the unit tests, the fuzz seed replays and the
#   functional integration tests; the release tree what the sanitizers distort, the kernel
#   initiator, conformance, Ceph and the static checks. The kernel initiator's tests (one guest at
#   a time, the longest chain) start once the release tree and the guest image are built, beside
#   the other builds; the rest of both trees' tests after the builds, each tree one daemon at a
#   time (ctest's daemon_cpu lock); the brief fuzzing beside them at a low priority, mostly on
#   what the tests leave idle. Tests that measure (label `alone`) run last, with nothing else on
#   the machine. A failing build stops the run (after the kernel initiator's tests, if they had
#   started); a failing test stage does not stop the next one.
set -euo pipefail
cd "$(dirname "$0")/.."
readonly BUDGET_S=3600
logs=build/test-logs
started=$(date +%s)

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
  echo "$name $(($(date +%s) - t0)) $rc" >>"$logs/stages"
  return "$rc"
}

# background_stage NAME COMMAND...: stage NAME in the background, its output to $logs/NAME.log
# and, once it ends, to the terminal in one piece (so two stages' lines never interleave).
# `wait_stages` waits for every background stage.
background_stage() {
  local name=$1
  shift
  echo "=== $name (in the background; log: $logs/$name.log)"
  (
    t0=$(date +%s)
    set +e
    "$@" >"$logs/$name.log" 2>&1
    rc=$?
    echo "$name $(($(date +%s) - t0)) $rc &" >>"$logs/stages"
    flock 9
    echo "=== $name ended ($rc): its output"
    cat "$logs/$name.log"
  ) 9>>"$logs/terminal.lock" &
  background+=($!)
}
background=()
wait_stages() {
  [ "${#background[@]}" -gt 0 ] || return 0
  local pid
  for pid in "${background[@]}"; do wait "$pid" || true; done
  background=()
}

report() {
  # The run's own status stays the script's: nothing here may stop the report or change it.
  set +e
  wait_stages
  local total=$(($(date +%s) - started))
  echo
  echo "=== stages"
  printf '%-22s %7s  %s\n' stage seconds result
  local name secs rc beside failed=()
  while read -r name secs rc beside; do
    printf '%-22s %7d  %s\n' "$name${beside:+ $beside}" "$secs" \
      "$([ "$rc" -eq 0 ] && echo ok || echo "FAILED ($rc)")"
    [ "$rc" -eq 0 ] || failed+=("$name")
  done <"$logs/stages"
  printf '%-22s %7d  %s\n' total "$total" "(& ran beside the stages around it)"
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
  # A skip is allowed only for a reason that cannot occur in CI (tests/CMakeLists.txt): each is
  # named here, so none passes unseen.
  local skipped
  skipped=$(cat "$logs"/tests-*.log 2>/dev/null |
    sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) \.+\*\*\*Skipped.*/  \1/p')
  if [ -n "$skipped" ]; then
    echo
    echo "=== skipped (the test's output says why: ctest --test-dir TREE -R NAME -V)"
    echo "$skipped"
  fi
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
    failing_cases
  fi
}

# failing_cases: each failing ctest test of the run, and in it each failing gtest case and
# unittest method, from the test stages' logs (ctest prints a failing test's output).
failing_cases() {
  local f
  for f in "$logs"/tests-*.log; do
    [ -e "$f" ] || continue
    sed -nE \
      -e '/\*\*\*Skipped/d' \
      -e 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) \.+\*\*\*([A-Za-z]+).*/  \1: \2/p' \
      -e 's/^\[  FAILED  \] ([^ ]+) \([0-9]+ ms\)$/    gtest \1/p' \
      -e 's/^(FAIL|ERROR): ([^ ]+) \(([^)]*\.\2)\).*/    unittest \3 (\1)/p;t' \
      -e 's/^(FAIL|ERROR): ([^ ]+) \(([^)]+)\).*/    unittest \3.\2 (\1)/p' "$f"
  done
}
trap report EXIT

mkdir -p "$logs"
rm -f "$logs"/*.log "$logs/stages"
# This run's cache statistics, apart from any other run sharing the cache.
export CCACHE_STATSLOG=$PWD/$logs/ccache-stats.log
stage install scripts/install-deps.sh
# The kernel initiator's guest image, built once per machine and cached outside the tree
# (tests/interop/guest_image.sh): minutes of debootstrap the first time, nothing after.
background_stage guest-image sh -c 'tests/interop/guest_image.sh >/dev/null'
# The release tree builds no unit tests: they run in the sanitized tree.
# Line tables only (-g1): a backtrace's file and line, a quarter less compile time than -g.
stage build-release sh -c 'cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DISCSIGW_FAULT_INJECTION=ON \
  -DISCSIGW_UNIT_TESTS=OFF -DISCSIGW_UNITY_BUILD=ON -DISCSIGW_WERROR=ON >build/configure.log 2>&1 \
  || { cat build/configure.log; exit 1; }; cmake --build build'
# The kernel initiator's tests (label guest) need only the release tree and the guest image, and
# are the longest chain of the run (one TCG guest at a time, 20 minutes): they start as soon as
# both are there, beside the other two builds and then the other tests. The guest image is there
# once its stage has written its line.
background_stage tests-guest sh -c 'until grep -q "^guest-image " "$1"; do sleep 1; done
  exec ctest --test-dir build --output-on-failure --no-tests=error -L "^release\$" -L "^guest\$"' \
  sh "$logs/stages"
stage build-sanitized scripts/sanitized.sh --build-dir build/asan --build-only
stage build-fuzzers scripts/fuzz.sh --build-dir build/fuzz --build-only
# A test with neither label would run nowhere: refuse it.
stage labels sh -c 'for d in build build/asan; do
  ctest --test-dir "$d" -N -LE "^(release|sanitized)\$" | grep "Test *#" && exit 1
done; exit 0' || true
background_stage tests-release ctest --test-dir build --output-on-failure --no-tests=error \
  -j "$(nproc)" -L '^release$' -LE '^(alone|guest)$'
background_stage tests-sanitized scripts/sanitized.sh --build-dir build/asan --no-build
# Fixed time per target: at nice 10 it takes mostly what the tests leave idle, at the cost of
# fewer executions than when it runs alone. Six targets at 16 s: the stage's 100 s of five at 20.
background_stage fuzz nice -n 10 scripts/fuzz.sh 16 --build-dir build/fuzz --no-build
wait_stages
stage tests-alone ctest --test-dir build --output-on-failure --no-tests=error -L '^release$' \
  -L '^alone$' || true
# The run passes when every stage did (the third field of each line of $logs/stages).
awk '$3 != 0 { failed = 1 } END { exit failed }' "$logs/stages"
