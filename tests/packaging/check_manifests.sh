#!/usr/bin/env bash
# Offline checks of deploy/ and helm/iscsigw: render every kustomize overlay and the CSI example
# with `kubectl kustomize` of the kubectl on PATH and of Debian 12's kubectl 1.20 (the same output), render the chart with default values and with ci/full-values.yaml
# (helmrender: Go text/template + sprig, the engine Helm uses; plus `helm lint`/`helm template`
# when a helm binary is on PATH), then yamllint the sources and every rendered file and validate
# every rendered object against the Kubernetes API schemas (validate/validate.mjs). Also checks
# that bad values and bad manifests are refused. About 20 s (ctest: packaging_manifests); no network once npm packages and
# Go sources are installed.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$repo_root"
here=tests/packaging
if [ -n "${1:-}" ]; then
  out=$1
  mkdir -p "$out"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi

# npm packages for the schema validation (package-lock.json pins them).
if [ ! -d "$here/validate/node_modules/kubernetes-models" ]; then
  log "npm ci in $here/validate"
  (cd "$here/validate" && npm ci --no-audit --no-fund --loglevel=error)
fi
validate() { node "$here/validate/validate.mjs" "$@"; }

# Kustomize: the base, each overlay, the CSI example, with every kustomize we can reach. The
# manifests are written for both the v2.0.3 inside Debian 12's kubectl 1.20 (what a fresh machine
# has) and kustomize v5 (kubectl 1.27+, what clusters' users have); both must render them, and
# render the same objects. The one thing allowed to differ is the generated ConfigMap's name
# suffix: each version hashes the content its own way, and each must point the StatefulSet at
# the name it generated.
kubectls=()
add_kubectl() {  # add_kubectl PATH: once per distinct kustomize version
  local v
  v=$("$1" version --client 2>/dev/null | tr -d '\n' | sed -E 's/.*(GitVersion:"|Client Version: )(v[0-9]+\.[0-9]+).*/\2/')
  for k in "${kubectls[@]}"; do [ "${k%%=*}" != "$v" ] || return 0; done
  kubectls+=("$v=$1")
}
command -v kubectl >/dev/null 2>&1 && add_kubectl "$(command -v kubectl)"
debian_kubectl=$("$here/debian_kubectl.sh") || die "cannot unpack Debian 12's kubectl (kubernetes-client)"
add_kubectl "$debian_kubectl"
log "kustomize renderers: ${kubectls[*]}"
rendered=()
for dir in deploy/base deploy/overlays/*/ deploy/examples/csi-iscsi; do
  dir=${dir%/}
  name=kustomize-$(echo "${dir#deploy/}" | tr / -)
  first=""; first_ver=""
  for k in "${kubectls[@]}"; do
    ver=${k%%=*}; bin=${k#*=}
    f="$out/$name-$ver.yaml"
    check "kubectl $ver kustomize $dir" sh -c "'$bin' kustomize '$dir' > '$f'"
    check "kubectl $ver: the StatefulSet mounts the ConfigMap generated beside it" \
      "$here/check_configmap_refs.py" "$f"
    sed -E 's/(iscsigw-(bootstrap|seccomp))-[a-z0-9]{10}$/\1-HASH/' "$f" > "$f.normal"
    if [ -z "$first" ]; then
      first=$f; first_ver=$ver; cp "$f" "$out/$name.yaml"; rendered+=("$out/$name.yaml")
    else
      check "kubectl $first_ver and $ver render $dir alike" \
        diff -u "$first.normal" "$f.normal"
    fi
  done
done
check "demo overlay bootstrap equals deploy/examples/demo.json" \
  cmp -s deploy/examples/demo.json deploy/overlays/demo/bootstrap.json

# Helm: helmrender with default and full values, strict (a missing value is an error).
export GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= GOCACHE="$pkg_work/gocache"
mkdir -p "$GOCACHE"
go build -o "$out/helmrender" "$here/helmrender/main.go"
chart=helm/iscsigw
# The admin API without client certificates only when asked for (docs/security.md): the default
# values are rendered with grpc.insecure, and refused without it.
printf 'grpc:\n  insecure: true\n' > "$out/insecure.yaml"
refuses "chart: default values (gRPC without client certificates) are refused" \
  "$out/helmrender" -chart $chart -strict -namespace iscsigw
check "chart: the refusal names tls.requireClientCert and grpc.insecure" sh -c \
  "'$out/helmrender' -chart $chart -strict 2>&1 | grep -q 'tls.requireClientCert.*grpc.insecure: true'"
check "helmrender default values (grpc.insecure)" sh -c \
  "'$out/helmrender' -chart $chart -strict -f '$out/insecure.yaml' -namespace iscsigw -notes '$out/notes-default.txt' > '$out/helm-default.yaml'"
check "helmrender ci/full-values.yaml" sh -c \
  "'$out/helmrender' -chart $chart -strict -api-versions snapshot.storage.k8s.io/v1 -f $chart/ci/full-values.yaml -name prod -namespace storage -notes '$out/notes-full.txt' > '$out/helm-full.yaml'"
rendered+=("$out/helm-default.yaml" "$out/helm-full.yaml")
check "ci/full-values.yaml sets every key of values.yaml" "$here/check_full_values.py"
# The other ci/ files (the CSI driver with and without TLS), each as its own release; rendered as
# for a cluster that serves the snapshot CRDs, as `helm install` on one would.
for values in $chart/ci/*-values.yaml; do
  [ "$values" != $chart/ci/full-values.yaml ] || continue
  name=helm-$(basename "$values" -values.yaml)
  check "helmrender ci/$(basename "$values")" sh -c \
    "'$out/helmrender' -chart $chart -strict -api-versions snapshot.storage.k8s.io/v1 -f '$values' -name $name -namespace csi -notes '$out/notes-$name.txt' > '$out/$name.yaml'"
  rendered+=("$out/$name.yaml")
done
check "NOTES.txt renders" test -s "$out/notes-default.txt"
# iscsiadm runs on the node's host, which cannot resolve Service names: NOTES never offers one as
# the portal, and says what SendTargets will answer.
check "NOTES.txt offers no cluster DNS name as the portal" sh -c \
  "! grep -n 'iscsi\\.[a-z0-9-]*\\.svc' '$out/notes-default.txt' '$out/notes-full.txt'"
check "NOTES.txt warns that an empty gateway.advertise means the pod IP" \
  grep -q 'gateway.advertise is empty' "$out/notes-default.txt"
check "a LoadBalancer with a fixed address advertises it" sh -c \
  "grep -A1 'name: ISCSIGW_ADVERTISE' '$out/helm-full.yaml' | grep -q '\"192.0.2.10:3260\"' && grep -q '192.0.2.10:3260' '$out/notes-full.txt'"
check "default values set no ISCSIGW_ADVERTISE" sh -c "! grep -q ISCSIGW_ADVERTISE '$out/helm-default.yaml'"
printf 'gateway:\n  advertise: [\"$(NODE_IP):3260\", \"[fd00::1]:3260\"]\n' > "$out/advertise.yaml"
check "gateway.advertise values pass through, \$(NODE_IP) left for Kubernetes" sh -c \
  "'$out/helmrender' -chart $chart -strict -f '$out/insecure.yaml' -f '$out/advertise.yaml' | grep -A1 'name: ISCSIGW_ADVERTISE' | grep -qF '\"\$(NODE_IP):3260,[fd00::1]:3260\"'"
check "full values render the ServiceMonitor and TLS probes" sh -c \
  "grep -q 'kind: ServiceMonitor' '$out/helm-full.yaml' && grep -q 'tcpSocket' '$out/helm-full.yaml'"
check "default values render gRPC probes" grep -q '^ *grpc:$' "$out/helm-default.yaml"
check "chart: each gRPC probe names its health service" "$here/check_probes.py" "$out/helm-default.yaml"
check "chart: with TLS every probe is a TCP check" "$here/check_probes.py" --tls "$out/helm-full.yaml"
check "kustomize: each gRPC probe names its health service" \
  "$here/check_probes.py" "$out/kustomize-base.yaml"
check "kustomize grpc-tls: every probe is a TCP check" \
  "$here/check_probes.py" --tls "$out/kustomize-overlays-grpc-tls.yaml"
check "chart: grpc.insecure says ISCSIGW_GRPC_INSECURE" \
  sh -c "grep -A1 -x ' *- name: ISCSIGW_GRPC_INSECURE' '$out/helm-default.yaml' | grep -qx ' *value: \"true\"'"
check "chart: mutual TLS renders no ISCSIGW_GRPC_INSECURE" \
  sh -c "! grep -q ISCSIGW_GRPC_INSECURE '$out/helm-full.yaml'"
check "chart: the metrics port only from the release's namespace and the monitoring namespace" \
  sh -c "grep -B12 'port: 9540' '$out/helm-default.yaml' | grep -q 'kubernetes.io/metadata.name: monitoring'"
check "kustomize: the metrics port only from the namespace and the monitoring namespace" sh -c \
  "grep -B12 'port: 9540' '$out/kustomize-overlays-default.yaml' | grep -q 'kubernetes.io/metadata.name: monitoring'"
printf 'ceph:\n  enabled: true\n  secretName: c\n' > "$out/ceph-nopools.yaml"
refuses "chart: Ceph without ceph.pools is refused (rbd LUNs use only the pools named)" \
  "$out/helmrender" -chart $chart -strict -f "$out/insecure.yaml" -f "$out/ceph-nopools.yaml"
printf 'service:\n  iscsi:\n    type: NodePort\n' > "$out/nodeport.yaml"
check "chart: a NodePort iSCSI Service keeps the initiator's address (externalTrafficPolicy Local)" \
  sh -c "'$out/helmrender' -chart $chart -strict -f '$out/insecure.yaml' -f '$out/nodeport.yaml' | grep -q 'externalTrafficPolicy: Local'"

# The gRPC clients: iscsigwctl in the gateway pod dials 127.0.0.1 with the pod's ISCSIGW_*
# variables (with TLS: the CA and the name the certificate carries), the CSI controller the gRPC
# Service with the same CA and name.
grpc_clients() { "$here/check_grpc_clients.py" "$@"; }
check "gRPC clients: default values" grpc_clients "$out/helm-default.yaml" --no-tls --no-csi
check "gRPC clients: ci/full-values.yaml (mutual TLS, CSI)" grpc_clients "$out/helm-full.yaml" --tls --csi
check "gRPC clients: ci/csi-values.yaml" grpc_clients "$out/helm-csi.yaml" --no-tls --csi
check "gRPC clients: ci/csi-tls-values.yaml" grpc_clients "$out/helm-csi-tls.yaml" --tls --csi
check "gRPC clients: kustomize default" grpc_clients "$out/kustomize-overlays-default.yaml" --no-tls
check "gRPC clients: kustomize grpc-tls" grpc_clients "$out/kustomize-overlays-grpc-tls.yaml" --tls
env_is() {  # env_is FILE NAME VALUE: the rendered environment variable NAME is VALUE
  grep -A1 -x " *- name: $2" "$1" | grep -qx " *value: \"\\?$3\"\\?"
}
check "kustomize grpc-tls: iscsigwctl verifies the gRPC Service's name" \
  env_is "$out/kustomize-overlays-grpc-tls.yaml" ISCSIGW_TLS_SERVER_NAME iscsigw-grpc.iscsigw.svc
check "chart: tls.serverName is the name iscsigwctl verifies" \
  env_is "$out/helm-csi-tls.yaml" ISCSIGW_TLS_SERVER_NAME gateway.storage.example.com
# The connection limits reach iscsigwd as the variables its flags read (server/flags.cc), and are
# left to the daemon's defaults when not set.
daemon_env_is() {  # daemon_env_is FILE NAME VALUE: env_is, and NAME is an iscsigwd flag's variable
  grep -qF "envname(\"$2\")" server/flags.cc && env_is "$@"
}
for var in ISCSIGW_MAX_CONNECTIONS=512 ISCSIGW_MAX_CONNECTIONS_PER_SOURCE=64 \
    ISCSIGW_MAX_DISCOVERY_SESSIONS=16 ISCSIGW_DISCOVERY_IDLE_TIMEOUT=10; do
  check "chart: ci/full-values.yaml gives iscsigwd $var" \
    daemon_env_is "$out/helm-full.yaml" "${var%%=*}" "${var#*=}"
done
# A stop that the storage does not answer ends before the kubelet's SIGKILL, saying why.
check "chart: default values bound the stop at 20 s of the 30 s grace period" \
  daemon_env_is "$out/helm-default.yaml" ISCSIGW_SHUTDOWN_TIMEOUT 20
check "chart: ci/full-values.yaml (60 s grace period) bounds the stop at 50 s" \
  daemon_env_is "$out/helm-full.yaml" ISCSIGW_SHUTDOWN_TIMEOUT 50
check "kustomize: the stop bounded at 20 s of the 30 s grace period" \
  daemon_env_is "$out/kustomize-base.yaml" ISCSIGW_SHUTDOWN_TIMEOUT 20
check "chart: default values leave the connection limits to the daemon" sh -c \
  "! grep -Eq 'ISCSIGW_(MAX_CONNECTIONS|MAX_DISCOVERY_SESSIONS|DISCOVERY_IDLE_TIMEOUT)' '$out/helm-default.yaml'"
printf 'gateway:\n  maxConnectionsPerSource: 1000000\n' > "$out/per-source-max.yaml"
"$out/helmrender" -chart $chart -strict -f "$out/insecure.yaml" -f "$out/per-source-max.yaml" > "$out/helm-per-source-max.yaml"
check "chart: gateway.maxConnectionsPerSource 1000000 reaches iscsigwd as 1000000, not 1e+06" \
  daemon_env_is "$out/helm-per-source-max.yaml" ISCSIGW_MAX_CONNECTIONS_PER_SOURCE 1000000
printf 'tls:\n  enabled: true\n  secretName: gw-tls\n' > "$out/tls.yaml"
"$out/helmrender" -chart $chart -strict -f "$out/insecure.yaml" -f "$out/tls.yaml" -name r1 -namespace ns1 > "$out/helm-tls.yaml"
check "chart: without tls.serverName iscsigwctl verifies the gRPC Service's name" \
  env_is "$out/helm-tls.yaml" ISCSIGW_TLS_SERVER_NAME r1-iscsigw-grpc.ns1.svc
sed '/name: ISCSIGW_TLS_SERVER_NAME/,+1d' "$out/helm-full.yaml" > "$out/no-server-name.yaml"
refuses "gRPC clients: TLS without ISCSIGW_TLS_SERVER_NAME is refused" \
  grpc_clients "$out/no-server-name.yaml"
sed '/- --tls-ca=/d' "$out/helm-csi-tls.yaml" > "$out/csi-no-ca.yaml"
refuses "gRPC clients: a CSI controller without --tls-ca against TLS is refused" \
  grpc_clients "$out/csi-no-ca.yaml"

# Ceph for rbd LUNs: the conf and keyring come from a Secret mounted read-only, never world-readable,
# with CEPH_CONF naming the conf; nothing of it without ceph.enabled or the ceph overlay.
ceph_mount() { "$here/check_ceph_mount.py" "$@"; }
check "Ceph: default values mount no Ceph Secret" ceph_mount "$out/helm-default.yaml" --none
check "Ceph: kustomize default mounts no Ceph Secret" \
  ceph_mount "$out/kustomize-overlays-default.yaml" --none
check "Ceph: ci/ceph-values.yaml mounts Secret iscsigw-ceph at /etc/ceph" \
  ceph_mount "$out/helm-ceph.yaml" iscsigw-ceph /etc/ceph ceph.conf keyring
check "Ceph: ci/full-values.yaml maps its own keys and mount path" \
  ceph_mount "$out/helm-full.yaml" iscsigw-ceph-prod /etc/ceph-prod prod.conf ceph.client.iscsigw.keyring
check "Ceph: kustomize ceph mounts Secret iscsigw-ceph at /etc/ceph" \
  ceph_mount "$out/kustomize-overlays-ceph.yaml" iscsigw-ceph /etc/ceph ceph.conf keyring
check "gRPC clients: ci/ceph-values.yaml" grpc_clients "$out/helm-ceph.yaml" --no-tls --no-csi
check "gRPC clients: kustomize ceph" grpc_clients "$out/kustomize-overlays-ceph.yaml" --no-tls
check "NOTES.txt shows the Ceph Secret and an rbd LUN with the mounted keyring" sh -c \
  "grep -q 'create secret generic iscsigw-ceph' '$out/notes-helm-ceph.txt' \
   && grep -q -- '--client-id gw --keyring /etc/ceph/keyring' '$out/notes-helm-ceph.txt'"
sed 's/^\( *defaultMode:\) 288$/\1 292/' "$out/kustomize-overlays-ceph.yaml" > "$out/ceph-world-readable.yaml"
refuses "Ceph: a world-readable keyring is refused" \
  ceph_mount "$out/ceph-world-readable.yaml" iscsigw-ceph /etc/ceph ceph.conf keyring
sed '/- name: CEPH_CONF/,+1d' "$out/helm-ceph.yaml" > "$out/ceph-no-conf-env.yaml"
refuses "Ceph: a mounted conf without CEPH_CONF is refused" \
  ceph_mount "$out/ceph-no-conf-env.yaml" iscsigw-ceph /etc/ceph ceph.conf keyring

# Several gateway pods on rbd LUNs: replicas, a Service per pod, the gateway id from the ordinal;
# and what would not be one device through several paths is refused.
check "ci/gateways-values.yaml: three replicas, each gateway id its ordinal + 1" sh -c \
  "grep -q '^  replicas: 3$' '$out/helm-gateways.yaml' \
   && grep -qF -- 'h=\$(cat /proc/sys/kernel/hostname); exec /usr/local/bin/iscsigwd --gateway-id=\"\$(( \${h##*-} + 1 ))\"' '$out/helm-gateways.yaml'"
check "ci/gateways-values.yaml: a Service per gateway pod, selecting that pod" sh -c \
  "for i in 0 1 2; do grep -A22 \"name: helm-gateways-iscsigw-iscsi-\$i\$\" '$out/helm-gateways.yaml' \
     | grep -q \"statefulset.kubernetes.io/pod-name: helm-gateways-iscsigw-\$i\$\" || exit 1; done"
check "default values: one replica, no gateway id, no per-pod Service" sh -c \
  "grep -q '^  replicas: 1$' '$out/helm-default.yaml' && ! grep -q -- '--gateway-id' '$out/helm-default.yaml' \
   && ! grep -q 'iscsigw-iscsi-0' '$out/helm-default.yaml'"
check "ci/gateways-values.yaml: the rbd targets shared through rbd/iscsigw with the mounted keyring" sh -c \
  "grep -A1 'name: ISCSIGW_SHARED_CONFIG$' '$out/helm-gateways.yaml' | grep -q 'value: \"rbd/iscsigw\"' \
   && grep -A1 'name: ISCSIGW_SHARED_CONFIG_KEYRING$' '$out/helm-gateways.yaml' | grep -q 'value: \"/etc/ceph/keyring\"' \
   && grep -A1 'name: ISCSIGW_SHARED_CONFIG_CLIENT_ID$' '$out/helm-gateways.yaml' | grep -q 'value: \"gw\"'"
check "default values: no shared configuration" sh -c "! grep -q ISCSIGW_SHARED_CONFIG '$out/helm-default.yaml'"
printf 'sharedConfig:\n  pool: rbd\n' > "$out/shared-one-replica.yaml"
refuses "sharedConfig with one replica is refused" \
  "$out/helmrender" -chart $chart -f $chart/ci/ceph-values.yaml -f "$out/shared-one-replica.yaml"
printf 'ceph:\n  enabled: false\n' > "$out/shared-no-ceph.yaml"
refuses "sharedConfig without ceph.enabled is refused" \
  "$out/helmrender" -chart $chart -f $chart/ci/gateways-values.yaml -f "$out/shared-no-ceph.yaml"
printf 'replicas: 2\n' > "$out/gateways-file-lun.yaml"
refuses "replicas > 1 with a file LUN is refused" \
  "$out/helmrender" -chart $chart -f "$out/insecure.yaml" -f "$out/gateways-file-lun.yaml"
printf 'replicas: 2\ngateway:\n  advertise: [\"192.0.2.1:3260\"]\n' > "$out/gateways-advertise.yaml"
refuses "replicas > 1 with gateway.advertise is refused" \
  "$out/helmrender" -chart $chart -f $chart/ci/gateways-values.yaml -f "$out/gateways-advertise.yaml"
printf 'replicas: 2\nservice:\n  iscsi:\n    type: NodePort\n    nodePort: 30260\n' > "$out/gateways-nodeport.yaml"
refuses "replicas > 1 with a fixed nodePort (one advertised address) is refused" \
  "$out/helmrender" -chart $chart -f $chart/ci/gateways-values.yaml -f "$out/gateways-nodeport.yaml"
printf 'replicas: 2\ncsi:\n  enabled: true\n' > "$out/gateways-csi.yaml"
refuses "replicas > 1 with csi.enabled is refused" \
  "$out/helmrender" -chart $chart -f $chart/ci/gateways-values.yaml -f "$out/gateways-csi.yaml"

# The gateway's seccomp profile (docs/security.md): RuntimeDefault plus io_uring, installed on the
# node by an init container by default, or expected there, or the runtime's default, or none.
seccomp() { "$here/check_seccomp.py" "$@"; }
profile=$chart/files/iscsigw-seccomp.json
check "seccomp profile: denies by default, allows io_uring, no name twice" seccomp profile $profile
check "seccomp profile: deploy/base carries the chart's" cmp -s $profile deploy/base/iscsigw-seccomp.json
python3 -c 'import json, sys; p = json.load(open(sys.argv[1])); p["syscalls"] = [r for r in p["syscalls"] if "io_uring_enter" not in r["names"]]; json.dump(p, sys.stdout)' \
  $profile > "$out/seccomp-no-io-uring.json"
python3 -c 'import json, sys; p = json.load(open(sys.argv[1])); p["syscalls"].append({"names": ["read"], "action": "SCMP_ACT_ALLOW"}); json.dump(p, sys.stdout)' \
  $profile > "$out/seccomp-twice.json"
sed 's/"defaultAction": "SCMP_ACT_ERRNO"/"defaultAction": "SCMP_ACT_ALLOW"/' $profile > "$out/seccomp-allow.json"
head -c 200 $profile > "$out/seccomp-cut.json"
for bad in no-io-uring twice allow cut; do
  refuses "seccomp profile: $bad is refused" seccomp profile "$out/seccomp-$bad.json"
done
check "seccomp: default values install the chart's profile (init container, hostPath) as Localhost" \
  seccomp pod "$out/helm-default.yaml" --type Localhost --install
check "seccomp: ci/full-values.yaml: a Localhost profile put on the nodes beforehand, no hostPath" \
  seccomp pod "$out/helm-full.yaml" --type Localhost --no-install --profile profiles/iscsigw-io-uring.json
check "seccomp: kustomize base installs the profile as Localhost" \
  seccomp pod "$out/kustomize-base.yaml" --type Localhost --install --profile iscsigw/iscsigw-seccomp.json
for values in "localhost-no-install=type: Localhost|install: false" \
    "runtimedefault=type: RuntimeDefault|install: true" "unconfined=type: Unconfined|install: true" \
    "custom-path=type: Localhost|localhostProfile: gw.json|nodeDirectory: /opt/kubelet/seccomp"; do
  name=${values%%=*}
  { echo "seccompProfile:"; echo "${values#*=}" | tr '|' '\n' | sed 's/^/  /'; } > "$out/seccomp-$name.yaml"
  "$out/helmrender" -chart $chart -strict -f "$out/insecure.yaml" -f "$out/seccomp-$name.yaml" \
    > "$out/helm-seccomp-$name.yaml"
  rendered+=("$out/helm-seccomp-$name.yaml")
done
check "seccomp: Localhost without install: no init container, no hostPath, no profile ConfigMap" \
  seccomp pod "$out/helm-seccomp-localhost-no-install.yaml" --type Localhost --no-install
check "seccomp: RuntimeDefault installs nothing" \
  seccomp pod "$out/helm-seccomp-runtimedefault.yaml" --type RuntimeDefault --no-install
check "seccomp: Unconfined installs nothing" \
  seccomp pod "$out/helm-seccomp-unconfined.yaml" --type Unconfined --no-install
check "seccomp: localhostProfile and nodeDirectory reach the pod" \
  seccomp pod "$out/helm-seccomp-custom-path.yaml" \
  --type Localhost --install --profile gw.json --node-dir /opt/kubelet/seccomp
# helm upgrade --reuse-values from a chart without seccompProfile renders without the section.
printf 'seccompProfile: null\n' > "$out/seccomp-absent.yaml"
check "seccomp: values without seccompProfile (--reuse-values from an earlier chart) get the default" sh -c \
  "'$out/helmrender' -chart $chart -strict -f '$out/insecure.yaml' -f '$out/seccomp-absent.yaml' > '$out/helm-seccomp-absent.yaml' \
   && '$here/check_seccomp.py' pod '$out/helm-seccomp-absent.yaml' --type Localhost --install"
refuses "seccomp: a rendering without the profile is refused as one that installs it" \
  seccomp pod "$out/helm-seccomp-localhost-no-install.yaml" --type Localhost --install
sed '/^ *- name: seccomp-profile$/,/^ *- ALL$/{/^ *drop:$/d;/^ *- ALL$/d}' "$out/helm-default.yaml" > "$out/seccomp-init-caps.yaml"
refuses "seccomp: an init container that keeps its capabilities is refused" \
  seccomp pod "$out/seccomp-init-caps.yaml" --type Localhost --install
# A namespace that enforces Pod Security baseline or restricted would refuse the installing init
# container only after the running gateway was deleted: the chart refuses to render instead
# (lookup sees the namespace at helm install/upgrade; helmrender -cluster stands for it).
for level in baseline restricted privileged; do
  printf -- '- apiVersion: v1\n  kind: Namespace\n  metadata:\n    name: iscsigw\n    labels:\n      pod-security.kubernetes.io/enforce: %s\n' \
    "$level" > "$out/ns-$level.yaml"
done
for level in baseline restricted; do
  check "seccomp: a namespace enforcing $level refuses the install, naming what to set" sh -c \
    "! '$out/helmrender' -chart $chart -strict -f '$out/insecure.yaml' -namespace iscsigw \
       -cluster '$out/ns-$level.yaml' > /dev/null 2> '$out/ns-$level.err' \
     && grep -q 'enforces Pod Security \"$level\".*seccompProfile.install=false' '$out/ns-$level.err'"
  check "seccomp: ... and renders with the profile put on the nodes beforehand (install: false)" sh -c \
    "'$out/helmrender' -chart $chart -strict -f '$out/insecure.yaml' \
       -f '$out/seccomp-localhost-no-install.yaml' -namespace iscsigw -cluster '$out/ns-$level.yaml' > /dev/null"
done
check "seccomp: a privileged namespace installs the profile" sh -c \
  "'$out/helmrender' -chart $chart -strict -f '$out/insecure.yaml' -namespace iscsigw \
     -cluster '$out/ns-privileged.yaml' | grep -q 'name: seccomp-profile'"
printf 'seccompProfile:\n  type: localhost\n' > "$out/bad-seccomp-type.yaml"
printf 'seccompProfile:\n  nodeDirectory: var/lib/kubelet/seccomp\n' > "$out/bad-seccomp-nodedir.yaml"
printf 'seccompProfile:\n  localhostProfile: /etc/gw.json\n' > "$out/bad-seccomp-abs.yaml"
printf 'seccompProfile:\n  localhostProfile: iscsigw/../gw.json\n' > "$out/bad-seccomp-dotdot.yaml"
printf 'securityContext:\n  seccompProfile:\n    type: Unconfined\n' > "$out/bad-seccomp-container.yaml"
# The way of earlier charts: a pod-level Localhost profile, which the container's would override.
printf 'podSecurityContext:\n  seccompProfile:\n    type: Localhost\n    localhostProfile: p.json\n' \
  > "$out/bad-seccomp-pod.yaml"
for bad in bad-seccomp-type bad-seccomp-nodedir bad-seccomp-abs bad-seccomp-dotdot bad-seccomp-container \
    bad-seccomp-pod; do
  refuses "chart refuses $bad" "$out/helmrender" -chart $chart -f "$out/insecure.yaml" -f "$out/$bad.yaml"
done

# CSI: nothing without csi.enabled; with it, the driver, both workloads and the classes.
check "default values render no CSI object" sh -c \
  "! grep -Eqx 'kind: (CSIDriver|StorageClass|VolumeSnapshotClass|DaemonSet|Deployment|ClusterRole)' '$out/helm-default.yaml'"
for kind in CSIDriver Deployment DaemonSet ClusterRole ClusterRoleBinding Role StorageClass VolumeSnapshotClass; do
  check "ci/csi-values.yaml renders a $kind" grep -qx "kind: $kind" "$out/helm-csi.yaml"
done
check "the node plugin logs in through the host's namespaces" sh -c \
  "grep -q -- '--host-exec=nsenter' '$out/helm-csi.yaml' && grep -q 'hostPID: true' '$out/helm-csi.yaml' \
   && grep -q 'mountPropagation: Bidirectional' '$out/helm-csi.yaml'"
check "the registrar registers /var/lib/kubelet/plugins/iscsi.iscsigw.io/csi.sock" \
  grep -q -- '- --kubelet-registration-path=/var/lib/kubelet/plugins/iscsi.iscsigw.io/csi.sock' "$out/helm-csi.yaml"
chap_params() {  # chap_params FILE: the CHAP Secret for provisioning, staging and expansion
  local p
  for p in provisioner node-stage controller-expand; do
    grep -q "csi.storage.k8s.io/$p-secret-name: \"iscsigw-chap\"" "$1" || return 1
  done
}
check "the StorageClass names the CHAP Secret for provisioning, staging and expansion" \
  chap_params "$out/helm-csi.yaml"
check "storageClass.chapPerVolume: each volume's CHAP secrets are its own" \
  grep -q 'chapPerVolume: "true"' "$out/helm-csi.yaml"
check "csi.chapSecret.name \"\" renders no secret parameter and no Secret Role" sh -c \
  "! grep -Eq 'secret-name|csi-chap-secret|chapPerVolume' '$out/helm-csi-tls.yaml'"
daemonset() {  # daemonset FILE: the node DaemonSet's document of a render
  awk 'BEGIN { RS = "\n---" } /\nkind: DaemonSet/' "$1"
}
check "csi.node.aclAddress: the node plugin reports its InternalIP for its ACL entries" sh -c \
  "$(declare -f daemonset); daemonset '$out/helm-csi.yaml' > '$out/csi-node.yaml' \
   && grep -q -- '- --node-address=\$(NODE_IP)' '$out/csi-node.yaml' \
   && grep -A3 'name: NODE_IP' '$out/csi-node.yaml' | grep -q 'fieldPath: status.hostIP'"
check "the node plugin keeps its records on the node, under the kubelet's plugin directory" \
  "$here/check_csi_state_dir.py" "$out/helm-csi.yaml" /var/lib/kubelet/plugins/iscsi.iscsigw.io
check "... under csi.node.kubeletDir's (full values)" \
  "$here/check_csi_state_dir.py" "$out/helm-full.yaml" /var/lib/k0s/kubelet/plugins/iscsi.iscsigw.io
sed '/- --state-dir=/d' "$out/helm-csi.yaml" > "$out/csi-no-state-dir.yaml"
refuses "... and a node plugin without --state-dir (records in the container) is caught" \
  "$here/check_csi_state_dir.py" "$out/csi-no-state-dir.yaml" /var/lib/kubelet/plugins/iscsi.iscsigw.io
sed 's|path: /var/lib/kubelet/plugins/iscsi.iscsigw.io-state|path: /var/lib/kubelet/plugins/iscsi.iscsigw.io/state|' \
  "$out/helm-csi.yaml" > "$out/csi-state-by-socket.yaml"
refuses "... and records in the directory of the plugin's socket are caught" \
  "$here/check_csi_state_dir.py" "$out/csi-state-by-socket.yaml" /var/lib/kubelet/plugins/iscsi.iscsigw.io
check "by default no node address and no per-volume CHAP parameter (neither fits every cluster)" sh -c \
  "$(declare -f daemonset); daemonset '$out/helm-csi-tls.yaml' | grep -q 'kind: DaemonSet' \
   && ! daemonset '$out/helm-csi-tls.yaml' | grep -Eq -- '--node-address|NODE_IP'"
check "NOTES.txt names the StorageClass" grep -q 'StorageClass iscsigw ' "$out/notes-helm-csi.txt"
refuses "csi.snapshotClass.create without the snapshot API is refused" \
  "$out/helmrender" -chart $chart -f $chart/ci/csi-values.yaml
# Several gateway pods are the paths of one multipath device each (docs/kubernetes.md, "Draining
# and upgrading"): a PodDisruptionBudget and an anti-affinity keep them apart and up; one pod gets
# neither. The iSCSI Services keep the initiator's address for ACLs and CHAP lockout.
avail() { "$here/check_availability.py" "$@"; }
check "default values (one replica): no PodDisruptionBudget, no anti-affinity" sh -c \
  "'$here/check_availability.py' '$out/helm-default.yaml' no-pdb && '$here/check_availability.py' '$out/helm-default.yaml' anti-affinity none"
check "ci/gateways-values.yaml (three replicas): a PodDisruptionBudget, maxUnavailable 1" \
  avail "$out/helm-gateways.yaml" pdb 1
check "ci/gateways-values.yaml: the gateway pods preferably on separate nodes" \
  avail "$out/helm-gateways.yaml" anti-affinity preferred
printf 'podAntiAffinity: required\npodDisruptionBudget:\n  maxUnavailable: "34%%"\nservice:\n  iscsi:\n    type: LoadBalancer\n' \
  > "$out/gateways-required.yaml"
"$out/helmrender" -chart $chart -strict -f $chart/ci/gateways-values.yaml -f "$out/gateways-required.yaml" \
  -name ha -namespace storage > "$out/helm-gateways-required.yaml"
rendered+=("$out/helm-gateways-required.yaml")
check "podAntiAffinity required and a percentage maxUnavailable" sh -c \
  "'$here/check_availability.py' '$out/helm-gateways-required.yaml' anti-affinity required \
   && '$here/check_availability.py' '$out/helm-gateways-required.yaml' pdb 34%"
check "three LoadBalancer iSCSI Services keep the initiator's address (externalTrafficPolicy Local)" \
  avail "$out/helm-gateways-required.yaml" traffic-policy
printf 'podAntiAffinity: none\npodDisruptionBudget:\n  enabled: false\n' > "$out/gateways-none.yaml"
"$out/helmrender" -chart $chart -strict -f $chart/ci/gateways-values.yaml -f "$out/gateways-none.yaml" \
  > "$out/helm-gateways-none.yaml"
check "podAntiAffinity none and podDisruptionBudget.enabled false render neither" sh -c \
  "'$here/check_availability.py' '$out/helm-gateways-none.yaml' no-pdb && '$here/check_availability.py' '$out/helm-gateways-none.yaml' anti-affinity none"
printf 'podDisruptionBudget:\n  minAvailable: 2\naffinity:\n  nodeAffinity: {}\ntopologySpreadConstraints:\n  - maxSkew: 1\n    topologyKey: topology.kubernetes.io/zone\n    whenUnsatisfiable: DoNotSchedule\n    labelSelector:\n      matchLabels:\n        app.kubernetes.io/component: gateway\n' \
  > "$out/gateways-own.yaml"
"$out/helmrender" -chart $chart -strict -f $chart/ci/gateways-values.yaml -f "$out/gateways-own.yaml" \
  > "$out/helm-gateways-own.yaml"
rendered+=("$out/helm-gateways-own.yaml")
check "affinity, topologySpreadConstraints and minAvailable replace the defaults" sh -c \
  "grep -A1 '^  minAvailable: 2$' '$out/helm-gateways-own.yaml' | grep -q selector \
   && ! grep -q '^  maxUnavailable:' '$out/helm-gateways-own.yaml' && ! grep -q podAntiAffinity '$out/helm-gateways-own.yaml' \
   && grep -q '^        nodeAffinity: {}$' '$out/helm-gateways-own.yaml' \
   && grep -A8 '^      topologySpreadConstraints:$' '$out/helm-gateways-own.yaml' | grep -q 'topologyKey: topology.kubernetes.io/zone'"
sed '/^kind: PodDisruptionBudget$/,/^---$/ s/component: gateway$/component: csi-node/' "$out/helm-gateways.yaml" \
  > "$out/pdb-other-pods.yaml"
refuses "a PodDisruptionBudget selecting other pods is refused" avail "$out/pdb-other-pods.yaml" pdb 1
sed 's/topologyKey: kubernetes.io\/hostname/topologyKey: topology.kubernetes.io\/zone/' "$out/helm-gateways.yaml" > "$out/zone-affinity.yaml"
refuses "an anti-affinity on another key is refused" avail "$out/zone-affinity.yaml" anti-affinity preferred
sed 's/externalTrafficPolicy: Local/externalTrafficPolicy: Cluster/' "$out/helm-gateways-required.yaml" > "$out/etp-cluster.yaml"
refuses "an iSCSI Service with externalTrafficPolicy Cluster is refused" avail "$out/etp-cluster.yaml" traffic-policy

# Storage capacity tracking: GetCapacity advertised by the controller (GET_CAPACITY), published by
# the provisioner, read by the scheduler through the CSIDriver.
check "the CSI controller advertises GET_CAPACITY" grep -q 'Rpc::GET_CAPACITY' csi/controller_service.cc
check "ci/csi-values.yaml: capacity tracking wired" avail "$out/helm-csi.yaml" capacity
check "ci/full-values.yaml: capacity tracking wired, its poll interval, immediate binding" sh -c \
  "'$here/check_availability.py' '$out/helm-full.yaml' capacity && grep -q -- '- --capacity-poll-interval=5m' '$out/helm-full.yaml' \
   && grep -q -- '- --capacity-for-immediate-binding' '$out/helm-full.yaml'"
check "ci/csi-values.yaml: no capacity for immediate binding by default" sh -c \
  "! grep -q -- '--capacity-for-immediate-binding' '$out/helm-csi.yaml'"
printf 'csi:\n  capacity:\n    enabled: false\n' > "$out/no-capacity.yaml"
"$out/helmrender" -chart $chart -strict -api-versions snapshot.storage.k8s.io/v1 -f $chart/ci/csi-values.yaml \
  -f "$out/no-capacity.yaml" > "$out/helm-csi-no-capacity.yaml"
check "csi.capacity.enabled false: no capacity flags, RBAC or storageCapacity" \
  avail "$out/helm-csi-no-capacity.yaml" no-capacity
check "default values (no CSI): no capacity RBAC" avail "$out/helm-default.yaml" no-capacity
sed '/- --enable-capacity/d' "$out/helm-csi.yaml" > "$out/capacity-no-flag.yaml"
refuses "a provisioner without --enable-capacity is refused" avail "$out/capacity-no-flag.yaml" capacity
sed 's/resources: \["replicasets"\]/resources: ["deployments"]/' "$out/helm-csi.yaml" > "$out/capacity-no-rs.yaml"
refuses "capacity RBAC without get on replicasets is refused" avail "$out/capacity-no-rs.yaml" capacity
sed '/- name: POD_NAME/,+3d' "$out/helm-csi.yaml" > "$out/capacity-no-pod-name.yaml"
refuses "a provisioner without POD_NAME is refused" avail "$out/capacity-no-pod-name.yaml" capacity
sed 's/storageCapacity: true/storageCapacity: false/' "$out/helm-csi.yaml" > "$out/capacity-driver-off.yaml"
refuses "a CSIDriver without storageCapacity is refused" avail "$out/capacity-driver-off.yaml" capacity

# values.schema.json refuses misspelt keys, bad enums and TLS without a Secret.
printf 'gateway:\n  logLevl: debug\n' > "$out/bad-key.yaml"
printf 'service:\n  iscsi:\n    type: External\n' > "$out/bad-enum.yaml"
printf 'tls:\n  enabled: true\n' > "$out/bad-tls.yaml"
printf 'bootstrap:\n  targets:\n    - name: x\n      luns:\n        - id: 300\n          ram: {}\n' > "$out/bad-lun.yaml"
printf 'bootstrap:\n  targets:\n    - name: x\n      chap:\n        user: u\n        secret: s\n' > "$out/bad-chap.yaml"
printf 'gateway:\n  advertise: [\"10.0.0.5\"]\n' > "$out/bad-advertise.yaml"
printf 'gateway:\n  maxConnectionsPerSource: 1000001\n' > "$out/bad-per-source.yaml"
printf 'gateway:\n  maxDiscoverySessions: -1\n' > "$out/bad-discovery-sessions.yaml"
printf 'gateway:\n  discoveryIdleTimeout: 0\n' > "$out/bad-discovery-timeout.yaml"
printf 'gateway:\n  discoveryIdleTimeout: 3601\n' > "$out/bad-discovery-timeout-max.yaml"
printf 'csi:\n  storageClass:\n    provisioning: sparse\n' > "$out/bad-csi-provisioning.yaml"
printf 'csi:\n  storageClass:\n    blockSize: 1024\n' > "$out/bad-csi-blocksize.yaml"
printf 'csi:\n  images:\n    provisioner:\n      tag: ""\n' > "$out/bad-csi-image.yaml"
printf 'csi:\n  node:\n    kubeletDir: var/lib/kubelet\n' > "$out/bad-csi-kubeletdir.yaml"
printf 'csi:\n  controler: {}\n' > "$out/bad-csi-key.yaml"
printf 'ceph:\n  enabled: true\n' > "$out/bad-ceph.yaml"
printf 'ceph:\n  keyringKey: keyrings/gw\n' > "$out/bad-ceph-key.yaml"
printf 'ceph:\n  mountPath: etc/ceph\n' > "$out/bad-ceph-mountpath.yaml"
printf 'bootstrap:\n  targets:\n    - name: x\n      luns:\n        - id: 0\n          rbd:\n            pool: rbd\n' \
  > "$out/bad-rbd-lun.yaml"
printf 'podAntiAffinity: soft\n' > "$out/bad-anti-affinity.yaml"
printf 'podDisruptionBudget:\n  maxUnavailable: -1\n' > "$out/bad-pdb.yaml"
printf 'monitoring:\n  prometheusRule:\n    thresholds:\n      lunDirFullPercent: 185\n' > "$out/bad-lun-dir-percent.yaml"
printf 'monitoring:\n  prometheusRule:\n    thresholds:\n      lunOfflineFor: 2 minutes\n' > "$out/bad-rule-duration.yaml"
printf 'monitoring:\n  prometheusRule:\n    thresholds:\n      lunOffline: 2m\n' > "$out/bad-rule-key.yaml"
printf 'monitoring:\n  dashboard:\n    label: "grafana dashboard"\n' > "$out/bad-dashboard-label.yaml"
printf 'csi:\n  capacity:\n    pollInterval: 1\n' > "$out/bad-capacity-interval.yaml"
for bad in bad-anti-affinity bad-pdb bad-lun-dir-percent bad-rule-duration bad-rule-key \
    bad-dashboard-label bad-capacity-interval; do
  refuses "values.schema.json refuses $bad" \
    "$out/helmrender" -chart $chart -f "$out/insecure.yaml" -f "$out/$bad.yaml"
done
for bad in bad-key bad-enum bad-tls bad-lun bad-chap bad-advertise bad-per-source \
    bad-discovery-sessions bad-discovery-timeout bad-discovery-timeout-max bad-csi-provisioning \
    bad-csi-blocksize bad-csi-image bad-csi-kubeletdir bad-csi-key bad-ceph bad-ceph-key \
    bad-ceph-mountpath bad-rbd-lun; do
  refuses "values.schema.json refuses $bad" \
    "$out/helmrender" -chart $chart -f "$out/insecure.yaml" -f "$out/$bad.yaml"
done
if command -v helm >/dev/null 2>&1; then
  check "helm lint --strict" helm lint --strict $chart -f "$out/insecure.yaml"
  check "helm lint --strict (full values)" helm lint --strict $chart -f $chart/ci/full-values.yaml
  check "helm template" sh -c "helm template iscsigw $chart -n iscsigw -f '$out/insecure.yaml' > '$out/helm-template.yaml'"
  rendered+=("$out/helm-template.yaml")
else
  log "skip helm lint/template: no helm binary on PATH"
fi

# yamllint: sources and rendered output.
check "yamllint sources" yamllint -s -c $here/yamllint.yaml deploy/base deploy/overlays deploy/examples $chart/Chart.yaml \
  $chart/values.yaml $chart/ci
check "yamllint rendered" yamllint -s -c $here/yamllint.yaml "${rendered[@]}"

# Schema validation of every rendered object; and a typo must be caught.
check "schema validation" validate "${rendered[@]}"
sed 's/readinessProbe:/readinesProbe:/' "$out/kustomize-base.yaml" > "$out/typo.yaml"
refuses "schema validation refuses an unknown field" validate "$out/typo.yaml"
# VolumeSnapshotClass is a CRD kind: validate/crds/ holds its schema; it must be checked, not skipped.
check "schema validation checks the VolumeSnapshotClass" sh -c \
  "grep -qx 'kind: VolumeSnapshotClass' '$out/helm-csi.yaml' && node '$here/validate/validate.mjs' '$out/helm-csi.yaml'"
sed 's/^deletionPolicy: Delete$/deletionPolicy: Remove/' "$out/helm-csi.yaml" > "$out/bad-vsc.yaml"
refuses "schema validation refuses a VolumeSnapshotClass's bad deletionPolicy" validate "$out/bad-vsc.yaml"
sed 's/^driver: iscsi.iscsigw.io$/drivr: iscsi.iscsigw.io/' "$out/helm-csi.yaml" > "$out/bad-vsc-key.yaml"
refuses "schema validation refuses a VolumeSnapshotClass's unknown field" validate "$out/bad-vsc-key.yaml"
sed 's/^kind: VolumeSnapshotClass$/kind: VolumeSnapshotPolicy/' "$out/helm-csi.yaml" > "$out/no-schema.yaml"
refuses "schema validation refuses a kind it has no schema for" validate "$out/no-schema.yaml"

if [ "$failures" -ne 0 ]; then
  log "manifest checks: $failures failed (output in $out)"
  exit 1
fi
log "manifest checks passed"
