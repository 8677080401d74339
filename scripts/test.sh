#!/usr/bin/env bash
# Installs what is missing, builds everything and runs the whole test suite through ctest: unit
# tests, integration tests against the real daemon, the Linux kernel initiator in a QEMU guest
# (tests/interop), and libiscsi's conformance suite on a RAM and a file LUN. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DISCSIGW_FAULT_INJECTION=ON
cmake --build build
# The kernel initiator's guest image, built once per machine and cached outside the tree
# (tests/interop/guest_image.sh); minutes the first time, nothing after.
tests/interop/guest_image.sh >/dev/null
ctest --test-dir build --output-on-failure -j "$(nproc)"
