#!/usr/bin/python3
"""Checks the gateway's seccomp profile and how a rendering installs it (docs/security.md).

  check_seccomp.py profile FILE
      FILE is a seccomp profile in the OCI/Kubernetes JSON form that denies by default
      (SCMP_ACT_ERRNO), allows io_uring_setup, io_uring_enter and io_uring_register without
      conditions, and names no system call twice (an unconditional name is in no other rule).
  check_seccomp.py pod RENDERED --type T [--install | --no-install] [--profile P]
                   [--node-dir D] [--profile-file FILE]
      The gateway StatefulSet of RENDERED (a multi-document YAML file) gives its container
      seccompProfile type T (and with Localhost, localhostProfile P; without --profile, the
      chart's default name: iscsigw/iscsigw-<the first 12 hex digits of FILE's SHA-256>.json).
      With --install, an init container seccomp-profile (RuntimeDefault, no capabilities, no
      privilege escalation) copies the profile from a ConfigMap of the rendering holding FILE's
      profile into the hostPath D/dirname(P), as basename(P), and only it mounts that hostPath;
      with --no-install, the StatefulSet has no init container and no hostPath, and the
      rendering no profile ConfigMap.
Exits 1 naming each failure.
"""
import argparse
import hashlib
import json
import os
import posixpath
import re
import sys

import yaml

IO_URING = ("io_uring_setup", "io_uring_enter", "io_uring_register")
ACTIONS = {"SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS",
           "SCMP_ACT_KILL_THREAD", "SCMP_ACT_TRAP", "SCMP_ACT_TRACE", "SCMP_ACT_LOG",
           "SCMP_ACT_NOTIFY"}
OPS = {"SCMP_CMP_NE", "SCMP_CMP_LT", "SCMP_CMP_LE", "SCMP_CMP_EQ", "SCMP_CMP_GE", "SCMP_CMP_GT",
       "SCMP_CMP_MASKED_EQ"}
PROFILE_KEY = "iscsigw-seccomp.json"


def check_profile(path, errors):
    try:
        with open(path) as f:
            p = json.load(f)
    except (OSError, ValueError) as e:
        errors.append(f"{path}: {e}")
        return
    extra = set(p) - {"defaultAction", "defaultErrnoRet", "architectures", "syscalls"}
    if extra:
        errors.append(f"{path}: keys outside the OCI seccomp form: {sorted(extra)}")
    if p.get("defaultAction") != "SCMP_ACT_ERRNO":
        errors.append(f"{path}: defaultAction is {p.get('defaultAction')!r}, not SCMP_ACT_ERRNO")
    for arch in ("SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"):
        if arch not in p.get("architectures", []):
            errors.append(f"{path}: architectures lack {arch}")
    unconditional = {}  # name -> index of the rule that allows it without conditions
    conditional = []    # (name, index) of every other rule
    for i, rule in enumerate(p.get("syscalls", [])):
        extra = set(rule) - {"names", "action", "args", "errnoRet"}
        if extra:
            errors.append(f"{path}: rule {i}: keys outside the OCI form: {sorted(extra)}")
        names = rule.get("names")
        if not names or not isinstance(names, list):
            errors.append(f"{path}: rule {i}: no names")
            continue
        if rule.get("action") not in ACTIONS:
            errors.append(f"{path}: rule {i}: action {rule.get('action')!r}")
        for a in rule.get("args") or []:
            if a.get("op") not in OPS or not isinstance(a.get("index"), int):
                errors.append(f"{path}: rule {i}: bad argument condition {a}")
        for n in names:
            if not isinstance(n, str) or not re.fullmatch(r"[a-z_][a-z0-9_]*", n):
                errors.append(f"{path}: rule {i}: {n!r} is not a system call name")
            elif rule.get("action") == "SCMP_ACT_ALLOW" and not rule.get("args"):
                if n in unconditional:
                    errors.append(f"{path}: {n} allowed twice (rules {unconditional[n]} and {i})")
                unconditional[n] = i
            else:
                conditional.append((n, i))
    for n, i in conditional:
        if n in unconditional:
            errors.append(f"{path}: {n} is allowed by rule {unconditional[n]} and named again "
                          f"in rule {i}")
    for n in IO_URING:
        if n not in unconditional:
            errors.append(f"{path}: {n} is not allowed")


def default_profile_name(profile_file):
    with open(profile_file, "rb") as f:
        return f"iscsigw/iscsigw-{hashlib.sha256(f.read()).hexdigest()[:12]}.json"


def check_pod(args, errors):
    with open(args.rendered) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    sets = [d for d in docs if d.get("kind") == "StatefulSet"]
    if len(sets) != 1:
        errors.append(f"{args.rendered}: {len(sets)} StatefulSets, not one")
        return
    spec = sets[0]["spec"]["template"]["spec"]
    gw = [c for c in spec["containers"] if c["name"] == "iscsigwd"]
    if len(gw) != 1:
        errors.append("no container iscsigwd")
        return
    gw = gw[0]
    sp = (gw.get("securityContext") or {}).get("seccompProfile") or {}
    if sp.get("type") != args.type:
        errors.append(f"iscsigwd: seccompProfile {sp}, not type {args.type}")
    profile = args.profile or default_profile_name(args.profile_file)
    if args.type == "Localhost" and sp.get("localhostProfile") != profile:
        errors.append(f"iscsigwd: localhostProfile {sp.get('localhostProfile')!r}, not {profile!r}")
    if args.type != "Localhost" and "localhostProfile" in sp:
        errors.append(f"iscsigwd: localhostProfile with type {args.type}")
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    host_paths = [v for v in volumes.values() if "hostPath" in v]
    inits = spec.get("initContainers") or []
    with open(args.profile_file) as f:
        want = json.load(f)
    profile_maps = [d for d in docs if d.get("kind") == "ConfigMap"
                    and PROFILE_KEY in (d.get("data") or {})]
    if not args.install:
        if inits:
            errors.append(f"init containers without install: {[c['name'] for c in inits]}")
        if host_paths:
            errors.append(f"hostPath volumes without install: {[v['name'] for v in host_paths]}")
        if profile_maps:
            errors.append("a profile ConfigMap without install")
        return
    if [c["name"] for c in inits] != ["seccomp-profile"]:
        errors.append(f"init containers {[c['name'] for c in inits]}, not [seccomp-profile]")
        return
    init = inits[0]
    sc = init.get("securityContext") or {}
    if (sc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        errors.append(f"seccomp-profile: seccompProfile {sc.get('seccompProfile')}, not RuntimeDefault")
    if sc.get("allowPrivilegeEscalation") is not False or sc.get("privileged"):
        errors.append("seccomp-profile: may gain privileges")
    if (sc.get("capabilities") or {}).get("drop") != ["ALL"] or (sc.get("capabilities") or {}).get("add"):
        errors.append(f"seccomp-profile: capabilities {sc.get('capabilities')}, not drop ALL")
    if not init.get("command") or init["command"][-1] != posixpath.basename(profile):
        errors.append(f"seccomp-profile: writes {init.get('command', [''])[-1]!r}, not "
                      f"{posixpath.basename(profile)!r}")
    mounts = {m["mountPath"]: m["name"] for m in init.get("volumeMounts", [])}
    node = volumes.get(mounts.get("/node"), {}).get("hostPath")
    directory = posixpath.dirname(profile)
    want_path = posixpath.join(args.node_dir, directory) if directory else args.node_dir
    if not node or node.get("path") != want_path or node.get("type") != "DirectoryOrCreate":
        errors.append(f"seccomp-profile: /node is {node}, not hostPath {want_path} (DirectoryOrCreate)")
    if len(host_paths) != 1:
        errors.append(f"{len(host_paths)} hostPath volumes, not one")
    for c in spec["containers"]:
        for m in c.get("volumeMounts", []):
            if "hostPath" in volumes.get(m["name"], {}):
                errors.append(f"container {c['name']} mounts the hostPath {m['name']}")
    source = mounts.get("/etc/iscsigw/seccomp")
    cm_name = (volumes.get(source, {}).get("configMap") or {}).get("name")
    cms = [d for d in profile_maps if d["metadata"]["name"] == cm_name]
    if not cms:
        errors.append(f"seccomp-profile: no ConfigMap {cm_name!r} with {PROFILE_KEY} in the rendering")
    elif json.loads(cms[0]["data"][PROFILE_KEY]) != want:
        errors.append(f"ConfigMap {cm_name}: {PROFILE_KEY} is not {args.profile_file}")
    elif "/etc/iscsigw/seccomp/" + PROFILE_KEY not in " ".join(init["command"]):
        errors.append(f"seccomp-profile: does not copy /etc/iscsigw/seccomp/{PROFILE_KEY}")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    pr = sub.add_parser("profile")
    pr.add_argument("file")
    po = sub.add_parser("pod")
    po.add_argument("rendered")
    po.add_argument("--type", required=True, choices=["Localhost", "RuntimeDefault", "Unconfined"])
    po.add_argument("--install", action=argparse.BooleanOptionalAction, default=False)
    po.add_argument("--profile")
    po.add_argument("--node-dir", default="/var/lib/kubelet/seccomp")
    po.add_argument("--profile-file", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "helm", "iscsigw", "files",
        PROFILE_KEY))
    args = ap.parse_args()
    errors = []
    if args.what == "profile":
        check_profile(args.file, errors)
    else:
        check_pod(args, errors)
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
