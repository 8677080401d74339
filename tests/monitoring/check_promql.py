#!/usr/bin/python3
"""Checks of the PromQL the chart ships (tests/monitoring/check_monitoring.sh runs it):

  check_promql.py rules RULES.yaml DASHBOARD.json WORK_DIR

- every query of the Grafana dashboard (each target's expr, each templating query's
  label_values() metric) parses: Grafana's variables are replaced by values of their kind and
  each expression becomes a recording rule of a file that `promtool check rules` checks;
- every metric the alerting rules and the dashboard name is a family of docs/reference/metrics.md
  (a histogram's _bucket, _sum and _count series count as the family), or `up`;
- panel ids are unique and every panel lies within Grafana's 24 columns.

Exits 1 naming each problem."""
import json
import os
import re
import subprocess
import sys

import yaml

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
# $METRICS_DOC: another copy, for the checks of this check.
METRICS_DOC = os.environ.get("METRICS_DOC") or os.path.join(REPO, "docs", "reference", "metrics.md")
# Series Prometheus makes itself.
BUILTIN = {"up"}
# Grafana's variables, replaced for parsing by values of the same kind.
VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h",
             "${datasource}": "prometheus", "$instance": ".*", "$target": ".*"}
METRIC = re.compile(r"\b((?:iscsigw|process)_[a-zA-Z0-9_]+|up)\b(?!\s*\()")


def documented_families():
    names = set()
    with open(METRICS_DOC) as f:
        for line in f:
            m = re.match(r"\|\s*`([a-zA-Z_:][a-zA-Z0-9_:]*)`\s*\|", line)
            if m:
                names.add(m.group(1))
    return names


def strip_strings(expr):
    """The expression without its string literals (label values such as "iscsigw_x")."""
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)


def metric_names(expr):
    return set(METRIC.findall(strip_strings(expr)))


def dashboard_queries(dash):
    """(where, PromQL) of every query of the dashboard."""
    out = []
    for panel in dash.get("panels", []):
        for t in panel.get("targets", []):
            out.append((f"panel {panel.get('id')} ({panel.get('title')}) {t.get('refId')}",
                        t.get("expr", "")))
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v.get("query", "")
        if isinstance(q, dict):
            q = q.get("query", "")
        m = re.fullmatch(r"label_values\((.*?)(?:,\s*[a-zA-Z_][a-zA-Z0-9_]*)?\)", q.strip())
        out.append((f"variable {v.get('name')}", m.group(1) if m else q))
    return out


def substitute(expr):
    for k, v in VARIABLES.items():
        expr = expr.replace(k, v)
    return expr


def check_layout(dash, problems):
    ids = [p.get("id") for p in dash.get("panels", [])]
    for i in sorted({i for i in ids if ids.count(i) > 1}, key=str):
        problems.append(f"dashboard: panel id {i} is used more than once")
    cells = {}
    for p in dash.get("panels", []):
        g = p.get("gridPos", {})
        x, y, w, h = (g.get(k, 0) for k in ("x", "y", "w", "h"))
        if x + w > 24:
            problems.append(f"dashboard: panel {p.get('id')} reaches column {x + w} of 24")
        for cx in range(x, x + w):
            for cy in range(y, y + h):
                if (cx, cy) in cells:
                    problems.append(f"dashboard: panel {p.get('id')} overlaps panel "
                                    f"{cells[(cx, cy)]}")
                    break
                cells[(cx, cy)] = p.get("id")
            else:
                continue
            break


def run(rules, dash, work):
    problems = []
    check_layout(dash, problems)
    queries = dashboard_queries(dash)
    # Every dashboard query, as a recording rule promtool parses.
    records = [{"record": f"dashboard:query_{i}", "expr": substitute(q)}
               for i, (_, q) in enumerate(queries)]
    path = os.path.join(work, "dashboard-queries.yaml")
    with open(path, "w") as f:
        yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]}, f)
    res = subprocess.run(["promtool", "check", "rules", path], capture_output=True, text=True)
    if res.returncode != 0:
        problems.append("dashboard: promtool check rules refuses a query:\n" + res.stdout +
                        res.stderr)
        for i, (where, q) in enumerate(queries):
            problems.append(f"  dashboard:query_{i} is {where}: {q}")
    # Metric names: the rules' and the dashboard's.
    used = {}
    for g in rules.get("groups", []):
        for r in g.get("rules", []):
            for n in metric_names(r.get("expr", "")):
                used.setdefault(n, f"rule {r.get('alert') or r.get('record')}")
    for where, q in queries:
        for n in metric_names(q):
            used.setdefault(n, f"dashboard {where}")
    documented = documented_families()
    allowed = documented | BUILTIN
    for name, where in sorted(used.items()):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        if name not in allowed and base not in allowed:
            problems.append(f"{where}: metric {name} is not in docs/reference/metrics.md")
    if not used:
        problems.append("no metric names found in the rules and the dashboard")
    for p in problems:
        print(p)
    print(f"check_promql: {len(queries)} dashboard queries, {len(used)} metric names, "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[1] != "rules":
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    with open(sys.argv[2]) as f:
        rules_doc = yaml.safe_load(f)
    with open(sys.argv[3]) as f:
        dash_doc = json.load(f)
    sys.exit(run(rules_doc, dash_doc, sys.argv[4]))
