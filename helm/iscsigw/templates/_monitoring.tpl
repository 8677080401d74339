{{/*
The Prometheus alerting rules (the groups of a rules file), with the thresholds of
monitoring.prometheusRule. The one source of the rules: prometheusrule.yaml renders them into a
PrometheusRule, and scripts/export-monitoring.sh writes them with the default thresholds to
deploy/monitoring/iscsigw-alerts.yaml (ctest monitoring_rules fails when that file differs).
Each alert has a test in tests/monitoring/iscsigw-alerts_test.yaml. Prometheus' own templates
in the annotations are written {{`{{ ... }}`}} so that Helm leaves them alone.
*/}}
{{- define "iscsigw.alertGroups" -}}
{{- $r := .Values.monitoring.prometheusRule -}}
{{- $t := $r.thresholds -}}
- name: iscsigw
  rules:
    - alert: IscsigwTargetDown
      expr: up{ {{- $r.jobSelector -}} } == 0
      for: 1m
      labels:
        severity: critical
      annotations:
        summary: "iscsigwd {{`{{ $labels.instance }}`}} is not being scraped"
        description: "Prometheus cannot scrape {{`{{ $labels.instance }}`}} for 1 minute: the gateway is down or unreachable."
    - alert: IscsigwLoginFailuresRising
      expr: sum by (instance) (rate(iscsigw_iscsi_logins_total{result!="success"}[5m])) > {{ $t.loginFailuresPerSecond }}
      for: 10m
      labels:
        severity: warning
      annotations:
        summary: "Failed iSCSI logins on {{`{{ $labels.instance }}`}}"
        description: "{{`{{ $value | humanize }}`}} failed logins per second for 10 minutes (wrong CHAP secrets, ACLs or target names)."
    - alert: IscsigwLatencyP99High
      expr: |
        histogram_quantile(0.99,
          sum by (instance, target, lun, class, le) (
            rate(iscsigw_scsi_command_duration_seconds_bucket{class=~"read|write"}[5m]))) > {{ $t.latencyP99Seconds }}
      for: 10m
      labels:
        severity: warning
      annotations:
        summary: "p99 {{`{{ $labels.class }}`}} latency above {{ $t.latencyP99Seconds }} s on {{`{{ $labels.target }}`}} LUN {{`{{ $labels.lun }}`}}"
        description: "p99 is {{`{{ $value | humanizeDuration }}`}} on {{`{{ $labels.instance }}`}}."
    - alert: IscsigwIoErrors
      expr: |
        sum by (instance, target, lun) (
          rate(iscsigw_scsi_check_conditions_total{sense_key=~"medium_error|hardware_error"}[5m])) > 0
      for: 5m
      labels:
        severity: critical
      annotations:
        summary: "I/O errors on {{`{{ $labels.target }}`}} LUN {{`{{ $labels.lun }}`}}"
        description: "Commands end in MEDIUM or HARDWARE ERROR on {{`{{ $labels.instance }}`}}: check the backing store."
    - alert: IscsigwStoreIoErrors
      expr: sum by (instance, target, lun) (increase(iscsigw_store_io_errors_total[5m])) > 0
      labels:
        severity: critical
      annotations:
        summary: "Backing store errors on {{`{{ $labels.target }}`}} LUN {{`{{ $labels.lun }}`}}"
        description: "{{`{{ $value | humanize }}`}} calls into the backing store failed in 5 minutes on {{`{{ $labels.instance }}`}}: check the file or device behind the LUN."
    - alert: IscsigwReactorSaturated
      expr: rate(iscsigw_reactor_busy_seconds_total[5m]) > {{ $t.reactorBusyRatio }}
      for: 15m
      labels:
        severity: warning
      annotations:
        summary: "Reactor {{`{{ $labels.reactor }}`}} of {{`{{ $labels.instance }}`}} is busy {{`{{ $value | humanizePercentage }}`}} of the time"
        description: "One reactor thread uses nearly a whole core; its connections queue behind each other. Add reactors (--reactors) or spread initiators over more gateways."
    - alert: IscsigwLunOffline
      expr: iscsigw_lun_online == 0
      for: {{ $t.lunOfflineFor }}
      labels:
        severity: critical
      annotations:
        summary: "LUN {{`{{ $labels.lun }}`}} of {{`{{ $labels.target }}`}} is offline on {{`{{ $labels.instance }}`}}"
        description: "Its backing store is offline, fenced or failed: commands to it end in NOT READY. The gateway's log says why; with several gateways the initiators' other paths still serve it."
    - alert: IscsigwLunDirAlmostFull
      expr: 100 * (iscsigw_lun_dir_size_bytes - iscsigw_lun_dir_free_bytes) / iscsigw_lun_dir_size_bytes >= {{ $t.lunDirFullPercent }}
      for: {{ $t.lunDirFullFor }}
      labels:
        severity: warning
      annotations:
        summary: "The LUN directory of {{`{{ $labels.instance }}`}} is {{`{{ $value | humanize }}`}}% full"
        description: "Thin LUN files grow as initiators write: once the file system is full, writes end in DATA PROTECT (no space). Grow the volume or move LUNs."
    - alert: IscsigwStateDirReadOnly
      expr: iscsigw_state_dir_writable == 0
      for: {{ $t.stateDirReadOnlyFor }}
      labels:
        severity: critical
      annotations:
        summary: "iscsigwd {{`{{ $labels.instance }}`}} cannot write its state directory"
        description: "The LUNs are still served, but no change can be kept: API changes fail and the gateway is not ready. The state volume is full or read-only."
    - alert: IscsigwChapFailures
      expr: sum by (instance) (rate(iscsigw_iscsi_logins_total{result="authentication_failure"}[5m])) > {{ $t.chapFailuresPerSecond }}
      for: {{ $t.chapFailuresFor }}
      labels:
        severity: warning
      annotations:
        summary: "CHAP failures on {{`{{ $labels.instance }}`}}"
        description: "{{`{{ $value | humanize }}`}} logins per second fail authentication: an initiator with a wrong or rotated secret, or one guessing (the gateway locks out the name and address, docs/security.md)."
    - alert: IscsigwNopTimeouts
      expr: sum by (instance) (increase(iscsigw_iscsi_nop_timeouts_total[10m])) >= {{ $t.nopTimeouts }}
      labels:
        severity: warning
      annotations:
        summary: "Initiators stop answering pings on {{`{{ $labels.instance }}`}}"
        description: "{{`{{ $value | humanize }}`}} connections dropped in 10 minutes because a NOP-In went unanswered: a network path or an initiator host is failing."
    - alert: IscsigwSessionsDropped
      # Per gateway, not per target: with one target per volume a pod moving away takes its
      # target from 1 session to 0, which is no loss of a path. A gateway that had at least 2.
      expr: sum by (instance) (iscsigw_iscsi_sessions) < {{ $t.sessionsDropRatio }} * max_over_time(sum by (instance) (iscsigw_iscsi_sessions)[30m:1m]) and on (instance) max_over_time(sum by (instance) (iscsigw_iscsi_sessions)[30m:1m]) >= 2
      for: 5m
      labels:
        severity: warning
      annotations:
        summary: "Sessions on {{`{{ $labels.instance }}`}} fell to {{`{{ $value }}`}}"
        description: "Fewer than {{ mulf $t.sessionsDropRatio 100 }}% of the gateway's sessions of the last 30 minutes are logged in: initiators lost this path (expected during a node drain)."
    - alert: IscsigwIoUringFallback
      # Only where a file LUN runs on the fallback: a gateway of rbd LUNs has nothing to lose.
      expr: iscsigw_io_uring_enabled == 0 and on (instance) iscsigw_io_uring_fallbacks_total > 0
      for: {{ $t.ioUringFallbackFor }}
      labels:
        severity: info
      annotations:
        summary: "File LUNs of {{`{{ $labels.instance }}`}} run without io_uring"
        description: "The kernel or the pod's seccomp profile refuses io_uring, so file LUNs use the thread-pool fallback at a fraction of the IOPS: install the chart's seccomp profile (docs/kubernetes.md)."
    - alert: IscsigwSharedConfigNotLoaded
      expr: iscsigw_shared_config_loaded == 0
      for: {{ $t.sharedConfigNotLoadedFor }}
      labels:
        severity: critical
      annotations:
        summary: "iscsigwd {{`{{ $labels.instance }}`}} has not loaded the shared configuration"
        description: "Its shared (rbd) targets are not served and it is not ready: check the RADOS object, the cephx user and the monitors (docs/multi-gateway.md)."
    - alert: IscsigwSharedConfigStale
      expr: time() - iscsigw_shared_config_last_load_timestamp_seconds > {{ $t.sharedConfigStaleSeconds }}
      labels:
        severity: warning
      annotations:
        summary: "The shared configuration of {{`{{ $labels.instance }}`}} is {{`{{ $value | humanizeDuration }}`}} old"
        description: "The gateway rereads it every 30 s and has not succeeded since: a change made through another gateway may not be served here."
{{- end }}
