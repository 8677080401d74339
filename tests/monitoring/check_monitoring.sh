#!/usr/bin/env bash
# The alerting rules and the Grafana dashboard the chart ships (monitoring.prometheusRule,
# monitoring.dashboard; docs/kubernetes.md, "Alerts and dashboards"), checked offline in a few
# seconds (ctest monitoring_rules):
# - the PrometheusRule rendered from the chart passes `promtool check rules`, with the default
#   thresholds and with ci/full-values.yaml's, and its alerts pass their unit tests
#   (iscsigw-alerts_test.yaml, `promtool test rules`); nudging a threshold or a comparison of a
#   rule makes those tests fail;
# - the dashboard ConfigMap carries the sidecar's label and the dashboard, which meets
#   dashboard.schema.json; its queries parse and every metric the rules and the dashboard name is
#   documented (check_promql.py);
# - the chart's defaults render neither object;
# - deploy/monitoring/ is what scripts/export-monitoring.sh writes from the chart.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cd "$repo"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
log_tag=monitoring
source "$repo/tests/packaging/lib.sh"
command -v promtool >/dev/null || { log "FAIL: promtool is not installed (package prometheus)"; exit 1; }
validate=tests/packaging/validate
if [ ! -d "$validate/node_modules/ajv" ]; then
  (cd "$validate" && npm ci --no-audit --no-fund --loglevel=error)
fi
export GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS=
export GOCACHE="${ISCSIGW_PKG_WORK:-/var/tmp/iscsigw-packaging}/gocache"
mkdir -p "$GOCACHE"
go build -o "$out/helmrender" tests/packaging/helmrender/main.go
chart=helm/iscsigw
render() { "$out/helmrender" -chart $chart -strict "$@"; }
# The document of KIND in a rendered chart.
# Each document starts with its own "---", so that several of one kind stay apart.
doc() { awk -v kind="$1" 'BEGIN { RS = "\n---" } $0 ~ "\nkind: " kind "\n" { print "---"; print }' "$2"; }
# A PrometheusRule's spec.groups as a rules file (two spaces deeper in the rendered chart).
groups() {
  doc PrometheusRule "$1" | awk '/^  groups:$/ { print "groups:"; body = 1; next }
                                 body && /^[^ ]/ { exit } body { sub(/^  /, ""); print }'
}
# The dashboard JSON of the dashboard ConfigMap of a rendered chart.
dashboard() {
  doc ConfigMap "$1" | /usr/bin/python3 -c '
import sys, yaml
for d in yaml.safe_load_all(sys.stdin):
    if d and d["metadata"]["name"].endswith("-dashboard"):
        print(d["data"]["iscsigw-dashboard.json"])'
}

printf 'grpc:\n  insecure: true\n' > "$out/insecure.yaml"
printf 'monitoring:\n  prometheusRule:\n    enabled: true\n  dashboard:\n    enabled: true\n' > "$out/on.yaml"
render -f "$out/insecure.yaml" > "$out/default.yaml"
render -f "$out/insecure.yaml" -f "$out/on.yaml" -name iscsigw -namespace storage > "$out/on.yaml.out"
render -f $chart/ci/full-values.yaml -api-versions snapshot.storage.k8s.io/v1 -name prod \
  -namespace storage > "$out/full.yaml"

doc PrometheusRule "$out/full.yaml" > "$out/full-rule.yaml"
doc ConfigMap "$out/on.yaml.out" > "$out/on-configmaps.yaml"
doc ConfigMap "$out/full.yaml" > "$out/full-configmaps.yaml"
check "default values render no PrometheusRule and no dashboard ConfigMap" sh -c \
  "! grep -qx 'kind: PrometheusRule' '$out/default.yaml' && ! grep -q 'grafana_dashboard' '$out/default.yaml' \
   && ! grep -q 'name: .*-dashboard$' '$out/default.yaml'"

# Rules: default thresholds, then full-values' thresholds.
mkdir -p "$out/rules" "$out/full-rules"
groups "$out/on.yaml.out" > "$out/rules/iscsigw-alerts.yaml"
groups "$out/full.yaml" > "$out/full-rules/iscsigw-alerts.yaml"
check "promtool check rules: the rendered PrometheusRule (default thresholds)" \
  promtool check rules "$out/rules/iscsigw-alerts.yaml"
check "promtool check rules: the rendered PrometheusRule (ci/full-values.yaml)" \
  promtool check rules "$out/full-rules/iscsigw-alerts.yaml"
check "the PrometheusRule has every alert the tests cover, and no other" bash -c "
  diff <(grep -o 'alert: [A-Za-z]*' '$out/rules/iscsigw-alerts.yaml' | sort) \
       <(grep -o 'alertname: [A-Za-z]*' '$here/iscsigw-alerts_test.yaml' | sed 's/alertname/alert/' | sort -u)"
cp "$here/iscsigw-alerts_test.yaml" "$out/rules/"
check "promtool test rules: every alert at its threshold's edge" \
  promtool test rules "$out/rules/iscsigw-alerts_test.yaml"
check "ci/full-values.yaml's thresholds and labels reach the PrometheusRule" sh -c "
  grep -qF '>= 90' '$out/full-rules/iscsigw-alerts.yaml' && grep -qF 'for: 1h' '$out/full-rules/iscsigw-alerts.yaml' \
  && grep -qF 'up{job=\"gw-metrics\"} == 0' '$out/full-rules/iscsigw-alerts.yaml' \
  && grep -qF '> 120' '$out/full-rules/iscsigw-alerts.yaml' \
  && grep -qx '    release: prometheus' '$out/full-rule.yaml'"
# Each nudge moves one rule's edge; the unit tests must notice.
mutants=(
  's/iscsigw_lun_online == 0/iscsigw_lun_online < 0/'
  's/for: 2m$/for: 3m/'
  's/size_bytes >= 85$/size_bytes > 85/'
  's/iscsigw_state_dir_writable == 0/iscsigw_state_dir_writable == 1/'
  's/{result="authentication_failure"}\[5m\])) > 0.05/{result="authentication_failure"}[5m])) >= 0.05/'
  's/nop_timeouts_total\[10m\])) >= 3/nop_timeouts_total[10m])) > 3/'
  's/(iscsigw_iscsi_sessions) < 0.5/(iscsigw_iscsi_sessions) <= 0.5/'
  's/\[30m:1m\]) >= 2$/[30m:1m]) >= 1/'
  's/iscsigw_io_uring_enabled == 0/iscsigw_io_uring_enabled == 1/'
  's/iscsigw_io_uring_fallbacks_total > 0/iscsigw_io_uring_fallbacks_total >= 0/'
  's/iscsigw_shared_config_loaded == 0/iscsigw_shared_config_loaded > 1/'
  's/timestamp_seconds > 300/timestamp_seconds >= 300/'
  's/{result!="success"}\[5m\])) > 0.1/{result!="success"}[5m])) >= 0.1/'
  's/\[5m\]))) > 0.1$/[5m]))) > 0.2/'
  's/reactor_busy_seconds_total\[5m\]) > 0.9/reactor_busy_seconds_total[5m]) >= 0.9/'
  's/medium_error|hardware_error/medium_error/'
  's/increase(iscsigw_store_io_errors_total\[5m\])/increase(iscsigw_store_io_errors_total[15m])/'
  's/up{job=~".*iscsigw.*"} == 0/up{job=~".*iscsigw.*"} == 2/'
)
# promtool takes a second of wall time per test file, little of it CPU: all mutants at once.
for i in "${!mutants[@]}"; do
  mkdir -p "$out/mutant$i"
  sed "${mutants[$i]}" "$out/rules/iscsigw-alerts.yaml" > "$out/mutant$i/iscsigw-alerts.yaml"
  cp "$here/iscsigw-alerts_test.yaml" "$out/mutant$i/"
  # errexit holds in the subshell too: the failure is caught, not fatal.
  (if promtool test rules "$out/mutant$i/iscsigw-alerts_test.yaml" >/dev/null 2>&1; then echo 0;
   else echo 1; fi > "$out/mutant$i/rc") &
done
wait
for i in "${!mutants[@]}"; do
  m=${mutants[$i]}
  if cmp -s "$out/rules/iscsigw-alerts.yaml" "$out/mutant$i/iscsigw-alerts.yaml"; then
    log "FAIL mutant $m changes nothing"; failures=$((failures + 1))
  else
    check "promtool test rules notices $m" sh -c "rc=\$(cat '$out/mutant$i/rc') && [ \"\$rc\" != 0 ]"
  fi
done

# Dashboard.
dashboard "$out/on.yaml.out" > "$out/dashboard.json"
dashboard "$out/full.yaml" > "$out/full-dashboard.json"
check "the dashboard ConfigMap holds files/iscsigw-dashboard.json" \
  /usr/bin/python3 -c "import json, sys; sys.exit(json.load(open('$out/dashboard.json')) != json.load(open('$chart/files/iscsigw-dashboard.json')))"
check "the dashboard ConfigMap carries grafana_dashboard: \"1\" by default" \
  grep -qx '    grafana_dashboard: "1"' "$out/on-configmaps.yaml"
check "ci/full-values.yaml: its label, namespace and annotations" sh -c \
  "grep -qx '    grafana_dashboard_iscsi: \"yes\"' '$out/full-configmaps.yaml' \
   && grep -qx '  namespace: observability' '$out/full-configmaps.yaml' \
   && grep -qx '    grafana_folder: Storage' '$out/full-configmaps.yaml'"
check "dashboard.schema.json" node "$here/check_dashboard_schema.mjs" "$out/dashboard.json"
/usr/bin/python3 - "$out/dashboard.json" "$out" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
bad = json.loads(json.dumps(d)); del bad["panels"][0]["targets"][0]["expr"]
json.dump(bad, open(sys.argv[2] + "/no-expr.json", "w"))
bad = json.loads(json.dumps(d)); bad["templating"]["list"] = bad["templating"]["list"][1:]
json.dump(bad, open(sys.argv[2] + "/no-datasource.json", "w"))
bad = json.loads(json.dumps(d)); del bad["uid"]
json.dump(bad, open(sys.argv[2] + "/no-uid.json", "w"))
bad = json.loads(json.dumps(d)); bad["panels"][1]["datasource"]["uid"] = "prometheus-main"
json.dump(bad, open(sys.argv[2] + "/fixed-datasource.json", "w"))
bad = json.loads(json.dumps(d)); bad["panels"][0]["targets"][0]["expr"] = "sum by (instance) (iscsigw_lun_online"
json.dump(bad, open(sys.argv[2] + "/unparsable.json", "w"))
bad = json.loads(json.dumps(d)); bad["panels"][0]["targets"][0]["expr"] = "iscsigw_lun_onlined"
json.dump(bad, open(sys.argv[2] + "/undocumented.json", "w"))
bad = json.loads(json.dumps(d)); bad["panels"][1]["id"] = bad["panels"][0]["id"]
json.dump(bad, open(sys.argv[2] + "/same-id.json", "w"))
PY
for bad in no-expr no-datasource no-uid fixed-datasource; do
  refuses "dashboard.schema.json refuses $bad" node "$here/check_dashboard_schema.mjs" "$out/$bad.json"
done
check "dashboard queries parse, metrics documented (default rules)" \
  /usr/bin/python3 "$here/check_promql.py" rules "$out/rules/iscsigw-alerts.yaml" "$out/dashboard.json" "$out"
check "dashboard queries parse, metrics documented (ci/full-values.yaml)" \
  /usr/bin/python3 "$here/check_promql.py" rules "$out/full-rules/iscsigw-alerts.yaml" "$out/full-dashboard.json" "$out"
for bad in unparsable undocumented same-id; do
  refuses "check_promql.py refuses $bad" \
    /usr/bin/python3 "$here/check_promql.py" rules "$out/rules/iscsigw-alerts.yaml" "$out/$bad.json" "$out"
done
# A metric an alert needs, gone from the reference.
grep -v '`iscsigw_state_dir_writable`' docs/reference/metrics.md > "$out/metrics-partly.md"
check "... (the reference without iscsigw_state_dir_writable differs)" \
  sh -c "! cmp -s docs/reference/metrics.md '$out/metrics-partly.md'"
refuses "check_promql.py refuses a rule on a metric the reference lost" env METRICS_DOC="$out/metrics-partly.md" \
  /usr/bin/python3 "$here/check_promql.py" rules "$out/rules/iscsigw-alerts.yaml" "$out/dashboard.json" "$out"
sed 's/iscsigw_store_io_errors_total/iscsigw_store_io_error_total/' "$out/rules/iscsigw-alerts.yaml" > "$out/undocumented-rule.yaml"
refuses "check_promql.py refuses a rule on an undocumented metric" \
  /usr/bin/python3 "$here/check_promql.py" rules "$out/undocumented-rule.yaml" "$out/dashboard.json" "$out"

# deploy/monitoring/ is generated from the chart.
HELMRENDER="$out/helmrender" scripts/export-monitoring.sh "$out/export" >/dev/null
check "deploy/monitoring/ is what scripts/export-monitoring.sh writes (run it)" \
  diff -r "$out/export" deploy/monitoring
check "deploy/monitoring/iscsigw-alerts.yaml: promtool check rules" \
  promtool check rules deploy/monitoring/iscsigw-alerts.yaml

if [ "$failures" -ne 0 ]; then
  log "monitoring checks: $failures failed"
  exit 1
fi
log "monitoring checks passed"
