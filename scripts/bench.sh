#!/usr/bin/env bash
# The benchmark suite (tests/bench/suite.py): installs what is missing (tgt, fio, iperf3, gnuplot,
# libiscsi's headers), builds, then measures iscsigwd against tgtd on null, RAM and file LUNs with
# fio's and iperf3's ceilings, and an rbd LUN against rbd bench on its image (a throwaway Ceph
# cluster), and rewrites docs/performance.md (its figures; the notes at its end are kept) and
# docs/perf/*.svg. About 50 minutes with the defaults; arguments go to suite.py (--seconds,
# --repeats, --only, --out). Needs root.
# Not part of the tests: run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --bench
# The binaries as the image builds them: file by file, with full debug info (scripts/test.sh
# leaves the same tree in unity batches with line tables only). Warnings stay warnings here: the
# test command's -Werror (ISCSIGW_WERROR, cached in this tree) is for the builds it checks.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DISCSIGW_FAULT_INJECTION=ON \
  -DISCSIGW_UNITY_BUILD=OFF -DISCSIGW_WERROR=OFF -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g -DNDEBUG"
cmake --build build
# The tests' shared helpers (tests/lib/iscsigw_test), which the benchmarks import too.
export PYTHONPATH="$PWD/tests/lib${PYTHONPATH:+:$PYTHONPATH}"
exec tests/bench/suite.py "$@"
