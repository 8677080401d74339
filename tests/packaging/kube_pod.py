"""Turns rendered manifests into what `podman kube play` runs: the StatefulSet's pod (ordinal 0)
on the host network with the gateway's listeners moved to the given loopback ports, its state
volume claim bound to a podman named volume, and the ConfigMaps it mounts.

  python3 kube_pod.py RENDERED.yaml ISCSI_PORT GRPC_PORT METRICS_PORT CLAIM IMAGE > pod.yaml

Everything else of the pod template (args, env, probes, security contexts, resources, volumes)
is kept as rendered.
"""
import sys

import yaml


def main():
    rendered, iscsi, grpc, metrics, claim, image = sys.argv[1:7]
    docs = [d for d in yaml.safe_load_all(open(rendered)) if d]
    sts = [d for d in docs if d["kind"] == "StatefulSet"]
    if len(sts) != 1:
        sys.exit("expected one StatefulSet, found %d" % len(sts))
    sts = sts[0]
    tmpl = sts["spec"]["template"]
    spec = dict(tmpl["spec"])
    spec["hostNetwork"] = True
    spec["restartPolicy"] = "Never"
    listen = {
        "ISCSIGW_PORTAL": "127.0.0.1:%s" % iscsi,
        "ISCSIGW_GRPC_LISTEN": "127.0.0.1:%s" % grpc,
        "ISCSIGW_METRICS_LISTEN": "127.0.0.1:%s" % metrics,
        # Where `iscsigwctl` in the pod dials without --server.
        "ISCSIGW_SERVER": "127.0.0.1:%s" % grpc,
    }
    ports = {"iscsi": int(iscsi), "grpc": int(grpc), "metrics": int(metrics)}
    for c in spec["containers"]:
        c["image"] = image
        c["imagePullPolicy"] = "Never"
        for e in c.get("env", []):
            if e["name"] in listen:
                e["value"] = listen.pop(e["name"])
        if listen:
            sys.exit("the container does not set %s" % ", ".join(listen))
        # On the host network the listeners are the host's ports: podman refuses port mappings
        # there, and the kubelet would only turn them into hostPorts.
        if sorted(p["name"] for p in c.get("ports", [])) != sorted(ports):
            sys.exit("unexpected container ports %s" % c.get("ports"))
        c.pop("ports", None)
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            pr = c.get(probe)
            if pr and "grpc" in pr:
                pr["grpc"]["port"] = int(grpc)
    # The init container (it writes the seccomp profile into the hostPath) runs the same image.
    for c in spec.get("initContainers", []):
        c["image"] = image
        c["imagePullPolicy"] = "Never"
    names = {v["name"] for v in spec.get("volumes", [])}
    spec.setdefault("volumes", [])
    for vct in sts["spec"].get("volumeClaimTemplates", []):
        if vct["metadata"]["name"] not in names:
            spec["volumes"].append({"name": vct["metadata"]["name"],
                                    "persistentVolumeClaim": {"claimName": claim}})
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": sts["metadata"]["name"] + "-0",
                     "labels": tmpl["metadata"].get("labels", {})},
        "spec": spec,
    }
    wanted = {v["configMap"]["name"] for v in spec["volumes"] if "configMap" in v}
    out = [pod] + [d for d in docs
                   if d["kind"] == "ConfigMap" and d["metadata"]["name"] in wanted]
    yaml.safe_dump_all(out, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
