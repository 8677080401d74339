"""The data plane end to end: the real iscsigwd driven by libiscsi's command-line tools."""
import os
import signal
import subprocess
import unittest

from iscsigw_test import harness
from iscsigw_test.harness import Daemon, DaemonTestCase, IQN_PREFIX, perf, run, wait_for

MiB = 1 << 20


def lun(id_, kind="ram", size=64 * MiB, block=512, **extra):
    spec = {"id": id_, kind: extra.pop("backing", {}), "sizeBytes": str(size), "blockSize": block}
    spec.update(extra)
    return spec


class DiscoveryAndIdentityTest(DaemonTestCase):
    STATE = {"targets": [
        {"name": IQN_PREFIX + "open", "allowAnyInitiator": True,
         "luns": [lun(0, "ram", 64 * MiB), lun(1, "null", 1024 * MiB, 4096)]},
        {"name": IQN_PREFIX + "closed", "allowAnyInitiator": False,
         "initiators": ["iqn.2026-11.io.iscsigw.test:someone-else"],
         "luns": [lun(0)]},
    ]}

    def test_sendtargets_lists_only_targets_the_initiator_may_use(self):
        out = run(["iscsi-ls", "-s", f"iscsi://{self.daemon.portal}"]).stdout
        self.assertIn(f"Target:{IQN_PREFIX}open Portal:{self.daemon.portal},1", out)
        self.assertNotIn("closed", out)
        # -s logs in to each listed target and reports its LUNs with their sizes.
        self.assertRegex(out, r"Lun:0\s+Type:DIRECT_ACCESS \(Size:63M\)")
        self.assertRegex(out, r"Lun:1\s+Type:DIRECT_ACCESS \(Size:1023M\)")

    def test_inquiry_reports_a_direct_access_spc4_device(self):
        out = run(["iscsi-inq", self.daemon.url("open", 0)]).stdout
        self.assertIn("Peripheral Device Type:DIRECT_ACCESS", out)
        self.assertIn("Version:6", out)
        self.assertIn("Vendor:ISCSIGW", out)
        self.assertIn("Version Descriptor:04c0 SBC-3", out)
        serial = run(["iscsi-inq", "-e", "1", "-c", "128", self.daemon.url("open", 0)]).stdout
        self.assertRegex(serial, r"Unit Serial Number:\[[0-9a-f]{16}\]")
        ids = run(["iscsi-inq", "-e", "1", "-c", "131", self.daemon.url("open", 0)]).stdout
        self.assertIn(f"Designator:[{IQN_PREFIX}open]", ids)
        self.assertIn(f"Designator:[{IQN_PREFIX}open,t,0x0001]", ids)
        self.assertIn("Designator Type:(3) NAA", ids)

    def test_read_capacity_matches_the_configured_size(self):
        out = run(["iscsi-readcapacity16", self.daemon.url("open", 1)]).stdout
        self.assertIn("LOGICAL BLOCK LENGTH IN BYTES:4096", out)
        self.assertIn(f"RETURNED LOGICAL BLOCK ADDRESS:{1024 * MiB // 4096 - 1}", out)
        self.assertIn(f"Total size:{1024 * MiB}", out)

    def test_initiator_not_in_acl_is_refused(self):
        p = run(["iscsi-inq", "-i", "iqn.2026-11.io.iscsigw.test:intruder",
                 self.daemon.url("closed", 0)], check=False)
        self.assertNotEqual(p.returncode, 0)
        wait_for(lambda: "status 0x0202" in self.daemon.read_log(),
                 what="the authorization failure (0x0202) in the log")

    def test_unknown_target_is_not_found(self):
        p = run(["iscsi-inq", self.daemon.url("nosuch", 0)], check=False)
        self.assertNotEqual(p.returncode, 0)
        wait_for(lambda: "target iqn.2026-11.io.iscsigw:nosuch not found" in self.daemon.read_log(),
                 what="the login rejection in the log")


class PerfSmokeTest(DaemonTestCase):
    STATE = {"targets": [{"name": IQN_PREFIX + "perf", "allowAnyInitiator": True,
                          "luns": [lun(0, "null", 4096 * MiB), lun(1, "ram", 256 * MiB)]}]}

    def test_iscsi_perf_on_null_and_ram_luns_runs_without_error(self):
        for n in (0, 1):
            with self.subTest(lun=n):
                iops = perf(self.daemon.url("perf", n))
                self.assertGreater(iops, 1000)
        self.assertNotIn("[error]", self.daemon.read_log())


class ShutdownTest(unittest.TestCase):
    def run_with_load_then_signal(self, sig):
        d = Daemon(state={"targets": [{"name": IQN_PREFIX + "stop", "allowAnyInitiator": True,
                                       "luns": [lun(0, "ram", 64 * MiB)]}]}).start()
        try:
            load = subprocess.Popen(["iscsi-perf", "-m", "32", "-b", "8", "-t", "30", "-r",
                                     d.url("stop", 0)], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            wait_for(lambda: "login: initiator" in d.read_log(), what="the load's login")
            rc = d.stop(sig, timeout=10)
            load.kill()
            load.wait()
            self.assertEqual(rc, 0)
            log = d.read_log()
            self.assertIn("shutting down", log)
            self.assertIn("stopped", log)
            # The portal is closed: a new login cannot connect.
            p = run(["iscsi-inq", d.url("stop", 0)], check=False, timeout=20)
            self.assertNotEqual(p.returncode, 0)
        finally:
            d.cleanup()

    def test_sigterm_under_load_exits_cleanly(self):
        self.run_with_load_then_signal(signal.SIGTERM)

    def test_sigint_exits_cleanly(self):
        self.run_with_load_then_signal(signal.SIGINT)


class BadConfigurationTest(unittest.TestCase):
    def start_expecting_failure(self, state, bootstrap_text=None):
        d = Daemon(state=state)
        try:
            if bootstrap_text is not None:
                with open(os.path.join(d.state_dir, "bootstrap.json"), "w") as f:
                    f.write(bootstrap_text)
            with self.assertRaises(RuntimeError) as ctx:
                d.start(timeout=10)
            return str(ctx.exception)
        finally:
            d.cleanup()

    def test_size_not_multiple_of_block_size_names_the_field(self):
        msg = self.start_expecting_failure(
            {"targets": [{"name": "bad", "allowAnyInitiator": True,
                          "luns": [lun(3, "ram", 1000, 4096)]}]})
        self.assertIn("lun 3 of iqn.2026-11.io.iscsigw:bad: size_bytes 1000 is not a multiple "
                      "of block_size 4096", msg)

    def test_misspelt_key_is_an_error_naming_the_file(self):
        msg = self.start_expecting_failure({}, bootstrap_text='{"targetz": []}')
        self.assertIn("bootstrap.json", msg)
        self.assertIn("targetz", msg)

    def test_bad_iqn_is_refused(self):
        msg = self.start_expecting_failure(
            {"targets": [{"name": "iqn.2026-11.io.iscsigw:UPPER", "allowAnyInitiator": True}]})
        self.assertIn("is not allowed", msg)


class DemoBootstrapTest(unittest.TestCase):
    def test_readme_demo_serves_the_demo_target(self):
        demo = os.path.join(harness.REPO, "deploy", "examples", "demo.json")
        d = Daemon(bootstrap=demo).start()
        try:
            out = run(["iscsi-ls", "-s", f"iscsi://{d.portal}"]).stdout
            self.assertIn(f"Target:{IQN_PREFIX}demo", out)
            self.assertRegex(out, r"Lun:0\s+Type:DIRECT_ACCESS \(Size:1023M\)")
        finally:
            d.cleanup()


if __name__ == "__main__":
    unittest.main()
