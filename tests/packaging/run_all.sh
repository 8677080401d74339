#!/usr/bin/env bash
# Every packaging check, as docs/testing.md ("Packaging") names it:
#   1. check_manifests.sh  kustomize overlays + CSI example + Helm chart: render, yamllint,
#                          Kubernetes API schema validation, values.schema.json refusals (~1 min)
#   2. container_test.sh   build the Dockerfile with podman (debootstrapped bookworm-slim base),
#                          run it, drive it with iscsi-ls, iscsi-inq, iscsigwctl (~20-30 min:
#                          the image build compiles the project)
#   3. kube_play_test.sh   podman kube play of the rendered StatefulSet's pod (~1 min, same image)
# Needs root (podman with vfs storage, debootstrap). --reuse-image skips the build when the image
# exists. Not part of ctest/CI: the image build alone would take a large share of CI's budget.
set -euo pipefail
cd "$(dirname "$0")"
source ./lib.sh
"$repo_root/scripts/install-deps.sh" --packaging
reuse=""
[ "${1:-}" = "--reuse-image" ] && reuse=--reuse
start=$SECONDS
./check_manifests.sh
./container_test.sh $reuse
./kube_play_test.sh --reuse
log "all packaging checks passed in $((SECONDS - start)) s"
echo "3 passed, 0 failed"
