#!/usr/bin/env bash
# Builds the image (build_image.sh; --reuse keeps an existing one), checks its metadata, runs it
# with host networking on loopback ports and a read-only root file system, and drives it from
# outside: iscsi-ls (discovery + login), iscsi-inq (INQUIRY on LUN 0), iscsigwctl over gRPC, the
# gRPC health service as the kubelet's probe asks it, the image's HEALTHCHECK, a SIGTERM stop
# (exit 0 well inside a pod's grace period), and a restart on the same state volume that keeps
# what iscsigwctl created.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
if [ "${1:-}" = "--reuse" ]; then
  "$(dirname "$0")/build_image.sh" --if-missing
else
  "$(dirname "$0")/build_image.sh"
fi

name=iscsigw-ctest-$$
volume=iscsigw-ctest-state-$$
cleanup() {
  pm rm -f -t 0 "$name" >/dev/null 2>&1 || true
  pm volume rm -f "$volume" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# --- image metadata
inspect() { pm image inspect "$image" --format "$1"; }
[ "$(inspect '{{.Config.User}}')" = "10001:10001" ] || die "image user is not 10001:10001"
[ "$(inspect '{{.Config.StopSignal}}')" = "SIGTERM" ] || die "STOPSIGNAL is not SIGTERM"
inspect '{{json .Config.Volumes}}' | grep -q '/var/lib/iscsigw' || die "no state volume"
pm image inspect "$image" | grep -q '"Healthcheck"' || die "no HEALTHCHECK (build with --format docker)"
for l in title description version revision created licenses; do
  inspect "{{index .Labels \"org.opencontainers.image.$l\"}}" | grep -q . \
    || die "label org.opencontainers.image.$l missing"
done
# The binaries say what the labels say: the version of CMakeLists.txt and the commit built.
label() { inspect "{{index .Labels \"org.opencontainers.image.$1\"}}"; }
for b in iscsigwd iscsigwctl iscsigw-csi; do
  want="$b $(label version) (commit $(label revision))"
  got=$(pm run --rm --network none "${pkg_ulimits[@]}" --entrypoint "/usr/local/bin/$b" "$image" \
    --version) || die "$b --version failed"
  [ "$got" = "$want" ] || die "$b --version: '$got', the labels say '$want'"
done
pm run --rm --network none "${pkg_ulimits[@]}" --entrypoint sh "$image" -c \
  "grep -q 'Apache License' /usr/share/doc/iscsigw/LICENSE" || die "the image lacks its LICENSE"
# Only runtime libraries: no compiler, no -dev package.
devs=$(pm run --rm --network none "${pkg_ulimits[@]}" --entrypoint sh "$image" -c \
  "dpkg-query -W -f='\${Package}\n' | grep -E -- '-dev$' || true
   for t in cc c++ gcc g++ cmake ninja protoc; do command -v \$t || true; done")
[ -z "$devs" ] || die "build packages in the runtime image: $devs"
# The chart's CSI pods run iscsigw-csi from this image; its node mode needs nsenter.
pm run --rm --network none "${pkg_ulimits[@]}" --entrypoint sh "$image" -c \
  "test -x /usr/local/bin/iscsigw-csi && command -v nsenter" >/dev/null \
  || die "the image lacks /usr/local/bin/iscsigw-csi or nsenter"
log "image metadata ok: $(pm image inspect "$image" --format '{{.Size}}') bytes"

# --- run: loopback ports, read-only root, state on a named volume
iscsi_port=$(free_port); grpc_port=$(free_port); metrics_port=$(free_port)
pm volume create "$volume" >/dev/null
run_gateway() {
  pm run -d --name "$name" --network host "${pkg_ulimits[@]}" --read-only --tmpfs /tmp \
    --cap-drop ALL --security-opt no-new-privileges \
    -e ISCSIGW_PORTAL="127.0.0.1:$iscsi_port" \
    -e ISCSIGW_GRPC_LISTEN="127.0.0.1:$grpc_port" \
    -e ISCSIGW_METRICS_LISTEN="127.0.0.1:$metrics_port" \
    -v "$volume:/var/lib/iscsigw" \
    "$image" --bootstrap /usr/share/iscsigw/demo.json >/dev/null
}
run_gateway
start=$SECONDS

# iscsigwctl from outside the container: the build's, else the image's own binary copied out.
ctl=""
for c in "${ISCSIGW_BUILD:-$repo_root/build}/bin/iscsigwctl" "$repo_root/build/bin/iscsigwctl"; do
  [ -x "$c" ] && { ctl=$c; break; }
done
if [ -z "$ctl" ]; then
  ctl="$pkg_work/iscsigwctl"
  pm cp "$name:/usr/local/bin/iscsigwctl" "$ctl"
fi
ctl() { "$ctl" --server "127.0.0.1:$grpc_port" "$@"; }

portal="127.0.0.1:$iscsi_port"
demo=iqn.2026-11.io.iscsigw:demo
wait_until 60 sh -c "iscsi-ls -s iscsi://$portal | grep -q $demo" \
  || { pm logs "$name" >&2; die "iscsi-ls did not list $demo"; }
log "gateway up after $((SECONDS - start)) s; iscsi-ls lists $demo"
iscsi-ls -s "iscsi://$portal" | tee "$pkg_work/iscsi-ls.txt" >&2
inq=$(iscsi-inq "iscsi://$portal/$demo/0")
echo "$inq" | grep -qi 'Peripheral Device Type' || die "iscsi-inq: $inq"
log "iscsi-inq LUN 0 ok"

wait_until 30 ctl gateway info || die "iscsigwctl gateway info failed"
ctl gateway info >&2
ctl target create ctest --allow-any-initiator >&2
ctl lun create ctest 0 --backing ram --size 64M >&2
wait_until 20 sh -c "iscsi-ls -s iscsi://$portal | grep -q iqn.2026-11.io.iscsigw:ctest" \
  || die "a target created with iscsigwctl is not listed by iscsi-ls"
log "iscsigwctl target/lun create ok"

# The kubelet's gRPC probe, from outside: grpc.health.v1.Health/Check answers SERVING.
/usr/bin/python3 "$(dirname "$0")/grpc_health.py" "127.0.0.1:$grpc_port" >&2 \
  || die "grpc.health.v1.Health/Check is not SERVING"
log "gRPC health: SERVING"

# HEALTHCHECK as the runtime runs it (inside the container).
pm healthcheck run "$name" || die "HEALTHCHECK failed"
log "HEALTHCHECK ok"
[ "$(pm exec "$name" id -u)" = 10001 ] || die "not running as uid 10001"

# SIGTERM: clean exit, quickly.
t0=$SECONDS
pm stop -t 30 "$name" >/dev/null
took=$((SECONDS - t0))
code=$(pm inspect "$name" --format '{{.State.ExitCode}}')
[ "$code" = 0 ] || { pm logs "$name" >&2; die "exit code $code after SIGTERM"; }
[ "$took" -lt 10 ] || die "SIGTERM stop took $took s"
log "SIGTERM stop: exit 0 in $took s"

# Restart on the same volume: what iscsigwctl created survives.
pm rm "$name" >/dev/null
run_gateway
wait_until 60 sh -c "iscsi-ls -s iscsi://$portal | grep -q iqn.2026-11.io.iscsigw:ctest" \
  || { pm logs "$name" >&2; die "target lost across a restart"; }
log "restart on the same volume keeps iscsigwctl's target"
pm stop -t 30 "$name" >/dev/null
log "container test passed"
