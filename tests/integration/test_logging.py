"""Logging end to end: the log level changed at run time through iscsigwctl, and the info lines
that say who logged in, from where, and who changed what."""
import json
import re
import struct
import unittest

from iscsigw_test.harness import IQN_PREFIX, INITIATOR, Daemon, simple_state, wait_for
from iscsigw_test.iscsi_client import Initiator, LoginError

TARGET = IQN_PREFIX + "logs"
# SendReject's debug line for the SNACK below (opcode 0x10, reason 0x05 command not supported).
REJECT_LINE = "reject opcode 0x10 reason 0x5"


def send_snack(c):
    """Sends a SNACK (not supported at ErrorRecoveryLevel 0) and waits for its Reject."""
    bhs = bytearray(48)
    bhs[0] = 0x10
    bhs[1] = 0x80
    bhs[16:20] = b"\xff\xff\xff\xff"
    struct.pack_into(">I", bhs, 28, c.exp_stat_sn)
    c.send(bhs)
    r = c.recv_skipping_nops()
    assert r.opcode == 0x3F, f"expected a Reject, got opcode {r.opcode:#x}"


def snack_reject(daemon):
    c = Initiator(daemon.portal, INITIATOR)
    try:
        c.login(TARGET)
        send_snack(c)
        c.logout()
    finally:
        c.close()


class LogLevelTest(unittest.TestCase):
    def setUp(self):
        self.d = Daemon(state=simple_state("logs"), extra_args=["--log-level", "info"]).start()
        self.addCleanup(self.d.cleanup)

    def levels(self, *args):
        return {l["logger"]: l["level"]
                for l in self.d.ctl_json("gateway", "log-level", *args)["loggers"]}

    def test_debug_appears_only_after_the_level_is_raised_and_reads_back(self):
        d = self.d
        self.assertEqual(self.levels(), {n: "info" for n in
                                         ("pdu", "iscsi", "scsi", "backing", "ctl")})
        snack_reject(d)
        # Lines reach the log in the order they were logged: once the info line of the level
        # change (logged after the Reject was sent) is there, the debug line would be too.
        out = d.ctl("gateway", "log-level", "debug", "--logger", "iscsi").stdout.split()
        self.assertEqual(out, ["LOGGER", "LEVEL", "iscsi", "debug"])
        wait_for(lambda: "log level of logger iscsi set to debug (was iscsi info)" in d.read_log(),
                 what="the level change in the log")
        self.assertNotIn(REJECT_LINE, d.read_log())

        snack_reject(d)
        wait_for(lambda: REJECT_LINE in d.read_log(), what="the debug line")
        self.assertEqual(self.levels("--logger", "iscsi"), {"iscsi": "debug"})
        self.assertEqual(self.levels()["scsi"], "info")

        # All loggers at once, and back.
        d.ctl("gateway", "log-level", "warn")
        self.assertEqual(set(self.levels().values()), {"warn"})
        d.ctl("gateway", "log-level", "info")
        self.assertEqual(set(self.levels().values()), {"info"})

    def test_unknown_logger_or_level_exits_with_invalid_argument(self):
        p = self.d.ctl("gateway", "log-level", "verbose", check=False)
        self.assertEqual(p.returncode, 3)
        self.assertEqual(p.stderr.strip(), "iscsigwctl: INVALID_ARGUMENT: level verbose is unknown "
                         "(trace, debug, info, warn, error, critical, off)")
        p = self.d.ctl("gateway", "log-level", "debug", "--logger", "nosuch", check=False)
        self.assertEqual(p.returncode, 3)
        self.assertIn("logger nosuch is unknown (pdu, iscsi, scsi, backing, ctl)", p.stderr)
        p = self.d.ctl("gateway", "log-level", "--logger", "nosuch", check=False)
        self.assertEqual(p.returncode, 3)
        self.assertEqual(set(self.levels().values()), {"info"})


class RateLimitTest(unittest.TestCase):
    def setUp(self):
        self.d = Daemon(state=simple_state("logs"), extra_args=["--log-level", "debug"]).start()
        self.addCleanup(self.d.cleanup)

    def test_a_flood_of_rejects_is_limited_and_the_count_reported(self):
        c = Initiator(self.d.portal, INITIATOR)
        self.addCleanup(c.close)
        c.login(TARGET)
        for _ in range(200):
            send_snack(c)
        # The bucket refills at one line a second: keep provoking until a line reports what was
        # suppressed (polling, not sleeping for a fixed time).
        def reported():
            send_snack(c)
            return re.search(r"reject opcode 0x10 reason 0x5 \((\d+) similar messages "
                             r"suppressed\)", self.d.read_log())
        wait_for(reported, timeout=10, interval=0.1, what="the suppressed count")
        log = self.d.read_log()
        suppressed = sum(int(n) for n in re.findall(r"\((\d+) similar messages suppressed\)", log))
        written = log.count(REJECT_LINE)
        # A burst of 10, then one a second: nearly all of the 200 were counted, not written.
        self.assertLess(written, 20, "rejects were not rate-limited")
        self.assertGreaterEqual(written + suppressed, 200)


class AuditLinesTest(unittest.TestCase):
    """Logins, sessions and configuration changes at info, with who, where and why."""

    def setUp(self):
        state = simple_state("logs", allow_any=False, initiators=[INITIATOR])
        self.d = Daemon(state=state, extra_args=["--log-level", "info", "--log-format",
                                                 "json"]).start()
        self.addCleanup(self.d.cleanup)

    def lines(self):
        return [json.loads(l) for l in self.d.read_log().splitlines() if l.startswith("{")]

    def wait_line(self, pred, what):
        return wait_for(lambda: next((l for l in self.lines() if pred(l)), None), what=what)

    def test_login_session_and_changes(self):
        d = self.d
        c = Initiator(d.portal, INITIATOR)
        c.login(TARGET)
        peer = "127.0.0.1:%d" % c.sock.getsockname()[1]
        login = self.wait_line(lambda l: l["msg"].startswith("login: "), "the login line")
        self.assertEqual(login["level"], "info")
        self.assertEqual(login["logger"], "iscsi")
        self.assertEqual(login["initiator"], INITIATOR)
        self.assertEqual(login["target"], TARGET)
        self.assertIn("from " + peer, login["msg"])
        self.assertIsInstance(login["conn"], int)
        self.assertGreater(login["tsih"], 0)
        c.logout()
        c.close()
        end = self.wait_line(lambda l: l["msg"].startswith("session closed"), "the session end")
        self.assertEqual((end["initiator"], end["target"], end["tsih"]),
                         (INITIATOR, TARGET, login["tsih"]))
        self.assertIn(peer, end["msg"])

        # A refused login says who, from where, and why.
        stranger = "iqn.2026-11.io.iscsigw.test:stranger"
        c = Initiator(d.portal, stranger)
        with self.assertRaises(LoginError):
            c.login(TARGET)
        c.close()
        refused = self.wait_line(lambda l: "not in the ACL" in l["msg"], "the refused login")
        self.assertEqual(refused["initiator"], stranger)
        self.assertEqual(refused["target"], TARGET)
        self.assertIn("127.0.0.1:", refused["msg"])

        # Configuration changes name the RPC, the caller and the object; secrets never appear.
        d.ctl("acl", "add", "logs", "iqn.2026-11.io.iscsigw.test:other")
        d.ctl("lun", "create", "logs", "1", "--size", "1M")
        d.ctl("auth", "set", "logs", "--user", "u", "--secret-file", "-",
              input="a-long-logged-secret\n")
        acl = self.wait_line(lambda l: "acl of " + TARGET in l["msg"], "the ACL change")
        self.assertRegex(acl["msg"], r"^AddAclEntry from ipv[46]:.*: acl of .*: "
                         r"iqn.2026-11.io.iscsigw.test:other added$")
        self.assertEqual(acl["logger"], "ctl")
        self.wait_line(lambda l: l["msg"].startswith("CreateLun from ")
                       and "lun 1 of " + TARGET + " created" in l["msg"], "the LUN change")
        self.wait_line(lambda l: l["msg"].startswith("SetChap from "), "the CHAP change")
        self.assertNotIn("a-long-logged-secret", d.read_log())


if __name__ == "__main__":
    unittest.main()
