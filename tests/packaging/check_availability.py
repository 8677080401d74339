#!/usr/bin/python3
"""Checks of a rendered chart (check_manifests.sh runs them) for what keeps volumes served
through node drains and what lets the scheduler see free space:

  check_availability.py FILE pdb MAX_UNAVAILABLE   a PodDisruptionBudget selecting exactly the
                                                   gateway pods, maxUnavailable as given
  check_availability.py FILE no-pdb                no PodDisruptionBudget
  check_availability.py FILE anti-affinity MODE    the gateway pods' anti-affinity on
                                                   kubernetes.io/hostname: preferred, required
                                                   or none (no affinity at all)
  check_availability.py FILE traffic-policy        every iSCSI Service of type NodePort or
                                                   LoadBalancer keeps the initiator's address
                                                   (externalTrafficPolicy: Local)
  check_availability.py FILE capacity              storage capacity tracking wired: the
                                                   CSIDriver's storageCapacity, the provisioner's
                                                   --enable-capacity with its owner and env, and
                                                   the RBAC it needs, bound to its account
  check_availability.py FILE no-capacity           none of that

Exits 1 saying what is wrong."""
import sys

import yaml


def objects(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def of_kind(objs, kind):
    return [o for o in objs if o.get("kind") == kind]


def one(objs, kind, pred=lambda o: True):
    found = [o for o in of_kind(objs, kind) if pred(o)]
    if len(found) != 1:
        raise AssertionError(f"{len(found)} {kind} objects, want 1")
    return found[0]


def gateway(objs):
    return one(objs, "StatefulSet")


def check_pdb(objs, max_unavailable):
    pdb = one(objs, "PodDisruptionBudget")
    sts = gateway(objs)
    spec = pdb["spec"]
    assert spec.get("maxUnavailable") == max_unavailable, f"maxUnavailable {spec.get('maxUnavailable')!r}"
    assert "minAvailable" not in spec, "minAvailable beside maxUnavailable"
    want = sts["spec"]["selector"]["matchLabels"]
    assert spec["selector"] == {"matchLabels": want}, f"selector {spec['selector']} is not the gateway's {want}"
    assert pdb["metadata"].get("namespace") == sts["metadata"].get("namespace"), "namespace"


def check_no_pdb(objs):
    assert not of_kind(objs, "PodDisruptionBudget"), "a PodDisruptionBudget is rendered"


def check_anti_affinity(objs, mode):
    sts = gateway(objs)
    pod = sts["spec"]["template"]["spec"]
    affinity = pod.get("affinity")
    if mode == "none":
        assert affinity is None, f"affinity {affinity}"
        return
    anti = affinity["podAntiAffinity"]
    want_labels = sts["spec"]["selector"]["matchLabels"]
    if mode == "required":
        terms = anti["requiredDuringSchedulingIgnoredDuringExecution"]
        assert "preferredDuringSchedulingIgnoredDuringExecution" not in anti
    else:
        prefs = anti["preferredDuringSchedulingIgnoredDuringExecution"]
        assert "requiredDuringSchedulingIgnoredDuringExecution" not in anti
        assert all(1 <= p["weight"] <= 100 for p in prefs)
        terms = [p["podAffinityTerm"] for p in prefs]
    assert len(terms) == 1, terms
    assert terms[0]["topologyKey"] == "kubernetes.io/hostname", terms[0]
    assert terms[0]["labelSelector"] == {"matchLabels": want_labels}, terms[0]["labelSelector"]
    assert pod["containers"][0]["name"] == "iscsigwd"


def check_traffic_policy(objs):
    services = [s for s in of_kind(objs, "Service")
                if any(p.get("name") == "iscsi" for p in s["spec"]["ports"])
                and s["spec"].get("type") in ("NodePort", "LoadBalancer")]
    assert services, "no iSCSI Service of type NodePort or LoadBalancer"
    for s in services:
        assert s["spec"].get("externalTrafficPolicy") == "Local", \
            f"Service {s['metadata']['name']}: externalTrafficPolicy {s['spec'].get('externalTrafficPolicy')}"


def provisioner(objs):
    dep = one(objs, "Deployment", lambda o: o["metadata"]["name"].endswith("-csi-controller"))
    pod = dep["spec"]["template"]["spec"]
    c = [c for c in pod["containers"] if c["name"] == "csi-provisioner"]
    assert len(c) == 1, "no csi-provisioner container"
    return dep, pod, c[0]


def capacity_roles(objs, sa, namespace):
    """The rules of every Role and ClusterRole bound to ServiceAccount sa in namespace."""
    rules = []
    for b in of_kind(objs, "RoleBinding") + of_kind(objs, "ClusterRoleBinding"):
        if not any(s.get("kind") == "ServiceAccount" and s.get("name") == sa
                   and s.get("namespace") == namespace for s in b.get("subjects", [])):
            continue
        ref = b["roleRef"]
        for r in of_kind(objs, ref["kind"]):
            if r["metadata"]["name"] != ref["name"]:
                continue
            if ref["kind"] == "Role" and r["metadata"].get("namespace") != b["metadata"].get("namespace"):
                continue
            ns = r["metadata"].get("namespace") if ref["kind"] == "Role" else "*"
            rules += [(ns, rule) for rule in r.get("rules", [])]
    return rules


def allowed(rules, namespace, group, resource, verb):
    return any(ns in (namespace, "*") and group in r.get("apiGroups", [])
               and resource in r.get("resources", []) and verb in r.get("verbs", [])
               for ns, r in rules)


def check_capacity(objs):
    driver = one(objs, "CSIDriver")
    assert driver["spec"].get("storageCapacity") is True, "CSIDriver storageCapacity is not true"
    dep, pod, c = provisioner(objs)
    args = c.get("args", [])
    assert "--enable-capacity" in args, "no --enable-capacity"
    # The pod's owner is a ReplicaSet, whose owner is the Deployment: level 2.
    assert "--capacity-ownerref-level=2" in args, "no --capacity-ownerref-level=2"
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in c.get("env", [])}
    assert env.get("POD_NAME") == "metadata.name", f"POD_NAME {env.get('POD_NAME')}"
    assert env.get("NAMESPACE") == "metadata.namespace", f"NAMESPACE {env.get('NAMESPACE')}"
    ns = dep["metadata"]["namespace"]
    rules = capacity_roles(objs, pod["serviceAccountName"], ns)
    for verb in ("get", "list", "watch", "create", "update", "patch", "delete"):
        assert allowed(rules, ns, "storage.k8s.io", "csistoragecapacities", verb), \
            f"the provisioner may not {verb} csistoragecapacities in {ns}"
    assert allowed(rules, ns, "", "pods", "get"), "the provisioner may not get its pod"
    assert allowed(rules, ns, "apps", "replicasets", "get"), "the provisioner may not get its ReplicaSet"


def check_no_capacity(objs):
    if of_kind(objs, "CSIDriver"):
        assert not one(objs, "CSIDriver")["spec"].get("storageCapacity"), "storageCapacity is true"
        _, _, c = provisioner(objs)
        assert not any(a.startswith("--enable-capacity") or a.startswith("--capacity")
                       for a in c.get("args", [])), "capacity flags"
    for r in of_kind(objs, "Role") + of_kind(objs, "ClusterRole"):
        for rule in r.get("rules", []):
            assert "csistoragecapacities" not in rule.get("resources", []), r["metadata"]["name"]


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    objs = objects(sys.argv[1])
    what, args = sys.argv[2], sys.argv[3:]
    checks = {
        "pdb": lambda: check_pdb(objs, int(args[0]) if args[0].isdigit() else args[0]),
        "no-pdb": lambda: check_no_pdb(objs),
        "anti-affinity": lambda: check_anti_affinity(objs, args[0]),
        "traffic-policy": lambda: check_traffic_policy(objs),
        "capacity": lambda: check_capacity(objs),
        "no-capacity": lambda: check_no_capacity(objs),
    }
    if what not in checks:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        checks[what]()
    except (AssertionError, KeyError, TypeError) as e:
        print(f"{sys.argv[1]}: {what}: {type(e).__name__} {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
