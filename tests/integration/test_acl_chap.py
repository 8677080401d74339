"""ACLs and CHAP, enforced at login and in discovery: libiscsi's tools and the test initiator
against the real iscsigwd, configured through iscsigwctl."""
import os
import subprocess
import unittest
from urllib.parse import quote

from iscsigw_test.harness import IQN_PREFIX, INITIATOR, Daemon, run, wait_for
from iscsigw_test.iscsi_client import Initiator, LoginError, chap_response, login_status

OTHER = "iqn.2026-11.io.iscsigw.test:other"
# The one initiator the CHAP target "chapacl" lists: the name the stage-jump attacker claims.
JUMPER = "iqn.2026-11.io.iscsigw.test:jumper"
SECRET = "initiator-secret-1"
CAROL_SECRET = "carol-secret-4444"  # chapacl's: a secret no other target has
TARGET_SECRET = "target-secret-22"
DISCOVERY_SECRET = "discovery-secret-333"


class AclChapTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Daemon().start()
        d = cls.d
        for name in ("acl", "cidr", "chap", "mutual", "drop", "chapacl"):
            d.ctl("target", "create", name)
            d.ctl("lun", "create", name, "0", "--size", "8M")
        d.ctl("acl", "add", "acl", INITIATOR)
        d.ctl("acl", "add", "cidr", INITIATOR, "--source", "10.0.0.0/8")
        d.ctl("acl", "add", "cidr", OTHER, "--source", "127.0.0.0/8")
        d.ctl("acl", "add", "drop", INITIATOR)
        d.ctl("acl", "add", "chapacl", JUMPER)
        d.ctl("auth", "set", "chapacl", "--user", "carol", "--secret-file", "-",
              input=CAROL_SECRET + "\n")
        for t in ("chap", "mutual"):
            d.ctl("acl", "allow-any", t, "on")
        d.ctl("auth", "set", "chap", "--user", "alice", "--secret-file", "-", input=SECRET + "\n")
        cls.target_secret_file = os.path.join(d.state_dir, "tsecret")
        with open(cls.target_secret_file, "w") as f:
            f.write(TARGET_SECRET)
        d.ctl("auth", "set", "mutual", "--user", "bob", "--secret-file", "-",
              "--mutual-user", "gw", "--mutual-secret-file", cls.target_secret_file,
              input=SECRET)

    @classmethod
    def tearDownClass(cls):
        rc = cls.d.stop()
        log = cls.d.read_log()
        cls.d.cleanup()
        if rc != 0:
            raise AssertionError(f"iscsigwd exited {rc}:\n{log[-4000:]}")
        for secret in (SECRET, TARGET_SECRET, CAROL_SECRET):
            if secret in log:
                raise AssertionError("a CHAP secret appeared in the daemon log")

    def login_status(self, target, initiator=INITIATOR, **kw):
        return login_status(self.d.portal, initiator, IQN_PREFIX + target if target else None,
                            **kw)

    # ---- ACL
    def test_listed_initiator_logs_in_and_others_are_refused_0x0202(self):
        self.assertEqual(self.login_status("acl"), 0)
        self.assertEqual(self.login_status("acl", OTHER), 0x0202)
        p = run(["iscsi-inq", "-i", OTHER, self.d.url("acl", 0)], check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("Authorization failure", p.stdout + p.stderr)
        self.assertIn("DIRECT_ACCESS", run(["iscsi-inq", "-i", INITIATOR, self.d.url("acl", 0)]).stdout)

    def test_discovery_lists_only_what_the_initiator_may_log_in_to(self):
        mine = run(["iscsi-ls", "-i", INITIATOR, f"iscsi://{self.d.portal}"]).stdout
        theirs = run(["iscsi-ls", "-i", OTHER, f"iscsi://{self.d.portal}"]).stdout
        self.assertIn(IQN_PREFIX + "acl ", mine)
        self.assertNotIn(IQN_PREFIX + "acl ", theirs)
        # Source CIDRs: INITIATOR is listed for cidr only from 10/8, OTHER from 127/8.
        self.assertNotIn(IQN_PREFIX + "cidr ", mine)
        self.assertIn(IQN_PREFIX + "cidr ", theirs)
        c = Initiator(self.d.portal, OTHER)
        c.login()
        names = c.send_targets()
        c.close()
        self.assertIn(IQN_PREFIX + "cidr", names)
        self.assertNotIn(IQN_PREFIX + "acl", names)

    def test_source_networks_are_enforced(self):
        self.assertEqual(self.login_status("cidr", INITIATOR), 0x0202)
        self.assertEqual(self.login_status("cidr", OTHER), 0)

    def test_removed_acl_entry_stops_logins_and_drops_sessions_when_asked(self):
        d = self.d
        c = Initiator(d.portal, INITIATOR)
        self.addCleanup(c.close)
        c.login(IQN_PREFIX + "drop")
        self.assertEqual(c.test_unit_ready(0)[0], 2)  # power-on attention: the session works
        out = d.ctl("acl", "remove", "drop", INITIATOR, "--drop-sessions").stdout
        self.assertIn("1 session(s) dropped", out)
        self.assertTrue(wait_for(c.closed, timeout=10, what="the dropped session"))
        self.assertEqual(self.login_status("drop"), 0x0202)
        d.ctl("acl", "add", "drop", INITIATOR)
        self.assertEqual(self.login_status("drop"), 0)

    # ---- CHAP
    def chap_url(self, target, user="alice", secret=SECRET, query=""):
        return (f"iscsi://{user}%{quote(secret)}@{self.d.portal}/{IQN_PREFIX}{target}/0"
                + query)

    def test_chap_with_libiscsi(self):
        self.assertIn("DIRECT_ACCESS", run(["iscsi-inq", self.chap_url("chap")]).stdout)
        p = run(["iscsi-inq", self.chap_url("chap", secret="wrong-secret-123")], check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("Authentication failure", p.stdout + p.stderr)
        p = run(["iscsi-inq", self.d.url("chap", 0)], check=False)  # no credentials at all
        self.assertNotEqual(p.returncode, 0)

    def test_chap_status_codes_and_algorithms(self):
        self.assertEqual(self.login_status("chap", chap=("alice", SECRET)), 0)
        self.assertEqual(self.login_status("chap", chap=("alice", "wrong-secret-123")), 0x0201)
        self.assertEqual(self.login_status("chap", chap=("mallory", SECRET)), 0x0201)
        self.assertEqual(self.login_status("chap"), 0x0201)  # AuthMethod=None only
        for algs in ("5", "6", "7", "8", "7,6,5"):
            self.assertEqual(self.login_status("chap", chap=("alice", SECRET), algorithms=algs), 0,
                             algs)
        self.assertEqual(self.login_status("chap", chap=("alice", SECRET), algorithms="1,2"),
                         0x0201)

    def test_guessing_under_new_initiator_names_is_locked_out_per_source(self):
        # Ten failures from one source against one target, each under a name of its own (so no
        # name reaches its own three): the source is locked out of that target, whatever name
        # it claims next, even with the right secret; another source, or another target, is not.
        for n in range(10):
            self.assertEqual(self.login_status("chap", f"{OTHER}-{n}", source="127.0.0.5",
                                               chap=("alice", f"wrong-secret-{n:04d}")), 0x0201)
        self.assertEqual(self.login_status("chap", OTHER + "-new", source="127.0.0.5",
                                           chap=("alice", SECRET)), 0x0201)
        self.assertEqual(self.login_status("chap", OTHER + "-new", source="127.0.0.6",
                                           chap=("alice", SECRET)), 0)
        self.assertEqual(self.login_status("mutual", OTHER + "-new", source="127.0.0.5",
                                           chap=("bob", SECRET)), 0)
        self.assertIn("10 from this source", self.d.read_log())

    def test_reflected_challenge_is_refused(self):
        self.assertEqual(self.login_status("mutual", chap=("bob", SECRET), reflect=True), 0x0201)

    def test_mutual_chap(self):
        c = Initiator(self.d.portal, INITIATOR)
        c.login(IQN_PREFIX + "mutual", chap=("bob", SECRET), mutual=("gw", TARGET_SECRET),
                algorithms="7")
        self.assertTrue(c.mutual_verified)
        c.close()
        # libiscsi: target_user / target_password URL arguments.
        good = self.chap_url("mutual", "bob", SECRET,
                             f"?target_user=gw&target_password={TARGET_SECRET}")
        self.assertIn("DIRECT_ACCESS", run(["iscsi-inq", good]).stdout)
        bad = self.chap_url("mutual", "bob", SECRET, "?target_user=gw&target_password=not-the-secret")
        p = run(["iscsi-inq", bad], check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("CHAP_R", p.stdout + p.stderr)

    def test_a_mutual_secret_is_no_initiator_secret_anywhere_on_the_gateway(self):
        # RFC 7143 9.2.1: the secret "mutual" authenticates the gateway with may not be one that
        # initiators authenticate with, on another target or for discovery; nothing changes.
        d = self.d
        p = d.ctl("auth", "set", "--discovery", "--user", "disco", "--secret-file",
                  self.target_secret_file, check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("target " + IQN_PREFIX + "mutual: chap.mutual_secret is the initiator "
                      "secret of discovery", p.stderr)
        self.assertNotIn(TARGET_SECRET, p.stderr)
        self.assertEqual(self.login_status(None), 0)  # discovery still without CHAP
        # alice's secret on "chap" as the gateway's secret on "drop": refused.
        alice_secret_file = os.path.join(d.state_dir, "alice-secret")
        with open(alice_secret_file, "w") as f:
            f.write(SECRET)
        p = d.ctl("auth", "set", "drop", "--user", "dave", "--secret-file", "-", "--mutual-user",
                  "gw", "--mutual-secret-file", alice_secret_file, input="dave-secret-4444",
                  check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("mutual_secret is the initiator secret of target", p.stderr)
        p = d.ctl("auth", "set", "drop", "--user", "dave", "--secret-file", "-", "--mutual-user",
                  "gw", "--mutual-secret-file", self.target_secret_file, input="dave-secret-4444")
        self.assertEqual(p.returncode, 0)
        d.ctl("auth", "clear", "drop")
        self.assertEqual(self.login_status("drop"), 0)

    def test_short_secret_is_refused_at_configuration(self):
        p = self.d.ctl("auth", "set", "chap", "--user", "alice", "--secret-file", "-",
                       input="elevenbytes", check=False)
        self.assertEqual(p.returncode, 3)
        self.assertIn("chap.secret is 11 bytes; RFC 7143 requires at least 12", p.stderr)
        self.assertEqual(self.login_status("chap", chap=("alice", SECRET)), 0)  # unchanged

    # ---- logins that must fail, and what they must leave alone. Each test from a loopback
    # address of its own, and under a new initiator name for each guess after the second, so
    # that no failure counts towards a lockout (docs/security.md: three per name and source, ten
    # per source and target) that would decide a later login instead of its credentials.
    def chap_exchange(self, c, target):
        """Security stage up to the challenge: returns (CHAP_A, CHAP_I, challenge)."""
        names = [("InitiatorName", c.name), ("SessionType", "Normal"), ("TargetName", target)]
        _, keys = c._login_pdu(0, 1, False, names + [("AuthMethod", "CHAP")])
        self.assertEqual(keys.get("AuthMethod"), "CHAP")
        _, keys = c._login_pdu(0, 1, False, [("CHAP_A", "5")])
        return int(keys["CHAP_A"]), int(keys["CHAP_I"]), bytes.fromhex(keys["CHAP_C"][2:])

    def test_a_failed_login_with_a_live_sessions_isid_leaves_that_session_alone(self):
        # RFC 7143 6.3.5: a login with a live session's initiator name and ISID reinstates it,
        # but only once it has authenticated. A wrong secret, or no CHAP at all, must leave the
        # live session and its connection as they are.
        source = "127.0.0.20"
        live = Initiator(self.d.portal, INITIATOR, source=source)
        live.login(IQN_PREFIX + "chap", chap=("alice", SECRET))
        self.assertEqual(live.test_unit_ready(0)[0], 0x02)  # the POWER ON unit attention
        self.assertEqual(live.test_unit_ready(0)[0], 0)
        tsihs = {s["tsih"] for s in self.d.ctl_json("session", "list").get("sessions", [])}
        for attempt in ({"chap": ("alice", "wrong-secret-123")}, {}):
            c = Initiator(self.d.portal, INITIATOR, source=source)
            c.isid = live.isid
            with self.assertRaises(LoginError, msg=str(attempt)) as e:
                c.login(IQN_PREFIX + "chap", **attempt)
            self.assertEqual(e.exception.status, 0x0201, attempt)
            c.close()
            # Still the same session, on its connection, with no unit attention of a new nexus.
            self.assertEqual(live.test_unit_ready(0)[0], 0, attempt)
        self.assertEqual({s["tsih"] for s in self.d.ctl_json("session", "list").get("sessions", [])},
                         tsihs)
        self.assertEqual(live.logout(), 0)
        live.close()

    def test_a_chap_response_replayed_in_a_new_login_is_refused(self):
        # The response an eavesdropper saw answers that login's challenge only (RFC 7143 9.2.1):
        # each login gets a challenge of its own, so the replay fails.
        source = "127.0.0.21"
        c = Initiator(self.d.portal, OTHER + "-replay", source=source)
        alg, ident, challenge = self.chap_exchange(c, IQN_PREFIX + "chap")
        captured = [("CHAP_N", "alice"),
                    ("CHAP_R", "0x" + chap_response(alg, ident, SECRET, challenge).hex())]
        transit, _ = c._login_pdu(0, 1, True, captured)
        self.assertTrue(transit)  # the honest login got through the security stage
        c.close()
        for n in range(3):
            c = Initiator(self.d.portal, f"{OTHER}-replay-{n}", source=source)
            _, _, again = self.chap_exchange(c, IQN_PREFIX + "chap")
            self.assertNotEqual(again, challenge, "the target repeated a challenge")
            with self.assertRaises(LoginError) as e:
                c._login_pdu(0, 1, True, captured)
            self.assertEqual(e.exception.status, 0x0201)
            c.close()

    def test_a_wrong_response_to_a_mutual_login_gets_no_target_response(self):
        # The target answers the initiator's challenge only after the initiator proved it knows
        # its secret: otherwise anyone could collect the target's responses to challenges of
        # their choosing and attack the target's secret offline.
        c = Initiator(self.d.portal, INITIATOR, source="127.0.0.22")
        alg, ident, challenge = self.chap_exchange(c, IQN_PREFIX + "mutual")
        with self.assertRaises(LoginError) as e:
            c._login_pdu(0, 1, True, [
                ("CHAP_N", "bob"),
                ("CHAP_R", "0x" + chap_response(alg, ident, "wrong-secret-123", challenge).hex()),
                ("CHAP_I", "3"), ("CHAP_C", "0x" + os.urandom(16).hex())])
        self.assertEqual(e.exception.status, 0x0201)
        self.assertNotIn("CHAP_R", e.exception.keys)
        self.assertNotIn("CHAP_N", e.exception.keys)
        c.close()

    def test_one_targets_credentials_do_not_open_another(self):
        # Each target's user with its own secret, on the other targets: the name and the secret
        # are checked together, per target.
        source = "127.0.0.23"
        tries = [("mutual", ("alice", SECRET)), ("chap", ("bob", SECRET)),
                 ("chap", ("carol", CAROL_SECRET)), ("mutual", ("carol", CAROL_SECRET)),
                 ("chap", ("alice", CAROL_SECRET)), ("chapacl", ("carol", SECRET)),
                 ("chapacl", ("alice", SECRET))]
        for n, (target, chap) in enumerate(tries):
            # chapacl admits JUMPER only: its tries share that name, two of them.
            initiator = JUMPER if target == "chapacl" else f"{OTHER}-cred-{n}"
            self.assertEqual(self.login_status(target, initiator, source=source, chap=chap),
                             0x0201, (target, chap))
        # And each still opens its own target from that source.
        for target, chap in (("chap", ("alice", SECRET)), ("chapacl", ("carol", CAROL_SECRET))):
            initiator = JUMPER if target == "chapacl" else OTHER + "-cred-ok"
            self.assertEqual(self.login_status(target, initiator, source=source, chap=chap), 0,
                             target)

    def test_a_wrong_discovery_secret_is_refused(self):
        d = self.d
        d.ctl("auth", "set", "--discovery", "--user", "disco", "--secret-file", "-",
              input=DISCOVERY_SECRET)
        try:
            source = "127.0.0.24"
            for n, chap in enumerate((("disco", "wrong-discovery-secret"), ("disco", SECRET),
                                      ("alice", SECRET))):
                self.assertEqual(self.login_status(None, f"{OTHER}-disco-{n}", source=source,
                                                   chap=chap), 0x0201, chap)
            self.assertEqual(self.login_status(None, OTHER + "-disco-ok", source=source,
                                               chap=("disco", DISCOVERY_SECRET)), 0)
        finally:
            d.ctl("auth", "clear", "--discovery")

    # ---- the stage-jump login (RFC 7143 6.3, 12): CHAP agreed, then straight to the operational
    # stage with T=1 NSG=3 and no CHAP at all. The target is in the security stage (it answered
    # T=0), so a request in the operational stage is refused 0x0200 and the connection closes.
    def stage_jump(self, target):
        c = Initiator(self.d.portal, JUMPER)
        names = [("InitiatorName", JUMPER)]
        names += [("SessionType", "Normal"), ("TargetName", target)] if target else \
            [("SessionType", "Discovery")]
        transit, keys = c._login_pdu(0, 3, False, names + [("AuthMethod", "CHAP")])
        self.assertEqual(keys.get("AuthMethod"), "CHAP")
        self.assertFalse(transit)
        with self.assertRaises(LoginError) as e:
            c._login_pdu(1, 3, True, [("HeaderDigest", "None"), ("DataDigest", "None"),
                                      ("MaxRecvDataSegmentLength", "8192")])
        self.assertEqual(e.exception.status, 0x0200)
        self.assertTrue(c.closed())
        c.close()
        # Skipping the security stage from the first request is refused as an authentication
        # failure, and asking to leave it before CHAP is answered T=0.
        c = Initiator(self.d.portal, JUMPER)
        with self.assertRaises(LoginError) as e:
            c._login_pdu(1, 3, True, names + [("MaxRecvDataSegmentLength", "8192")])
        self.assertEqual(e.exception.status, 0x0201)
        c.close()
        c = Initiator(self.d.portal, JUMPER)
        transit, _ = c._login_pdu(0, 3, True, names + [("AuthMethod", "CHAP")])
        self.assertFalse(transit)
        c.close()

    def test_stage_jump_past_chap_is_refused(self):
        before = self.d.metric("iscsigw_iscsi_logins_total", {"result": "initiator_error"})
        self.stage_jump(IQN_PREFIX + "chapacl")
        self.assertEqual(self.d.metric("iscsigw_iscsi_logins_total", {"result": "initiator_error"}),
                         before + 1)
        # No command on the LUN reached it: the honest login still works and sees the first UA.
        c = Initiator(self.d.portal, JUMPER)
        c.login(target=IQN_PREFIX + "chapacl", chap=("carol", CAROL_SECRET))
        self.assertEqual(c.test_unit_ready(0)[0], 0x02)  # POWER ON unit attention, first
        c.logout()

    def test_stage_jump_past_discovery_chap_is_refused(self):
        d = self.d
        d.ctl("auth", "set", "--discovery", "--user", "disco", "--secret-file", "-",
              input=DISCOVERY_SECRET)
        try:
            self.stage_jump(None)
        finally:
            d.ctl("auth", "clear", "--discovery")

    def test_discovery_chap(self):
        d = self.d
        d.ctl("auth", "set", "--discovery", "--user", "disco", "--secret-file", "-",
              input=DISCOVERY_SECRET)
        try:
            self.assertEqual(self.login_status(None), 0x0201)
            c = Initiator(d.portal, INITIATOR)
            c.login(chap=("disco", DISCOVERY_SECRET))
            self.assertIn(IQN_PREFIX + "acl", c.send_targets())
            c.close()
            p = run(["iscsi-ls", f"iscsi://{d.portal}"], check=False)
            self.assertNotEqual(p.returncode, 0)
            out = run(["iscsi-ls", f"iscsi://disco%{DISCOVERY_SECRET}@{d.portal}"]).stdout
            self.assertIn(IQN_PREFIX + "chap", out)
        finally:
            d.ctl("auth", "clear", "--discovery")
        self.assertEqual(self.login_status(None), 0)


class ChapDigestsTest(unittest.TestCase):
    """--chap-digests: an operator refuses the weak digests; initiators that offer only those
    are refused 0x0201, the others get the first strong one of their list."""

    def test_only_the_digests_given_are_chosen(self):
        bad = Daemon(extra_args=["--chap-digests", "SHA-256,SHA-512"])
        self.addCleanup(bad.cleanup)
        p = subprocess.run(bad.args, capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn('--chap-digests: CHAP digest "sha-512" is not one of', p.stderr)

        d = Daemon(extra_args=["--chap-digests", "SHA-256,SHA3-256"]).start()
        self.addCleanup(d.cleanup)
        d.ctl("target", "create", "strong")
        d.ctl("lun", "create", "strong", "0", "--size", "1M")
        d.ctl("acl", "allow-any", "strong", "on")
        d.ctl("auth", "set", "strong", "--user", "alice", "--secret-file", "-", input=SECRET)
        status = lambda algorithms: login_status(d.portal, INITIATOR, IQN_PREFIX + "strong",
                                                 chap=("alice", SECRET), algorithms=algorithms)
        self.assertEqual(status("5"), 0x0201)
        self.assertEqual(status("5,6"), 0x0201)
        self.assertEqual(status("5,8"), 0)
        self.assertEqual(status("7"), 0)
        # libiscsi offers MD5 only unless told otherwise: refused too.
        p = run(["iscsi-inq", f"iscsi://alice%{SECRET}@{d.portal}/{IQN_PREFIX}strong/0"],
                check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("no supported algorithm in CHAP_A=5", d.read_log())


if __name__ == "__main__":
    unittest.main()
