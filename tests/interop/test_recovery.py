"""e. Recovery and f. command timeouts, with the Linux kernel initiator.

e. A gateway that stops answering (SIGSTOP) while fio's verified writes run: the kernel's NOP-Out
   ping times out, it drops the connection, reinstates the session and retries; the data
   verifies, and a write the store held across the stall does not land after the reinstatement.
   A gateway killed (SIGKILL) and started again on the same state and portal: the kernel
   reconnects by itself, the mounted ext4 goes on working and e2fsck finds it clean.
f. A store slower than the disk's SCSI timeout: the kernel's error handler sends ABORT TASK and
   LOGICAL UNIT RESET, the gateway answers them once the held writes have ended (none lands
   after), the disk stays online and the data verifies.
"""
import os
import re
import signal
import sys
import time
import unittest

import guest as g

LUN_BYTES = 128 << 20
HELD_OFFSET = 64 << 20  # past fio's 16 MiB
HOLD_MS = 14000
LOGINS = "iscsigw_iscsi_logins_total"
TMF = "iscsigw_iscsi_task_management_requests_total"


class RecoveryTest(g.InteropTestCase):
    SERIES = True  # its scenarios share one boot of the guest

    def metric_or_zero(self, gw, name, labels):
        """A counter whose series appears with its first occurrence: absent reads as 0."""
        try:
            return gw.metric(name, labels)
        except AssertionError:
            return 0

    def normal_session_isids(self, gw):
        """The ISID of every login to the target, in order, from the gateway's log."""
        return re.findall(r"login: initiator \S+ isid (\S+) -> " + re.escape(g.TARGET) + " ",
                          gw.read_log())

    def env(self, gw, **extra):
        return dict(PORTAL=gw.guest_portals()[0], TARGET=g.TARGET, **extra)

    def test_stalled_gateway_during_fio_verify(self):
        # Beside fio's 16 MiB, the scenario's write of the block at HELD_OFFSET is held HOLD_MS
        # (its retry is not): it arrives about a second before the gateway stops, so it is still
        # in the store when the stall ends (8 s or more) and the reinstated session's login has to
        # wait for it, well inside the kernel's 15 s login timeout.
        held = {"delayMs": HOLD_MS, "ops": ["write"], "offset": str(HELD_OFFSET), "length": "1",
                "maxFaults": "1"}
        gw = self.start_gateway([g.file_lun(os.path.join(self.tmp, "a.img"), LUN_BYTES,
                                            fault=held)])
        # At 250 IOPS the 16 MiB write phase lasts about 16 s: the stall falls inside it.
        env = self.env(gw, FIO_SIZE="16M", FIO_RATE=250, HELD_OFFSET=HELD_OFFSET,
                       HOLD_MS=HOLD_MS)
        with self.guest("recovery_stall", env) as vm:
            go = vm.step("writing")
            logins = gw.metric(LOGINS, {"result": "success"})
            stopped = time.monotonic()
            gw.proc.send_signal(signal.SIGSTOP)
            try:
                go()
                # Stopped until the guest has seen its connection dropped, and at least 8 s:
                # longer than the NOP-Out interval and timeout together, so that the kernel's
                # first attempts to log in again meet a gateway that does not answer either.
                go = vm.step("dropped", timeout=120)
                remaining = stopped + 8 - time.monotonic()
                if remaining > 0:
                    time.sleep(remaining)
            finally:
                gw.proc.send_signal(signal.SIGCONT)
            stall = time.monotonic() - stopped
            go()
            vm.wait()
        self.assertGreater(gw.metric(LOGINS, {"result": "success"}), logins,
                           "no login after the stall")
        # The kernel recovered its session: it logged in again with the same ISID.
        isids = self.normal_session_isids(gw)
        self.assertEqual(len(isids), 2, isids)
        self.assertEqual(isids[0], isids[1], isids)
        print(f"gateway stopped for {stall:.1f}s", file=sys.stderr)

    def test_killed_gateway_restarted_under_mounted_ext4(self):
        gw = self.start_gateway([g.file_lun(os.path.join(self.tmp, "a.img"), LUN_BYTES)])
        env = self.env(gw, FIO_SIZE="16M", FIO_RATE=250)
        with self.guest("recovery_restart", env) as vm:
            go = vm.step("writing")
            self.assertEqual(gw.stop(signal.SIGKILL), -signal.SIGKILL)
            gw.start()
            go()
            go = vm.step("reconnected", timeout=300)
            try:
                sessions = gw.ctl_json("session", "list").get("sessions", [])
                self.assertEqual([s["initiator_name"] for s in sessions], [g.GUEST_IQN], sessions)
            finally:
                go()
            vm.wait()
        # The log spans both processes: the kernel logged in again with the ISID it had.
        isids = self.normal_session_isids(gw)
        self.assertEqual(len(isids), 2, isids)
        self.assertEqual(isids[0], isids[1], isids)

    def test_command_timeouts_escalate_to_lun_reset(self):
        # The write of the block at 1 MiB and its first retry are held 10 s each (the first two
        # writes touching that byte; fio writes every block of the 3 MiB once). With a 2 s SCSI
        # timeout the kernel aborts the write after its third timer expiry (6 to 9 s: libiscsi
        # grants a command that made progress another period and pings the connection in the
        # next), and the abort is answered once the write has landed: within the 10 s abort
        # timeout. The retry is held again; its second timeout goes to the error handler's
        # LOGICAL UNIT RESET, answered once it has landed too; the next retry goes through.
        fault = {"delayMs": 10000, "ops": ["write"], "offset": str(1 << 20), "length": "1",
                 "maxFaults": "2"}
        gw = self.start_gateway([g.file_lun(os.path.join(self.tmp, "a.img"), LUN_BYTES,
                                            fault=fault)])
        env = self.env(gw, SCSI_TIMEOUT=2, ABORT_TIMEOUT=10, FIO_SIZE="3M",
                       HELD_OFFSET=fault["offset"], HOLD_MS=fault["delayMs"])
        with self.guest("command_timeouts", env) as vm:
            go = vm.step("fio-done", timeout=480)
            try:
                done = {"target": g.TARGET, "response": "function_complete"}
                aborts = self.metric_or_zero(gw, TMF, dict(done, function="abort_task"))
                resets = self.metric_or_zero(gw, TMF, dict(done, function="logical_unit_reset"))
                self.assertGreaterEqual(aborts, 1, "the gateway completed no ABORT TASK")
                self.assertGreaterEqual(resets, 1, "the gateway completed no LOGICAL UNIT RESET")
                self.assertIn("LOGICAL UNIT RESET of LUN 0 on " + g.TARGET, gw.read_log())
                # Every task management request was answered in time: the kernel never gave up
                # on the session and logged in again.
                self.assertEqual(len(self.normal_session_isids(gw)), 1)
            finally:
                go()
            vm.wait()
        print(f"gateway completed {aborts:.0f} ABORT TASK, {resets:.0f} LOGICAL UNIT RESET",
              file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
