"""Test harness: runs the real iscsigwd on loopback and drives it with libiscsi's tools.

Daemons bind port 0; the chosen ports are read from <state-dir>/ports.json. Nothing sleeps for a
fixed time: every wait polls with a deadline.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.request

# tests/lib/iscsigw_test/harness.py: four levels below the repository's root.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.environ.get("ISCSIGW_BUILD", os.path.join(REPO, "build"))
IQN_PREFIX = "iqn.2026-11.io.iscsigw:"
INITIATOR = "iqn.2026-11.io.iscsigw.test:initiator"


def binary(name):
    return os.path.join(BUILD, "bin", name)


def wait_for(predicate, timeout=10.0, interval=0.02, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def read_text(path, missing=""):
    """The file's text as far as it is written (undecodable bytes replaced), or `missing`."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return missing


class LoggedProcess:
    """A process under test whose stdout and stderr go to one file (log_path), which read_log()
    returns as far as it is written. Subclasses set self.name, self.args, self.env and
    self.log_path before spawn()."""

    proc = None

    def spawn(self):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=self.env)

    def exited(self):
        """Raises with the log if the process has exited (for start()'s readiness polls)."""
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n"
                               f"{self.read_log()}")

    def read_log(self):
        return read_text(self.log_path)

    def stop(self, sig=signal.SIGTERM, timeout=20.0):
        """Signals the process and returns its exit code (None if it was not running)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            raise AssertionError(f"{self.name} did not stop within {timeout}s after {sig}")
        finally:
            self.log.close()
            self.proc = None
        return rc


def rbd_files(state):
    """The ceph.conf and keyring paths that STATE's rbd LUNs name, each once, in order."""
    confs, keyrings = [], []
    for target in (state or {}).get("targets", []):
        for lun in target.get("luns", []):
            rbd = lun.get("rbd") or {}
            if rbd.get("conf") and rbd["conf"] not in confs:
                confs.append(rbd["conf"])
            if rbd.get("keyring") and rbd["keyring"] not in keyrings:
                keyrings.append(rbd["keyring"])
    return confs, keyrings


class Daemon(LoggedProcess):
    """One iscsigwd process with its own state directory."""

    name = "iscsigwd"

    def __init__(self, bootstrap=None, state=None, extra_args=(), state_dir=None, env=None,
                 backing_allow=(tempfile.gettempdir(),), rbd_allow=("rbd",)):
        """BACKING_ALLOW and RBD_ALLOW become --backing-allow and --rbd-allow (docs/security.md):
        by default the test's temporary directories and the test clusters' pool; a test of the
        confinement itself passes its own. Every ceph.conf and keyring the STATE's rbd LUNs name
        becomes a --rbd-conf or --rbd-keyring, as an operator would start a gateway for them."""
        self.owns_dir = state_dir is None
        self.state_dir = state_dir or tempfile.mkdtemp(prefix="iscsigw-test-")
        self.log_path = os.path.join(self.state_dir, "iscsigwd.log")
        self.args = [binary("iscsigwd"), "--state-dir", self.state_dir,
                     "--portal", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
                     "--metrics-listen", "127.0.0.1:0"]
        if "--log-level" not in extra_args:
            self.args += ["--log-level", "debug"]
        if state is not None:
            bootstrap = os.path.join(self.state_dir, "bootstrap.json")
            with open(bootstrap, "w") as f:
                json.dump(state, f)
        if bootstrap:
            self.args += ["--bootstrap", bootstrap]
        for path in backing_allow:
            self.args += ["--backing-allow", path]
        for pool in rbd_allow:
            self.args += ["--rbd-allow", pool]
        confs, keyrings = rbd_files(state)
        for conf in confs:
            self.args += ["--rbd-conf", conf]
        for keyring in keyrings:
            self.args += ["--rbd-keyring", keyring]
        self.args += list(extra_args)
        self.env = dict(os.environ, **(env or {}))
        self.ports = None

    def start(self, timeout=15.0):
        ports_file = os.path.join(self.state_dir, "ports.json")
        if os.path.exists(ports_file):
            os.unlink(ports_file)
        self.spawn()

        def ready():
            self.exited()
            if not os.path.exists(ports_file):
                return None
            with open(ports_file) as f:
                return json.load(f)

        self.ports = wait_for(ready, timeout, what="ports.json")
        return self

    @property
    def portal(self):
        return self.ports["iscsi"][0]

    def url(self, target, lun=0, initiator=None):
        name = target if target.startswith(("iqn.", "eui.", "naa.")) else IQN_PREFIX + target
        return f"iscsi://{self.portal}/{name}/{lun}"

    @property
    def grpc(self):
        return self.ports["grpc"]

    def ctl(self, *args, check=True, input=None, output=None):
        """Runs iscsigwctl against this daemon's gRPC port; returns CompletedProcess."""
        cmd = [binary("iscsigwctl"), "--server", self.grpc]
        if output:
            cmd += ["-o", output]
        return run(cmd + [str(a) for a in args], check=check, input=input)

    def ctl_json(self, *args):
        return json.loads(self.ctl(*args, output="json").stdout)

    def metric(self, name, labels=None):
        """Sum of the samples of metric NAME on /metrics whose labels include LABELS."""
        with urllib.request.urlopen(f"http://{self.ports['metrics']}/metrics", timeout=10) as r:
            body = r.read().decode()
        total = 0.0
        found = False
        for line in body.splitlines():
            if line.startswith("#") or not line.startswith(name):
                continue
            head, _, value = line.rpartition(" ")
            metric, _, rest = head.partition("{")
            if metric != name:
                continue
            if labels and not all(f'{k}="{v}"' in rest for k, v in labels.items()):
                continue
            total += float(value)
            found = True
        if not found:
            raise AssertionError(f"metric {name} {labels or ''} not exported")
        return total

    def cleanup(self):
        if self.proc is not None:
            self.stop()
        if self.owns_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)


def run(args, timeout=60, check=True, input=None):
    """Runs a client tool; returns CompletedProcess with text output."""
    p = subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=timeout,
                       input=input)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {p.returncode}\nstdout:\n{p.stdout}\n"
                             f"stderr:\n{p.stderr}")
    return p


def perf(url, seconds=2, depth=32, blocks=8):
    """Runs iscsi-perf (random 4 KiB READ16 at the given queue depth); returns average IOPS."""
    p = run(["iscsi-perf", "-m", str(depth), "-b", str(blocks), "-t", str(seconds), "-r", url],
            timeout=seconds + 30)
    text = p.stdout.replace("\r", "\n")
    m = re.findall(r"iops average (\d+)", text)
    if not m or "finished" not in text:
        raise AssertionError(f"iscsi-perf did not finish cleanly:\n{text[-2000:]}\n{p.stderr}")
    return int(m[-1])


def load(url, seconds=2, qd=32, bs=4096):
    """Runs tests/bench/iscsi_load (random 4 KiB reads at queue depth QD); returns its JSON
    figures (iops, lat_us {p50, p99, p999, mean}, errors). Raises unless every command ended
    GOOD."""
    path = binary("iscsi_load")
    if not os.path.exists(path):
        raise AssertionError(f"{path} is not built: it needs libiscsi-dev "
                             "(scripts/install-deps.sh installs it)")
    p = subprocess.run([path, url, "--rw", "randread", "--bs", str(bs), "--qd", str(qd),
                        "--seconds", str(seconds), "--json"],
                       capture_output=True, text=True, timeout=seconds + 60)
    if p.returncode != 0:
        raise AssertionError(f"iscsi_load exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    figures = json.loads(p.stdout)
    if figures["errors"] != 0:
        raise AssertionError(f"iscsi_load: {figures['errors']} command(s) did not end GOOD")
    return figures


def simple_state(name="t0", luns=None, allow_any=True, initiators=()):
    if luns is None:
        luns = [{"id": 0, "ram": {}, "sizeBytes": str(64 << 20), "blockSize": 512}]
    return {"targets": [{"name": IQN_PREFIX + name, "allowAnyInitiator": allow_any,
                         "initiators": list(initiators), "luns": luns}]}


def stop_and_clean(daemon):
    """Stops `daemon` (SIGTERM), removes its directory, and fails naming its exit code and the
    end of its log when it did not exit 0."""
    rc = daemon.stop()
    log = daemon.read_log()
    daemon.cleanup()
    if rc != 0:
        raise AssertionError(f"iscsigwd exited {rc} at shutdown:\n{log[-4000:]}")


class DaemonTestCase(unittest.TestCase):
    """Starts one daemon per test class from STATE (a bootstrap dict)."""

    STATE = None
    EXTRA_ARGS = ()

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(state=cls.STATE or simple_state(), extra_args=cls.EXTRA_ARGS).start()

    @classmethod
    def tearDownClass(cls):
        stop_and_clean(cls.daemon)


def loop_xfs(test, size=512 << 20):
    """A reflink-capable XFS on a loop device, mounted for `test` (a unittest.TestCase) and
    unmounted by its cleanup; None when this machine has no loop device to mount it on (a
    container). A missing mkfs.xfs fails the test: scripts/install-deps.sh installs xfsprogs."""
    if shutil.which("mkfs.xfs") is None:
        test.fail("no mkfs.xfs: scripts/install-deps.sh installs xfsprogs")
    if subprocess.run(["losetup", "-f"], capture_output=True).returncode != 0:
        return None
    work = tempfile.mkdtemp(prefix="iscsigw-xfs-")
    test.addCleanup(shutil.rmtree, work, True)
    img, mnt = os.path.join(work, "fs.img"), os.path.join(work, "mnt")
    os.mkdir(mnt)
    with open(img, "wb") as f:
        f.truncate(size)
    subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", img], check=True)
    if subprocess.run(["mount", "-o", "loop", img, mnt], capture_output=True).returncode != 0:
        return None
    test.addCleanup(subprocess.run, ["umount", mnt], check=False)
    return mnt
