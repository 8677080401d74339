"""Connections one source, and discovery, may hold (docs/security.md, "Connections"): one address
cannot take the whole connection table, discovery sessions are capped and closed when idle, and
discovery gives way before a normal login is refused. Against the real daemon, from several
loopback addresses (any of 127/8 reaches it)."""
import socket
import time
import unittest

from iscsigw_test.harness import IQN_PREFIX, Daemon, simple_state, wait_for
from iscsigw_test.iscsi_client import Initiator, login_status

NAME = "iqn.2026-11.io.iscsigw.test:limits"
OUT_OF_RESOURCES = 0x0302


class Fixture(unittest.TestCase):
    def start(self, *args):
        d = Daemon(state=simple_state("lim"), extra_args=list(args)).start()
        self.addCleanup(d.cleanup)
        return d

    def session(self, d, source="127.0.0.1", discovery=False, name=NAME):
        c = Initiator(d.portal, name, source=source)
        self.addCleanup(c.close)
        c.login(None if discovery else IQN_PREFIX + "lim")
        return c

    def works(self, c):
        """A READ on LUN 0 answered GOOD (after the unit attention of a new session)."""
        c.test_unit_ready(0)
        self.assertEqual(c.read(0, 0, 1)[0], 0)

    def idle(self, d, source="127.0.0.1"):
        host, _, port = d.portal.rpartition(":")
        s = socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0))
        self.addCleanup(s.close)
        return s

    @staticmethod
    def closed_by_daemon(sock, within=10.0):
        """True once the daemon closes SOCK (what it sends before is read and dropped)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                if sock.recv(65536) == b"":
                    return True
            except ConnectionError:
                return True
            except socket.timeout:
                return False
        return False


class PerSourceTest(Fixture):
    def test_one_source_cannot_take_every_connection(self):
        d = self.start("--max-connections-per-source", "4", "--max-connections", "64")
        sessions = [self.session(d, name=f"{NAME}-{i}") for i in range(4)]
        # A fifth connection from the same address: every one of its four is a normal session,
        # so nothing makes room and the daemon closes it.
        extra = self.idle(d)
        self.assertTrue(self.closed_by_daemon(extra), "a fifth connection from one source stayed")
        # Another address is not affected.
        self.works(self.session(d, source="127.0.0.2"))
        for s in sessions:  # and the four still work
            self.works(s)
        self.assertIn("--max-connections-per-source", d.read_log())

    def test_idle_connections_of_a_source_give_way_to_its_own_login(self):
        d = self.start("--max-connections-per-source", "4", "--max-connections", "64")
        idle = [self.idle(d) for _ in range(4)]
        time.sleep(0.2)
        self.works(self.session(d))  # the oldest idle one makes room
        self.assertTrue(self.closed_by_daemon(idle[0]))


class DiscoveryTest(Fixture):
    def test_discovery_sessions_are_capped(self):
        d = self.start("--max-discovery-sessions", "2")
        held = [self.session(d, discovery=True, source=f"127.0.0.{i + 2}") for i in range(2)]
        self.assertEqual(login_status(d.portal, NAME, source="127.0.0.9"), OUT_OF_RESOURCES)
        # Normal sessions are not counted against it.
        self.works(self.session(d))
        held[0].logout()
        held[0].close()
        wait_for(lambda: login_status(d.portal, NAME, source="127.0.0.9") == 0, 10,
                 what="a discovery login once one of the two logged out")

    def test_an_idle_discovery_session_is_closed(self):
        d = self.start("--discovery-idle-timeout", "1")
        c = self.session(d, discovery=True)
        self.assertIn(IQN_PREFIX + "lim", str(c.send_targets()))
        normal = self.session(d)
        self.assertTrue(self.closed_by_daemon(c.sock, within=10))
        time.sleep(1.5)
        self.works(normal)  # a normal session is never closed for being idle
        self.assertIn("idle for 1000 ms: closing", d.read_log())

    def test_discovery_gives_way_to_a_normal_login(self):
        d = self.start("--max-connections", "4")
        held = [self.session(d, discovery=True, source=f"127.0.0.{i + 2}") for i in range(4)]
        self.works(self.session(d, source="127.0.0.9"))  # the oldest discovery session goes
        self.assertTrue(self.closed_by_daemon(held[0].sock))
        # Normal sessions are never evicted: with four, a fifth login is refused.
        for i in range(3):
            self.session(d, source=f"127.0.1.{i + 1}")
        late = self.idle(d, source="127.0.2.1")
        self.assertTrue(self.closed_by_daemon(late))


if __name__ == "__main__":
    unittest.main()
