#!/usr/bin/python3
"""Checks that the CSI node plugin of a rendering keeps its records on the node.

  check_csi_state_dir.py RENDERED.yaml PLUGIN_DIR

The DaemonSet's iscsigw-csi container (--mode=node) must name its --state-dir, and that path must
lie in a writable volumeMount of a hostPath volume (DirectoryOrCreate) under the kubelet's
plugins directory, the parent of PLUGIN_DIR (plugins/<driver>, the directory of the plugin's
socket), and not in PLUGIN_DIR, which the CSI specification keeps to the socket alone: records in
the container's own file system are gone after a container restart or a DaemonSet upgrade, and
NodeUnstageVolume would then have to rebuild them from open-iscsi (docs/kubernetes.md). Exits 1
naming each problem.
"""
import posixpath
import sys

import yaml

from check_grpc_clients import fail, flags_of


def node_plugin(docs):
    for d in docs:
        if d.get("kind") != "DaemonSet":
            continue
        pod = d["spec"]["template"]["spec"]
        for c in pod["containers"]:
            if "--mode=node" in c.get("args", []):
                return d, pod, c
    return None


def under(path, root):
    path, root = posixpath.normpath(path), posixpath.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    path, plugin_dir = argv[1], argv[2]
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    found = node_plugin(docs)
    if found is None:
        return fail([f"{path}: no DaemonSet container runs --mode=node"])
    ds, pod, c = found
    where = f"{path}: DaemonSet {ds['metadata']['name']} container {c['name']}"
    state_dir = flags_of(c).get("state-dir")
    if not state_dir:
        return fail([f"{where}: no --state-dir (the default is in the container's own files)"])
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    # The mount that holds the state directory: the deepest one over it.
    mounts = [m for m in c.get("volumeMounts", []) if under(state_dir, m["mountPath"])]
    if not mounts:
        return fail([f"{where}: nothing is mounted over --state-dir={state_dir}"])
    m = max(mounts, key=lambda m: len(posixpath.normpath(m["mountPath"])))
    problems = []
    host = volumes.get(m["name"], {}).get("hostPath")
    if host is None:
        return fail([f"{where}: --state-dir={state_dir} is on volume {m['name']}, no hostPath"])
    on_host = posixpath.join(host["path"],
                             posixpath.relpath(state_dir, m["mountPath"])).rstrip("/.")
    if m.get("readOnly"):
        problems.append(f"{where}: volume {m['name']} is mounted read-only")
    plugins = posixpath.dirname(posixpath.normpath(plugin_dir))
    if not under(on_host, plugins) or posixpath.normpath(on_host) == plugins:
        problems.append(f"{where}: the records are at {on_host} on the node, not in a directory "
                        f"under {plugins}")
    if under(on_host, plugin_dir):
        problems.append(f"{where}: the records are at {on_host}, in the directory of the "
                        f"plugin's socket {plugin_dir}")
    if m.get("subPath") or m.get("subPathExpr"):
        problems.append(f"{where}: volume {m['name']} is mounted with a subPath")
    if host.get("type") != "DirectoryOrCreate" and m["mountPath"] == state_dir:
        problems.append(f"{where}: hostPath {host['path']} is of type {host.get('type')!r}, "
                        "not DirectoryOrCreate (a new node has no such directory)")
    return fail(problems)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
