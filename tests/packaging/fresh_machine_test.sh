#!/usr/bin/env bash
# Runs the README's test command as a newcomer would on a fresh Debian 12: a clean
# `debootstrap --variant=minbase bookworm` root (root user, apt only, nothing else installed), the
# committed tree (git archive HEAD) copied in, then `scripts/test.sh` inside a chroot. It catches
# what the development machines carry but the install script does not bring. Not part of CI: it
# takes 30-50 minutes on 2 cores, every tree compiled cold (the minbase root is built once and
# copied for each run; the chroot has a compiler cache of its own, empty).
#
#   tests/packaging/fresh_machine_test.sh [--keep] [--root DIR] [--command CMD]
#
# As root. --keep leaves the chroot behind; --root DIR runs again in a chroot an earlier --keep
# left (its packages installed and its compiler cache warm, as on a machine that has run the
# command before), the tree copied into a new directory as a new clone would be; --command runs
# CMD (from the tree's root) instead of scripts/test.sh, e.g. "scripts/bench.sh --seconds 1
# --repeats 1" for the benchmark suite.
#
# Output: the test command's output (ending with its table of stages and slowest tests); exit
# status is the test command's.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
keep=0
reuse=
command=scripts/test.sh
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --root) reuse=${2:?--root needs a directory}; shift ;;
    --command) command=${2:?--command needs a command}; shift ;;
    *) die "unknown argument $1" ;;
  esac
  shift
done
[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap and chroot)"
command -v debootstrap >/dev/null 2>&1 || apt-get install -y -qq --no-install-recommends debootstrap

# The mirror the host's apt uses, so the chroot reaches what the host reaches.
mirror=$(grep -hoE 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
  | head -1 | tr -d ' ' || true)
mirror=${mirror:-http://deb.debian.org/debian}
security=${mirror%/debian*}/debian-security

base="$pkg_work/fresh-bookworm-minbase"
if [ ! -f "$base/.complete" ]; then
  log "debootstrap bookworm minbase from $mirror into $base"
  rm -rf "$base"
  debootstrap --variant=minbase bookworm "$base" "$mirror" >"$pkg_work/debootstrap.log" 2>&1 \
    || die "debootstrap failed (log: $pkg_work/debootstrap.log)"
  touch "$base/.complete"
fi

if [ -n "$reuse" ]; then
  [ -d "$reuse/root" ] && [ -x "$reuse/bin/bash" ] || die "--root $reuse: not a chroot an earlier --keep left"
  root=$reuse
  keep=1
else
  root=$(mktemp -d "$pkg_work/fresh-run.XXXXXX")
fi
mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
  if [ "$keep" -eq 1 ]; then log "chroot kept at $root"; else rm -rf "$root"; fi
}
trap cleanup EXIT
if [ -z "$reuse" ]; then
  log "copying the minbase root to $root"
  cp -a "$base/." "$root/"
  rm -f "$root/.complete"
fi
cat >"$root/etc/apt/sources.list" <<SRC
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
SRC
cp /etc/resolv.conf "$root/etc/resolv.conf"
# The site's network trust, which every machine here has before any package: its extra CA
# certificates (installed into the bundle when ca-certificates is) and the variables naming the
# bundle (npm reads NODE_EXTRA_CA_CERTS). Packages are not copied, only this.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi
site_env=()
for v in NODE_EXTRA_CA_CERTS SSL_CERT_FILE SSL_CERT_DIR CURL_CA_BUNDLE REQUESTS_CA_BUNDLE \
  GIT_SSL_CAINFO http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [ -n "${!v:-}" ] && site_env+=("$v=${!v}")
done
# What a booted machine has: /proc, /sys, /dev, a tmpfs /dev/shm and /tmp.
for m in proc sys dev dev/pts; do
  mount --bind "/$m" "$root/$m"; mounted+=("$root/$m")
done
mount -t tmpfs -o size=4g tmpfs "$root/dev/shm"; mounted+=("$root/dev/shm")

# Each run in a new directory, as CI clones into a new folder each time.
rev=$(git -C "$repo_root" rev-parse --short HEAD)
tree=/root/iscsigw
[ -e "$root$tree" ] && tree=$(mktemp -d -u "/root/iscsigw-$rev.XXXX")
mkdir -p "$root$tree"
git -C "$repo_root" archive HEAD | tar -x -C "$root$tree"
log "$command in the chroot, $tree (commit $rev)"
start=$SECONDS
set +e
chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  "${site_env[@]}" \
  /bin/bash -c "cd $tree && $command" 2>&1 | tee "$pkg_work/fresh-run.log"
rc=${PIPESTATUS[0]}
set -e
log "$command exited $rc after $((SECONDS - start)) s (log: $pkg_work/fresh-run.log)"
exit "$rc"
