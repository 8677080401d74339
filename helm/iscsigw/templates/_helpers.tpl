{{/* Names, labels and small pieces shared by the templates. */}}

{{- define "iscsigw.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name; 63 characters at most (DNS label). */}}
{{- define "iscsigw.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "iscsigw.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "iscsigw.selectorLabels" -}}
app.kubernetes.io/name: {{ include "iscsigw.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end }}

{{- define "iscsigw.labels" -}}
helm.sh/chart: {{ include "iscsigw.chart" . }}
{{ include "iscsigw.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: iscsigw
{{- end }}

{{- define "iscsigw.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "iscsigw.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "iscsigw.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{- define "iscsigw.bootstrapConfigMap" -}}
{{- .Values.bootstrap.existingConfigMap | default (printf "%s-bootstrap" (include "iscsigw.fullname" .)) }}
{{- end }}

{{/* bootstrap.json: the protobuf JSON form of iscsigw.v1.State. */}}
{{- define "iscsigw.bootstrapJson" -}}
{{- dict "targets" .Values.bootstrap.targets | toPrettyJson }}
{{- end }}

{{/*
The gateway container's seccomp profile (seccompProfile.*, docs/security.md). The chart's profile,
files/iscsigw-seccomp.json, is installed under a name of its content's hash unless
seccompProfile.localhostProfile names it: a changed profile is a new file and a new pod spec, and
releases of different chart versions on one node do not overwrite each other's. Each key falls
back to its default of values.yaml: `helm upgrade --reuse-values` from a chart without them
renders with the old chart's values, which lack the whole section.
*/}}
{{- define "iscsigw.seccompType" -}}
{{- dig "type" "Localhost" (get .Values "seccompProfile" | default dict) }}
{{- end }}

{{- define "iscsigw.seccompLocalhostProfile" -}}
{{- dig "localhostProfile" "" (get .Values "seccompProfile" | default dict) | default (printf "iscsigw/iscsigw-%s.json" (.Files.Get "files/iscsigw-seccomp.json" | sha256sum | trunc 12)) }}
{{- end }}

{{- define "iscsigw.seccompNodeDirectory" -}}
{{- dig "nodeDirectory" "/var/lib/kubelet/seccomp" (get .Values "seccompProfile" | default dict) }}
{{- end }}

{{/* Whether the gateway pod installs the chart's profile on its node (an init container). */}}
{{- define "iscsigw.seccompInstall" -}}
{{- if and (eq (include "iscsigw.seccompType" .) "Localhost") (dig "install" true (get .Values "seccompProfile" | default dict)) }}true{{ end }}
{{- end }}

{{- define "iscsigw.seccompConfigMap" -}}
{{- printf "%s-seccomp" (include "iscsigw.fullname" .) }}
{{- end }}

{{/* A probe, from (dict "root" . "service" NAME "probe" SETTINGS): the gRPC health check of
the service NAME (iscsigw.liveness or iscsigw.readiness, docs/kubernetes.md "Probes"), or a TCP
check of the port when it speaks TLS: the kubelet's gRPC probe has no TLS client. */}}
{{- define "iscsigw.probe" -}}
{{- if .root.Values.tls.enabled -}}
tcpSocket:
  port: grpc
{{- else -}}
grpc:
  port: {{ .root.Values.service.grpc.port }}
  service: {{ .service }}
{{- end }}
{{- with .probe }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* ISCSIGW_ADVERTISE, comma-separated: gateway.advertise, or what the iSCSI Service type makes
reachable from the nodes' hosts (a fixed nodePort on the gateway's node, a fixed load balancer
address); empty: SendTargets answers with the pod IP. */}}
{{- define "iscsigw.advertise" -}}
{{- $svc := .Values.service.iscsi -}}
{{- if .Values.gateway.advertise -}}
{{- join "," .Values.gateway.advertise -}}
{{- else if and (eq $svc.type "NodePort") $svc.nodePort -}}
{{- printf "$(NODE_IP):%v" $svc.nodePort -}}
{{- else if and (eq $svc.type "LoadBalancer") $svc.loadBalancerIP -}}
{{- printf "%s:%v" $svc.loadBalancerIP $svc.port -}}
{{- end -}}
{{- end }}

{{/* The CSI driver's pods: selector labels and labels, from (dict "root" . "component" NAME). */}}
{{- define "iscsigw.csiSelectorLabels" -}}
app.kubernetes.io/name: {{ include "iscsigw.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "iscsigw.csiLabels" -}}
helm.sh/chart: {{ include "iscsigw.chart" .root }}
{{ include "iscsigw.csiSelectorLabels" . }}
app.kubernetes.io/version: {{ .root.Values.image.tag | default .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: iscsigw
{{- end }}

{{/* The CSI driver's name (a contract: docs/kubernetes.md, "The CSI driver"): fixed, so one release per cluster enables it. */}}
{{- define "iscsigw.csiDriverName" -}}
iscsi.iscsigw.io
{{- end }}

{{/* The gRPC Service's in-cluster DNS name. */}}
{{- define "iscsigw.grpcServiceHost" -}}
{{- printf "%s-grpc.%s.svc" (include "iscsigw.fullname" .) .Release.Namespace }}
{{- end }}

{{/* The name clients verify the gateway's certificate against: tls.serverName, or the gRPC
Service's DNS name. */}}
{{- define "iscsigw.tlsServerName" -}}
{{- .Values.tls.serverName | default (include "iscsigw.grpcServiceHost" .) }}
{{- end }}

{{- define "iscsigw.sidecarImage" -}}
{{- printf "%s:%s" .repository .tag }}
{{- end }}

{{/* The securityContext of every CSI container that needs no privilege. */}}
{{- define "iscsigw.csiRestricted" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop:
    - ALL
{{- end }}

{{/*
Several gateway pods (replicas > 1) export the same rbd images: refuse what would not be one
device seen through several paths.
*/}}
{{- define "iscsigw.checkGateways" -}}
{{- if .Values.bootstrap.existingConfigMap }}
{{- fail "replicas > 1 needs the targets declared in bootstrap.targets (their LUNs are checked to be rbd), not bootstrap.existingConfigMap" }}
{{- end }}
{{- range .Values.bootstrap.targets }}
{{- $target := .name }}
{{- range .luns }}
{{- if not .rbd }}
{{- fail (printf "replicas > 1: LUN %v of %s is not rbd; every gateway pod would serve data of its own under one name" .id $target) }}
{{- end }}
{{- end }}
{{- end }}
{{- if include "iscsigw.advertise" . }}
{{- fail "replicas > 1: an advertised address (gateway.advertise, or the one a NodePort's fixed nodePort or a LoadBalancer's loadBalancerIP gives) would be the same for every gateway pod; leave them unset (each pod answers SendTargets with its own address)" }}
{{- end }}
{{- if .Values.csi.enabled }}
{{- fail "replicas > 1 with csi.enabled: the CSI driver makes file LUNs, which are each gateway pod's own" }}
{{- end }}
{{- if and .Values.sharedConfig.pool (not .Values.ceph.enabled) }}
{{- fail "sharedConfig.pool needs ceph.enabled: the gateways reach the shared configuration with the mounted conf and keyring" }}
{{- end }}
{{- end }}
