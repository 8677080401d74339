"""a. Discovery and login from the Linux kernel initiator: SendTargets with discovery CHAP returns
the advertised portal, the discovered record logs in with CHAP and mutual CHAP (iscsiadm's
node.session.auth.*), and a wrong secret is refused. i. Logout and node delete leave no session
on the gateway: its session and connection gauges are back at 0."""
import os
import unittest

import guest as g


class DiscoveryChapTest(g.InteropTestCase):
    def test_discovery_and_login_with_chap(self):
        size = 256 << 20
        gw = self.start_gateway([g.file_lun(os.path.join(self.tmp, "a.img"), size)])
        info = gw.ctl_json("gateway", "info")
        self.assertEqual(info["advertised"], gw.guest_portals())
        secrets = {"DISC_USER": "disc-user", "DISC_SECRET": "discovery-secret-42",
                   "CHAP_USER": "node-user", "CHAP_SECRET": "initiator-secret-42",
                   "MUTUAL_USER": "gw-user", "MUTUAL_SECRET": "target-secret-4242"}
        gw.ctl("auth", "set", "--discovery", "--user", secrets["DISC_USER"],
               "--secret-file", self.secret("disc", secrets["DISC_SECRET"]))
        gw.ctl("auth", "set", g.TARGET, "--user", secrets["CHAP_USER"],
               "--secret-file", self.secret("chap", secrets["CHAP_SECRET"]),
               "--mutual-user", secrets["MUTUAL_USER"],
               "--mutual-secret-file", self.secret("mutual", secrets["MUTUAL_SECRET"]))
        env = dict(secrets, PORTAL=gw.guest_portals()[0], TARGET=g.TARGET, LUN_BYTES=size)
        gauges = ("iscsigw_iscsi_sessions", "iscsigw_iscsi_connections")
        with g.Guest("discovery_chap", env) as vm:
            go = vm.step("logged-in")
            try:
                sessions = gw.ctl_json("session", "list").get("sessions", [])
                self.assertEqual([s["initiator_name"] for s in sessions], [g.GUEST_IQN], sessions)
                for m in gauges:
                    self.assertEqual(gw.metric(m, {"target": g.TARGET}), 1, m)
            finally:
                go()
            # i. After logout and node delete nothing is left on the gateway either.
            vm.step("logged-out")()
            for m in gauges:
                self.assertEqual(gw.metric(m, {"target": g.TARGET}), 0, m)
            self.assertEqual(gw.ctl_json("session", "list").get("sessions", []), [])
            vm.wait()


if __name__ == "__main__":
    unittest.main()
