"""The control plane end to end: iscsigwctl against the real iscsigwd, the state file across
restarts and kill -9, live configuration changes seen by logged-in sessions, TLS."""
import json
import os
import shutil
import subprocess
import tempfile
import threading
import unittest

from iscsigw_test.harness import (IQN_PREFIX, INITIATOR, Daemon, binary, run, simple_state, wait_for)
from iscsigw_test.iscsi_client import Initiator, sense_key_asc

MiB = 1 << 20


def read(path):
    with open(path) as f:
        return f.read()
PATTERN = bytes((i * 7 + 3) & 0xFF for i in range(4096))


class Fixture(unittest.TestCase):
    """A fresh daemon per test (no bootstrap unless the test gives one)."""

    def start(self, **kw):
        d = Daemon(**kw).start()
        self.addCleanup(d.cleanup)
        return d


class CliEndToEndTest(Fixture):
    def test_create_reach_restart_and_data_survives(self):
        d = self.start()
        img = os.path.join(d.state_dir, "db0.img")
        self.assertIn("target iqn.2026-11.io.iscsigw:db created", d.ctl("target", "create", "db").stdout)
        d.ctl("lun", "create", "db", "0", "--backing", "file", "--path", img, "--create",
              "--size", "64M")
        # LUN 1: O_DIRECT. Direct applies to file backing only.
        d.ctl("lun", "create", "db", "1", "--backing", "file", "--path", img + ".direct",
              "--create", "--size", "8M", "--direct")
        wrong = d.ctl("lun", "create", "db", "2", "--backing", "ram", "--size", "8M", "--direct",
                      check=False)
        self.assertNotEqual(wrong.returncode, 0)
        self.assertIn("--direct apply to --backing file only", wrong.stderr)
        d.ctl("acl", "add", "db", INITIATOR)

        inq = run(["iscsi-inq", "-i", INITIATOR, d.url("db", 0)]).stdout
        self.assertIn("Peripheral Device Type:DIRECT_ACCESS", inq)
        serial_before = run(["iscsi-inq", "-i", INITIATOR, "-e", "1", "-c", "128",
                             d.url("db", 0)]).stdout

        c = Initiator(d.portal, INITIATOR)
        c.login(IQN_PREFIX + "db")
        c.test_unit_ready(0)  # consumes the power-on unit attention
        self.assertEqual(c.write(0, 100, PATTERN)[0], 0)
        status, data, _ = c.read(0, 100, 8)
        self.assertEqual((status, data), (0, PATTERN))
        c.test_unit_ready(1)
        self.assertEqual(c.write(1, 8, PATTERN)[0], 0)
        self.assertEqual(c.read(1, 8, 8)[:2], (0, PATTERN))
        self.assertEqual(c.logout(), 0)
        c.close()
        before = d.ctl_json("target", "get", "db")
        self.assertEqual([lun.get("file", {}).get("direct", False) for lun in before["luns"]],
                         [False, True])

        self.assertEqual(d.stop(), 0)
        d2 = self.start(state_dir=d.state_dir)
        after = d2.ctl_json("target", "get", "db")
        self.assertEqual(after, before)
        self.assertEqual([e["initiator"] for e in after["acl"]], [INITIATOR])
        self.assertEqual(after["luns"][0]["size_bytes"], str(64 * MiB))
        self.assertEqual(run(["iscsi-inq", "-i", INITIATOR, "-e", "1", "-c", "128",
                              d2.url("db", 0)]).stdout, serial_before)
        c = Initiator(d2.portal, INITIATOR)
        c.login(IQN_PREFIX + "db")
        c.test_unit_ready(0)
        status, data, _ = c.read(0, 100, 8)
        self.assertEqual((status, data), (0, PATTERN))
        c.close()

    def test_tables_json_and_exit_codes(self):
        d = self.start()
        d.ctl("target", "create", "t1", "--alias", "first", "--allow-any-initiator")
        d.ctl("lun", "create", "t1", "0", "--size", "32M")
        d.ctl("lun", "create", "t1", "1", "--backing", "null", "--size", "1G", "--block-size", "4096")
        table = d.ctl("target", "list").stdout.splitlines()
        self.assertEqual(table[0].split(), ["NAME", "LUNS", "ACL", "ANY", "CHAP", "ALIAS"])
        self.assertEqual(table[1].split(), [IQN_PREFIX + "t1", "2", "0", "yes", "-", "first"])
        luns = d.ctl_json("lun", "list", "t1")["luns"]
        self.assertEqual([(l["id"], l["size_bytes"], l["block_size"]) for l in luns],
                         [(0, str(32 * MiB), 512), (1, str(1 << 30), 4096)])
        self.assertIn("ram", luns[0])
        self.assertIn("null", luns[1])

        p = d.ctl("target", "get", "nosuch", check=False)
        self.assertEqual(p.returncode, 5)
        self.assertEqual(p.stderr, "iscsigwctl: NOT_FOUND: target iqn.2026-11.io.iscsigw:nosuch not found\n")
        p = d.ctl("target", "create", "t1", check=False)
        self.assertEqual(p.returncode, 6)
        self.assertEqual(p.stderr.count("\n"), 1)
        p = d.ctl("lun", "create", "t1", "2", "--size", "1000", check=False)
        self.assertEqual(p.returncode, 3)
        self.assertIn("size_bytes 1000 is not a multiple of block_size 512", p.stderr)
        p = d.ctl("lun", "resize", "t1", "0", "16M", check=False)
        self.assertEqual(p.returncode, 9)
        self.assertIn("shrinking is not supported", p.stderr)
        p = d.ctl("lun", "frobnicate", check=False)
        self.assertEqual(p.returncode, 64)
        p = run([binary("iscsigwctl"), "--server", "127.0.0.1:1", "--timeout", "2", "gateway",
                 "info"], check=False)
        self.assertEqual(p.returncode, 14)
        self.assertTrue(p.stderr.startswith("iscsigwctl: UNAVAILABLE: "))

    def test_idempotent_create_with_request_id(self):
        d = self.start()
        d.ctl("target", "create", "r", "--request-id", "abc")
        d.ctl("target", "create", "r", "--request-id", "abc")
        d.ctl("lun", "create", "r", "0", "--size", "4M", "--request-id", "l0")
        d.ctl("lun", "create", "r", "0", "--size", "4M", "--request-id", "l0")
        self.assertEqual(len(d.ctl_json("target", "list")["targets"]), 1)
        self.assertEqual(len(d.ctl_json("lun", "list", "r")["luns"]), 1)

    def test_gateway_info(self):
        d = self.start(extra_args=["--reactors", "2"])
        info = d.ctl_json("gateway", "info")
        self.assertEqual(info["portals"], [d.portal])
        self.assertEqual(info["reactors"], 2)
        self.assertEqual(info["state_dir"], d.state_dir)
        self.assertTrue(info["state_dir_healthy"])
        self.assertRegex(info["version"], r"^\d+\.\d+\.\d+$")
        self.assertIn("uptime:", d.ctl("gateway", "info").stdout)


class LiveChangesTest(Fixture):
    def session(self, d, target="live"):
        c = Initiator(d.portal, INITIATOR)
        self.addCleanup(c.close)
        c.login(IQN_PREFIX + target)
        status, sense = c.test_unit_ready(0)
        self.assertEqual((status, sense_key_asc(sense)), (2, (6, 0x29, 0x00)))  # power on
        self.assertEqual(c.test_unit_ready(0)[0], 0)
        return c

    def test_new_lun_and_resize_reach_a_logged_in_session(self):
        d = self.start(state=simple_state("live"))
        c = self.session(d)
        d.ctl("lun", "create", "live", "1", "--size", "8M")
        status, sense = c.test_unit_ready(0)
        # SPC-4: REPORTED LUNS DATA HAS CHANGED on the LUNs the session already had.
        self.assertEqual((status, sense_key_asc(sense)), (2, (6, 0x3F, 0x0E)))
        c.test_unit_ready(1)  # the new LUN's own power-on attention
        self.assertEqual(c.write(1, 0, PATTERN)[0], 0)
        self.assertEqual(c.read(1, 0, 8)[:2], (0, PATTERN))

        d.ctl("lun", "resize", "live", "0", "128M")
        status, sense = c.test_unit_ready(0)
        self.assertEqual((status, sense_key_asc(sense)), (2, (6, 0x2A, 0x09)))
        status, size, _ = c.read_capacity(0)
        self.assertEqual((status, size), (0, 128 * MiB))
        # The grown range is usable.
        self.assertEqual(c.write(0, 128 * MiB // 512 - 8, PATTERN)[0], 0)
        self.assertEqual(c.read(0, 128 * MiB // 512 - 8, 8)[:2], (0, PATTERN))
        out = run(["iscsi-readcapacity16", d.url("live", 0)]).stdout
        self.assertIn(f"Total size:{128 * MiB}", out)

    def test_session_list_and_kill_asks_for_logout_then_drops(self):
        d = self.start(state=simple_state("live"))
        c = self.session(d)
        sessions = d.ctl_json("session", "list")["sessions"]
        self.assertEqual(len(sessions), 1)
        s = sessions[0]
        self.assertEqual(s["target"], IQN_PREFIX + "live")
        self.assertEqual(s["initiator_name"], INITIATOR)
        self.assertEqual(s["isid"], c.isid.hex())
        self.assertEqual(s["tsih"], c.tsih)
        self.assertTrue(s["connections"][0]["peer"].startswith("127.0.0.1:"))
        self.assertEqual(s["parameters"]["HeaderDigest"], "None")
        self.assertEqual(s["parameters"]["MaxBurstLength"], "262144")
        self.assertIn("reactor", d.ctl("session", "list").stdout.splitlines()[0].lower())

        d.ctl("session", "kill", str(c.tsih), "--timeout", "1")
        event, seconds = c.wait_async()
        self.assertEqual((event, seconds), (1, 1))  # RFC 7143 11.9.1: logout requested
        # This initiator ignores the request: the target drops the connection after the timeout.
        self.assertTrue(wait_for(c.closed, timeout=10, what="the dropped connection"))
        wait_for(lambda: not d.ctl_json("session", "list").get("sessions"), what="no sessions")

        c2 = self.session(d)
        d.ctl("session", "kill", str(c2.tsih))
        self.assertEqual(c2.wait_async()[0], 1)
        self.assertEqual(c2.logout(), 0)  # a polite initiator logs out
        self.assertEqual(d.ctl("session", "kill", "999", check=False).returncode, 5)

    def test_delete_target_with_sessions_needs_force(self):
        d = self.start(state=simple_state("live"))
        c = self.session(d)
        p = d.ctl("target", "delete", "live", check=False)
        self.assertEqual(p.returncode, 9)
        self.assertIn("has 1 session(s)", p.stderr)
        out = d.ctl("target", "delete", "live", "--force").stdout
        self.assertIn("1 session(s) terminated", out)
        self.assertEqual(c.wait_async()[0], 1)
        self.assertTrue(wait_for(c.closed, timeout=10, what="the dropped connection"))
        self.assertEqual(d.ctl_json("target", "list").get("targets", []), [])


class DurabilityTest(Fixture):
    def test_corrupt_state_file_stops_the_start_and_is_left_alone(self):
        d = self.start()
        d.ctl("target", "create", "x")
        self.assertEqual(d.stop(), 0)
        path = os.path.join(d.state_dir, "state.json")
        broken = read(path)[:-20]
        with open(path, "w") as f:
            f.write(broken)
        p = subprocess.run([binary("iscsigwd"), "--state-dir", d.state_dir, "--portal",
                            "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"],
                           capture_output=True, text=True, timeout=30)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(f"state file {path}: ", p.stderr)
        self.assertIn("not starting", p.stderr)
        self.assertEqual(read(path), broken)

    def test_hand_broken_value_names_the_field(self):
        d = Daemon()
        self.addCleanup(d.cleanup)
        with open(os.path.join(d.state_dir, "state.json"), "w") as f:
            json.dump({"targets": [{"name": "x", "luns": [{"id": 300, "ram": {},
                                                         "sizeBytes": "4096"}]}]}, f)
        p = subprocess.run(d.args, capture_output=True, text=True, timeout=30)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("lun 300 of iqn.2026-11.io.iscsigw:x: id 300 is out of range 0..255",
                      p.stderr)

    def test_state_file_is_private(self):
        d = self.start()
        secret = os.path.join(d.state_dir, "secret")
        with open(secret, "w") as f:
            f.write("a-long-chap-secret\n")
        d.ctl("target", "create", "s")
        d.ctl("auth", "set", "s", "--user", "u", "--secret-file", secret)
        st = os.stat(os.path.join(d.state_dir, "state.json"))
        self.assertEqual(st.st_mode & 0o777, 0o600)
        self.assertNotIn("a-long-chap-secret", d.read_log())
        self.assertNotIn("a-long-chap-secret", d.ctl("target", "get", "s", output="json").stdout)

    def test_a_state_dir_others_can_write_stops_the_start(self):
        # docs/security.md, "The state directory": it holds the CHAP secrets and says which
        # files are LUNs; one that another user owns or may write is not trusted.
        def start_in(mode, owner=None):
            state_dir = tempfile.mkdtemp(prefix="iscsigw-trust-")
            self.addCleanup(shutil.rmtree, state_dir, True)
            os.chmod(state_dir, mode)
            if owner is not None:
                os.chown(state_dir, *owner)
            return subprocess.run([binary("iscsigwd"), "--state-dir", state_dir, "--portal",
                                   "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
                                   "--metrics-listen", "127.0.0.1:0"],
                                  capture_output=True, text=True, timeout=30), state_dir

        for mode, owner, why in ((0o777, None, "writable by every user"),
                                 (0o1777, None, "writable by every user"),
                                 (0o770, (0, 4242), "writable by group 4242"),
                                 (0o700, (65534, 65534), "not owned by the daemon's user")):
            p, state_dir = start_in(mode, owner)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(f"state dir {state_dir}", p.stderr)
            self.assertIn(why, p.stderr)
            self.assertEqual(os.listdir(state_dir), [])  # nothing written there

    def test_an_fsgroup_volume_is_trusted_by_a_non_root_daemon(self):
        # As Kubernetes prepares a volume for fsGroup 10001: root's, group 10001, setgid, g+rwx;
        # the daemon runs as 10001:10001.
        state_dir = tempfile.mkdtemp(prefix="iscsigw-fsgroup-")
        self.addCleanup(shutil.rmtree, state_dir, True)
        os.chown(state_dir, 0, 10001)
        os.chmod(state_dir, 0o2770)
        p = subprocess.Popen(["setpriv", "--reuid", "10001", "--regid", "10001", "--clear-groups",
                              binary("iscsigwd"), "--state-dir", state_dir, "--portal",
                              "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
                              "--metrics-listen", "127.0.0.1:0", "--backing-allow", state_dir],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            wait_for(lambda: p.poll() is not None or
                     os.path.exists(os.path.join(state_dir, "ports.json")), 30,
                     what="ports.json from the daemon running as 10001")
            self.assertIsNone(p.poll(), p.stdout.read() if p.poll() is not None else "")
        finally:
            p.terminate()
            p.wait(timeout=30)

    def test_kill_9_during_api_calls_never_leaves_an_unreadable_state_file(self):
        d = self.start()
        for round_ in range(3):
            stop = threading.Event()

            def burst(n=round_):
                i = 0
                while not stop.is_set():
                    run([binary("iscsigwctl"), "--server", d.grpc, "--timeout", "5", "target",
                         "create", f"k{n}-{i}"], check=False)
                    i += 1

            threads = [threading.Thread(target=burst) for _ in range(3)]
            for t in threads:
                t.start()
            wait_for(lambda: len(json.loads(read(os.path.join(d.state_dir, "state.json")))
                                 .get("targets", [])) >= 3 * (round_ + 1),
                     what="a few targets created")
            d.proc.kill()
            d.proc.wait()
            stop.set()
            for t in threads:
                t.join()
            d.log.close()
            d.proc = None
            with open(os.path.join(d.state_dir, "state.json")) as f:
                targets = json.load(f)["targets"]
            d.start()
            listed = d.ctl_json("target", "list")["targets"]
            self.assertEqual(sorted(t["name"] for t in listed), sorted(t["name"] for t in targets))
            self.assertGreaterEqual(len(listed), 3 * (round_ + 1))

    def test_bootstrap_is_idempotent_on_top_of_persisted_state(self):
        boot = simple_state("boot", allow_any=True)
        d = self.start(state=boot)
        d.ctl("acl", "allow-any", "boot", "off")
        d.ctl("lun", "resize", "boot", "0", "128M")
        d.ctl("lun", "create", "boot", "1", "--size", "4M")
        before = d.ctl_json("target", "get", "boot")
        self.assertEqual(d.stop(), 0)
        d2 = self.start(state_dir=d.state_dir, bootstrap=os.path.join(d.state_dir, "bootstrap.json"))
        self.assertEqual(d2.ctl_json("target", "get", "boot"), before)
        self.assertFalse(before.get("allow_any_initiator", False))
        self.assertEqual(len(d2.ctl_json("target", "list")["targets"]), 1)


class TlsTest(Fixture):
    SERVICE = "iscsigw-grpc.storage.svc"

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="iscsigw-tls-")
        cls.addClassCleanup(shutil.rmtree, cls.dir, True)

        def sh(*args):
            subprocess.run(args, check=True, capture_output=True, cwd=cls.dir)

        # "rogue" is a CA the daemon does not trust, with a client certificate of its own.
        for ca in ("ca", "rogue"):
            sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
               "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-subj", f"/CN=iscsigw test {ca}")
        loopback = "DNS:localhost,IP:127.0.0.1"
        # "service" is what a cluster's certificate looks like: it names the gRPC Service only,
        # so a client dialing 127.0.0.1 inside the pod must be told which name to verify.
        for name, cn, ca, san in (("server", "localhost", "ca", loopback),
                                  ("client", "iscsigwctl", "ca", loopback),
                                  ("rogue-client", "iscsigwctl", "rogue", loopback),
                                  ("service", cls.SERVICE, "ca", "DNS:" + cls.SERVICE)):
            sh("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
               "-out", f"{name}.csr", "-subj", f"/CN={cn}")
            with open(os.path.join(cls.dir, "ext.cnf"), "w") as f:
                f.write(f"subjectAltName={san}\n")
            sh("openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey",
               f"{ca}.key", "-CAcreateserial", "-days", "2", "-out", f"{name}.pem",
               "-extfile", "ext.cnf")

    def f(self, name):
        return os.path.join(self.dir, name)

    def ctl(self, d, *args):
        return run([binary("iscsigwctl"), "--server", d.grpc, "--timeout", "5", *args],
                   check=False)

    def ctl_env(self, env, *args):
        """iscsigwctl with no connection flags: everything from the ISCSIGW_* variables."""
        clean = {k: v for k, v in os.environ.items() if not k.startswith("ISCSIGW_")}
        return subprocess.run([binary("iscsigwctl"), "--timeout", "5", *args],
                              env={**clean, **env}, capture_output=True, text=True, timeout=60)

    def test_tls_and_mutual_tls(self):
        d = self.start(extra_args=["--tls-cert", self.f("server.pem"), "--tls-key",
                                   self.f("server.key")])
        self.assertEqual(self.ctl(d, "gateway", "info").returncode, 14)  # plaintext refused
        ok = self.ctl(d, "--tls-ca", self.f("ca.pem"), "gateway", "info")
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertIn("(TLS)", d.read_log())
        d.stop()

        m = self.start(extra_args=["--tls-cert", self.f("server.pem"), "--tls-key",
                                   self.f("server.key"), "--tls-client-ca", self.f("ca.pem")])
        client = ["--tls-ca", self.f("ca.pem"), "--tls-cert", self.f("client.pem"), "--tls-key",
                  self.f("client.key")]
        rogue = ["--tls-ca", self.f("ca.pem"), "--tls-cert", self.f("rogue-client.pem"),
                 "--tls-key", self.f("rogue-client.key")]
        # The handshake fails without a client certificate, or with one from a CA the daemon
        # does not trust: UNAVAILABLE, and the change asked for is not made.
        for creds in (["--tls-ca", self.f("ca.pem")], rogue):
            p = self.ctl(m, *creds, "target", "create", "mtls")
            self.assertEqual(p.returncode, 14, p.stderr)
            self.assertTrue(p.stderr.startswith("iscsigwctl: UNAVAILABLE: "), p.stderr)
        self.assertEqual(self.ctl(m, "gateway", "info").returncode, 14)  # plaintext
        ok = self.ctl(m, *client, "gateway", "info")
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertIn("(mutual TLS)", m.read_log())
        listed = self.ctl(m, *client, "-o", "json", "target", "list")
        self.assertEqual(json.loads(listed.stdout).get("targets", []), [])
        ok = self.ctl(m, *client, "target", "create", "mtls")
        self.assertEqual(ok.returncode, 0, ok.stderr)
        listed = self.ctl(m, *client, "-o", "json", "target", "list")
        self.assertEqual([t["name"] for t in json.loads(listed.stdout)["targets"]],
                         [IQN_PREFIX + "mtls"])

    def open_api(self, *extra):
        """A daemon whose gRPC listens on every address (docs/security.md)."""
        d = Daemon()
        i = d.args.index("--grpc-listen")
        d.args[i + 1] = "0.0.0.0:0"
        d.args += list(extra)
        self.addCleanup(d.cleanup)
        return d

    def test_admin_api_off_loopback_needs_client_certificates_or_an_explicit_insecure(self):
        # Refused: it exits 2 before binding anything, naming the flags that would allow it.
        d = self.open_api("--tls-cert", self.f("server.pem"), "--tls-key", self.f("server.key"))
        p = subprocess.run(d.args, capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2, p.stderr)
        for flag in ("--tls-client-ca", "--grpc-insecure", "0.0.0.0:0"):
            self.assertIn(flag, p.stderr)
        self.assertFalse(os.path.exists(os.path.join(d.state_dir, "ports.json")))

        # Said out loud: it starts, and warns.
        d = self.open_api("--grpc-insecure").start()
        port = d.grpc.rpartition(":")[2]
        ok = run([binary("iscsigwctl"), "--server", f"127.0.0.1:{port}", "gateway", "info"])
        self.assertEqual(ok.returncode, 0)
        self.assertIn("without client certificates (--grpc-insecure)", d.read_log())

        # Mutual TLS: it starts without the warning, and only a client certificate gets in.
        m = self.open_api("--tls-cert", self.f("server.pem"), "--tls-key", self.f("server.key"),
                          "--tls-client-ca", self.f("ca.pem")).start()
        port = m.grpc.rpartition(":")[2]
        server = f"127.0.0.1:{port}"
        p = run([binary("iscsigwctl"), "--server", server, "--timeout", "5", "--tls-ca",
                 self.f("ca.pem"), "gateway", "info"], check=False)
        self.assertEqual(p.returncode, 14, p.stderr)
        ok = run([binary("iscsigwctl"), "--server", server, "--timeout", "5", "--tls-ca",
                  self.f("ca.pem"), "--tls-cert", self.f("client.pem"), "--tls-key",
                  self.f("client.key"), "gateway", "info"], check=False)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertNotIn("--grpc-insecure", m.read_log())

        # Loopback and unix sockets need neither.
        u = Daemon()
        i = u.args.index("--grpc-listen")
        sock = os.path.join(u.state_dir, "api.sock")
        u.args[i + 1] = "unix:" + sock
        self.addCleanup(u.cleanup)
        u.start()
        ok = run([binary("iscsigwctl"), "--server", "unix:" + sock, "gateway", "info"],
                 check=False)
        self.assertEqual(ok.returncode, 0, ok.stderr)

    def test_in_pod_cli_verifies_the_service_name_from_the_environment(self):
        # The gateway pod's iscsigwctl: 127.0.0.1, the CA and the Service's name from the pod's
        # environment (the chart and deploy/overlays/grpc-tls set them), and a certificate
        # with no IP SAN.
        d = self.start(extra_args=["--tls-cert", self.f("service.pem"), "--tls-key",
                                   self.f("service.key")])
        env = {"ISCSIGW_SERVER": d.grpc, "ISCSIGW_TLS_CA": self.f("ca.pem"),
               "ISCSIGW_TLS_SERVER_NAME": self.SERVICE}
        self.assertTrue(d.grpc.startswith("127.0.0.1:"), d.grpc)
        ok = self.ctl_env(env, "-o", "json", "gateway", "info")
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertIn("version", json.loads(ok.stdout))
        # A flag wins over its variable.
        wrong = self.ctl_env(env, "--tls-server-name", "other.example", "gateway", "info")
        self.assertEqual(wrong.returncode, 14, wrong.stderr)

        # Without the name the certificate is checked against 127.0.0.1, which it does not
        # carry: UNAVAILABLE, one line that says so and names the way out.
        del env["ISCSIGW_TLS_SERVER_NAME"]
        p = self.ctl_env(env, "gateway", "info")
        self.assertEqual(p.returncode, 14, p.stderr)
        self.assertTrue(p.stderr.startswith("iscsigwctl: UNAVAILABLE: "), p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertIn("--tls-server-name", p.stderr)

        # The name without TLS is a usage error, not a silent plaintext connection.
        p = self.ctl_env({"ISCSIGW_SERVER": d.grpc, "ISCSIGW_TLS_SERVER_NAME": self.SERVICE},
                         "gateway", "info")
        self.assertEqual(p.returncode, 64, p.stderr)
        self.assertIn("--tls-server-name needs TLS", p.stderr)


if __name__ == "__main__":
    unittest.main()
