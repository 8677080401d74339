"""h. Persistent reservations from the Linux kernel initiator, as Pacemaker's fence_scsi uses them:
two initiator names (two open-iscsi ifaces) on one LUN register, reserve Write Exclusive,
Registrants Only, fence one another with PREEMPT AND ABORT, release and clear, with sg_persist;
the fenced node's writes end in RESERVATION CONFLICT. In round two the fenced node is writing
when it is fenced, and none of its writes lands after the fencing has completed: its region reads
the same right after the fencing and once its writer has ended."""
import os
import sys
import unittest

import guest as g

IQN_A = "iqn.2026-11.io.iscsigw.interop:node-a"
IQN_B = "iqn.2026-11.io.iscsigw.interop:node-b"
STORE_DELAY_MS = 1000


class ReservationsKernelTest(g.InteropTestCase):
    def test_fence_scsi_sequence(self):
        # Store writes start STORE_DELAY_MS late (fault injection, a test build's), so that the
        # fenced node has writes inside the gateway when PREEMPT AND ABORT aborts them, and a
        # gateway that answered it before they left the store would let them land after: later
        # than the scenario's first read of their blocks.
        lun = g.file_lun(os.path.join(self.tmp, "a.img"), 64 << 20,
                         fault={"delayMs": STORE_DELAY_MS, "ops": ["write"]})
        gw = self.start_gateway([lun], initiators=(IQN_A, IQN_B))
        env = dict(PORTAL=gw.guest_portals()[0], TARGET=g.TARGET, IQN_A=IQN_A, IQN_B=IQN_B,
                   STORE_DELAY_MS=STORE_DELAY_MS)
        with g.Guest("reservations_kernel", env) as vm:
            go = vm.step("round-one")
            try:
                sessions = gw.ctl_json("session", "list").get("sessions", [])
                names = sorted(s["initiator_name"] for s in sessions if not s["discovery"])
                self.assertEqual(names, [IQN_A, IQN_B], sessions)
                # Every RESERVATION CONFLICT the gateway counted reached the guest's kernel, which
                # logs each: the scenario's five (the writes of unregistered B and of fenced A, by
                # dd and by SG_IO, and A's RESERVE) and the sd driver's MODE SENSE on the fenced
                # path (SPC-4 table 63: a conflict for a nexus that is not registered).
                seen = self.kernel_conflicts(vm)
                self.assertGreaterEqual(seen, 5)
                self.assertEqual(self.conflicts(gw), seen)
            finally:
                go()
            go = vm.step("done", timeout=600)
            try:
                # Round two's fenced writer goes through the sd driver's error handling (command
                # timeouts, ABORT TASK, LOGICAL UNIT RESET): the kernel logged no conflict the
                # gateway did not count, and some came from the fenced writer.
                self.assertGreaterEqual(self.conflicts(gw), self.kernel_conflicts(vm))
                self.assertGreater(self.kernel_conflicts(vm), seen)
            finally:
                go()
            took = vm.wait()
            print(f"reservations_kernel scenario: {took:.0f} s", file=sys.stderr)

    @staticmethod
    def kernel_conflicts(vm):
        with open(os.path.join(vm.run_dir, "conflicts")) as f:
            return int(f.read())

    @staticmethod
    def conflicts(gw):
        return gw.metric("iscsigw_scsi_reservation_conflicts_total",
                         {"target": g.TARGET, "lun": "0"})


if __name__ == "__main__":
    unittest.main()
