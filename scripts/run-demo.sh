#!/usr/bin/env bash
# Installs what is missing, builds, and runs iscsigwd with the demo target
# (iqn.2026-11.io.iscsigw:demo, LUN 0 a 1 GiB RAM disk, open to any initiator) on 127.0.0.1:3260.
# Try it from another shell: iscsi-ls -s iscsi://127.0.0.1
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target iscsigwd
# A private state directory (iscsigwd trusts only its own: docs/security.md).
state_dir="${ISCSIGW_STATE_DIR:-$HOME/.local/state/iscsigw-demo}"
mkdir -p -m 0700 "$state_dir"
exec build/bin/iscsigwd --state-dir "$state_dir" --portal 127.0.0.1:3260 \
  --grpc-listen 127.0.0.1:50051 --metrics-listen 127.0.0.1:9540 \
  --bootstrap deploy/examples/demo.json "$@"
