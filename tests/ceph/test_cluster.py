"""The throwaway Ceph cluster of the rbd backing store's tests: scripts/ceph-test-cluster.sh.

start DIR brings up one mon and one memstore OSD on 127.0.0.1 and prints DIR/ceph.conf; the pool
`rbd` must then take objects and rbd images (rados and rbd CLIs, as a test would use it). stop DIR
must leave no daemon of that DIR and free every port the cluster listened on. Two clusters in two
DIRs run at once without seeing each other. A start that cannot finish within its deadline fails
with the daemons' log tails and leaves nothing running. The measured start and stop times are
printed; start must take under 30 s.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                      "ceph-test-cluster.sh")
START_LIMIT_S = 30


def read(path, mode="rb"):
    with open(path, mode) as f:
        return f.read()


def run(*args, **kw):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=120, **kw)


def start(d, env=None):
    t0 = time.monotonic()
    r = run("bash", SCRIPT, "start", d, env=env)
    return r, time.monotonic() - t0


def stop(d):
    t0 = time.monotonic()
    r = run("bash", SCRIPT, "stop", d)
    return r, time.monotonic() - t0


def daemons_of(conf):
    """pid -> name of the live (not zombie) ceph-mon/ceph-osd processes started with conf."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/status") as f:
                zombie = "\nState:\tZ" in f.read()
        except OSError:
            continue
        if comm in ("ceph-mon", "ceph-osd") and conf.encode() in args and not zombie:
            found[int(pid)] = comm
    return found


def listeners():
    """(address, port, inode) of every listening TCP socket (IPv4 and IPv6)."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != "0A":  # LISTEN
                continue
            addr, port = fields[1].split(":")
            if len(addr) == 8:
                addr = ".".join(str(int(addr[i:i + 2], 16)) for i in (6, 4, 2, 0))
            out.append((addr, int(port, 16), int(fields[9])))
    return out


def sockets_of(pids):
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                m = re.match(r"socket:\[(\d+)\]", os.readlink(f"/proc/{pid}/fd/{fd}"))
                if m:
                    inodes.add(int(m.group(1)))
        except OSError:
            pass
    return inodes


def port_window(conf):
    text = read(conf, "r")
    mon = int(re.search(r"^mon host = \[v2:127\.0\.0\.1:(\d+)\]$", text, re.M).group(1))
    top = int(re.search(r"^ms bind port max = (\d+)$", text, re.M).group(1))
    return mon, top


class Cluster:
    """A cluster in a fresh temporary DIR; stopped and removed at the end of the test."""

    def __init__(self, test):
        self.dir = tempfile.mkdtemp(prefix="ceph-test-cluster.")
        self.conf = os.path.join(self.dir, "ceph.conf")
        test.addCleanup(self.cleanup)

    def cleanup(self):
        run("bash", SCRIPT, "stop", self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)

    def cli(self, *args, check=True):
        r = run(args[0], "-c", self.conf, *args[1:])
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(args)}: exit {r.returncode}\n{r.stdout}{r.stderr}")
        return r


class CephTestClusterTest(unittest.TestCase):

    def check_started(self, c, r, seconds):
        self.assertEqual(r.returncode, 0, r.stderr[-4000:])
        self.assertEqual(r.stdout.strip().splitlines()[-1], c.conf)
        self.assertTrue(os.path.isfile(c.conf))
        self.assertLess(seconds, START_LIMIT_S)
        names = sorted(daemons_of(c.conf).values())
        self.assertEqual(names, ["ceph-mon", "ceph-osd"])

    def check_listening(self, c):
        """The daemons listen on 127.0.0.1 only, within the DIR's port window; returns the ports."""
        mon_port, top = port_window(c.conf)
        mine = sockets_of(daemons_of(c.conf))
        socks = [(a, p) for a, p, inode in listeners() if inode in mine]
        self.assertIn(("127.0.0.1", mon_port), socks)
        # The OSD: public, cluster and two heartbeat listeners.
        self.assertGreaterEqual(len(socks), 5, socks)
        for addr, port in socks:
            self.assertEqual(addr, "127.0.0.1", socks)
            self.assertTrue(mon_port <= port <= top, (port, mon_port, top))
        return {p for _, p in socks}

    def check_stopped(self, c, r, ports):
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(daemons_of(c.conf), {})
        still = sorted(p for a, p, _ in listeners() if p in ports)
        self.assertEqual(still, [], "ports of the stopped cluster still listen")
        shutil.rmtree(c.dir)
        self.assertFalse(os.path.exists(c.dir))

    def test_start_use_stop(self):
        c = Cluster(self)
        r, start_s = start(c.dir)
        self.check_started(c, r, start_s)
        ports = self.check_listening(c)

        # A second start on a running DIR refuses and leaves it running.
        again, _ = start(c.dir)
        self.assertNotEqual(again.returncode, 0)
        self.assertIn("already running", again.stderr)
        self.assertEqual(len(daemons_of(c.conf)), 2)

        apps = c.cli("ceph", "osd", "pool", "application", "get", "rbd").stdout
        self.assertIn('"rbd"', apps)

        # An object through rados.
        work = tempfile.mkdtemp(prefix="ceph-test-data.")
        self.addCleanup(shutil.rmtree, work, True)
        obj = os.path.join(work, "obj")
        with open(obj, "wb") as f:
            f.write(os.urandom(100_000))
        c.cli("rados", "-p", "rbd", "put", "obj1", obj)
        c.cli("rados", "-p", "rbd", "get", "obj1", obj + ".back")
        self.assertEqual(read(obj), read(obj + ".back"))

        # An image: created, written by rbd bench; another imported from random bytes and
        # exported back.
        c.cli("rbd", "create", "--size", "64M", "rbd/bench")
        t0 = time.monotonic()
        bench = c.cli("rbd", "bench", "--io-type", "write", "--io-size", "4K", "--io-total", "4M",
                      "rbd/bench")
        bench_s = time.monotonic() - t0
        self.assertIn("ops: 1024", bench.stdout)
        src = os.path.join(work, "image.in")
        with open(src, "wb") as f:
            f.write(os.urandom(8 << 20))
        c.cli("rbd", "import", src, "rbd/imported")
        c.cli("rbd", "export", "rbd/imported", src + ".out")
        self.assertEqual(read(src), read(src + ".out"))
        self.assertEqual(sorted(c.cli("rbd", "ls", "rbd").stdout.split()), ["bench", "imported"])

        r, stop_s = stop(c.dir)
        self.check_stopped(c, r, ports)
        print(f"\nceph test cluster: start {start_s:.2f} s, stop {stop_s:.2f} s, "
              f"rbd bench 4 MiB of 4K writes {bench_s:.2f} s", file=sys.stderr)

    def test_two_at_once(self):
        a, b = Cluster(self), Cluster(self)
        results = {}

        def go(c):
            results[c.dir] = start(c.dir)

        threads = [threading.Thread(target=go, args=(c,)) for c in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for c in (a, b):
            self.check_started(c, *results[c.dir])
        ports_a, ports_b = self.check_listening(a), self.check_listening(b)
        self.assertFalse(ports_a & ports_b)

        # Each sees its own pool only.
        a.cli("rbd", "create", "--size", "4M", "rbd/in-a")
        b.cli("rbd", "create", "--size", "4M", "rbd/in-b")
        self.assertEqual(a.cli("rbd", "ls", "rbd").stdout.split(), ["in-a"])
        self.assertEqual(b.cli("rbd", "ls", "rbd").stdout.split(), ["in-b"])

        # Stopping one leaves the other working.
        r, stop_a = stop(a.dir)
        self.check_stopped(a, r, ports_a)
        self.assertEqual(b.cli("rbd", "ls", "rbd").stdout.split(), ["in-b"])
        r, stop_b = stop(b.dir)
        self.check_stopped(b, r, ports_b)
        print("\nceph test clusters started at once: " +
              ", ".join(f"{s:.2f} s" for _, s in results.values()) +
              f"; stopped in {stop_a:.2f} s and {stop_b:.2f} s", file=sys.stderr)

    def test_deadline(self):
        c = Cluster(self)
        env = dict(os.environ, CEPH_TEST_START_TIMEOUT="0")
        r, _ = start(c.dir, env=env)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("start failed", r.stderr)
        self.assertIn("---- last lines of", r.stderr)
        self.assertEqual(daemons_of(c.conf), {})


if __name__ == "__main__":
    unittest.main()
