"""rbd LUNs end to end: iscsigwd serving a Ceph RBD image of a throwaway cluster
(scripts/ceph-test-cluster.sh, started once for this module in a temp dir and stopped after).

- `iscsigwctl lun create --backing rbd --create --size` makes the image; WRITE (with FUA), READ,
  SYNCHRONIZE CACHE, UNMAP, COMPARE AND WRITE (one block: on the cluster; eight: in the gateway,
  with MISCOMPARE and its offset) and an online resize through ResizeLun, checked with libiscsi's
  tools and, for the data, with `rbd export`; the store's latency and errors show in /metrics.
- `lun delete` and `target delete` remove an image the gateway created (and only such an image),
  unless --keep-backing; an image another client has open is kept and the answer says why.
- A cluster that is not there: CreateLun fails within 20 s naming the cluster; a missing image or
  pool names it; no keyring content reaches the log or the API.
- The OSD stopped (SIGSTOP) for a few seconds while commands run: they wait and then complete,
  the reactor keeps serving another LUN meanwhile, and the daemon serves the rbd LUN afterwards.
- A write that librbd's cache answered and whose OSD op then timed out: the flush or FUA write
  that takes its error answers WRITE ERROR, never NOT READY retried into GOOD.
- The gateway's lock broken by another client (its client blocklisted): NOT READY, MANUAL
  INTERVENTION REQUIRED, the reason in the API, and service again once the LUN is created again.
"""
import json
import os
import re
import select
import signal
import socket
import struct
import sys
import threading
import time
import unittest
import urllib.request

import rados
import rbd as rbdlib

from iscsigw_test import harness
from iscsigw_test.ceph_cluster import TestCluster, stop_process, threads_stopped
from iscsigw_test.iscsi_client import Initiator, sense_key_asc

TARGET = harness.IQN_PREFIX + "rbd"
CLUSTER = TestCluster()
CONF = None


def setUpModule():
    global CONF
    CONF = CLUSTER.start(prefix="iscsigw-rbd-lun-").conf
    # Every conf and keyring the tests below name through the API, as the operator's flags
    # (docs/security.md: an API call names only those the daemon was started with).
    confs = [CONF] + [os.path.join(CLUSTER.dir, n + ".conf") for n in (
        "plain", "theirs", "throttled", "inline", "dashes", "slow-dead", "dead", "optimeout")]
    # (nopool: allowed, and missing from the cluster, for the error that says so.)
    args = ["--reactors", "1", "--rbd-keyring", os.path.join(CLUSTER.dir, "client.gw.keyring"),
            "--rbd-allow", "nopool"]
    for conf in confs:
        args += ["--rbd-conf", conf]
    RbdLunTest.EXTRA_ARGS = tuple(args)


def tearDownModule():
    CLUSTER.stop()


rbd = CLUSTER.rbd
export = CLUSTER.export


def pattern(n, seed):
    return bytes((seed + i * 31 + (i >> 9)) & 0xFF for i in range(n))


class RbdLunTest(harness.DaemonTestCase):
    STATE = harness.simple_state("rbd", luns=[
        {"id": 0, "ram": {}, "sizeBytes": str(8 << 20), "blockSize": 512}])
    # One reactor: a reactor blocked on the cluster would stall every session. (EXTRA_ARGS: set
    # by setUpModule, once the cluster's directory is known.)

    def create_lun(self, lun_id, image, size="64M", *extra, check=True):
        return self.daemon.ctl("lun", "create", TARGET, lun_id, "--backing", "rbd", "--pool", "rbd",
                               "--image", image, "--ceph-conf", CONF, *extra, check=check)

    def login(self):
        ini = Initiator(self.daemon.portal, harness.INITIATOR, timeout=60)
        ini.login(TARGET)
        self.addCleanup(ini.close)
        return ini

    def command(self, ini, lun, cdb, read_len=0, data=b""):
        """A command, retried once past a unit attention (a new LUN, a new capacity)."""
        for _ in range(3):
            status, buf, sense = ini._command(lun, cdb, read_len=read_len, data=data)
            if status == 2 and sense_key_asc(sense)[0] == 0x6:
                continue
            return status, buf, sense
        return status, buf, sense

    def test_io_compare_and_write_unmap_resize(self):
        out = self.create_lun(1, "vol1", "64M", "--create", "--size", "64M").stdout
        self.assertIn("rbd:rbd/vol1", out)
        self.assertIn("64 MiB", rbd("info", "rbd/vol1").stdout)
        url = self.daemon.url(TARGET, 1)
        inq = harness.run(["iscsi-inq", url]).stdout
        self.assertIn("iscsigw", inq.lower())
        cap = harness.run(["iscsi-readcapacity16", url]).stdout
        self.assertRegex(cap, r"LBPME:1 LBPRZ:1")  # thin provisioned, unmapped blocks read zeros
        self.assertRegex(cap, r"RETURNED LOGICAL BLOCK ADDRESS:131071\b")

        ini = self.login()
        # WRITE(10) with FUA, then plain WRITE(10)s, READ(10) back.
        first = pattern(64 * 512, 1)
        cdb = struct.pack(">BBIBHB", 0x2A, 0x08, 0, 0, 64, 0)
        status, _, sense = self.command(ini, 1, cdb, data=first)
        self.assertEqual(status, 0, sense.hex())
        second = pattern(32 * 512, 2)
        status, _, sense = self.command(ini, 1, struct.pack(">BBIBHB", 0x2A, 0, 10000, 0, 32, 0),
                                        data=second)
        self.assertEqual(status, 0, sense.hex())
        status, data, _ = self.command(ini, 1, struct.pack(">BBIBHB", 0x28, 0, 0, 0, 64, 0),
                                       read_len=64 * 512)
        self.assertEqual(status, 0)
        self.assertEqual(data, first)
        # SYNCHRONIZE CACHE(10).
        status, _, sense = self.command(ini, 1, struct.pack(">BBIBHB", 0x35, 0, 0, 0, 0, 0))
        self.assertEqual(status, 0, sense.hex())

        # COMPARE AND WRITE of one 512-byte block (librbd compares on the cluster) and of eight
        # (the gateway): a match writes, a mismatch is MISCOMPARE with the offset in INFORMATION.
        for lba, blocks in ((0, 1), (8, 8)):
            n = blocks * 512
            new = pattern(n, 50 + blocks)
            caw = struct.pack(">BBQ3xBBB", 0x89, 0, lba, blocks, 0, 0)
            status, _, sense = self.command(ini, 1, caw, data=first[lba * 512:lba * 512 + n] + new)
            self.assertEqual(status, 0, f"{blocks} blocks: {sense.hex()}")
            wrong = bytearray(new)
            wrong[n // 2 + 5] ^= 0xFF
            status, _, sense = self.command(ini, 1, caw, data=bytes(wrong) + pattern(n, 9))
            self.assertEqual(status, 2)
            self.assertEqual(sense_key_asc(sense)[:2], (0xE, 0x1D), sense.hex())
            # Fixed or descriptor format: the INFORMATION field holds the offset.
            info = struct.unpack(">I", sense[2 + 3:2 + 7])[0] if sense[2] & 0x7F == 0x70 else None
            if info is not None:
                self.assertEqual(info, n // 2 + 5)
            first = first[:lba * 512] + new + first[lba * 512 + n:]

        # UNMAP of blocks 16..23 (partial object: zeroed).
        params = struct.pack(">HH4xQI4x", 22, 16, 16, 8)
        status, _, sense = self.command(ini, 1, struct.pack(">BBxxxxBHB", 0x42, 0, 0, 24, 0),
                                        data=params)
        self.assertEqual(status, 0, sense.hex())
        status, _, sense = self.command(ini, 1, struct.pack(">BBIBHB", 0x35, 0, 0, 0, 0, 0))
        self.assertEqual(status, 0)

        image = export("vol1")
        self.assertEqual(len(image), 64 << 20)
        expect = first[:16 * 512] + bytes(8 * 512) + first[24 * 512:]
        self.assertEqual(image[:64 * 512], expect)
        self.assertEqual(image[10000 * 512:10032 * 512], second)

        # Online resize through ResizeLun: the image grows, READ CAPACITY follows.
        self.daemon.ctl("lun", "resize", TARGET, 1, "96M")
        self.assertIn("96 MiB", rbd("info", "rbd/vol1").stdout)
        cap = harness.run(["iscsi-readcapacity16", url]).stdout
        self.assertRegex(cap, r"RETURNED LOGICAL BLOCK ADDRESS:196607\b")
        lun = self.daemon.ctl_json("lun", "get", TARGET, 1)
        self.assertEqual(int(lun["size_bytes"]), 96 << 20, lun)
        self.assertEqual(lun["rbd"], {"pool": "rbd", "image": "vol1", "namespace": "", "conf": CONF,
                                      "client_id": "", "keyring": "", "create": True,
                                      "created": True}, lun)

        # The store's calls are timed under their operation, compare_and_write included.
        with urllib.request.urlopen(f"http://{self.daemon.ports['metrics']}/metrics") as r:
            metrics = r.read().decode()
        for op in ("read", "write", "flush", "unmap", "compare_and_write"):
            pat = r'iscsigw_store_io_duration_seconds_count\{lun="1",op="%s",target="%s"\} [1-9]'
            self.assertIsNotNone(re.search(pat % (op, re.escape(TARGET)), metrics), op)
        self.assertIn('iscsigw_store_io_errors_total{lun="1",target="%s"} 0' % TARGET, metrics)

    def test_client_options_set_where_the_conf_leaves_cephs_default(self):
        # One LUN per conf, each with a librados handle of its own, asked on an admin socket of
        # its own.
        names = ("rbd_cache_writethrough_until_flush", "objecter_inflight_ops",
                 "objecter_inflight_op_bytes", "rbd_non_blocking_aio", "librados_thread_count",
                 "rbd_cache")
        # One completion thread on a host of fewer than 4 cores, Ceph's 2 elsewhere.
        threads = "1" if len(os.sched_getaffinity(0)) < 4 else "2"
        extras = {
            "plain": "",
            "theirs": "rbd cache writethrough until flush = true\nlibrados thread count = 2\n",
            # A throttle of the conf's: librbd keeps queueing to its own thread.
            "throttled": "objecter_inflight_ops = 2048\n",
            # The conf asks for inline dispatch with a blocking throttle: granted, and warned.
            # (A run of blanks in a key is one '_' to Ceph as to the gateway.)
            "inline": "rbd non blocking aio = false\nobjecter  inflight op_bytes = 209715200\n",
            # Ceph 16 takes no dashes in a conf file's keys: this one is not set, ours is.
            "dashes": "rbd-cache-writethrough-until-flush = true\n",
        }
        seen = {}
        for lun_id, (name, extra) in enumerate(extras.items(), start=11):
            conf = os.path.join(CLUSTER.dir, f"{name}.conf")
            sock = os.path.join(CLUSTER.dir, "run", f"{name}.asok")
            with open(CONF) as src, open(conf, "w") as dst:
                dst.write(src.read() + f"\n[client]\nadmin socket = {sock}\n" + extra)
            self.daemon.ctl("lun", "create", TARGET, lun_id, "--backing", "rbd", "--pool", "rbd",
                            "--image", "opts-" + name, "--ceph-conf", conf, "--create", "--size",
                            "8M")
            self.addCleanup(self.daemon.ctl, "lun", "delete", TARGET, lun_id)
            seen[name] = []
            for n in names:
                out = harness.run(["ceph", "--admin-daemon", sock, "config", "get", n]).stdout
                seen[name].append(json.loads(out)[n])
            # I/O works either way: a write, read back (FUA: through the cache to the OSD).
            ini, data = self.login(), pattern(4096, lun_id)
            status, _, sense = self.command(ini, lun_id,
                                            struct.pack(">BBIBHB", 0x2A, 0x08, 0, 0, 8, 0),
                                            data=data)
            self.assertEqual(status, 0, sense.hex())
            status, got, sense = self.command(ini, lun_id,
                                              struct.pack(">BBIBHB", 0x28, 0, 0, 0, 8, 0),
                                              read_len=4096)
            self.assertEqual((status, got), (0, data), sense.hex())
        self.assertEqual(seen, {
            # ours: the cache acknowledges from the first write; no blocking throttle; librbd
            # dispatches on the reactor
            # and librbd's cache on: this gateway alone exports the image (no --gateway-id)
            "plain": ["false", "0", "0", "false", threads, "true"],
            "theirs": ["true", "0", "0", "false", "2", "true"],  # the conf wins
            "throttled": ["false", "2048", "0", "true", threads, "true"],
            "inline": ["false", "0", "209715200", "false", threads, "true"],
            "dashes": ["false", "0", "0", "false", threads, "true"],
        })
        self.assertIn(f"ceph conf {os.path.join(CLUSTER.dir, 'inline.conf')}: rbd_non_blocking_aio "
                      "false with objecter_inflight_op_bytes 209715200", self.daemon.read_log())
        self.assertNotIn("throttled.conf: rbd_non_blocking_aio", self.daemon.read_log())

    def test_delete_removes_only_an_image_the_gateway_created(self):
        def exists(image):
            return rbd("info", "rbd/" + image, check=False).returncode == 0

        made = f"made-{os.getpid()}"
        given = f"given-{os.getpid()}"
        kept = f"kept-{os.getpid()}"
        rbd("create", "rbd/" + given, "--size", "16M")
        self.addCleanup(rbd, "rm", "rbd/" + given, check=False)
        self.addCleanup(rbd, "rm", "rbd/" + kept, check=False)
        self.create_lun(10, made, "16M", "--create", "--size", "16M")
        self.create_lun(11, given, "16M", "--create", "--size", "16M")  # there already
        self.create_lun(12, kept, "16M", "--create", "--size", "16M")
        self.assertTrue(self.daemon.ctl_json("lun", "get", TARGET, 10)["rbd"]["created"])
        self.assertFalse(self.daemon.ctl_json("lun", "get", TARGET, 11)["rbd"]["created"])
        # In use when it goes: the store closes once its commands are done, then the image goes.
        ini = self.login()
        status, _, sense = self.command(ini, 10, struct.pack(">BBIBHB", 0x2A, 0x08, 0, 0, 8, 0),
                                        data=pattern(8 * 512, 3))
        self.assertEqual(status, 0, sense.hex())
        self.assertIn("backing file or image removed", self.daemon.ctl("lun", "delete", TARGET, 10).stdout)
        self.assertFalse(exists(made))
        self.assertNotIn("removed", self.daemon.ctl("lun", "delete", TARGET, 11).stdout)
        self.assertTrue(exists(given))
        self.daemon.ctl("lun", "delete", TARGET, 12, "--keep-backing")
        self.assertTrue(exists(kept))

        # Open by another client: the LUN goes, the image stays, and the answer says why.
        busy = f"busy-{os.getpid()}"
        self.create_lun(13, busy, "16M", "--create", "--size", "16M")
        self.addCleanup(rbd, "rm", "rbd/" + busy, check=False)
        cluster = rados.Rados(conffile=CONF)
        cluster.connect()
        self.addCleanup(cluster.shutdown)
        ioctx = cluster.open_ioctx("rbd")
        self.addCleanup(ioctx.close)
        image = rbdlib.Image(ioctx, busy)  # a watcher
        try:
            p = self.daemon.ctl("lun", "delete", TARGET, 13, check=False)
        finally:
            image.close()
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("FAILED_PRECONDITION", p.stderr.upper().replace(" ", "_"))
        self.assertIn("the LUN is deleted", p.stderr)
        self.assertIn("another client has the image open", p.stderr)
        self.assertTrue(exists(busy))
        self.assertNotIn(TARGET + " 13 ", self.daemon.ctl("lun", "list", TARGET).stdout)

        # DeleteTarget removes the images its LUNs made.
        other = "rbd-gone"
        self.daemon.ctl("target", "create", other)
        made2 = f"made2-{os.getpid()}"
        self.daemon.ctl("lun", "create", other, 0, "--backing", "rbd", "--pool", "rbd",
                        "--image", made2, "--ceph-conf", CONF, "--create", "--size", "8M")
        self.assertTrue(exists(made2))
        out = self.daemon.ctl("target", "delete", other).stdout
        self.assertIn("1 backing file(s) or image(s) removed", out)
        self.assertFalse(exists(made2))

    def test_reads_and_metrics_do_not_wait_for_a_cluster_that_does_not_answer(self):
        # Regression: the data plane opened an rbd image under its configuration lock, so lun
        # get/list and the /metrics scrape waited out a dead cluster's client_mount_timeout.
        dead = os.path.join(CLUSTER.dir, "slow-dead.conf")
        with open(dead, "w") as f:
            f.write("[global]\nmon host = [v2:127.0.0.1:9]\nauth client required = none\n"
                    "client mount timeout = 4\nlog file = /dev/null\n")
        result = {}

        def create():
            result["p"] = self.daemon.ctl("lun", "create", TARGET, 20, "--backing", "rbd",
                                          "--pool", "rbd", "--image", "x", "--ceph-conf", dead,
                                          check=False)

        worker = threading.Thread(target=create)
        worker.start()
        try:
            time.sleep(1)  # the create waits for the dead cluster now
            t0 = time.monotonic()
            self.daemon.ctl("lun", "list", TARGET)
            listed = time.monotonic() - t0
            t0 = time.monotonic()
            with urllib.request.urlopen(f"http://{self.daemon.ports['metrics']}/metrics") as r:
                r.read()
            scraped = time.monotonic() - t0
            still_waiting = worker.is_alive()
        finally:
            worker.join(30)
        self.assertTrue(still_waiting, "the create did not wait for the cluster")
        self.assertLess(listed, 1.5)
        self.assertLess(scraped, 1.5)
        self.assertNotEqual(result["p"].returncode, 0)
        self.assertIn("Ceph cluster of " + dead, result["p"].stderr)

    def test_missing_cluster_image_and_pool(self):
        keyring = os.path.join(CLUSTER.dir, "client.gw.keyring")
        secret = "AQBzZXNzaW9ubm90YXJlYWxrZXlhdGFsbA=="
        with open(keyring, "w") as f:
            f.write(f"[client.gw]\n\tkey = {secret}\n")
        dead = os.path.join(CLUSTER.dir, "dead.conf")
        with open(dead, "w") as f:
            f.write("[global]\nmon host = [v2:127.0.0.1:9]\nauth client required = none\n"
                    "log file = /dev/null\n")
        t0 = time.monotonic()
        p = self.daemon.ctl("lun", "create", TARGET, 5, "--backing", "rbd", "--pool", "rbd",
                            "--image", "x", "--ceph-conf", dead, "--keyring", keyring,
                            "--create", "--size", "8M", check=False)
        took = time.monotonic() - t0
        self.assertNotEqual(p.returncode, 0)
        # The store's own mount timeout (15 s, rbd_store.cc) and not Ceph's 300 s default.
        self.assertLess(took, 60)
        self.assertIn("Ceph cluster of " + dead, p.stderr)
        self.assertIn("127.0.0.1:9", p.stderr)
        self.assertIn("UNAVAILABLE", p.stderr.upper())

        p = self.create_lun(6, "no-such-image", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("image no-such-image does not exist in pool rbd", p.stderr)
        p = self.daemon.ctl("lun", "create", TARGET, 7, "--backing", "rbd", "--pool", "nopool",
                            "--image", "x", "--ceph-conf", CONF, check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("pool nopool does not exist", p.stderr)
        p = self.daemon.ctl("lun", "create", TARGET, 7, "--backing", "rbd", "--pool", "rbd",
                            check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--pool and --image", p.stderr)
        # None of it left a LUN behind, and no key reached the log or the API.
        luns = self.daemon.ctl("lun", "list", TARGET).stdout
        for lun_id in (" 5 ", " 6 ", " 7 "):
            self.assertNotIn(TARGET + lun_id, luns)
        self.assertNotIn(secret, self.daemon.read_log())

    def test_osd_stopped_while_io_runs(self):
        self.create_lun(2, "vol2", "16M", "--create", "--size", "16M")
        ini = self.login()
        data = pattern(16 * 512, 7)
        status, _, _ = self.command(ini, 2, struct.pack(">BBIBHB", 0x2A, 0, 0, 0, 16, 0), data=data)
        self.assertEqual(status, 0)
        other = self.login()  # a ram LUN on the same (only) reactor

        pid = CLUSTER.osd_pid()
        stop_process(pid)
        try:
            # Commands to the rbd LUN wait for the OSD (FUA: librbd's cache may acknowledge a
            # plain write at once, as the caching mode page's WCE=1 allows)...
            itts = [ini.send_command(2, struct.pack(">BBIBHB", 0x2A, 8, 100 + i * 16, 0, 16, 0),
                                     data=pattern(16 * 512, 20 + i)) for i in range(4)]
            itts.append(ini.send_command(2, struct.pack(">BBIBHB", 0x28, 0, 0, 0, 16, 0),
                                         read_len=16 * 512))
            # ...while the reactor keeps serving the ram LUN.
            for _ in range(20):
                t0 = time.monotonic()
                status, _, _ = self.command(other, 0, struct.pack(">BBIBHB", 0x2A, 0, 0, 0, 1, 0),
                                            data=pattern(512, 1))
                self.assertEqual(status, 0)
                self.assertLess(time.monotonic() - t0, 1.0)
            time.sleep(3)  # the OSD stays stopped a few seconds
            # Nothing answered yet: a FUA write and a read that missed the cache need the OSD.
            early = b""
            if select.select([ini.sock], [], [], 0)[0]:
                early = ini.sock.recv(48, socket.MSG_PEEK)
            stopped = threads_stopped(pid)
        finally:
            os.kill(pid, signal.SIGCONT)
        self.assertTrue(stopped, "the OSD did not stay stopped")
        self.assertFalse(len(early) == 48 and early[0] & 0x3F in (0x21, 0x25),
                         f"a command was answered while the OSD was stopped: {early.hex()}")
        answers = {}
        for _ in itts:
            itt, status, buf, sense = ini.recv_response()
            answers[itt] = (status, buf, sense)
        for itt in itts[:-1]:
            self.assertEqual(answers[itt][0], 0, answers[itt][2].hex())
        self.assertEqual(answers[itts[-1]][0], 0)
        self.assertEqual(answers[itts[-1]][1], data)
        # They did wait for the OSD: the store's write time holds the seconds it was stopped.
        with urllib.request.urlopen(f"http://{self.daemon.ports['metrics']}/metrics") as r:
            metrics = r.read().decode()
        m = re.search(r'iscsigw_store_io_duration_seconds_sum\{lun="2",op="write",target="%s"\} '
                      r'(\S+)' % re.escape(TARGET), metrics)
        self.assertIsNotNone(m)
        self.assertGreater(float(m.group(1)), 4 * 2.5,
                           "\n".join(line for line in metrics.splitlines()
                                     if 'lun="2"' in line and "store" in line))
        # Served again afterwards, and the daemon is up.
        status, back, _ = ini.read(2, 100, 16)
        self.assertEqual(status, 0)
        self.assertEqual(back, pattern(16 * 512, 20))
        self.assertIsNone(self.daemon.proc.poll())


    def test_a_write_an_osd_op_timeout_lost_is_reported_never_retried_into_good(self):
        # librbd's cache, on for an image one gateway alone exports, answers a plain write before
        # the OSD has it (WCE=1 allows that) and hands the error of a write whose OSD op timed
        # out (rados_osd_op_timeout) to the next flush that ends, once. A flush or FUA write
        # answered NOT READY, BECOMING READY for it would be retried by the initiator (Linux
        # retries that sense) and end GOOD, the write gone: the flush that takes the error must
        # answer it as a write error.
        conf = os.path.join(CLUSTER.dir, "optimeout.conf")
        with open(CONF) as src, open(conf, "w") as dst:
            dst.write(src.read() + "\n[client]\nrados osd op timeout = 3\n")
        lun = 30
        self.daemon.ctl("lun", "create", TARGET, lun, "--backing", "rbd", "--pool", "rbd",
                        "--image", "optimeout", "--ceph-conf", conf, "--create", "--size", "16M")
        self.addCleanup(self.daemon.ctl, "lun", "delete", TARGET, lun)
        ini = self.login()
        write_error, not_ready, good = (2, (3, 0x0C, 0)), (2, (2, 4, 1)), (0, None)
        # A first write takes the image's exclusive lock while the OSD answers.
        status, _, sense = self.command(ini, lun, struct.pack(">BBIBHB", 0x2A, 8, 0, 0, 8, 0),
                                        data=pattern(4096, 1))
        self.assertEqual(status, 0, sense.hex())

        def answer(cdb, data=b""):
            status, _, sense = ini._command(lun, cdb, data=data)
            return status, sense_key_asc(sense) if status == 2 else None

        sync = struct.pack(">BBIBHB", 0x35, 0, 0, 0, 0, 0)
        fua_write = struct.pack(">BBIBHB", 0x2A, 8, 512, 0, 8, 0)
        pid = CLUSTER.osd_pid()
        for name, cdb in (("SYNCHRONIZE CACHE", sync), ("a FUA WRITE", fua_write)):
            stop_process(pid)
            try:
                # Plain writes, answered by the cache while the OSD cannot take them...
                for i in range(8):
                    status, _, sense = ini._command(
                        lun, struct.pack(">BBIBHB", 0x2A, 0, 64 + i * 8, 0, 8, 0),
                        data=pattern(4096, 40 + i))
                    self.assertEqual(status, 0, sense.hex())
                # ...then the command that flushes them, which waits out the op timeout.
                t0 = time.monotonic()
                answers = [answer(cdb, data=pattern(4096, 90) if cdb is fua_write else b"")]
                waited = time.monotonic() - t0
                self.assertTrue(threads_stopped(pid), "the OSD did not stay stopped")
            finally:
                os.kill(pid, signal.SIGCONT)
            self.assertGreater(waited, 2.5, f"{name} did not wait for the OSD")
            # As an initiator would: again while NOT READY (the OSD answers now), then a flush.
            while answers[-1] == not_ready and len(answers) < 5:
                answers.append(answer(cdb, data=pattern(4096, 90) if cdb is fua_write else b""))
            answers.append(answer(sync))
            # The lost writes are reported before any flush ends GOOD: by the command that took
            # the error, and (a FUA write having failed too) by the next flush; then it is spent.
            want = [write_error, good] if cdb is sync else [write_error, write_error]
            self.assertEqual(answers, want, f"{name}: answers {answers}")
            self.assertEqual(answer(sync), good)
        # Served as before: a write and its read back.
        status, _, sense = self.command(ini, lun, struct.pack(">BBIBHB", 0x2A, 8, 1024, 0, 8, 0),
                                        data=pattern(4096, 7))
        self.assertEqual(status, 0, sense.hex())
        status, back, sense = ini.read(lun, 1024, 8)
        self.assertEqual((status, back), (0, pattern(4096, 7)), sense.hex())


def daemon_on_new_image(test, name, extra_args):
    """A new 16 MiB image "<name>-<pid>" (removed after the test) and a daemon serving it as LUN 0
    of target rbd-<name>."""
    image = f"{name}-{os.getpid()}"
    rbd("create", "rbd/" + image, "--size", "16M")
    test.addCleanup(rbd, "rm", "rbd/" + image, check=False)
    state = harness.simple_state("rbd-" + name, luns=[
        {"id": 0, "rbd": {"pool": "rbd", "image": image, "conf": CONF}, "blockSize": 512}])
    daemon = harness.Daemon(state=state, extra_args=extra_args).start(timeout=60)
    test.addCleanup(daemon.cleanup)
    return image, daemon


class RbdShutdownTest(unittest.TestCase):
    def test_a_stop_that_the_cluster_does_not_answer_is_bounded(self):
        # The OSD stopped: the shutdown flush and closing the image (releasing its exclusive
        # lock) wait for it. The daemon gives up after --shutdown-timeout and exits non-zero
        # saying what it waited for.
        image, daemon = daemon_on_new_image(self, "stop", ["--shutdown-timeout", "3"])
        ini = Initiator(daemon.portal, harness.INITIATOR, timeout=60)
        ini.login(harness.IQN_PREFIX + "rbd-stop")
        self.addCleanup(ini.close)
        ini.test_unit_ready(0)  # the power-on unit attention
        self.assertEqual(ini.write(0, 0, pattern(4096, 5)), (0, b""))  # takes the lock
        pid = CLUSTER.osd_pid()
        stop_process(pid)
        try:
            t0 = time.monotonic()
            rc = daemon.stop(timeout=60)
            took = time.monotonic() - t0
        finally:
            os.kill(pid, signal.SIGCONT)
        log = daemon.read_log()
        self.assertEqual(rc, 3, log[-2000:])
        self.assertLess(took, 30)  # the bound, not rados_osd_op_timeout or forever
        # Blocked on the shutdown flush (the write went to the stopped OSD) or the close.
        self.assertRegex(log, r"shutdown did not finish within 3 s .*still waiting for "
                         rf"(the flush of lun 0 of \S+rbd-stop|closing rbd image rbd/{image})")


class RbdLunOfflineAtStartTest(unittest.TestCase):
    """An rbd LUN that cannot open at start (its cluster down, its image missing) does not stop
    the daemon or the other LUNs: it answers NOT READY, BECOMING READY and comes online by itself
    once its image can be opened."""

    def test_unreachable_luns_start_offline_and_come_online(self):
        image = f"late-{os.getpid()}"
        dead = os.path.join(CLUSTER.dir, "dead-at-start.conf")
        with open(dead, "w") as f:
            f.write("[global]\nmon host = [v2:127.0.0.1:9]\nauth client required = none\n"
                    "client mount timeout = 2\nlog file = /dev/null\n")
        state = harness.simple_state("rbd-offline", luns=[
            {"id": 0, "ram": {}, "sizeBytes": str(8 << 20), "blockSize": 512},
            {"id": 1, "rbd": {"pool": "rbd", "image": image, "conf": CONF},
             "sizeBytes": str(8 << 20), "blockSize": 512},
            {"id": 2, "rbd": {"pool": "rbd", "image": "x", "conf": dead},
             "sizeBytes": str(8 << 20), "blockSize": 512}])
        daemon = harness.Daemon(state=state, extra_args=["--reactors", "1"]).start(timeout=60)
        self.addCleanup(daemon.cleanup)
        self.addCleanup(daemon.stop)
        ini = Initiator(daemon.portal, harness.INITIATOR, timeout=60)
        ini.login(harness.IQN_PREFIX + "rbd-offline")
        self.addCleanup(ini.close)

        def command(lun, cdb, read_len=0):
            for _ in range(3):  # past the unit attentions of a new session
                status, data, sense = ini._command(lun, cdb, read_len=read_len)
                if status == 2 and sense_key_asc(sense)[0] == 0x6:
                    continue
                return status, data, sense
            return status, data, sense

        def read(lun):
            return command(lun, struct.pack(">BBIBHB", 0x28, 0, 0, 0, 8, 0), read_len=8 * 512)

        def test_unit_ready(lun):
            return command(lun, bytes(6))

        # TEST UNIT READY first: it touches no block, yet must not answer GOOD for a LUN that
        # cannot serve I/O (SPC-4 6.47).
        for lun in (1, 2):
            status, _, sense = test_unit_ready(lun)
            self.assertEqual(status, 2, f"TEST UNIT READY of offline lun {lun}")
            self.assertEqual(sense_key_asc(sense), (0x2, 0x04, 0x01), sense.hex())
        status, _, sense = test_unit_ready(0)
        self.assertEqual(status, 0, sense.hex())
        status, _, sense = read(0)
        self.assertEqual(status, 0, sense.hex())
        for lun in (1, 2):
            status, _, sense = read(lun)
            self.assertEqual(status, 2)
            # SPC-4 table 52: NOT READY, LOGICAL UNIT IS IN PROCESS OF BECOMING READY.
            self.assertEqual(sense_key_asc(sense), (0x2, 0x04, 0x01), sense.hex())
            # Its capacity is not known either: no made-up size for the initiator to take.
            status, _, sense = command(lun, bytes([0x25] + [0] * 9), read_len=8)
            self.assertEqual((status, sense_key_asc(sense)), (2, (0x2, 0x04, 0x01)), sense.hex())
        status, _, sense = command(1, bytes([0x12, 0, 0, 0, 96, 0]), read_len=96)
        self.assertEqual(status, 0, "INQUIRY is served while the LUN is offline")
        log = daemon.read_log()
        self.assertRegex(log, r"warn.*rbd/" + image + r": offline.*does not exist")
        self.assertRegex(log, r"warn.*lun 2 of .*rbd-offline: .*127\.0\.0\.1:9")
        # The API says which LUNs are offline and why (lun get/list, GetTarget).
        luns = {l["id"]: l for l in daemon.ctl_json("lun", "list", "rbd-offline")["luns"]}
        self.assertEqual(luns[0]["offline_reason"], "")
        self.assertRegex(luns[1]["offline_reason"], image + ".*does not exist")
        self.assertRegex(luns[2]["offline_reason"], r"127\.0\.0\.1:9")
        table = daemon.ctl("lun", "get", "rbd-offline", 2).stdout
        self.assertRegex(table, r"\boffline\b")
        self.assertRegex(table, r"lun 2 offline: .*127\.0\.0\.1:9")
        target = daemon.ctl_json("target", "get", "rbd-offline")
        self.assertRegex(target["luns"][1]["offline_reason"], "does not exist")

        rbd("create", "rbd/" + image, "--size", "8M")
        self.addCleanup(rbd, "rm", "rbd/" + image, check=False)
        t0 = time.monotonic()
        status, data, _ = harness.wait_for(lambda: (lambda r: r if r[0] == 0 else None)(read(1)),
                                           timeout=60, interval=0.2, what="lun 1 online")
        print(f"lun 1 online {time.monotonic() - t0:.1f} s after its image was created",
              file=sys.stderr)
        self.assertEqual(data, bytes(8 * 512))
        status, _, sense = test_unit_ready(1)
        self.assertEqual(status, 0, sense.hex())
        self.assertEqual(daemon.ctl_json("lun", "get", "rbd-offline", 1)["offline_reason"], "")
        self.assertIn("online", daemon.ctl("lun", "get", "rbd-offline", 1).stdout)
        status, _, sense = read(2)
        self.assertEqual(sense_key_asc(sense), (0x2, 0x04, 0x01))
        status, _, sense = test_unit_ready(2)
        self.assertEqual((status, sense_key_asc(sense)), (2, (0x2, 0x04, 0x01)), sense.hex())
        self.assertIsNone(daemon.proc.poll())


class RbdLunFencedTest(unittest.TestCase):
    """Another client breaks the gateway's exclusive lock, which makes the cluster blocklist the
    gateway's client: its LUNs answer NOT READY, MANUAL INTERVENTION REQUIRED (not MEDIUM ERROR,
    not a hang), the API says why, and a LUN created again gets a client of its own and serves."""

    def test_blocklisted_gateway_answers_not_ready_until_the_lun_is_recreated(self):
        images = [f"fence-{os.getpid()}-{i}" for i in (0, 1)]
        for image in images:
            rbd("create", "rbd/" + image, "--size", "8M")
            self.addCleanup(rbd, "rm", "rbd/" + image, check=False)
        state = harness.simple_state("rbd-fence", luns=[
            {"id": i, "rbd": {"pool": "rbd", "image": image, "conf": CONF}, "blockSize": 512}
            for i, image in enumerate(images)])
        daemon = harness.Daemon(state=state, extra_args=["--reactors", "1"]).start(timeout=60)
        self.addCleanup(daemon.cleanup)
        self.addCleanup(daemon.stop)
        target = harness.IQN_PREFIX + "rbd-fence"
        ini = Initiator(daemon.portal, harness.INITIATOR, timeout=60)
        ini.login(target)
        self.addCleanup(ini.close)

        def command(lun, cdb, read_len=0, data=b""):
            for _ in range(4):  # past unit attentions (a new session, a new LUN)
                status, buf, sense = ini._command(lun, cdb, read_len=read_len, data=data)
                if status == 2 and sense_key_asc(sense)[0] == 0x6:
                    continue
                return status, buf, sense
            return status, buf, sense

        def write_fua(lun, lba, seed):
            return command(lun, struct.pack(">BBIBHB", 0x2A, 0x08, lba, 0, 8, 0),
                           data=pattern(8 * 512, seed))

        for lun in (0, 1):
            status, _, sense = write_fua(lun, 0, lun)  # takes the image's exclusive lock
            self.assertEqual(status, 0, sense.hex())
        # Ceph 16: [{"id": cookie, "locker": "client.N", "address": ...}]
        locks = json.loads(rbd("lock", "ls", "--format", "json", "rbd/" + images[0]).stdout)
        self.assertIsInstance(locks, list, locks)
        self.assertEqual(len(locks), 1, locks)
        # Breaking the lock blocklists its owner, this gateway's client.
        rbd("lock", "rm", "rbd/" + images[0], locks[0]["id"], locks[0]["locker"])

        t0 = time.monotonic()
        status, _, sense = write_fua(0, 8, 9)
        took = time.monotonic() - t0
        self.assertEqual(status, 2, "a write of a blocklisted gateway answered GOOD")
        # SPC-4 table 52: NOT READY, LOGICAL UNIT NOT READY, MANUAL INTERVENTION REQUIRED.
        self.assertEqual(sense_key_asc(sense), (0x2, 0x04, 0x03), sense.hex())
        self.assertLess(took, 20)
        # The client is fenced, so every LUN it serves is; TEST UNIT READY says so too.
        for lun in (0, 1):
            status, _, sense = command(lun, bytes(6))
            self.assertEqual((status, sense_key_asc(sense)), (2, (0x2, 0x04, 0x03)), sense.hex())
        luns = {l["id"]: l for l in daemon.ctl_json("lun", "list", "rbd-fence")["luns"]}
        for lun in (0, 1):
            self.assertRegex(luns[lun]["offline_reason"], "blocklisted")
        self.assertRegex(daemon.read_log(), r"error.*rbd/" + images[0] + ".*blocklisted")
        self.assertEqual(export(images[0])[:8 * 512], pattern(8 * 512, 0))

        # Created again, the LUN has a client of its own: it takes the lock back and serves.
        daemon.ctl("lun", "delete", "rbd-fence", 0)
        daemon.ctl("lun", "create", "rbd-fence", 0, "--backing", "rbd", "--pool", "rbd",
                   "--image", images[0], "--ceph-conf", CONF)
        status, _, sense = write_fua(0, 8, 9)
        self.assertEqual(status, 0, sense.hex())
        self.assertEqual(export(images[0])[8 * 512:16 * 512], pattern(8 * 512, 9))
        status, _, sense = command(1, bytes(6))
        self.assertEqual(sense_key_asc(sense), (0x2, 0x04, 0x03), "lun 1 kept the fenced client")
        self.assertIsNone(daemon.proc.poll())


class RbdLunCrashRestartTest(unittest.TestCase):
    """Regression: after kill -9 of iscsigwd, the restarted daemon's first write to an rbd LUN
    waited ~30 s for the OSDs to time out the dead instance's watch before librbd could take the
    image's exclusive lock."""

    def test_first_write_after_kill_9_does_not_wait_for_the_dead_lock(self):
        image, daemon = daemon_on_new_image(self, "crash", ["--reactors", "1"])
        target = harness.IQN_PREFIX + "rbd-crash"

        def first_write(seed):
            ini = Initiator(daemon.portal, harness.INITIATOR, timeout=90)
            ini.login(target)
            self.addCleanup(ini.close)
            for _ in range(3):  # past the unit attentions of a new session
                t0 = time.monotonic()
                cdb = struct.pack(">BBIBHB", 0x2A, 0x08, seed, 0, 8, 0)  # WRITE(10), FUA
                status, _, sense = ini._command(0, cdb, data=pattern(8 * 512, seed))
                took = time.monotonic() - t0
                if not (status == 2 and sense_key_asc(sense)[0] == 0x6):
                    break
            self.assertEqual(status, 0, sense.hex())
            return took

        first_write(1)  # takes the image's exclusive lock
        self.assertEqual(daemon.stop(signal.SIGKILL), -signal.SIGKILL)
        t0 = time.monotonic()
        daemon.start()
        started = time.monotonic() - t0
        took = first_write(2)
        print(f"after kill -9: restart {started:.2f} s, first write {took:.2f} s", file=sys.stderr)
        self.assertLess(took, 10)
        self.assertRegex(daemon.read_log(), r"broke the exclusive lock of client\.\d+")
        self.assertEqual(export(image)[2 * 512:10 * 512], pattern(8 * 512, 2))


if __name__ == "__main__":
    unittest.main()
