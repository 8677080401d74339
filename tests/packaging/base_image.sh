#!/usr/bin/env bash
# Builds debian:bookworm-slim locally, since no container registry is reachable: a
# `debootstrap --variant=minbase bookworm` root filesystem, imported into the packaging image
# store under the name the Dockerfile uses. Idempotent: does nothing when the image exists.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
mkdir -p "$pkg_work"/{storage,run,tmp}

if pm image exists docker.io/library/debian:bookworm-slim; then
  log "base image debian:bookworm-slim present"
  exit 0
fi
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
rootfs="$pkg_work/rootfs-bookworm"
if [ ! -x "$rootfs/usr/bin/apt-get" ]; then
  log "debootstrap --variant=minbase bookworm from $mirror (a few minutes)"
  rm -rf "$rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$pkg_work/debootstrap.log" 2>&1 \
    || { tail -20 "$pkg_work/debootstrap.log" >&2; die "debootstrap failed"; }
fi
# As in Debian's slim images: no docs or man pages from later installs, and a clean apt state.
mkdir -p "$rootfs/etc/dpkg/dpkg.cfg.d"
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker-slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
CFG
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
log "importing as debian:bookworm-slim"
tar -C "$rootfs" --numeric-owner -c . \
  | pm import --change 'CMD ["bash"]' - docker.io/library/debian:bookworm-slim >/dev/null
pm image exists docker.io/library/debian:bookworm-slim || die "import failed"
