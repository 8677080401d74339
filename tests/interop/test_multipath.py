"""g. dm-multipath over two portals from the Linux kernel initiator, with
tests/interop/multipath.conf: one map of two paths (one session per advertised portal) and fio
verify on it while a path goes away twice, each time coming back into the map: the gateway kills
one session (here), then the guest partitions one path from the network (scenarios/multipath.sh)."""
import os
import sys
import time
import unittest

import guest as g


class MultipathTest(g.InteropTestCase):
    def target_sessions(self, gw):
        return [s for s in gw.ctl_json("session", "list").get("sessions", [])
                if s["target"] == g.TARGET]

    def test_fio_verify_rides_out_a_killed_and_a_partitioned_path(self):
        size = 256 << 20
        gw = self.start_gateway([g.file_lun(os.path.join(self.tmp, "a.img"), size)], portals=2)
        env = dict(PORTALS=" ".join(gw.guest_portals()), TARGET=g.TARGET, LUN_BYTES=size)
        with g.Guest("multipath", env) as vm:
            go = vm.step("io-running", timeout=900)
            sessions = self.target_sessions(gw)
            self.assertEqual([s["initiator_name"] for s in sessions], [g.GUEST_IQN] * 2, sessions)
            self.assertEqual(len({s["isid"] for s in sessions}), 2, sessions)
            victim = sessions[0]
            gw.ctl("session", "kill", victim["tsih"])
            # open-iscsi answers the Logout request (RFC 7143 11.9.1, AsyncEvent 1) by logging
            # out and in again under the same ISID: the gateway sees a new TSIH for it.
            deadline = time.monotonic() + 120
            while True:
                now = self.target_sessions(gw)
                again = [s for s in now if s["isid"] == victim["isid"]]
                if len(now) == 2 and again and again[0]["tsih"] != victim["tsih"]:
                    back = again[0]
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(vm.report(
                        f"session ISID {victim['isid']} not back 120 s after killing TSIH "
                        f"{victim['tsih']}: {now}"))
                time.sleep(0.5)
            go(f"killed TSIH {victim['tsih']} (ISID {victim['isid']}), back as TSIH "
               f"{back['tsih']}\n")
            took = vm.wait(timeout=900)
            print(f"multipath scenario: {took:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
