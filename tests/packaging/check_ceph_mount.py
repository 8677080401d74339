#!/usr/bin/python3
"""Checks how a rendering gives the gateway its Ceph conf and keyring, for rbd LUNs.

  check_ceph_mount.py RENDERED.yaml --none
  check_ceph_mount.py RENDERED.yaml SECRET MOUNT_PATH CONF_KEY KEYRING_KEY

--none: the gateway container (the one that runs iscsigwd) sets no CEPH_CONF and mounts nothing
at /etc/ceph. Otherwise: Secret SECRET is mounted read-only at MOUNT_PATH in that container, its
key CONF_KEY as MOUNT_PATH/ceph.conf and KEYRING_KEY as MOUNT_PATH/keyring (no other key), with an
explicit mode that neither the world may read nor anyone write (the keyring holds a cephx key; a
Secret volume without defaultMode is 0644), and CEPH_CONF is MOUNT_PATH/ceph.conf, so that an rbd
LUN with an empty conf reads it; ISCSIGW_RBD_CONF and ISCSIGW_RBD_KEYRING name the mounted files and
ISCSIGW_RBD_ALLOW at least one pool (--none: none of the three is set). Exits 1 naming each
problem.
"""
import sys

import yaml

from check_grpc_clients import fail


def gateway_of(docs):
    for d in docs:
        if d.get("kind") not in ("StatefulSet", "Deployment", "DaemonSet"):
            continue
        pod = d["spec"]["template"]["spec"]
        for c in pod["containers"]:
            if c["name"] == "iscsigwd":
                return d, pod, c
    return None


def main(argv):
    path = argv[1]
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    gateway = gateway_of(docs)
    if gateway is None:
        return fail([f"{path}: no iscsigwd container"])
    w, pod, c = gateway
    where = f"{path}: {w['kind']} {w['metadata']['name']} container iscsigwd"
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    mounts = {m["mountPath"].rstrip("/"): m for m in c.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    problems = []

    if argv[2:] == ["--none"]:
        if "CEPH_CONF" in env:
            problems.append(f"{where}: no Ceph expected, CEPH_CONF is {env['CEPH_CONF']!r}")
        for name in ("ISCSIGW_RBD_ALLOW", "ISCSIGW_RBD_CONF", "ISCSIGW_RBD_KEYRING"):
            if name in env:
                problems.append(f"{where}: no Ceph expected, {name} is {env[name]!r}")
        if "/etc/ceph" in mounts:
            problems.append(f"{where}: no Ceph expected, volume {mounts['/etc/ceph']['name']} "
                            "is mounted at /etc/ceph")
        return fail(problems)
    if len(argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    secret, mount_path, conf_key, keyring_key = argv[2:]
    mount_path = mount_path.rstrip("/")

    conf = f"{mount_path}/ceph.conf"
    if env.get("CEPH_CONF") != conf:
        problems.append(f"{where}: CEPH_CONF is {env.get('CEPH_CONF')!r}, not {conf!r}")
    # docs/security.md: rbd LUNs name only the daemon's conf and keyring, in the pools it allows.
    for name, want in (("ISCSIGW_RBD_CONF", conf), ("ISCSIGW_RBD_KEYRING", f"{mount_path}/keyring")):
        if env.get(name) != want:
            problems.append(f"{where}: {name} is {env.get(name)!r}, not {want!r}")
    if not env.get("ISCSIGW_RBD_ALLOW"):
        problems.append(f"{where}: ISCSIGW_RBD_ALLOW names no pool: every rbd LUN would be refused")
    mount = mounts.get(mount_path)
    if mount is None:
        return fail(problems + [f"{where}: nothing is mounted at {mount_path}"])
    if mount.get("subPath"):
        problems.append(f"{where}: {mount_path} is a subPath mount, which a changed Secret "
                        "never updates")
    if mount.get("readOnly") is not True:
        problems.append(f"{where}: {mount_path} is not mounted readOnly")
    vol = volumes.get(mount["name"], {})
    src = vol.get("secret")
    if src is None or src.get("secretName") != secret:
        return fail(problems + [f"{where}: {mount_path} is volume {mount['name']}, not Secret "
                                f"{secret}"])
    items = {i["key"]: i for i in src.get("items", [])}
    want = {conf_key: "ceph.conf", keyring_key: "keyring"}
    got = {k: i["path"] for k, i in items.items()}
    if got != want:
        problems.append(f"{where}: Secret {secret} items map {got}, not {want}")
    modes = [("defaultMode", src.get("defaultMode"))]
    modes += [(f"item {k} mode", i["mode"]) for k, i in items.items() if "mode" in i]
    for name, mode in modes:
        if mode is None:
            problems.append(f"{where}: Secret {secret} has no {name}: its files would be 0644, "
                            "the keyring readable by every user of the container")
        elif mode & 0o007 or mode & 0o222:
            problems.append(f"{where}: Secret {secret} {name} is {mode:#o}: the keyring must be "
                            "neither world-readable nor writable")
    return fail(problems)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
