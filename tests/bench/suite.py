#!/usr/bin/python3
"""The benchmark suite: iscsigwd against tgtd (Debian's tgt) on equivalent LUNs, with the device's
and the network's ceilings measured in the same run, written to docs/performance.md with plots.

LUNs, each pair served at the same time on loopback and loaded one at a time:
  null  iscsigwd `null` against tgtd's null store: the targets' own cost, no media.
  ram   a 1 GiB iscsigwd `ram` LUN against tgtd's rdwr store on a 1 GiB file in /dev/shm; both
        are written end to end first, so no read finds a hole.
  file  a 4 GiB file of random data on this machine's disk (under /var/tmp/iscsigw-bench), as an
        iscsigwd file LUN through the page cache and with `direct`, and as tgtd's rdwr store.
        The page cache is dropped (sync, drop_caches) before each run.
  rbd   a 1 GiB RBD image of a throwaway one-node cluster (scripts/ceph-test-cluster.sh: one mon,
        one memstore OSD on this machine) as an iscsigwd rbd LUN, written end to end first. tgtd
        has no rbd store in Debian's tgt; the ceiling is `rbd bench` straight on the image
        (librbd, 32 threads, 4 KiB random), run in every round just before the gateway's cell
        of the same workload, so that both meet the OSD in the same state; the ceiling is the
        median of those runs. Rbd cells run --rbd-repeats rounds (5): on a 2-core VM a single
        round's ratio to the ceiling ranged from 70% to 100%.
        Its writes take the image's exclusive lock from the gateway, which takes it back at its
        next write.
Workloads (build/bin/iscsi_load, one session on libiscsi's async API, every status checked):
  4 KiB random read and write at QD 1, 8, 32 and 128; 4 KiB random write with FUA at QD32;
  70/30 read/write at QD32; 128 KiB sequential read and write at QD32; 1 MiB sequential read at
  QD8.
Per cell: IOPS, MB/s, p50/p99/p99.9 latency, target CPU per I/O (utime+stime of the target
process over the run, from /proc) and the ratio to tgtd. File cells and fio's also read the block
device under the file (/sys/block/DEV/stat, around each run): the device's reads per second and
its average queue (the time its requests spent in it per second of the run, what iostat calls
aqu-sz), so that a ratio to fio shows whether the device was kept as busy. The rbd LUN's OSD keeps
its data in memory (memstore): no block device to read there. Each cell runs --repeats times,
the targets interleaved within each round, and every figure is the median of its repeats.
Ceilings: fio (libaio, O_DIRECT) straight on the file, and fio's 4 KiB random reads at QD32
through the page cache (io_uring, uncached at the start: the kernel's buffered path on the same
file); iperf3's single TCP stream on loopback; `rbd bench` on the rbd LUN's image.
CPU idle: while it runs, the suite holds /dev/cpu_dma_latency at 0 (what tuned's
latency-performance profile does), so idle cores poll instead of halting; on a VM, waking a
halted vCPU adds tens of microseconds to every round trip at low queue depth, for every target
alike. --allow-idle-states measures without it.
Profiles: for each goal this run misses, the cell is run once more under a system-wide `perf
record` (cpu-clock), and docs/performance.md shows where the machine's time went (by thread name) and
the target's hottest functions: the profile that bounds the figure.
One session against two on the null LUN shows what a second session adds (the single-session
ceiling).
Abuse (--only abuse): tests/integration/test_abuse.py run alone on the machine, each abuse
beside a well-behaved session (4 KiB random reads QD32 on a RAM LUN), --seconds per run, its
--repeats runs alone and under the abuse interleaved. The test asserts what holds on any machine
(statuses, p99, RSS, the documented bounds); the share of its IOPS the session keeps is measured
here, against a goal, because on a 2-core VM running other tests beside it that ratio is noise.

Usage, from the repository's root:
  PYTHONPATH=tests/lib tests/bench/suite.py [--seconds 5] [--repeats 3] [--rbd-repeats 5]
      [--out docs/performance.md] [--only null,ram,file,rbd,abuse]
Run it through scripts/bench.sh, which installs the packages and builds first. Needs root
(tgtd, drop_caches). Not part of the tests: a figure here asserts nothing.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

from iscsigw_test import harness

from e2e_vs_tgtd import cpu_seconds, free_port, start_tgtd
from file_lun_read import data_file, drop_caches

KIB = 1024
RAM_LUN_BYTES = 1 << 30
RBD_LUN_BYTES = 1 << 30
CEPH_CLUSTER = os.path.join(harness.REPO, "scripts", "ceph-test-cluster.sh")
FILE_LUN_GIB = 4

# (key, label, iscsi_load arguments). The key names the cell in plots and goals.
WORKLOADS = (
    [(f"randread-qd{q}", f"4 KiB random read QD{q}", ["--rw", "randread", "--bs", "4096",
                                                      "--qd", str(q)]) for q in (1, 8, 32, 128)]
    + [(f"randwrite-qd{q}", f"4 KiB random write QD{q}", ["--rw", "randwrite", "--bs", "4096",
                                                          "--qd", str(q)])
       for q in (1, 8, 32, 128)]
    + [("randwrite-fua-qd32", "4 KiB random write FUA QD32",
        ["--rw", "randwrite", "--bs", "4096", "--qd", "32", "--fua"]),
       ("randrw70-qd32", "4 KiB 70/30 read/write QD32",
        ["--rw", "randrw", "--mix", "70", "--bs", "4096", "--qd", "32"]),
       ("seqread128k-qd32", "128 KiB sequential read QD32",
        ["--rw", "read", "--bs", str(128 * KIB), "--qd", "32"]),
       ("seqwrite128k-qd32", "128 KiB sequential write QD32",
        ["--rw", "write", "--bs", str(128 * KIB), "--qd", "32"]),
       ("seqread1m-qd8", "1 MiB sequential read QD8",
        ["--rw", "read", "--bs", str(1024 * KIB), "--qd", "8"])])

METRICS = ("iops", "mbps", "p50", "p99", "p999", "cpu_us", "dev_rps", "dev_queue")

# fio's 4 KiB random reads at QD32 through the page cache: what the kernel's buffered path
# itself reaches on the file, beside the O_DIRECT ceiling every file goal is measured against.
CACHED_CEILING = "randread-qd32-pagecache"

# The cells the goals look at, profiled when their goal is missed.
PROFILED = ("randread-qd1", "randread-qd32", "randwrite-qd32", "randwrite-fua-qd32",
            "seqread128k-qd32")


class Target:
    """One LUN of one target process: a name for the tables, its URL and the process to charge."""

    def __init__(self, name, url, pid, tgtd=False):
        self.name, self.url, self.pid, self.tgtd = name, url, pid, tgtd


def iscsi_load(url, args, seconds, pid=None):
    """Runs one iscsi_load; returns its JSON plus cpu_us (target CPU per I/O) when pid is given."""
    cmd = [harness.binary("iscsi_load"), url, "--json", "--seconds", str(seconds)] + args
    cpu0 = cpu_seconds(pid) if pid else 0.0
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 600)
    cpu1 = cpu_seconds(pid) if pid else 0.0
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    r = json.loads(out.stdout)
    ios = r["iops"] * r["seconds"]
    r["cpu_us"] = (cpu1 - cpu0) * 1e6 / ios if ios else float("nan")
    r["p50"], r["p99"], r["p999"] = r["lat_us"]["p50"], r["lat_us"]["p99"], r["lat_us"]["p999"]
    return r


def block_device(path):
    """The /sys/block name of the whole disk holding path (a partition's parent), or None."""
    st = os.stat(path)
    node = os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if not os.path.exists(node):
        return None  # tmpfs, overlay without a device
    if os.path.exists(os.path.join(node, "partition")):
        node = os.path.dirname(node)
    return os.path.basename(node)


def device_counters(dev):
    """(completed reads, milliseconds requests spent in the device) of /sys/block/DEV/stat."""
    with open(f"/sys/block/{dev}/stat") as f:
        fields = [int(x) for x in f.read().split()]
    return fields[0], fields[10]  # reads completed; time_in_queue (ms, weighted)


def with_device(dev, run):
    """Runs run() and adds the device's reads per second and average queue over it to its
    result (NaN without a device)."""
    if dev is None:
        r = run()
        r["dev_rps"] = r["dev_queue"] = float("nan")
        return r
    (reads0, queue0), t0 = device_counters(dev), time.monotonic()
    r = run()
    (reads1, queue1), wall = device_counters(dev), time.monotonic() - t0
    r["dev_rps"] = (reads1 - reads0) / wall
    r["dev_queue"] = (queue1 - queue0) / 1000.0 / wall
    return r


def fill(url):
    """Writes the whole LUN once, so that reads meet data rather than holes."""
    iscsi_load(url, ["--rw", "write", "--bs", str(1024 * KIB), "--qd", "8", "--once"], 3600)


def gw_daemon(lun):
    state = {"targets": [{"name": harness.IQN_PREFIX + "bench", "allowAnyInitiator": True,
                          "luns": [dict(lun, id=0, blockSize=512)]}]}
    # A file LUN's directory is allowed as an operator would allow it (--backing-allow).
    allow = [tempfile.gettempdir()]
    if "file" in lun:
        allow.append(os.path.dirname(lun["file"]["path"]))
    return harness.Daemon(state=state, extra_args=["--log-level", "warn"],
                          backing_allow=allow).start()


class Lab:
    """Starts and stops the targets of one LUN kind."""

    def __init__(self):
        self.daemons, self.tgtds, self.files = [], [], []
        self.cluster = None  # a throwaway Ceph cluster's directory
        self.rbd_conf = None  # its conf
        self.ceilings = {}   # measured alongside the cells (rbd bench), for the Ceilings table
        self.device = None   # the block device under a file LUN (/sys/block name)

    def tgtd(self, bstype, backing, name):
        proc, url = start_tgtd(free_port(), bstype, backing, name)
        self.tgtds.append(proc)
        return Target("tgtd", url, proc.pid, tgtd=True)

    def gw(self, name, lun):
        d = gw_daemon(lun)
        self.daemons.append(d)
        return Target(name, d.url("bench", 0), d.proc.pid)

    def close(self):
        try:
            for d in self.daemons:
                d.cleanup()
        finally:
            self.close_rest()

    def close_rest(self):
        for p in self.tgtds:
            p.kill()  # tgtd in the foreground ignores SIGTERM
            p.wait()
        for f in self.files:
            os.unlink(f)
        if self.cluster:
            subprocess.run(["bash", CEPH_CLUSTER, "stop", self.cluster], capture_output=True,
                           timeout=120)
            shutil.rmtree(self.cluster, ignore_errors=True)


def rbd_bench(conf, image, io_type, seconds):
    """`rbd bench` 4 KiB random at 32 threads on the image for about `seconds`: its IOPS."""
    def run(total_ops):
        out = subprocess.run(["rbd", "-c", conf, "bench", "--io-type", io_type, "--io-size",
                              "4096", "--io-threads", "32", "--io-pattern", "rand",
                              "--io-total", str(total_ops * 4096), image],
                             capture_output=True, text=True, check=True, timeout=seconds + 600)
        m = re.search(r"^elapsed: *\S+ +ops: *(\d+) +ops/sec: *([\d.]+)", out.stdout, re.M)
        if not m:
            raise RuntimeError(f"rbd bench: no summary line in:\n{out.stdout}{out.stderr}")
        return float(m.group(2))
    estimate = run(20000)
    return run(max(20000, int(estimate * seconds)))


# The cells with an rbd bench ceiling, and rbd bench's --io-type for each.
RBD_CEILINGS = {"randread-qd32": "read", "randwrite-qd32": "write"}


def rbd_setup(lab, args, log):
    """A throwaway cluster with a 1 GiB image written end to end; its conf."""
    lab.cluster = tempfile.mkdtemp(prefix="iscsigw-bench-ceph-")
    # memstore keeps the OSD's data in RAM, 1 GiB unless told: room for the image and then some
    # (a full OSD blocks every write).
    env = dict(os.environ, CEPH_TEST_MEMSTORE_BYTES=str(3 * RBD_LUN_BYTES))
    t0 = time.monotonic()
    r = subprocess.run(["bash", CEPH_CLUSTER, "start", lab.cluster], capture_output=True,
                       text=True, timeout=120, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"ceph-test-cluster.sh start failed:\n{r.stderr}")
    lab.ceilings["ceph_start_s"] = time.monotonic() - t0
    log(f"rbd: the throwaway cluster started in {lab.ceilings['ceph_start_s']:.2f} s")
    conf = r.stdout.strip().splitlines()[-1]
    subprocess.run(["rbd", "-c", conf, "create", "rbd/bench", "--size",
                    f"{RBD_LUN_BYTES >> 20}M"], check=True, capture_output=True)
    subprocess.run(["rbd", "-c", conf, "bench", "--io-type", "write", "--io-size", "4M",
                    "--io-threads", "8", "--io-pattern", "seq", "--io-total",
                    str(RBD_LUN_BYTES), "rbd/bench"], check=True, capture_output=True)
    lab.rbd_conf = conf
    return conf


def setup(kind, lab, args, log):
    """The targets for one LUN kind, tgtd first; and whether to drop the page cache per run."""
    if kind == "null":
        return [lab.tgtd("null", "/dev/null/", "null"),
                lab.gw("iscsigwd", {"null": {}, "sizeBytes": str(1 << 40)})], False
    if kind == "ram":
        shm = tempfile.NamedTemporaryFile(dir="/dev/shm", prefix="iscsigw-bench-", delete=False)
        shm.truncate(RAM_LUN_BYTES)
        shm.close()
        lab.files.append(shm.name)
        targets = [lab.tgtd("rdwr", shm.name, "ram"),
                   lab.gw("iscsigwd", {"ram": {}, "sizeBytes": str(RAM_LUN_BYTES)})]
        for t in targets:
            fill(t.url)
        return targets, False
    if kind == "rbd":
        conf = rbd_setup(lab, args, log)
        return [lab.gw("iscsigwd", {"rbd": {"pool": "rbd", "image": "bench", "conf": conf},
                                    "sizeBytes": str(RBD_LUN_BYTES)})], False
    path = data_file(FILE_LUN_GIB)
    lab.device = block_device(path)
    lun = {"sizeBytes": str(FILE_LUN_GIB << 30)}
    return [lab.tgtd("rdwr", path, "file"),
            lab.gw("iscsigwd", dict(lun, file={"path": path})),
            lab.gw("iscsigwd direct", dict(lun, file={"path": path, "direct": True}))], True


def perf_report(data, *args):
    out = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "-g", "none",
                          *args], capture_output=True, text=True)
    return [line.rstrip() for line in out.stdout.splitlines()
            if line.strip() and not line.startswith("#")]


def profile(t, key, seconds):
    """Runs one cell under a system-wide cpu-clock `perf record`; returns the share of the
    machine's time by thread name and the target's hottest functions (text lines)."""
    wargs = next(w for k, _, w in WORKLOADS if k == key)
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "perf.data")
        rec = subprocess.Popen(["perf", "record", "-a", "-g", "-F", "999", "-o", data, "--",
                                "sleep", str(seconds)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
        try:
            iscsi_load(t.url, wargs, seconds)
        finally:
            err = rec.communicate(timeout=seconds + 60)[1]
        if rec.returncode != 0:  # e.g. perf_event_paranoid in a container
            return [f"perf record failed: {err.strip()[-300:]}"], []
        by_thread = perf_report(data, "--sort", "comm", "--percent-limit", "2")
        hottest = perf_report(data, "--pid", str(t.pid), "--percentage", "relative", "--sort",
                              "dso,sym", "--percent-limit", "1.5")
    return by_thread, hottest[:15]


def median_cells(samples):
    return {m: statistics.median(s[m] for s in samples) for m in METRICS}


def run_kind(kind, args, log, ceil):
    lab = Lab()
    try:
        targets, drop = setup(kind, lab, args, log)
        samples = {}
        rbd_runs = {}
        for rnd in range(args.rbd_repeats if kind == "rbd" else args.repeats):
            for key, _, wargs in WORKLOADS:
                if kind == "rbd" and key in RBD_CEILINGS:
                    c = rbd_bench(lab.rbd_conf, "rbd/bench", RBD_CEILINGS[key], args.seconds)
                    rbd_runs.setdefault(key, []).append(c)
                    log(f"rbd round {rnd + 1} {key} rbd bench: {c:.0f} IOPS")
                for t in targets:
                    if drop:
                        drop_caches()
                    r = with_device(lab.device, lambda: iscsi_load(t.url, wargs, args.seconds,
                                                                   t.pid))
                    samples.setdefault((key, t.name), []).append(r)
                    log(f"{kind} round {rnd + 1} {key} {t.name}: {r['iops']:.0f} IOPS "
                        f"p50 {r['p50']:.0f} us, {r['cpu_us']:.2f} us CPU/IO")
        cells = {k: median_cells(v) for k, v in samples.items()}
        for key, runs in rbd_runs.items():
            lab.ceilings[f"rbd-{key}"] = {"what": f"rbd bench on the rbd LUN's image, {key}",
                                          "iops": statistics.median(runs)}
        extra = {}
        if kind == "null":
            extra = sessions_ceiling(targets[1], args, log)
        profiles = {}
        if args.profile:
            for t in (t for t in targets if not t.tgtd):
                for key in PROFILED:
                    if drop:
                        drop_caches()
                    profiles[(key, t.name)] = profile(t, key, args.seconds)
            log(f"{kind}: {len(profiles)} cells profiled")
        ceil.update(lab.ceilings)
        return [t.name for t in targets], cells, extra, profiles
    finally:
        lab.close()


def thread_cpu(pid):
    """utime + stime of each thread of pid, in seconds, by thread id."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended
        out[tid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def sessions_ceiling(gw, args, log):
    """One session against two on the same LUN, the same load in total: 4 KiB random reads at
    QD32 and 128 KiB sequential reads at QD32 (QD16 each for two). Per run: IOPS, target CPU per
    I/O, and how busy the target's busiest thread (a reactor) was, which says whether one session
    is bounded by its reactor."""
    out = {}
    for label, wargs in (("4 KiB random read", ["--rw", "randread", "--bs", "4096"]),
                         ("128 KiB sequential read", ["--rw", "read", "--bs", str(128 * KIB)])):
        for sessions in (1, 2):
            runs = []
            for _ in range(args.repeats):
                cmd = [harness.binary("iscsi_load"), gw.url, "--json", "--seconds",
                       str(args.seconds), "--qd", str(32 // sessions)] + wargs
                cpu0, threads0, t0 = cpu_seconds(gw.pid), thread_cpu(gw.pid), time.monotonic()
                procs = [subprocess.Popen(cmd + ["--initiator", f"{harness.INITIATOR}-{i}"],
                                          stdout=subprocess.PIPE, text=True)
                         for i in range(sessions)]
                iops = sum(json.loads(p.communicate(timeout=args.seconds + 60)[0])["iops"]
                           for p in procs)
                wall = time.monotonic() - t0
                cpu, threads1 = cpu_seconds(gw.pid) - cpu0, thread_cpu(gw.pid)
                busiest = max(threads1[t] - threads0.get(t, 0.0) for t in threads1) / wall
                runs.append((iops, cpu * 1e6 / (iops * args.seconds), busiest))
            out[(label, sessions)] = tuple(statistics.median(r[i] for r in runs)
                                           for i in range(3))
            log(f"null {label}, {sessions} session(s): {out[(label, sessions)][0]:.0f} IOPS, "
                f"busiest thread {out[(label, sessions)][2]:.0%}")
    return out


def fio(path, rw, bs, depth, seconds, cached=False):
    """fio on path: libaio and O_DIRECT, or (cached) io_uring through the page cache, the way a
    file LUN without `direct` reads (libaio would block on a buffered read)."""
    engine = ["--ioengine=io_uring", "--direct=0"] if cached else ["--ioengine=libaio",
                                                                   "--direct=1"]
    out = subprocess.run(["fio", "--name=ceiling", f"--filename={path}", f"--rw={rw}",
                          f"--bs={bs}", f"--iodepth={depth}", *engine,
                          "--time_based", f"--runtime={seconds}", "--output-format=json"],
                         capture_output=True, text=True, check=True)
    job = json.loads(out.stdout)["jobs"][0]
    side = job["read"] if "read" in rw else job["write"]
    pct = side["clat_ns"]["percentile"]
    return {"iops": side["iops"], "mbps": side["bw_bytes"] / 1e6,
            "p50": pct["50.000000"] / 1e3, "p99": pct["99.000000"] / 1e3,
            "p999": pct["99.900000"] / 1e3}


def ceilings(args, log):
    """fio on the file LUN's file and iperf3's single stream, medians of --repeats."""
    path = data_file(FILE_LUN_GIB)
    dev = block_device(path)
    out = {}
    for key, rw, bs, depth, cached in (("randread-qd1", "randread", 4096, 1, False),
                                       ("randread-qd32", "randread", 4096, 32, False),
                                       (CACHED_CEILING, "randread", 4096, 32, True),
                                       ("randwrite-qd32", "randwrite", 4096, 32, False),
                                       ("seqread128k-qd32", "read", 128 * KIB, 32, False)):
        runs = []
        for _ in range(args.repeats):
            drop_caches()
            runs.append(with_device(dev, lambda: fio(path, rw, bs, depth, args.seconds, cached)))
        out[key] = {m: statistics.median(r[m] for r in runs)
                    for m in ("iops", "mbps", "p50", "p99", "p999", "dev_rps", "dev_queue")}
        if cached:
            out[key]["what"] = ("fio io_uring through the page cache (uncached at the start), "
                                "randread-qd32")
        log(f"fio {key}: {out[key]['iops']:.0f} IOPS")
    gbps = []
    for _ in range(args.repeats):
        port = free_port()
        server = subprocess.Popen(["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", str(port)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            # Any connection counts as the one-off server's client: wait for the listening
            # socket without connecting to it.
            harness.wait_for(lambda: subprocess.run(
                ["ss", "-Hltn", f"sport = :{port}"], capture_output=True,
                text=True).stdout.strip(), what="iperf3's server")
            r = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t",
                                str(args.seconds), "-J"], capture_output=True, text=True,
                               timeout=args.seconds + 60)
            if r.returncode != 0:
                raise RuntimeError(f"iperf3 failed: {r.stdout}{r.stderr}")
            gbps.append(json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9)
        finally:
            server.kill()
            server.wait()
    out["iperf3_mbps"] = statistics.median(gbps) * 1e3 / 8
    log(f"iperf3 single stream: {out['iperf3_mbps']:.0f} MB/s")
    return out


# ---------------------------------------------------------------------------------------------
# Report


# The share of its IOPS the well-behaved session keeps under each abuse (docs/hostile-input.md).
ABUSE_KEPT_GOAL = 0.80


def run_abuse(args, log):
    """Runs tests/integration/test_abuse.py with the figures recorded; returns (the test's exit
    status and last lines, one record per abuse)."""
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl", prefix="iscsigw-abuse-") as rec:
        env = dict(os.environ, PYTHONPATH=os.path.join(harness.REPO, "tests", "lib"),
                   ISCSIGW_BUILD=harness.BUILD, ISCSIGW_SANITIZED="0",
                   ISCSIGW_ABUSE_RECORD=rec.name, ISCSIGW_ABUSE_SECONDS=str(args.seconds))
        log("abuse: tests/integration/test_abuse.py")
        p = subprocess.run([sys.executable, "-m", "unittest", "test_abuse"], env=env,
                           cwd=os.path.join(harness.REPO, "tests", "integration"),
                           capture_output=True, text=True, timeout=3600)
        records = [json.loads(line) for line in rec.read().splitlines() if line.strip()]
    for r in records:
        r["kept"] = statistics.median(r["under"]) / statistics.median(r["alone"])
        log(f"abuse {r['what']}: kept {r['kept']:.0%} of the session's IOPS")
    return p.returncode, [line for line in p.stderr.splitlines() if line.strip()][-2:], records


def abuse_table(status, tail, records):
    rows = [f"tests/integration/test_abuse.py: {'passed' if status == 0 else 'FAILED'} "
            f"({' / '.join(tail)}).", "",
            "| abuse | session IOPS alone | under the abuse | kept | p99 alone ms | p99 under ms "
            "| peak RSS MiB | the abuse (its last run) |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in records:
        rows.append(f"| {r['what']} | {fmt(statistics.median(r['alone']))} | "
                    f"{fmt(statistics.median(r['under']))} | {r['kept']:.0%} | "
                    f"{r['p99_alone']:.2f} | {r['p99_under']:.2f} | {r['peak_rss']:.0f} | "
                    + ", ".join(f"{k} {v}" for k, v in r["counts"].items()) + " |")
    return "\n".join(rows)


def machine():
    cpu = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_gib = int(f.readline().split()[1]) / (1 << 20)
    disk = subprocess.run(["df", "--output=source,fstype", "/var/tmp"], capture_output=True,
                          text=True).stdout.splitlines()[-1].split()
    return (f"{os.cpu_count()} cores ({cpu}), {mem_gib:.0f} GiB, Linux {platform.release()}, "
            f"file LUN on {disk[0]} ({disk[1]})")


def fmt(v, digits=0):
    if v != v:  # NaN
        return "–"
    if digits == 0 and v >= 10000:
        return f"{v / 1000:.1f}K"
    return f"{v:.{digits}f}"


def table(kind, names, cells):
    device = kind == "file"  # the only kind on a block device (docstring)
    rows = ["| workload | target | IOPS | MB/s | p50 µs | p99 µs | p99.9 µs | CPU µs/IO "
            "| IOPS x tgtd | CPU x tgtd |" + (" device reads/s | device queue |" if device else ""),
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
            + (" ---: | ---: |" if device else "")]
    for key, label, _ in WORKLOADS:
        base = cells.get((key, "tgtd"))
        for n in names:
            c = cells[(key, n)]
            ratio = cpu_ratio = ""
            if n != "tgtd" and base:
                ratio = f"{c['iops'] / base['iops']:.2f}x"
                cpu_ratio = f"{c['cpu_us'] / base['cpu_us']:.2f}x"
            rows.append(f"| {label} | {n} | {fmt(c['iops'])} | {fmt(c['mbps'])} | "
                        f"{fmt(c['p50'])} | {fmt(c['p99'])} | {fmt(c['p999'])} | "
                        f"{fmt(c['cpu_us'], 2)} | {ratio} | {cpu_ratio} |"
                        + (f" {fmt(c['dev_rps'])} | {fmt(c['dev_queue'], 1)} |" if device
                           else ""))
    return "\n".join(rows)


def goals(results, ceil, abuse=()):
    """(goal, measured, met, cells) for each of the suite's goals that this run covered; cells:
    the (kind, key, target) the goal looked at (None: no cell to profile)."""
    out = []

    def cell(kind, key, name):
        return results[kind][1][(key, name)]

    for name in ("iscsigwd", "iscsigwd direct"):
        if "file" in results and "randread-qd32" in ceil:
            c, t = cell("file", "randread-qd32", name), cell("file", "randread-qd32", "tgtd")
            f = ceil["randread-qd32"]
            ratio, dev = c["iops"] / t["iops"], c["iops"] / f["iops"]
            cached = ""
            if name == "iscsigwd" and CACHED_CEILING in ceil:
                cached = (f" ({c['iops'] / ceil[CACHED_CEILING]['iops']:.0%} of fio through the "
                          "page cache)")
            out.append((f"file ({name}), 4 KiB random read QD32: ≥ 2.0x tgtd and ≥ 85% of fio",
                        f"{ratio:.2f}x, {dev:.0%}{cached}", ratio >= 2.0 and dev >= 0.85,
                        ("file", "randread-qd32", name)))
            if f["dev_queue"] > 0:  # NaN (no block device under the file) compares false
                queue = c["dev_queue"] / f["dev_queue"]
                out.append((f"file ({name}), 4 KiB random read QD32: the device's average queue "
                            "≥ 0.8 of fio's", f"{c['dev_queue']:.1f} vs {f['dev_queue']:.1f}, "
                            f"{queue:.2f}x", queue >= 0.8, None))
            for key, what in (("randwrite-qd32", "write"), ("randwrite-fua-qd32", "write FUA")):
                c, t = cell("file", key, name), cell("file", key, "tgtd")
                ratio = c["iops"] / t["iops"]
                out.append((f"file ({name}), 4 KiB random {what} QD32: ≥ 2.0x tgtd",
                            f"{ratio:.2f}x", ratio >= 2.0, ("file", key, name)))
    for kind in ("null", "ram"):
        if kind in results:
            c, t = cell(kind, "randread-qd32", "iscsigwd"), cell(kind, "randread-qd32", "tgtd")
            ratio, cpu = c["iops"] / t["iops"], c["cpu_us"] / t["cpu_us"]
            out.append((f"{kind}, 4 KiB random read QD32: ≥ 2.4x tgtd, CPU/IO ≤ 0.2x tgtd",
                        f"{ratio:.2f}x, {cpu:.2f}x", ratio >= 2.4 and cpu <= 0.2,
                        (kind, "randread-qd32", "iscsigwd")))
    if "null" in results and "iperf3_mbps" in ceil:
        c = cell("null", "seqread128k-qd32", "iscsigwd")
        share = c["mbps"] / ceil["iperf3_mbps"]
        out.append(("null, 128 KiB sequential read QD32: ≥ 85% of iperf3's single stream",
                    f"{c['mbps']:.0f} of {ceil['iperf3_mbps']:.0f} MB/s, {share:.0%}",
                    share >= 0.85, ("null", "seqread128k-qd32", "iscsigwd")))
    for kind in ("rbd",):
        for key, what in (("randread-qd32", "read"), ("randwrite-qd32", "write")):
            if kind in results and f"rbd-{key}" in ceil:
                c = cell(kind, key, "iscsigwd")
                share = c["iops"] / ceil[f"rbd-{key}"]["iops"]
                out.append((f"rbd, 4 KiB random {what} QD32: ≥ 80% of rbd bench on the image",
                            f"{fmt(c['iops'])} of {fmt(ceil[f'rbd-{key}']['iops'])} IOPS, "
                            f"{share:.0%}", share >= 0.80, (kind, key, "iscsigwd")))
    for kind in results:
        if "tgtd" not in results[kind][0]:
            continue
        names = [n for n in results[kind][0] if n != "tgtd"]
        for name in names:
            c, t = cell(kind, "randread-qd1", name), cell(kind, "randread-qd1", "tgtd")
            ratio = c["p50"] / t["p50"]
            out.append((f"{kind} ({name}), 4 KiB random read QD1 p50: ≤ 0.7x tgtd",
                        f"{c['p50']:.0f} vs {t['p50']:.0f} µs, {ratio:.2f}x", ratio <= 0.7,
                        (kind, "randread-qd1", name)))
    for kind, (names, cells, _, _) in results.items():
        for name in (n for n in names if n != "tgtd"):
            # A cell where nothing completed has no latency to compare.
            tails = [(label, cells[(key, name)]) for key, label, _ in WORKLOADS
                     if "4 KiB" in label and (key, name) in cells and cells[(key, name)]["p99"] > 0]
            if not tails:
                continue
            worst = max(tails, key=lambda lc: lc[1]["p999"] / lc[1]["p99"])
            over = [label for label, c in tails if c["p999"] > 3 * c["p99"]]
            out.append((f"{kind} ({name}), every 4 KiB cell: p99.9 ≤ 3x p99",
                        f"worst {worst[1]['p999'] / worst[1]['p99']:.1f}x ({worst[0]}); "
                        + (f"over in {len(over)} of {len(tails)}" if over else "none over"),
                        not over, None))
    for r in abuse:
        out.append((f"under {r['what']}: the session keeps ≥ {ABUSE_KEPT_GOAL:.0%} of its IOPS",
                    f"{r['kept']:.0%}", r["kept"] >= ABUSE_KEPT_GOAL, None))
    return out


def plot(kind, names, cells, outdir):
    """IOPS and p50 latency against queue depth for 4 KiB random reads and writes (SVG)."""
    qds = (1, 8, 32, 128)
    data = os.path.join(outdir, f"{kind}.dat")
    with open(data, "w") as f:
        for n in names:
            f.write(f"# {n}\n")
            for q in qds:
                r, w = cells[(f"randread-qd{q}", n)], cells[(f"randwrite-qd{q}", n)]
                f.write(f"{q} {r['iops']} {w['iops']} {r['p50']} {w['p50']}\n")
            f.write("\n\n")
    files = []
    for what, cols, ylabel in (("iops", (2, 3), "IOPS"), ("latency", (4, 5), "p50 latency (µs)")):
        svg = os.path.join(outdir, f"{kind}-{what}.svg")
        series = []
        for i, n in enumerate(names):
            series.append(f"'{data}' index {i} using 1:{cols[0]} with linespoints "
                          f"title '{n} read'")
            series.append(f"'{data}' index {i} using 1:{cols[1]} with linespoints dashtype 2 "
                          f"title '{n} write'")
        script = (f"set terminal svg size 640,400 font 'sans,11'; set output '{svg}';"
                  f"set title '{kind} LUN, 4 KiB random I/O'; set logscale x 2;"
                  f"set xlabel 'queue depth'; set ylabel '{ylabel}'; set key top left;"
                  f"set xtics ({', '.join(str(q) for q in qds)}); set grid;"
                  f"plot {', '.join(series)}")
        subprocess.run(["gnuplot", "-e", script], check=True)
        files.append(svg)
    os.unlink(data)
    return files


def report(args, results, ceil, started, seconds_taken, abuse=None):
    # The plots go to perf/ beside the report, which links them by relative path.
    outdir = os.path.join(os.path.dirname(os.path.abspath(args.out)), "perf")
    os.makedirs(outdir, exist_ok=True)
    md = ["# Performance", "",
          "Generated by `scripts/bench.sh` (tests/bench/suite.py); do not edit by hand above "
          "the notes at the end, which are kept across runs. "
          "Method: tests/bench/suite.py's docstring.", "",
          f"Run {started:%Y-%m-%d %H:%M} UTC, {seconds_taken / 60:.0f} minutes: "
          f"{args.seconds} s per cell, median of {args.repeats} (rbd: {args.rbd_repeats}). "
          f"Machine: {machine()}; "
          f"{args.idle_note}. Client and targets share the machine's cores and talk over "
          "loopback.", ""]
    if ceil:
        md += ["## Ceilings", "",
               "| what | IOPS | MB/s | p50 µs | p99 µs | p99.9 µs | device reads/s "
               "| device queue |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for key, c in ceil.items():
            if key in ("iperf3_mbps", "ceph_start_s"):
                continue
            what = c.get("what", f"fio libaio O_DIRECT on the file, {key}")
            nan = float("nan")
            md.append(f"| {what} | {fmt(c['iops'])} | {fmt(c.get('mbps', nan))} | "
                      f"{fmt(c.get('p50', nan))} | {fmt(c.get('p99', nan))} | "
                      f"{fmt(c.get('p999', nan))} | {fmt(c.get('dev_rps', nan))} | "
                      f"{fmt(c.get('dev_queue', nan), 1)} |")
        if "iperf3_mbps" in ceil:
            md.append(f"| iperf3, one TCP stream on loopback | | {ceil['iperf3_mbps']:.0f} "
                      "| | | | | |")
        md.append("")
        if "ceph_start_s" in ceil:
            md += [f"The rbd LUN's throwaway cluster (one mon, one memstore OSD) started in "
                   f"{ceil['ceph_start_s']:.2f} s.", ""]
    g = goals(results, ceil, abuse[2] if abuse else ())
    if g:
        md += ["## Goals", "", "| goal | measured | met |", "| --- | --- | --- |"]
        md += [f"| {goal} | {measured} | {'yes' if met else 'no'} |"
               for goal, measured, met, _ in g]
        md.append("")
        missed = [(goal, cell) for goal, _, met, cell in g if not met and cell]
        if missed and any(r[3] for r in results.values()):
            md += ["## Profiles of the goals missed", "",
                   "Each cell run once more under `perf record -a -g -e cpu-clock`: the machine's "
                   "time by thread (`swapper` is idle; `reactor-N` are the target's reactors, "
                   "`iou-wrk` io_uring's workers), then the target's hottest functions (share "
                   "of the target's samples).", ""]
            for goal, (kind, key, name) in missed:
                prof = results[kind][3].get((key, name))
                if prof:
                    md += [f"### {goal}", "", "```", *prof[0], "", *prof[1], "```", ""]
    for kind, (names, cells, extra, _) in results.items():
        md += [f"## {kind} LUN", "", table(kind, names, cells), ""]
        if extra:
            md += ["One session against two on this LUN, the same queue depth in total (QD32; "
                   "QD16 each for two), and how busy the target's busiest thread was:", "",
                   "| workload | sessions | IOPS | CPU µs/IO | busiest thread |",
                   "| --- | ---: | ---: | ---: | ---: |"]
            md += [f"| {label} | {n} | {fmt(v[0])} | {v[1]:.2f} | {v[2]:.0%} |"
                   for (label, n), v in extra.items()]
            md.append("")
        for svg in plot(kind, names, cells, outdir):
            rel = os.path.relpath(svg, os.path.dirname(os.path.abspath(args.out)))
            md += [f"![{os.path.basename(svg)}]({rel})", ""]
    if abuse:
        md += ["## Under abuse", "", abuse_table(*abuse), ""]
    notes = kept_notes(args.out)
    with open(args.out, "w") as f:
        f.write("\n".join(md) + notes)
    return g


# What follows this line in the report is written by hand (the reading of the figures, what bounds
# each) and kept when the figures above it are rewritten.
NOTES_MARKER = "<!-- Written by hand below this line; tests/bench/suite.py keeps it. -->"


def kept_notes(path):
    """The hand-written end of the report at path, marker included, or "" when it has none."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return ""
    at = text.find(NOTES_MARKER)
    return "" if at < 0 else "\n" + text[at:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=5, help="per cell")
    ap.add_argument("--repeats", type=int, default=3, help="runs per cell; figures are medians")
    ap.add_argument("--rbd-repeats", type=int, default=5, help="runs per rbd cell")
    ap.add_argument("--out", default=os.path.join(harness.REPO, "docs", "performance.md"))
    ap.add_argument("--only", default="null,ram,file,rbd,abuse",
                    help="comma-separated LUN kinds (null, ram, file, rbd) and abuse")
    ap.add_argument("--no-ceilings", action="store_true")
    ap.add_argument("--allow-idle-states", action="store_true",
                    help="do not hold /dev/cpu_dma_latency at 0 (idle cores may halt)")
    ap.add_argument("--no-profile", dest="profile", action="store_false",
                    help="skip the perf profiles of the goal cells")
    args = ap.parse_args()
    kinds = [k for k in args.only.split(",") if k]
    for k in kinds:
        if k not in ("null", "ram", "file", "rbd", "abuse"):
            ap.error(f"unknown LUN kind {k}")
    if not os.path.exists(harness.binary("iscsi_load")):
        sys.exit(f"{harness.binary('iscsi_load')} is missing: run scripts/bench.sh")

    started, t0 = datetime.datetime.utcnow(), time.monotonic()

    def log(msg):
        print(f"[{time.monotonic() - t0:6.0f}s] {msg}", flush=True)

    # Held open for the whole run: the kernel honours the request while the descriptor is open.
    latency_pin = None
    if not args.allow_idle_states:
        try:
            latency_pin = open("/dev/cpu_dma_latency", "wb", buffering=0)
            latency_pin.write(struct.pack("i", 0))
        except OSError as e:  # a container without the device, or not root
            log(f"/dev/cpu_dma_latency: {e}; idle cores may halt")
            latency_pin = None
    args.idle_note = ("idle cores poll (/dev/cpu_dma_latency held at 0)" if latency_pin
                      else "idle cores may halt")

    ceil = {} if args.no_ceilings else ceilings(args, log)
    results = {k: run_kind(k, args, log, ceil) for k in kinds if k != "abuse"}
    abuse = run_abuse(args, log) if "abuse" in kinds else None
    g = report(args, results, ceil, started, time.monotonic() - t0, abuse)
    print(f"wrote {args.out}")
    for goal, measured, met, _ in g:
        print(f"{'met ' if met else 'MISS'} {goal}: {measured}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
