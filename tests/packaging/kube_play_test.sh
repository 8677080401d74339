#!/usr/bin/env bash
# `podman kube play` of the rendered StatefulSet's pod: renders deploy/overlays/demo with kubectl
# kustomize, turns the StatefulSet into its pod on the host network (kube_pod.py: loopback ports,
# the state claim bound to a named volume, the bootstrap ConfigMap alongside), plays it with the
# image from build_image.sh, and checks that the gateway answers iSCSI (iscsi-ls, iscsi-inq) and
# gRPC (iscsigwctl), as non-root with a read-only root file system, then `kube down` stops it.
# --reuse keeps an existing image.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
if [ "${1:-}" = "--reuse" ]; then
  "$(dirname "$0")/build_image.sh" --if-missing
else
  "$(dirname "$0")/build_image.sh"
fi

work=$(mktemp -d "$pkg_work/kubeplay.XXXXXX")
claim=iscsigw-kubeplay-state-$$
cleanup() {
  [ -f "$work/pod.yaml" ] && pm kube down "$work/pod.yaml" >/dev/null 2>&1 || true
  pm volume rm -f "$claim" >/dev/null 2>&1 || true
  # kube play keeps each ConfigMap it mounted as a named volume.
  for cm in $(sed -n 's/^  name: \(iscsigw-\(bootstrap\|seccomp\).*\)$/\1/p' "$work/pod.yaml" 2>/dev/null); do
    pm volume rm -f "$cm" >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

iscsi_port=$(free_port); grpc_port=$(free_port); metrics_port=$(free_port)
kubectl kustomize "$repo_root/deploy/overlays/demo" > "$work/rendered.yaml"
/usr/bin/python3 "$(dirname "$0")/kube_pod.py" "$work/rendered.yaml" "$iscsi_port" "$grpc_port" \
  "$metrics_port" "$claim" "$image" > "$work/pod.yaml"
# A PersistentVolume's provisioner makes the volume writable for fsGroup; here that is a chown.
pm volume create "$claim" >/dev/null
chown 10001:10001 "$(pm volume inspect "$claim" --format '{{.Mountpoint}}')"

log "podman kube play (pod iscsigw-0, host network, ports $iscsi_port/$grpc_port/$metrics_port)"
start=$SECONDS
pm kube play "$work/pod.yaml" >&2
container=$(pm ps -a --filter pod=iscsigw-0 --format '{{.Names}}' | grep -v infra | head -1)
[ -n "$container" ] || die "kube play started no container"

portal="127.0.0.1:$iscsi_port"
demo=iqn.2026-11.io.iscsigw:demo
wait_until 60 sh -c "iscsi-ls -s iscsi://$portal | grep -q $demo" \
  || { pm logs "$container" >&2; die "iscsi-ls did not list $demo"; }
log "pod up after $((SECONDS - start)) s; iscsi-ls lists $demo"
iscsi-inq "iscsi://$portal/$demo/0" | grep -qi 'Peripheral Device Type' || die "iscsi-inq failed"
log "iscsi-inq LUN 0 ok"
pm exec "$container" iscsigwctl --server "127.0.0.1:$grpc_port" gateway info >&2 \
  || die "iscsigwctl gateway info failed"
pm exec "$container" iscsigwctl --server "127.0.0.1:$grpc_port" target list >&2
log "gRPC answers (iscsigwctl inside the pod)"
for service in iscsigw.liveness iscsigw.readiness; do
  /usr/bin/python3 "$(dirname "$0")/grpc_health.py" "127.0.0.1:$grpc_port" "$service" >&2 \
    || die "the pod's gRPC probe target $service is not SERVING"
done
log "gRPC health (the probes' checks, iscsigw.liveness and iscsigw.readiness): SERVING"
[ "$(pm exec "$container" id -u)" = 10001 ] || die "pod does not run as uid 10001"
if pm exec "$container" sh -c 'touch /usr/local/bin/x' 2>/dev/null; then
  die "root file system is writable"
fi
pm exec "$container" test -f /var/lib/iscsigw/ports.json || die "no ports.json on the state volume"
log "non-root, read-only root, state on the claim"

# As the kubelet does on delete: SIGTERM, then the grace period.
pm pod stop -t 30 iscsigw-0 >/dev/null
code=$(pm inspect "$container" --format '{{.State.ExitCode}}')
[ "$code" = 0 ] || { pm logs "$container" >&2; die "exit code $code after SIGTERM"; }
log "pod stop: gateway exited 0"
pm kube down "$work/pod.yaml" >/dev/null
log "kube play test passed"
