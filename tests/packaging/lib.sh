# Shared by the packaging checks: paths, a podman that needs no daemon, registry or systemd, and
# small helpers. Sourced, not run.
# shellcheck shell=bash

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# Image store, rootfs cache and scratch space; outside the repo so the build context stays small.
pkg_work="${ISCSIGW_PKG_WORK:-/var/tmp/iscsigw-packaging}"
image="${ISCSIGW_IMAGE:-localhost/iscsigw:test}"

# vfs storage (no overlay mounts needed), runc, cgroupfs (no systemd), file events (no journald).
# Explicit ulimits: podman's default nofile (1048576) is above the hard limit of a sandbox without
# CAP_SYS_RESOURCE, and runc then fails to start the container.
pkg_ulimits=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit "nproc=4096:4096")
# The same limits for what takes no --ulimit flag (podman kube play).
mkdir -p "$pkg_work"
cat >"$pkg_work/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$(ulimit -Hn):$(ulimit -Hn)", "nproc=4096:4096"]
CONF
export CONTAINERS_CONF="$pkg_work/containers.conf"
pm() {
  podman --root "$pkg_work/storage" --runroot "$pkg_work/run" --tmpdir "$pkg_work/tmp" \
    --storage-driver vfs --runtime runc --cgroup-manager cgroupfs --events-backend file "$@"
}

# log_tag, set before sourcing, names the check in each line.
log() { printf '%s [%s] %s\n' "$(date +%H:%M:%S)" "${log_tag:-packaging}" "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

# Checks that go on after a failure and count it in $failures.
failures=0
check() {  # check NAME CMD...: runs CMD, counts a failure
  local name=$1; shift
  if "$@"; then log "ok   $name"; else log "FAIL $name"; failures=$((failures + 1)); fi
}
refuses() {  # refuses NAME CMD...: CMD must fail
  local name=$1; shift
  if "$@" >/dev/null 2>&1; then log "FAIL $name (accepted)"; failures=$((failures + 1));
  else log "ok   $name"; fi
}

# A free TCP port on 127.0.0.1 (the kernel picks; there is a tiny window before our bind).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_until SECONDS CMD...: polls CMD until it succeeds or the deadline passes.
wait_until() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.5
  done
}
