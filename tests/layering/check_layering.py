"""The one-way layering of the tree, checked on every #include of the tree:

  server -> controlplane -> dataplane/api -> iscsi -> scsi -> pdu/backing -> base/runtime

rpc/ (gRPC helpers shared by the control plane and the CSI driver) sits above base only.
The control plane reaches the data plane only through dataplane/api (and base, its Status and
logging); the metrics collectors also read the per-reactor counter shards of dataplane/runtime,
by design. The CSI driver is a gRPC client of the gateway and imports nothing of it.
Exit 1 with one line per include that crosses a layer."""
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

# (directory, include prefixes it may not use, except these prefixes)
RULES = [
    ("controlplane/service", ["dataplane/"], ["dataplane/api/", "dataplane/base/"]),
    ("controlplane/state", ["dataplane/"], ["dataplane/api/", "dataplane/base/"]),
    ("controlplane/metrics", ["dataplane/"],
     ["dataplane/api/", "dataplane/base/", "dataplane/runtime/"]),
    ("csi", ["dataplane/", "controlplane/", "server/"], ["dataplane/base/"]),
    ("rpc", ["dataplane/", "controlplane/", "server/", "csi/"], ["dataplane/base/"]),
    ("dataplane", ["controlplane/", "server/", "csi/", "iscsigw/v1/"], []),
    ("dataplane/scsi", ["dataplane/iscsi/", "dataplane/api/"], []),
    ("dataplane/pdu", ["dataplane/iscsi/", "dataplane/scsi/", "dataplane/api/"], []),
    ("dataplane/backing", ["dataplane/iscsi/", "dataplane/scsi/", "dataplane/api/"], []),
]


def violations():
    out = []
    for directory, banned, allowed in RULES:
        root = os.path.join(REPO, directory)
        for base, _, files in os.walk(root):
            for name in files:
                if not name.endswith((".h", ".cc")):
                    continue
                path = os.path.join(base, name)
                with open(path, errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        inc = m.group(1)
                        if any(inc.startswith(b) for b in banned) and \
                                not any(inc.startswith(a) for a in allowed):
                            rel = os.path.relpath(path, REPO)
                            out.append(f"{rel}:{n}: {directory} may not include {inc}")
    return out


def main():
    found = violations()
    for v in found:
        print(v)
    print(f"layering: {len(found)} violation(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
