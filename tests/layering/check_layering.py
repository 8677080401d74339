"""The one-way layering of the tree, checked on every #include of the project's sources, quoted
or angled:

  server -> controlplane -> dataplane/api -> iscsi -> scsi -> backing -> base/
                                              iscsi -> pdu -> base
             dataplane/api -> backing/file, backing/rbd -> backing, runtime -> base/

The stores that need a medium stand beside the SCSI engine, not under it: dataplane/backing is the
store interface and the stores that need no medium, all the engine may include (and links);
backing/file (io_uring) and backing/rbd (librbd) are included only by dataplane/api, which opens
stores by kind.

rpc/ (gRPC helpers shared by the control plane and the CSI driver) sits above base only. The
control plane reaches the data plane only through dataplane/api (and base, its Status and
logging); the metrics collectors also read the per-reactor counter shards of dataplane/runtime,
by design. The CSI driver is a gRPC client of the gateway and imports nothing of it. No source
includes tests/.

Each module (a directory below; dataplane/backing/file and dataplane/backing/rbd are modules of
their own, apart from dataplane/backing) lists what it may include besides itself; anything else
is a violation, and so is a source in a directory no module names (a new directory gets a line
here).
Exit 1 with one line per include that crosses a layer."""
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE = re.compile(r'^\s*#\s*include\s+[<"]([^">]+)[">]')
# What an include names when it is one of the project's headers (iscsigw/v1: generated from
# proto/).
PROJECT = ("base/", "dataplane/", "controlplane/", "server/", "csi/", "rpc/", "iscsigw/", "tests/")
SOURCES = ("base", "dataplane", "controlplane", "server", "csi", "rpc")

BASE = ["base"]
# module -> the modules it may include besides itself.
MAY_INCLUDE = {
    "base": [],
    "dataplane/runtime": BASE,
    "dataplane/pdu": BASE,
    "dataplane/backing": BASE,
    "dataplane/backing/file": BASE + ["dataplane/runtime", "dataplane/backing"],
    "dataplane/backing/rbd": BASE + ["dataplane/runtime", "dataplane/backing"],
    "dataplane/scsi": BASE + ["dataplane/backing"],
    "dataplane/iscsi": BASE + ["dataplane/runtime", "dataplane/pdu", "dataplane/backing",
                               "dataplane/scsi"],
    "dataplane/api": BASE + ["dataplane/runtime", "dataplane/pdu", "dataplane/backing",
                             "dataplane/backing/file", "dataplane/backing/rbd", "dataplane/scsi",
                             "dataplane/iscsi"],
    "rpc": BASE + ["iscsigw"],
    "controlplane/state": BASE + ["dataplane/api", "iscsigw"],
    "controlplane/metrics": BASE + ["dataplane/api", "dataplane/runtime", "iscsigw"],
    "controlplane/service": BASE + ["dataplane/api", "controlplane/state", "controlplane/metrics",
                                    "rpc", "iscsigw"],
    "csi": BASE + ["rpc", "iscsigw"],
    "server": BASE + ["dataplane/api", "controlplane/state", "controlplane/metrics",
                      "controlplane/service", "csi", "rpc", "iscsigw"],
}


# Modules one directory deeper than their parent's.
SUBMODULES = ("dataplane/backing/file", "dataplane/backing/rbd")


def module_of(path):
    """The module a source or an include path belongs to: one of SUBMODULES, dataplane/X and
    controlplane/X, else the top directory."""
    for sub in SUBMODULES:
        if path.startswith(sub + "/"):
            return sub
    parts = path.split("/")
    if parts[0] in ("dataplane", "controlplane") and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0]


def violations(repo=REPO):
    out = []
    for top in SOURCES:
        for base, _, files in os.walk(os.path.join(repo, top)):
            for name in sorted(files):
                if not name.endswith((".h", ".cc")):
                    continue
                path = os.path.join(base, name)
                rel = os.path.relpath(path, repo)
                mine = module_of(rel)
                if mine not in MAY_INCLUDE:
                    out.append(f"{rel}: no layer for {mine}/ in tests/layering/check_layering.py")
                    continue
                allowed = set(MAY_INCLUDE[mine]) | {mine}
                with open(path, errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or not m.group(1).startswith(PROJECT):
                            continue
                        inc = m.group(1)
                        if module_of(inc) not in allowed:
                            out.append(f"{rel}:{n}: {mine} may not include {inc}")
    return out


def main():
    found = violations()
    for v in found:
        print(v)
    print(f"layering: {len(found)} violation(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
