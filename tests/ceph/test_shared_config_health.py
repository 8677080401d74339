"""Readiness follows the shared configuration (docs/operations.md, "Health and probes"): a gateway
with --shared-config whose cluster answers is ready, with iscsigw_shared_config_loaded 1 and the
object's version and last read in the metrics; with the cluster's only OSD stopped (SIGSTOP), its
watch goes unconfirmed and readiness turns NOT_SERVING within StateStore::kWatchStaleAfter (30 s)
and a few probes, while liveness stays SERVING and the local RAM target serves I/O; with the OSD
back, it is ready again and the last read moves on."""
import os
import re
import signal
import sys
import time
import unittest

from iscsigw_test import harness
from iscsigw_test.ceph_cluster import TestCluster, stop_process
from iscsigw_test.health import NOT_SERVING, SERVING, health
from iscsigw_test.iscsi_client import Initiator

CLUSTER = TestCluster()
# The watch counts as failing 30 s after the OSD last confirmed it (pinged every 5 s); the rest is
# room for a loaded machine. A bound against a hang, not a measurement.
NOT_READY_WITHIN = 75.0
READY_AGAIN_WITHIN = 60.0


def setUpModule():
    CLUSTER.start(prefix="iscsigw-cfg-health-")


def tearDownModule():
    CLUSTER.stop()


class SharedConfigHealthTest(unittest.TestCase):
    def test_readiness_follows_the_shared_configuration(self):
        started = time.time()
        gw = harness.Daemon(state=harness.simple_state("local"), extra_args=[
            "--gateway-id", "1", "--shared-config", "rbd/cfg-health",
            "--shared-config-conf", CLUSTER.conf,
            "--rbd-conf", CLUSTER.conf, "--health-interval-ms", "200"])
        self.addCleanup(gw.cleanup)
        gw.start(timeout=60)
        harness.wait_for(lambda: health(gw.grpc, "iscsigw.readiness") == SERVING, 30,
                         what="ready once the shared configuration is loaded")
        self.assertEqual(health(gw.grpc, ""), SERVING)
        self.assertEqual(health(gw.grpc, "iscsigw.liveness"), SERVING)
        self.assertEqual(gw.metric("iscsigw_shared_config_loaded"), 1)
        self.assertEqual(gw.metric("iscsigw_state_dir_writable"), 1)
        version = gw.metric("iscsigw_shared_config_version")
        self.assertGreater(version, 0)
        loaded_at = gw.metric("iscsigw_shared_config_last_load_timestamp_seconds")
        self.assertGreaterEqual(loaded_at, started - 1)
        self.assertLessEqual(loaded_at, time.time() + 1)
        # A change written to the object moves the version this gateway serves.
        gw.ctl("target", "create", "shared", "--allow-any-initiator")
        gw.ctl("lun", "create", "shared", 0, "--backing", "rbd", "--pool", "rbd", "--image",
               "img-health", "--ceph-conf", CLUSTER.conf, "--create", "--size", "8M")
        self.assertGreater(gw.metric("iscsigw_shared_config_version"), version)

        ini = Initiator(gw.portal, harness.INITIATOR, timeout=60)
        self.addCleanup(ini.close)
        ini.login(harness.IQN_PREFIX + "local")
        ini.test_unit_ready(0)  # the new session's unit attention

        pid = CLUSTER.osd_pid()
        stop_process(pid)
        resumed = False
        try:
            t0 = time.monotonic()
            harness.wait_for(lambda: health(gw.grpc, "iscsigw.readiness") == NOT_SERVING,
                             NOT_READY_WITHIN, interval=0.2,
                             what="readiness NOT_SERVING with the OSD stopped")
            print(f"\nreadiness NOT_SERVING {time.monotonic() - t0:.1f} s after the OSD stopped",
                  file=sys.stderr)
            self.assertEqual(health(gw.grpc, ""), NOT_SERVING)
            # The cluster is not fixed by restarting the gateway: it stays live, and serves.
            self.assertEqual(health(gw.grpc, "iscsigw.liveness"), SERVING)
            self.assertEqual(ini.write(0, 0, b"\x5a" * 512), (0, b""))
            self.assertEqual(ini.read(0, 0, 1), (0, b"\x5a" * 512, b""))
            self.assertEqual(gw.metric("iscsigw_state_dir_writable"), 1)
            self.assertEqual(gw.metric("iscsigw_shared_config_loaded"), 1)
            log = gw.read_log()
            self.assertRegex(log, r"health: iscsigw\.readiness NOT_SERVING: .*shared configuration")
            self.assertNotIn("health: iscsigw.liveness", log)
            os.kill(pid, signal.SIGCONT)
            resumed = True
            harness.wait_for(lambda: health(gw.grpc, "iscsigw.readiness") == SERVING,
                             READY_AGAIN_WITHIN, interval=0.2,
                             what="ready again with the OSD back")
        finally:
            if not resumed:
                os.kill(pid, signal.SIGCONT)
        self.assertEqual(health(gw.grpc, ""), SERVING)
        harness.wait_for(
            lambda: gw.metric("iscsigw_shared_config_last_load_timestamp_seconds") > loaded_at,
            READY_AGAIN_WITHIN, what="the shared configuration read again")
        self.assertRegex(gw.read_log(), r"(?m)health: iscsigw\.readiness SERVING$")


if __name__ == "__main__":
    sys.exit(unittest.main())
