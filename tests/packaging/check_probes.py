#!/usr/bin/python3
"""Checks the gateway's probes in a rendering (docs/kubernetes.md, "Probes"): the iscsigwd
container's liveness and startup probes ask the gRPC health service iscsigw.liveness, its
readiness probe iscsigw.readiness, and startup allows at least MIN_STARTUP_SECONDS; with --tls,
all three are TCP checks of the gRPC port (the kubelet's gRPC probe has no TLS client).

    check_probes.py [--tls] RENDERED.yaml

Exits 1 naming each probe that is wrong.
"""
import sys

import yaml

WANT = {"livenessProbe": "iscsigw.liveness", "startupProbe": "iscsigw.liveness",
        "readinessProbe": "iscsigw.readiness"}
MIN_STARTUP_SECONDS = 120


def problems(docs, tls):
    found = False
    for d in docs:
        if d.get("kind") != "StatefulSet":
            continue
        for c in d["spec"]["template"]["spec"]["containers"]:
            if c["name"] != "iscsigwd":
                continue
            found = True
            where = f'StatefulSet {d["metadata"]["name"]} container {c["name"]}'
            for probe, service in WANT.items():
                p = c.get(probe)
                if p is None:
                    yield f"{where}: no {probe}"
                    continue
                if tls:
                    if p.get("tcpSocket", {}).get("port") != "grpc" or "grpc" in p:
                        yield f"{where}: {probe} is not a TCP check of the grpc port: {p}"
                elif p.get("grpc", {}).get("service") != service:
                    yield f"{where}: {probe} does not ask the gRPC health service {service}: {p}"
            s = c.get("startupProbe") or {}
            budget = s.get("periodSeconds", 10) * s.get("failureThreshold", 3)
            if budget < MIN_STARTUP_SECONDS:
                yield f"{where}: startupProbe allows {budget} s, less than {MIN_STARTUP_SECONDS}"
    if not found:
        yield "no StatefulSet with an iscsigwd container"


def main(argv):
    tls = "--tls" in argv
    paths = [a for a in argv if a != "--tls"]
    if len(paths) != 1:
        sys.exit(__doc__)
    with open(paths[0]) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    bad = list(problems(docs, tls))
    for line in bad:
        print(f"{paths[0]}: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
