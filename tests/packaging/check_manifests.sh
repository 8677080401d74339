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
    sed -E 's/(iscsigw-bootstrap)-[a-z0-9]{10}$/\1-HASH/' "$f" > "$f.normal"
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
check "helmrender default values" sh -c \
  "'$out/helmrender' -chart $chart -strict -namespace iscsigw -notes '$out/notes-default.txt' > '$out/helm-default.yaml'"
check "helmrender ci/full-values.yaml" sh -c \
  "'$out/helmrender' -chart $chart -strict -f $chart/ci/full-values.yaml -name prod -namespace storage -notes '$out/notes-full.txt' > '$out/helm-full.yaml'"
rendered+=("$out/helm-default.yaml" "$out/helm-full.yaml")
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
  "'$out/helmrender' -chart $chart -strict -f '$out/advertise.yaml' | grep -A1 'name: ISCSIGW_ADVERTISE' | grep -qF '\"\$(NODE_IP):3260,[fd00::1]:3260\"'"
check "full values render the ServiceMonitor and TLS probes" sh -c \
  "grep -q 'kind: ServiceMonitor' '$out/helm-full.yaml' && grep -q 'tcpSocket' '$out/helm-full.yaml'"
check "default values render gRPC probes" grep -q '^ *grpc:$' "$out/helm-default.yaml"

# The gRPC clients: iscsigwctl in the gateway pod dials 127.0.0.1 with the pod's ISCSIGW_*
# variables (with TLS: the CA and the name the certificate carries), the CSI controller the gRPC
# Service with the same CA and name.
grpc_clients() { "$here/check_grpc_clients.py" "$@"; }
check "gRPC clients: default values" grpc_clients "$out/helm-default.yaml" --no-tls --no-csi
check "gRPC clients: ci/full-values.yaml (mutual TLS)" grpc_clients "$out/helm-full.yaml" --tls
check "gRPC clients: kustomize default" grpc_clients "$out/kustomize-overlays-default.yaml" --no-tls
check "gRPC clients: kustomize grpc-tls" grpc_clients "$out/kustomize-overlays-grpc-tls.yaml" --tls
env_is() {  # env_is FILE NAME VALUE: the rendered environment variable NAME is VALUE
  grep -A1 -x " *- name: $2" "$1" | grep -qx " *value: \"\\?$3\"\\?"
}
check "kustomize grpc-tls: iscsigwctl verifies the gRPC Service's name" \
  env_is "$out/kustomize-overlays-grpc-tls.yaml" ISCSIGW_TLS_SERVER_NAME iscsigw-grpc.iscsigw.svc
printf 'tls:\n  enabled: true\n  secretName: gw-tls\n' > "$out/tls.yaml"
"$out/helmrender" -chart $chart -strict -f "$out/tls.yaml" -name r1 -namespace ns1 > "$out/helm-tls.yaml"
check "chart: without tls.serverName iscsigwctl verifies the gRPC Service's name" \
  env_is "$out/helm-tls.yaml" ISCSIGW_TLS_SERVER_NAME r1-iscsigw-grpc.ns1.svc
sed '/name: ISCSIGW_TLS_SERVER_NAME/,+1d' "$out/helm-full.yaml" > "$out/no-server-name.yaml"
refuses "gRPC clients: TLS without ISCSIGW_TLS_SERVER_NAME is refused" \
  grpc_clients "$out/no-server-name.yaml"

# values.schema.json refuses misspelt keys, bad enums and TLS without a Secret.
printf 'gateway:\n  logLevl: debug\n' > "$out/bad-key.yaml"
printf 'service:\n  iscsi:\n    type: External\n' > "$out/bad-enum.yaml"
printf 'tls:\n  enabled: true\n' > "$out/bad-tls.yaml"
printf 'bootstrap:\n  targets:\n    - name: x\n      luns:\n        - id: 300\n          ram: {}\n' > "$out/bad-lun.yaml"
printf 'bootstrap:\n  targets:\n    - name: x\n      chap:\n        user: u\n        secret: s\n' > "$out/bad-chap.yaml"
printf 'gateway:\n  advertise: [\"10.0.0.5\"]\n' > "$out/bad-advertise.yaml"
for bad in bad-key bad-enum bad-tls bad-lun bad-chap bad-advertise; do
  refuses "values.schema.json refuses $bad" "$out/helmrender" -chart $chart -f "$out/$bad.yaml"
done
if command -v helm >/dev/null 2>&1; then
  check "helm lint --strict" helm lint --strict $chart
  check "helm lint --strict (full values)" helm lint --strict $chart -f $chart/ci/full-values.yaml
  check "helm template" sh -c "helm template iscsigw $chart -n iscsigw > '$out/helm-template.yaml'"
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

if [ "$failures" -ne 0 ]; then
  log "manifest checks: $failures failed (output in $out)"
  exit 1
fi
log "manifest checks passed"
