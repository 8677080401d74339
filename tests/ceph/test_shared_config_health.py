"""Readiness follows the shared configuration (docs/operations.md, "Health and probes"): a gateway
with --shared-config whose cluster answers is ready, with iscsigw_shared_config_loaded 1 and the
object's version and last load in the metrics; with the cluster's only OSD stopped (SIGSTOP), its
watch goes unconfirmed and readiness turns NOT_SERVING within StateStore::kWatchStaleAfter (20 s)
and a few probes, while liveness stays SERVING and the local RAM target serves I/O. That it turns
SERVING again once the object can be read and watched is held by the unit tests
(tests/unit/controlplane/state/shared_config_test.cc): after an OSD paused this long, the
gateway's librados client does not always get its ops answered again (a new client's are), so
the recovery would test librados, not the rule."""
import os
import signal
import sys
import time
import unittest

from iscsigw_test import harness
from iscsigw_test.ceph_cluster import TestCluster, stop_process
from iscsigw_test.health import NOT_SERVING, SERVING, health
from iscsigw_test.iscsi_client import Initiator

CLUSTER = TestCluster()
# The watch counts as failing 20 s after the OSD last confirmed it (pinged every 5 s): NOT_SERVING
# 15 to 20 s after the stop; the rest is room for a loaded machine, a bound against a hang. The
# OSD is resumed as soon as that is checked, before it could drop the watch itself (30 s after the
# last ping it heard), which the test is not about.
NOT_READY_WITHIN = 28.0


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
            "--rbd-conf", CLUSTER.conf, "--health-interval-ms", "200",
            # See above: a librados op may not end once the OSD resumes, and the stop waits for
            # the reread that made it; the bound ends such a stop (exit status 3) before the
            # harness gives up on it.
            "--shutdown-timeout", "10"])
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
        finally:
            os.kill(pid, signal.SIGCONT)


if __name__ == "__main__":
    sys.exit(unittest.main())
