#!/usr/bin/python3
"""Checks a kustomize rendering: every ConfigMap a workload mounts is one the rendering contains.

kustomize appends a content hash to a generated ConfigMap's name and must rewrite every reference
to it; each kustomize version hashes differently, so this is checked per rendering rather than by
comparing names across versions. Exits 1 naming the dangling reference.
"""
import sys

import yaml


def main(path):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    configmaps = {(d["metadata"].get("namespace"), d["metadata"]["name"])
                  for d in docs if d.get("kind") == "ConfigMap"}
    bad = []
    for d in docs:
        if d.get("kind") not in ("StatefulSet", "Deployment", "DaemonSet"):
            continue
        ns = d["metadata"].get("namespace")
        for vol in d["spec"]["template"]["spec"].get("volumes", []):
            cm = vol.get("configMap")
            if cm and (ns, cm["name"]) not in configmaps:
                bad.append(f'{d["kind"]} {d["metadata"]["name"]} volume {vol["name"]}: '
                           f'ConfigMap {cm["name"]} (namespace {ns}) is not in the rendering')
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
