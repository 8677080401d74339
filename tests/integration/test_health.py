"""grpc.health.v1 as the probes ask it (docs/operations.md, "Health and probes"):
iscsigw.readiness (and "" and iscsigw.v1.GatewayService) follows the state directory, NOT_SERVING
while it cannot be written (a tmpfs remounted read-only, which stops root too, or filled up) and
SERVING again once it can, with the gateway's own view (GetGatewayInfo), refused changes and
iscsigw_state_dir_writable in step; iscsigw.liveness stays SERVING throughout, and the LUNs go on
serving I/O, to a session from before and to a new login."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from iscsigw_test.harness import IQN_PREFIX, Daemon, wait_for
from iscsigw_test.health import LIVENESS as LIVE, NOT_SERVING, SERVING, health
from iscsigw_test.iscsi_client import Initiator, sense_key_asc

UNAVAILABLE = 14
READY = ["iscsigw.readiness", "", "iscsigw.v1.GatewayService"]


class HealthTest(unittest.TestCase):
    def start(self, size="16m"):
        """A gateway whose state directory is a tmpfs of SIZE, with a file LUN outside it."""
        mnt = tempfile.mkdtemp(prefix="iscsigw-statefs-")
        self.addCleanup(shutil.rmtree, mnt, True)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                           mnt]).returncode:
            self.skipTest("cannot mount a tmpfs here")
        self.addCleanup(subprocess.run, ["umount", "-l", mnt])
        luns = tempfile.mkdtemp(prefix="iscsigw-luns-")
        self.addCleanup(shutil.rmtree, luns, True)
        d = Daemon(state_dir=mnt, extra_args=["--health-interval-ms", "200", "--lun-dir", luns])
        # The log stays writable, and open files for writing would keep the remount from working.
        logs = tempfile.mkdtemp(prefix="iscsigw-log-")
        self.addCleanup(shutil.rmtree, logs, True)
        d.log_path = os.path.join(logs, "iscsigwd.log")
        d.start()
        self.addCleanup(d.cleanup)
        for service in READY + [LIVE]:
            self.assertEqual(health(d.grpc, service), SERVING, service)
        self.assertEqual(d.metric("iscsigw_state_dir_writable"), 1)
        d.ctl("target", "create", "before", "--allow-any-initiator")
        d.ctl("lun", "create", "before", "0", "--backing", "file", "--path", "l0.img", "--create",
              "--size", "1M")
        return d, mnt, luns

    def login(self, d):
        c = Initiator(d.portal, "iqn.2026-12.io.test:health")
        self.addCleanup(c.close)
        c.login(IQN_PREFIX + "before")
        c.test_unit_ready(0)  # the new session's unit attention
        return c

    def assert_io(self, c, fill):
        # A refused LUN change is applied and rolled back: REPORTED LUNS DATA HAS CHANGED, once.
        for _ in range(3):
            status, sense = c.test_unit_ready(0)
            if status == 0:
                break
            self.assertEqual(sense_key_asc(sense)[0], 0x6, sense.hex())
        data = bytes([fill]) * 4096
        status, sense = c.write(0, 8, data)
        self.assertEqual(status, 0, sense.hex())
        status, got, sense = c.read(0, 8, 8)
        self.assertEqual(status, 0, sense.hex())
        self.assertEqual(got, data)

    def assert_unwritable(self, d, luns, reason):
        wait_for(lambda: health(d.grpc, "iscsigw.readiness") == NOT_SERVING, timeout=20,
                 what="readiness NOT_SERVING")
        for service in READY:
            self.assertEqual(health(d.grpc, service), NOT_SERVING, service)
        # A restart would not make the directory writable: the process stays live.
        self.assertEqual(health(d.grpc, LIVE), SERVING)
        self.assertEqual(d.metric("iscsigw_state_dir_writable"), 0)
        info = d.ctl_json("gateway", "info")
        self.assertFalse(info["state_dir_healthy"])
        self.assertIn(reason, info["state_dir_error"])
        refused = d.ctl("target", "create", "during", check=False)
        self.assertEqual(refused.returncode, UNAVAILABLE, refused.stderr)
        # A LUN whose change could not be saved leaves no file behind.
        refused = d.ctl("lun", "create", "before", "1", "--backing", "file", "--path", "l1.img",
                        "--create", "--size", "1M", check=False)
        self.assertEqual(refused.returncode, UNAVAILABLE, refused.stderr)
        self.assertEqual(sorted(os.listdir(luns)), ["l0.img", "snapshots"])
        log = d.read_log()
        self.assertIn("cannot be written", log)
        self.assertEqual(log.count("health: iscsigw.readiness NOT_SERVING"), 1, log[-3000:])
        self.assertIn(reason, log.split("health: iscsigw.readiness NOT_SERVING", 1)[1])

    def assert_writable_again(self, d, mnt):
        wait_for(lambda: health(d.grpc, "iscsigw.readiness") == SERVING, timeout=20,
                 what="readiness SERVING again")
        for service in READY + [LIVE]:
            self.assertEqual(health(d.grpc, service), SERVING, service)
        self.assertEqual(d.metric("iscsigw_state_dir_writable"), 1)
        self.assertRegex(d.read_log(), r"(?m)health: iscsigw\.readiness SERVING$")
        self.assertNotIn("health: iscsigw.liveness", d.read_log())
        self.assertTrue(d.ctl_json("gateway", "info")["state_dir_healthy"])
        d.ctl("target", "create", "after")
        names = [t["name"].split(":")[-1] for t in d.ctl_json("target", "list")["targets"]]
        self.assertEqual(sorted(names), ["after", "before"])
        self.assertFalse(os.path.exists(os.path.join(mnt, ".health-probe")))

    def test_not_ready_but_live_while_the_state_directory_is_read_only(self):
        d, mnt, luns = self.start()
        before = self.login(d)
        self.assert_io(before, 0x11)

        subprocess.run(["mount", "-o", "remount,ro", mnt], check=True)
        self.assert_unwritable(d, luns, "Read-only file system")
        self.assert_io(before, 0x22)
        self.assert_io(self.login(d), 0x33)

        subprocess.run(["mount", "-o", "remount,rw", mnt], check=True)
        self.assert_writable_again(d, mnt)
        self.assert_io(before, 0x44)

    def test_not_ready_but_live_while_the_state_directory_is_full(self):
        d, mnt, luns = self.start(size="1m")
        before = self.login(d)
        filler = os.path.join(mnt, "filler")
        with open(filler, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError:
                pass
        self.assert_unwritable(d, luns, "No space left on device")
        self.assert_io(before, 0x55)
        self.assert_io(self.login(d), 0x66)

        os.unlink(filler)
        self.assert_writable_again(d, mnt)


if __name__ == "__main__":
    sys.exit(unittest.main())
