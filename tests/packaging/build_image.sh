#!/usr/bin/env bash
# Builds the repository's Dockerfile into the packaging image store as $ISCSIGW_IMAGE
# (localhost/iscsigw:test), on the debootstrapped debian:bookworm-slim (base_image.sh), with
# podman: vfs storage, runc, explicit ulimits, host network for apt. The context is the work tree,
# as `podman build .` would use it. Compiles the project on the build machine's cores: about
# 35 minutes on 2 busy cores. --if-missing: keep an existing image.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
if [ "${1:-}" = "--if-missing" ] && pm image exists "$image"; then
  log "image $image present"
  exit 0
fi
"$(dirname "$0")/base_image.sh"
# The version the binaries report (CMakeLists.txt) labels the image; the revision is also the commit
# they report, which the build stage cannot read from the context (no .git: Dockerfile).
version=$(sed -n 's/^project(iscsigw VERSION \([0-9.]*\) .*/\1/p' "$repo_root/CMakeLists.txt")
[ -n "$version" ] || die "no project version in $repo_root/CMakeLists.txt"
revision=$(git -C "$repo_root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
log "building $image from $repo_root (version $version, revision $revision)"
start=$SECONDS
pm build --format docker --network host --isolation oci --runtime runc "${pkg_ulimits[@]}" \
  --jobs 1 --layers \
  --build-arg VERSION="$version" --build-arg REVISION="$revision" \
  --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  -t "$image" -f "$repo_root/Dockerfile" "$repo_root"
log "built $image in $((SECONDS - start)) s"
