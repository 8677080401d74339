#!/usr/bin/python3
"""Every key of the chart's values.yaml appears in ci/full-values.yaml, so that the rendering of
that file reaches every knob (docs/kubernetes.md says so). The entries of lists are examples and
are not compared. Exits 1 naming each key missing."""
import os
import sys

import yaml

CHART = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "helm", "iscsigw")


def keys(node, prefix=""):
    out = set()
    if isinstance(node, dict):
        for k, v in node.items():
            out.add(prefix + k)
            out |= keys(v, prefix + k + ".")
    return out


def main():
    with open(os.path.join(CHART, "values.yaml")) as f:
        defaults = yaml.safe_load(f)
    with open(os.path.join(CHART, "ci", "full-values.yaml")) as f:
        full = yaml.safe_load(f)
    missing = sorted(keys(defaults) - keys(full))
    for k in missing:
        print(f"helm/iscsigw/ci/full-values.yaml: no key {k}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
