#!/usr/bin/python3
"""Cached 4 KiB random reads (QD32, one session) from a file LUN with iscsigwd in a container
under three seccomp filters, in one run on one machine:
  runtime-default  the chart's profile (helm/iscsigw/files/iscsigw-seccomp.json) without its
                   io_uring rule: containerd's RuntimeDefault, what a pod gets today; io_uring is
                   refused and the file store runs on its thread pool
  chart            the chart's profile as shipped: RuntimeDefault plus io_uring_setup,
                   io_uring_enter and io_uring_register
  unconfined       no seccomp filter, for reference
The container is the chart's pod security context as podman gives it: user 10001, no
capabilities, no-new-privileges, a read-only root. Its root is a directory holding iscsigwd and
the libraries it links (no image registry is needed), the network the host's; the state directory
and the LUN file are bind mounts. The 1 GiB LUN file (random data, kept in
/var/tmp/iscsigw-seccomp-bench/lun for the next run) is read once before the runs, so every read
is a page-cache hit. Each round runs the three filters one after
the other (interleaved, so that a change in the machine's load meets all three), each cell is
the median of --repeats rounds. Each gateway's log and open files are checked: the fallback's
warning and no io_uring descriptor under runtime-default, io_uring descriptors and no warning
under the other two.

Usage, from the repository's root, as root, after a release build of iscsigwd and iscsi_load:
  PYTHONPATH=tests/lib tests/bench/seccomp_io_uring.py [--seconds 20] [--repeats 3]
Needs podman and runc (`scripts/install-deps.sh --packaging`); podman runs with --runtime
runc (crun refuses hybrid cgroup hierarchies) and a containers.conf of this script's with
ulimits the caller may set.
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

from iscsigw_test import harness

from suite import iscsi_load

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROFILE = os.path.join(REPO, "helm", "iscsigw", "files", "iscsigw-seccomp.json")
WORK = "/var/tmp/iscsigw-seccomp-bench"
IO_URING = {"io_uring_setup", "io_uring_enter", "io_uring_register"}
FALLBACK = "allow io_uring_setup, io_uring_enter and io_uring_register"
UID = 10001


def without_io_uring(profile):
    """PROFILE with the io_uring calls taken out of every rule (and empty rules dropped)."""
    p = json.loads(json.dumps(profile))
    rules = []
    for rule in p["syscalls"]:
        rule["names"] = [n for n in rule["names"] if n not in IO_URING]
        if rule["names"]:
            rules.append(rule)
    p["syscalls"] = rules
    return p


def rootfs(binary):
    """A directory with BINARY at /usr/local/bin/iscsigwd and every library it links."""
    root = os.path.join(WORK, "rootfs")
    shutil.rmtree(root, ignore_errors=True)
    for d in ("usr/local/bin", "proc", "sys", "dev", "tmp", "etc", "var/lib/iscsigw", "luns"):
        os.makedirs(os.path.join(root, d))
    shutil.copy(binary, os.path.join(root, "usr/local/bin/iscsigwd"))
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        lib = parts[2] if len(parts) > 2 and parts[1] == "=>" else parts[0]
        if lib.startswith("/"):
            dest = os.path.join(root, lib.lstrip("/"))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copy(lib, dest)  # follows symbolic links
    with open(os.path.join(root, "etc/passwd"), "w") as f:
        f.write(f"iscsigw:x:{UID}:{UID}::/var/lib/iscsigw:/sbin/nologin\n")
    with open(os.path.join(root, "etc/group"), "w") as f:
        f.write(f"iscsigw:x:{UID}:\n")
    return root


def lun_file(size):
    os.makedirs(os.path.join(WORK, "lun"), exist_ok=True)
    path = os.path.join(WORK, "lun", "lun.img")
    if not os.path.exists(path) or os.path.getsize(path) != size:
        subprocess.run(["dd", "if=/dev/urandom", f"of={path}.tmp", "bs=1M",
                        f"count={size >> 20}", "status=none"], check=True)
        os.rename(path + ".tmp", path)
    os.chown(path, UID, UID)
    with open(path, "rb") as f:  # into the page cache
        while f.read(8 << 20):
            pass
    return path


class Gateway:
    """iscsigwd in a podman container under one seccomp setting (a profile file or unconfined)."""

    def __init__(self, name, seccomp, root, lun, conf):
        self.name = name
        self.state = tempfile.mkdtemp(prefix=f"state-{name}-", dir=WORK)
        os.chown(self.state, UID, UID)
        os.chmod(self.state, 0o700)
        state = {"targets": [{"name": harness.IQN_PREFIX + "bench", "allowAnyInitiator": True,
                              "luns": [{"id": 0, "file": {"path": "/luns/lun.img"},
                                        "sizeBytes": str(os.path.getsize(lun)),
                                        "blockSize": 512}]}]}
        with open(os.path.join(self.state, "bootstrap.json"), "w") as f:
            json.dump(state, f)
        self.container = f"iscsigw-seccomp-{name}-{os.getpid()}"
        env = dict(os.environ, CONTAINERS_CONF=conf)
        out = subprocess.run(
            ["podman", "run", "--runtime", "runc", "-d", "--name", self.container,
             "--network", "host", "--user", f"{UID}:{UID}", "--cap-drop", "all",
             "--security-opt", "no-new-privileges", "--security-opt", f"seccomp={seccomp}",
             "--read-only", "-v", f"{self.state}:/var/lib/iscsigw",
             "-v", f"{os.path.dirname(lun)}:/luns", "--rootfs", root,
             "/usr/local/bin/iscsigwd", "--state-dir", "/var/lib/iscsigw",
             "--bootstrap", "/var/lib/iscsigw/bootstrap.json", "--backing-allow", "/luns",
             "--portal", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
             "--metrics-listen", "127.0.0.1:0", "--log-format", "text"],
            env=env, capture_output=True, text=True)
        if out.returncode != 0:
            subprocess.run(["podman", "rm", "-f", self.container], capture_output=True)
            shutil.rmtree(self.state, ignore_errors=True)
            raise RuntimeError(f"podman run: {out.stderr}")
        ports_file = os.path.join(self.state, "ports.json")
        ports = harness.wait_for(lambda: os.path.exists(ports_file) and open(ports_file).read(),
                                 15, what=f"{name}: ports.json")
        self.portal = json.loads(ports)["iscsi"][0]
        self.pid = int(subprocess.run(["podman", "inspect", "-f", "{{.State.Pid}}",
                                       self.container], capture_output=True, text=True,
                                      check=True).stdout)

    def url(self):
        return f"iscsi://{self.portal}/{harness.IQN_PREFIX}bench/0"

    def seccomp_mode(self):
        with open(f"/proc/{self.pid}/status") as f:
            return next(line.split()[1] for line in f if line.startswith("Seccomp:"))

    def io_uring_fds(self):
        fd_dir = f"/proc/{self.pid}/fd"
        return sum(1 for fd in os.listdir(fd_dir)
                   if os.readlink(os.path.join(fd_dir, fd)) == "anon_inode:[io_uring]")

    def log(self):
        out = subprocess.run(["podman", "logs", self.container], capture_output=True, text=True)
        return out.stdout + out.stderr

    def stop(self):
        subprocess.run(["podman", "rm", "-f", "-t", "10", self.container], capture_output=True)
        shutil.rmtree(self.state, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iscsigwd", default=harness.binary("iscsigwd"))
    args = ap.parse_args()

    os.makedirs(WORK, exist_ok=True)
    os.chmod(WORK, 0o755)
    conf = os.path.join(WORK, "containers.conf")
    # podman's defaults (nofile 2^20, nproc) may be above this machine's hard limits, which
    # cannot be raised without CAP_SYS_RESOURCE: the container keeps the caller's.
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 32768)
    with open(conf, "w") as f:
        f.write(f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", '
                f'"nproc={nproc}:{nproc}"]\n')
    with open(PROFILE) as f:
        profile = json.load(f)
    default_path = os.path.join(WORK, "runtime-default.json")
    with open(default_path, "w") as f:
        json.dump(without_io_uring(profile), f)
    root = rootfs(args.iscsigwd)
    lun = lun_file(1 << 30)
    # Idle cores poll rather than halt while this runs, as in the suite (tests/bench/suite.py).
    try:
        latency_pin = open("/dev/cpu_dma_latency", "wb", buffering=0)
        latency_pin.write((0).to_bytes(4, "little"))
    except OSError:
        latency_pin = None

    cells = [("runtime-default", default_path, False), ("chart", PROFILE, True),
             ("unconfined", "unconfined", True)]
    gws = {}
    results = {name: [] for name, _, _ in cells}
    try:
        for name, seccomp, _ in cells:
            gws[name] = Gateway(name, seccomp, root, lun, conf)
        for name, _, uring in cells:
            gw = gws[name]
            mode = gw.seccomp_mode()
            fds = gw.io_uring_fds()
            warned = FALLBACK in gw.log()
            print(f"{name}: Seccomp {mode} (2: filter), {fds} io_uring fds, "
                  f"fallback warning {'logged' if warned else 'absent'}", flush=True)
            if (mode == "2") != (name != "unconfined") or (fds > 0) != uring or warned == uring:
                raise RuntimeError(f"{name}: not the expected filter or I/O path:\n{gw.log()}")
        for r in range(args.repeats):
            for name, _, _ in cells:
                gw = gws[name]
                res = iscsi_load(gw.url(), ["--rw", "randread", "--bs", "4096", "--qd", "32"],
                                 args.seconds, gw.pid)
                results[name].append(res)
                print(f"round {r + 1} {name}: {res['iops']:.0f} IOPS, {res['cpu_us']:.1f} us "
                      f"CPU/IO, p50 {res['p50']} us, p99 {res['p99']} us", flush=True)
    finally:
        for gw in gws.values():
            gw.stop()
        shutil.rmtree(root, ignore_errors=True)
        if latency_pin:
            latency_pin.close()

    print(f"\ncached 4 KiB random read, QD32, one session, {args.seconds:g} s x {args.repeats}, "
          f"1 GiB file LUN, {os.cpu_count()} cores, medians")
    print(f"{'seccomp':17} {'io_uring':>8} {'IOPS':>8} {'CPU us/IO':>10} {'p50 us':>7} "
          f"{'p99 us':>7}  runs (IOPS)")
    for name, _, uring in cells:
        rs = results[name]
        med = lambda key: statistics.median(r[key] for r in rs)  # noqa: E731
        print(f"{name:17} {'yes' if uring else 'no':>8} {med('iops'):8.0f} {med('cpu_us'):10.1f} "
              f"{med('p50'):7.0f} {med('p99'):7.0f}  "
              f"{', '.join(str(round(r['iops'])) for r in rs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
