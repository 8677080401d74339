#!/usr/bin/python3
"""Checks that the gRPC clients in a rendering can reach and verify the gateway they ship with.

  check_grpc_clients.py RENDERED.yaml [--tls | --no-tls] [--csi | --no-csi]

The gateway container (the one that runs iscsigwd) must set ISCSIGW_SERVER to 127.0.0.1 and its own
gRPC port, so that `kubectl exec ... iscsigwctl` needs no flags. When it serves TLS
(ISCSIGW_TLS_CERT), ISCSIGW_TLS_CA and ISCSIGW_TLS_SERVER_NAME must be set too, the CA file must lie
in a mounted Secret, and with mutual TLS (ISCSIGW_TLS_CLIENT_CA) the client certificate and key as
well. The CSI controller's iscsigw-csi, when rendered, must dial a Service of the rendering on the
gRPC port, and carry the TLS client flags (files mounted, the same server name) exactly when the
gateway serves TLS. --tls/--no-tls and --csi/--no-csi state what the rendering must contain.
Exits 1 naming each problem.
"""
import sys

import yaml


def env_of(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def mounted_secret(pod, container, path):
    """The Secret whose volume is mounted over PATH in CONTAINER, or None."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for m in container.get("volumeMounts", []):
        prefix = m["mountPath"].rstrip("/") + "/"
        if path.startswith(prefix) and "secret" in volumes.get(m["name"], {}):
            return volumes[m["name"]]["secret"]["secretName"]
    return None


def flags_of(container):
    out = {}
    for a in container.get("args", []):
        if a.startswith("--") and "=" in a:
            k, v = a[2:].split("=", 1)
            out[k] = v
    return out


def main(argv):
    path = argv[1]
    want = set(argv[2:])
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    problems = []
    workloads = [d for d in docs if d.get("kind") in ("StatefulSet", "Deployment", "DaemonSet")]
    services = {(d["metadata"].get("namespace"), d["metadata"]["name"]): d
                for d in docs if d.get("kind") == "Service"}

    gateway = None
    for w in workloads:
        pod = w["spec"]["template"]["spec"]
        for c in pod["containers"]:
            if c["name"] == "iscsigwd":
                gateway = (w, pod, c)
    if gateway is None:
        return fail([f"{path}: no iscsigwd container"])
    w, pod, c = gateway
    env = env_of(c)
    where = f"{path}: {w['kind']} {w['metadata']['name']} container iscsigwd"
    grpc_port = next(p["containerPort"] for p in c["ports"] if p["name"] == "grpc")
    if env.get("ISCSIGW_SERVER") != f"127.0.0.1:{grpc_port}":
        problems.append(f"{where}: ISCSIGW_SERVER is {env.get('ISCSIGW_SERVER')!r}, "
                        f"not 127.0.0.1:{grpc_port}")
    tls = "ISCSIGW_TLS_CERT" in env
    if "--tls" in want and not tls:
        problems.append(f"{where}: TLS expected, ISCSIGW_TLS_CERT is not set")
    if "--no-tls" in want and tls:
        problems.append(f"{where}: plaintext expected, ISCSIGW_TLS_CERT is set")
    server_name = env.get("ISCSIGW_TLS_SERVER_NAME")
    if tls:
        client_vars = ["ISCSIGW_TLS_CA", "ISCSIGW_TLS_SERVER_NAME"]
        if "ISCSIGW_TLS_CLIENT_CA" in env:
            client_vars += ["ISCSIGW_TLS_CLIENT_CERT", "ISCSIGW_TLS_CLIENT_KEY"]
        for var in client_vars:
            if not env.get(var):
                problems.append(f"{where}: serves TLS but {var} is not set for iscsigwctl")
            elif var != "ISCSIGW_TLS_SERVER_NAME" and not mounted_secret(pod, c, env[var]):
                problems.append(f"{where}: {var}={env[var]} is not in a mounted Secret")
    else:
        for var in ("ISCSIGW_TLS_CA", "ISCSIGW_TLS_SERVER_NAME", "ISCSIGW_TLS_CLIENT_CERT"):
            if var in env:
                problems.append(f"{where}: plaintext gRPC but {var} is set")

    csi = None
    for w2 in workloads:
        pod2 = w2["spec"]["template"]["spec"]
        for c2 in pod2["containers"]:
            if c2["name"] == "iscsigw-csi" and "--mode=controller" in c2.get("args", []):
                csi = (w2, pod2, c2)
    if "--csi" in want and csi is None:
        problems.append(f"{path}: no CSI controller (iscsigw-csi --mode=controller)")
    if "--no-csi" in want and csi is not None:
        problems.append(f"{path}: a CSI controller, none expected")
    if csi is not None:
        w2, pod2, c2 = csi
        where = f"{path}: {w2['kind']} {w2['metadata']['name']} container iscsigw-csi"
        flags = flags_of(c2)
        host, _, port = flags.get("gateway", "").rpartition(":")
        parts = host.split(".")
        svc = services.get((parts[1] if len(parts) > 1 else None, parts[0]))
        if len(parts) != 3 or parts[2] != "svc" or svc is None:
            problems.append(f"{where}: --gateway={flags.get('gateway')} names no Service "
                            "<name>.<namespace>.svc of the rendering")
        elif not any(str(p["port"]) == port and p.get("targetPort") == "grpc"
                     for p in svc["spec"]["ports"]):
            problems.append(f"{where}: --gateway port {port} is not the gRPC port of Service "
                            f"{svc['metadata']['name']}")
        tls_flags = ["tls-ca", "tls-server-name"]
        if tls and "ISCSIGW_TLS_CLIENT_CA" in env:
            tls_flags += ["tls-cert", "tls-key"]
        for flag in tls_flags if tls else []:
            if flag not in flags:
                problems.append(f"{where}: the gateway serves TLS but --{flag} is not given")
            elif flag != "tls-server-name" and not mounted_secret(pod2, c2, flags[flag]):
                problems.append(f"{where}: --{flag}={flags[flag]} is not in a mounted Secret")
        if tls and flags.get("tls-server-name") != server_name:
            problems.append(f"{where}: --tls-server-name={flags.get('tls-server-name')} differs "
                            f"from the gateway pod's ISCSIGW_TLS_SERVER_NAME={server_name}")
        if not tls and any(k.startswith("tls-") for k in flags):
            problems.append(f"{where}: TLS client flags against a plaintext gateway")
    return fail(problems)


def fail(problems):
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
