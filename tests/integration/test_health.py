"""grpc.health.v1 follows the state directory: NOT_SERVING while it cannot be written (here a
tmpfs remounted read-only, which stops root too), SERVING again once it can, with the gateway's
own view (GetGatewayInfo) and refused changes in step."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import grpc

from iscsigw_test.harness import Daemon, wait_for

SERVING, NOT_SERVING = 1, 2
UNAVAILABLE = 14


def health(address, service=""):
    """Health/Check's status; the messages are encoded by hand (field 1 in both)."""
    name = service.encode()
    request = (b"\x0a" + bytes([len(name)]) + name) if name else b""
    with grpc.insecure_channel(address) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                    request_serializer=lambda m: m,
                                    response_deserializer=lambda m: m)
        response = check(request, timeout=5)
    return response[1] if response[:1] == b"\x08" and len(response) > 1 else 0


class HealthTest(unittest.TestCase):
    def test_not_serving_while_the_state_directory_cannot_be_written(self):
        mnt = tempfile.mkdtemp(prefix="iscsigw-statefs-")
        self.addCleanup(shutil.rmtree, mnt, True)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", mnt]).returncode:
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
        for service in ["", "iscsigw.v1.GatewayService"]:
            self.assertEqual(health(d.grpc, service), SERVING)
        d.ctl("target", "create", "before")

        subprocess.run(["mount", "-o", "remount,ro", mnt], check=True)
        wait_for(lambda: health(d.grpc) == NOT_SERVING, timeout=20, what="NOT_SERVING")
        self.assertEqual(health(d.grpc, "iscsigw.v1.GatewayService"), NOT_SERVING)
        info = d.ctl_json("gateway", "info")
        self.assertFalse(info["state_dir_healthy"])
        self.assertIn("Read-only file system", info["state_dir_error"])
        refused = d.ctl("target", "create", "during", check=False)
        self.assertEqual(refused.returncode, UNAVAILABLE, refused.stderr)
        # A LUN whose change could not be saved leaves no file behind.
        refused = d.ctl("lun", "create", "before", "0", "--backing", "file", "--path", "l.img",
                        "--create", "--size", "1M", check=False)
        self.assertEqual(refused.returncode, UNAVAILABLE, refused.stderr)
        self.assertEqual(sorted(os.listdir(luns)), ["snapshots"])
        self.assertIn("cannot be written", d.read_log())

        subprocess.run(["mount", "-o", "remount,rw", mnt], check=True)
        wait_for(lambda: health(d.grpc) == SERVING, timeout=20, what="SERVING again")
        self.assertTrue(d.ctl_json("gateway", "info")["state_dir_healthy"])
        d.ctl("target", "create", "after")
        names = [t["name"].split(":")[-1] for t in d.ctl_json("target", "list")["targets"]]
        self.assertEqual(sorted(names), ["after", "before"])
        self.assertFalse(os.path.exists(os.path.join(mnt, ".health-probe")))


if __name__ == "__main__":
    sys.exit(unittest.main())
