"""Crash consistency on an rbd LUN: the scenario of iscsigw_test/crash_consistency.py
(four pipelined writers mixing WRITE, WRITE FUA and SYNCHRONIZE CACHE, kill -9 of iscsigwd
mid-run, a restart on the same state dir, every block read back) with LUN 0 on an RBD image of the
module's throwaway cluster.

Stronger here than on a file LUN: librbd's write-back cache lives in the gateway's memory, so a
write it acknowledged and did not yet send is lost with the process. The check therefore proves
that FUA and WCE=0 writes and SYNCHRONIZE CACHE are answered only after librbd flushed them to the
OSD. The restart also has to take the image's exclusive lock over from the killed instance. What
the daemon serves after the restart is compared with `rbd export` of the image.
"""
import os
import unittest

from iscsigw_test.ceph_cluster import TestCluster
from iscsigw_test.crash_consistency import BLOCK, LUN_BYTES, CrashScenario

CLUSTER = TestCluster()


def setUpModule():
    CLUSTER.start(prefix="iscsigw-rbd-crash-")


def tearDownModule():
    CLUSTER.stop()


class RbdCrashConsistencyTest(CrashScenario, unittest.TestCase):
    """An rbd LUN on an image made with the rbd CLI."""

    def lun_spec(self, state_dir):
        image = f"crash-{os.path.basename(state_dir)}"
        CLUSTER.rbd("create", f"rbd/{image}", "--size", f"{LUN_BYTES >> 20}M")
        return {"rbd": {"pool": "rbd", "image": image, "conf": CLUSTER.conf}}

    def backing_reader(self, state_dir, spec):
        image = CLUSTER.export(spec["rbd"]["image"])
        self.assertEqual(len(image), LUN_BYTES)
        return lambda first, blocks: image[first * BLOCK:(first + blocks) * BLOCK]


if __name__ == "__main__":
    unittest.main()
