"""One throwaway Ceph cluster (scripts/ceph-test-cluster.sh) for a test module: started in a
temporary directory by start(), stopped and removed by stop(). setUpModule starts it;
tearDownModule stops it. Without the Ceph daemons the module fails, it does not skip: the README's
test command installs them (scripts/install-deps.sh), and a suite that reported "passed" with
nothing run would hide a broken install."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from . import harness

SCRIPT = os.path.join(harness.REPO, "scripts", "ceph-test-cluster.sh")


class TestCluster:
    def __init__(self):
        self.dir = None
        self.conf = None

    def start(self, prefix="iscsigw-ceph-"):
        if shutil.which("ceph-mon") is None or shutil.which("ceph-osd") is None:
            raise RuntimeError("the Ceph daemons (ceph-mon, ceph-osd) are not installed: "
                               "scripts/install-deps.sh installs them")
        self.dir = tempfile.mkdtemp(prefix=prefix)
        t0 = time.monotonic()
        r = subprocess.run(["bash", SCRIPT, "start", self.dir], capture_output=True, text=True,
                           timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"ceph-test-cluster.sh start failed:\n{r.stderr}")
        self.conf = r.stdout.strip().splitlines()[-1]
        print(f"test cluster up in {time.monotonic() - t0:.1f} s: {self.conf}", file=sys.stderr)
        return self

    def stop(self):
        if self.dir:
            subprocess.run(["bash", SCRIPT, "stop", self.dir], capture_output=True, timeout=120)
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def rbd(self, *args, check=True):
        return harness.run(["rbd", "-c", self.conf] + list(args), check=check)

    def export(self, image, pool="rbd"):
        """The image's whole content, read by `rbd export` (not through any gateway)."""
        path = os.path.join(self.dir, image + ".export")
        self.rbd("export", f"{pool}/{image}", path)
        try:
            with open(path, "rb") as f:
                return f.read()
        finally:
            os.unlink(path)

    def osd_pid(self):
        with open(os.path.join(self.dir, "run", "osd.0.pid")) as f:
            return int(f.read().strip())


def threads_stopped(pid):
    """Whether every thread of process `pid` is stopped (state T)."""
    states = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            states.append(f.read().rsplit(")", 1)[1].split()[0])
    return all(st == "T" for st in states)


def stop_process(pid):
    """SIGSTOP to `pid` (an OSD, a gateway), returning once every thread of it has stopped: the
    signal takes effect when a thread next enters the kernel, and until then it could still
    answer. The caller sends SIGCONT."""
    os.kill(pid, signal.SIGSTOP)
    try:
        harness.wait_for(lambda: threads_stopped(pid), 5, what=f"every thread of {pid} stopped")
    except BaseException:
        os.kill(pid, signal.SIGCONT)
        raise
