"""The gRPC control plane under abuse: oversized requests, floods of creates past the limits,
names that are not names, and many clients changing the same objects at once. Each test checks
that the daemon answers with the documented status, stays up, stays within its memory bound, and
that the state file stays valid JSON that matches the API and survives a restart.

The calls go through Python's grpcio (Debian python3-grpcio) with message classes generated from
proto/ into a temporary directory at import (iscsigw_test.csi_stubs), so the test sees the API
exactly as any client does; malformed bytes are sent with an identity serializer.
"""
import json
import os
import random
import sys
import threading
import time
import unittest

import grpc

from iscsigw_test.csi_stubs import gateway_pb2 as pb
from iscsigw_test.csi_stubs import state_pb2 as st
from iscsigw_test.harness import IQN_PREFIX, Daemon


MiB = 1 << 20
SERVICE = "/iscsigw.v1.GatewayService/"
RESPONSES = {
    "CreateTarget": st.Target, "GetTarget": st.Target, "ListTargets": pb.ListTargetsResponse,
    "DeleteTarget": pb.DeleteTargetResponse, "CreateLun": st.Lun, "ListLuns": pb.ListLunsResponse,
    "DeleteLun": pb.DeleteLunResponse, "AddAclEntry": st.AclEntry,
    "ListAclEntries": pb.ListAclEntriesResponse, "RemoveAclEntry": pb.RemoveAclEntryResponse,
    "SetChap": st.ChapConfig, "GetGatewayInfo": pb.GatewayInfo,
}
# The flood's target limit. The default, 4096 (docs/reference/api.md "Limits",
# controlplane/state/limits.h), is reached the same way, but every change rewrites the whole
# state, so filling 4096 targets takes ~20 s of daemon CPU on its own (~45 s on a busy 2-core
# machine); 1024 keeps the test short.
FLOOD_MAX_TARGETS = 1024
# The daemon's resident memory after the flood (docs/reference/api.md "Limits": 40 MiB measured
# with 4096 targets).
RSS_BOUND = 128 * MiB
# Under ASan (scripts/sanitized.sh) most of the RSS is the sanitizer's quarantine: not judged.
SANITIZED = os.environ.get("ISCSIGW_SANITIZED") == "1"
INITIATOR_PREFIX = "iqn.2026-11.io.iscsigw.test:"


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


class Client:
    """GatewayService over one channel; call(...) raises grpc.RpcError, code(...) returns it."""

    def __init__(self, address, credentials=None, options=()):
        self.channel = (grpc.secure_channel(address, credentials, options) if credentials
                        else grpc.insecure_channel(address, options))
        self.methods = {}

    def method(self, name, raw=False):
        key = (name, raw)
        if key not in self.methods:
            self.methods[key] = self.channel.unary_unary(
                SERVICE + name,
                request_serializer=(lambda b: b) if raw else (lambda m: m.SerializeToString()),
                response_deserializer=RESPONSES[name].FromString)
        return self.methods[key]

    def call(self, name, request, timeout=30):
        return self.method(name, raw=isinstance(request, bytes))(request, timeout=timeout)

    def code(self, name, request, timeout=30):
        try:
            self.call(name, request, timeout)
            return grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            return e.code(), e.details() or ""

    def targets(self):
        """Every target, following the page tokens."""
        out, token = [], ""
        while True:
            page = self.call("ListTargets", pb.ListTargetsRequest(page_size=1000, page_token=token))
            out.extend(page.targets)
            token = page.next_page_token
            if not token:
                return out

    def close(self):
        self.channel.close()


def create_target(name, **kw):
    return pb.CreateTargetRequest(target=st.Target(name=name, **kw))


def null_lun(target, lun_id, **kw):
    return pb.CreateLunRequest(target=target, lun=st.Lun(id=lun_id, null=st.NullBacking(),
                                                         size_bytes=MiB, **kw))


def file_lun(target, lun_id, path):
    return pb.CreateLunRequest(target=target, lun=st.Lun(
        id=lun_id, file=st.FileBacking(path=path, create=True), size_bytes=MiB))


def acl(target, initiator, sources=()):
    return pb.AddAclEntryRequest(target=target,
                                 entry=st.AclEntry(initiator=initiator, sources=list(sources)))


def run_window(client, requests, window=128):
    """Issues every (method, request) with at most `window` in flight on one channel; returns the
    status codes in request order. The fast path for floods: one channel, futures, no threads."""
    codes = [None] * len(requests)
    slots = threading.Semaphore(window)
    done = threading.Event()
    left = [len(requests)]
    lock = threading.Lock()

    def finished(i, fut):
        err = fut.exception()
        codes[i] = grpc.StatusCode.OK if err is None else err.code()
        slots.release()
        with lock:
            left[0] -= 1
            if left[0] == 0:
                done.set()

    for i, (name, req) in enumerate(requests):
        slots.acquire()
        fut = client.method(name).future(req, timeout=120)
        fut.add_done_callback(lambda f, i=i: finished(i, f))
    if requests:
        done.wait(300)
    return codes


def encode_varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def varint_field(number, value):
    return encode_varint(number << 3) + encode_varint(value)


def field(number, payload):
    """A length-delimited protobuf field (strings, bytes and messages alike)."""
    return encode_varint(number << 3 | 2) + encode_varint(len(payload)) + payload


class Fixture(unittest.TestCase):
    def start(self, *extra, state_dir=None):
        d = Daemon(extra_args=list(extra), state_dir=state_dir).start()
        self.addCleanup(d.cleanup)
        c = Client(d.grpc)
        self.addCleanup(c.close)
        return d, c

    def restart(self, d):
        self.assertEqual(d.stop(), 0, d.read_log()[-3000:])
        d.start()
        c = Client(d.grpc)
        self.addCleanup(c.close)
        return c

    def state_file(self, d):
        with open(os.path.join(d.state_dir, "state.json")) as f:
            return json.load(f)  # fails the test if the file is not valid JSON

    def assert_alive(self, d, c):
        self.assertIsNone(d.proc.poll(), d.read_log()[-3000:])
        info = c.call("GetGatewayInfo", pb.GetGatewayInfoRequest())
        self.assertTrue(info.state_dir_healthy)
        return info

    def assert_state_matches_api(self, d, c):
        """The state file, ListTargets and each target's LUNs and ACL agree; returns a summary."""
        listed = {}
        for t in c.targets():
            luns = sorted(l.id for l in c.call("ListLuns", pb.ListLunsRequest(target=t.name)).luns)
            entries = sorted(e.initiator for e in
                             c.call("ListAclEntries", pb.ListAclEntriesRequest(target=t.name)).entries)
            listed[t.name] = (luns, entries)
        on_disk = {t["name"]: (sorted(l.get("id", 0) for l in t.get("luns", [])),
                               sorted(e["initiator"] for e in t.get("acl", [])))
                   for t in self.state_file(d).get("targets", [])}
        self.assertEqual(listed, on_disk)
        return listed


class OversizedMessageTest(Fixture):
    def test_oversized_request_is_resource_exhausted_and_the_largest_legitimate_one_fits(self):
        d, c = self.start()
        before = self.state_file(d)

        # 4 MiB (controlplane/service/server.h kMaxRequestBytes) plus a little: refused by gRPC
        # before it is parsed.
        code, details = c.code("CreateTarget", create_target("big", alias="a" * (4 * MiB + 1)))
        self.assertEqual(code, grpc.StatusCode.RESOURCE_EXHAUSTED, details)
        code, _ = c.code("CreateTarget", bytes(5 * MiB))
        self.assertEqual(code, grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assert_alive(d, c)
        self.assertEqual(self.state_file(d), before)

        # The largest legitimate request: a target with the most ACL entries a target may have,
        # each a 223-byte name (RFC 7143 4.2.7.1) with the most sources an entry may have.
        entries = []
        for i in range(4096):
            name = f"{INITIATOR_PREFIX}{i:06d}-"
            entries.append(st.AclEntry(
                initiator=name + "x" * (223 - len(name)),
                sources=[f"fd00:{i:x}:ffff:ffff:ffff:ffff:ffff:{k:x}00/120" for k in range(8)]))
        req = create_target("largest", acl=entries)
        size = req.ByteSize()
        self.assertGreater(size, 2 * MiB)
        self.assertLess(size, 4 * MiB)
        c.call("CreateTarget", req, timeout=60)
        got = c.call("GetTarget", pb.GetTargetRequest(name="largest"))  # fits a 4 MiB client
        self.assertEqual(len(got.acl), 4096)
        self.assertEqual(list(got.acl[4095].sources), list(entries[4095].sources))
        # One more entry is past the limit.
        code, details = c.code("AddAclEntry", acl("largest", INITIATOR_PREFIX + "one-more"))
        self.assertEqual(code, grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("already has 4096 entries, the limit per target (--max-acl-entries)", details)

        c = self.restart(d)
        self.assertEqual(c.call("GetTarget", pb.GetTargetRequest(name="largest")), got)


class FloodTest(Fixture):
    def test_100k_creates_hold_every_limit_memory_and_the_state_file(self):
        args = ["--max-targets", str(FLOOD_MAX_TARGETS), "--max-luns-per-target", "32",
                "--max-acl-entries", "256", "--log-level", "info"]
        d, c = self.start(*args)
        c.call("CreateTarget", create_target("lunfull"))
        c.call("CreateTarget", create_target("aclfull"))
        rss_before = rss_bytes(d.proc.pid)

        total = 100_000
        requests = []
        for i in range(total):
            kind = i % 10
            if kind < 8:
                requests.append(("CreateTarget", create_target(f"f{i}")))
            elif kind == 8:
                requests.append(("AddAclEntry", acl("aclfull", f"{INITIATOR_PREFIX}i{i}")))
            else:
                requests.append(("CreateLun", null_lun("lunfull", (i // 10) % 256)))
        started = time.monotonic()
        codes = run_window(c, requests)
        elapsed = time.monotonic() - started
        rss_after = rss_bytes(d.proc.pid)
        print(f"\n{total} create calls in {elapsed:.1f} s ({total / elapsed:.0f}/s); daemon RSS "
              f"{rss_before / MiB:.0f} MiB before, {rss_after / MiB:.0f} MiB after",
              file=sys.stderr)

        def tally(kind):
            out = {}
            for (name, req), code in zip(requests, codes):
                if name == kind:
                    out[code] = out.get(code, 0) + 1
            return out

        ok, exhausted = grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED
        self.assertEqual(tally("CreateTarget"), {ok: FLOOD_MAX_TARGETS - 2,
                                                 exhausted: 80_000 - (FLOOD_MAX_TARGETS - 2)})
        self.assertEqual(tally("AddAclEntry"), {ok: 256, exhausted: 10_000 - 256})
        # 32 LUNs fit; later calls for an id that exists are ALREADY_EXISTS, for any other id
        # RESOURCE_EXHAUSTED.
        luns = tally("CreateLun")
        self.assertEqual(luns[ok], 32)
        self.assertEqual(set(luns), {ok, exhausted, grpc.StatusCode.ALREADY_EXISTS})
        if not SANITIZED:
            self.assertLess(rss_after, RSS_BOUND)

        code, details = c.code("CreateTarget", create_target("one-more"))
        self.assertEqual(code, exhausted)
        self.assertIn(f"already has {FLOOD_MAX_TARGETS} targets, the limit (--max-targets)",
                      details)
        code, details = c.code("CreateLun", null_lun("lunfull", 200))
        self.assertEqual(code, exhausted)
        self.assertIn("already has 32 LUNs, the limit per target (--max-luns-per-target)", details)

        info = self.assert_alive(d, c)
        self.assertEqual(info.targets, FLOOD_MAX_TARGETS)
        listed = self.assert_state_matches_api(d, c)
        self.assertEqual(len(listed), FLOOD_MAX_TARGETS)
        self.assertEqual(len(listed[IQN_PREFIX + "lunfull"][0]), 32)
        self.assertEqual(len(listed[IQN_PREFIX + "aclfull"][1]), 256)

        c = self.restart(d)
        self.assertEqual(self.assert_state_matches_api(d, c), listed)
        self.assertEqual(c.code("CreateTarget", create_target("still-full"))[0], exhausted)


class NamesTest(Fixture):
    BAD_TARGET_NAMES = [
        "iqn.2026-11.io.iscsigw:a\x01b",        # C0 control
        "iqn.2026-11.io.iscsigw:a\nb",          # newline (log injection)
        "iqn.2026-11.io.iscsigw:a\x00b",        # NUL (ends a text key value)
        "iqn.2026-11.io.iscsigw:a\x7f",         # DEL
        "iqn.2026-11.io.iscsigw:a\u0085b",      # C1 control (NEL)
        "iqn.2026-11.io.iscsigw:a\u202eb",      # printable but not an iSCSI name character
        "iqn.2026-11.io.iscsigw:a b",           # space
        "iqn.2026-11.IO.iscsigw:upper",         # RFC 7143 4.2.7.1: no upper case
        "iqn.2026-11.io.iscsigw:" + "x" * 201,  # 224 bytes: over 223
        "iqn.26-11.io.iscsigw:x",               # not iqn.YYYY-MM.
        "eui.02004567A425678D",                 # upper-case hex
        "eui.02004567a425678",                  # 15 hex digits
        "naa.52004567ba64678d1",                # 17 hex digits
        "naa.xyz4567ba64678d",                  # not hex
        "\x1b[31mred",                          # escape sequence under the default prefix
    ]

    def test_bad_names_paths_and_users_are_invalid_argument_and_change_nothing(self):
        d, c = self.start()
        c.call("CreateTarget", create_target("good"))
        c.call("CreateLun", null_lun("good", 0))
        c.call("AddAclEntry", acl("good", INITIATOR_PREFIX + "ok"))
        state_before = self.state_file(d)
        api_before = self.assert_state_matches_api(d, c)
        invalid = grpc.StatusCode.INVALID_ARGUMENT

        cases = [("CreateTarget", create_target(n)) for n in self.BAD_TARGET_NAMES]
        cases += [
            ("CreateTarget", create_target("alias", alias="bad\x1b[2Jalias")),
            ("CreateTarget", create_target("alias", alias="a" * 256)),
            ("CreateTarget", create_target("inacl", initiators=["iqn.2026-11.io.x:a\tb"])),
            ("CreateTarget", create_target("inacl", acl=[st.AclEntry(initiator="not a name")])),
            ("CreateLun", null_lun("good\n", 1)),  # a lookup by a name that is not one
            ("CreateLun", null_lun("good", 1, serial="\x01\x02")),
            ("CreateLun", null_lun("good", 1, serial="caf\u00e9")),  # VPD 0x80 is ASCII
            ("CreateLun", file_lun("good", 1, os.path.join(d.state_dir, "a\nb.img"))),
            ("CreateLun", file_lun("good", 1, os.path.join(d.state_dir, "nul\x00.img"))),
            ("CreateLun", file_lun("good", 1, "/" + "p" * 4095)),
            ("AddAclEntry", acl("good", INITIATOR_PREFIX + "x\r\ny")),
            ("AddAclEntry", acl("good", INITIATOR_PREFIX + "\u00e9")),
            ("AddAclEntry", acl("good", "iqn.2026-11.io.iscsigw.test:UPPER")),
            ("AddAclEntry", acl("good", "eui.0123")),
            ("AddAclEntry", acl("good", INITIATOR_PREFIX + "s", ["10.0.0.1/8"])),
            ("AddAclEntry", acl("good", INITIATOR_PREFIX + "s", ["10.0.0.0/8\n"])),
            ("AddAclEntry", acl("good", INITIATOR_PREFIX + "s",
                                [f"10.0.{k}.0/24" for k in range(9)])),
            ("SetChap", pb.SetChapRequest(target="good", chap=st.ChapConfig(
                user="user\x00name", secret="a-long-enough-secret"))),
            ("SetChap", pb.SetChapRequest(target="good", chap=st.ChapConfig(
                user="user\x7f", secret="a-long-enough-secret"))),
            ("SetChap", pb.SetChapRequest(target="good", chap=st.ChapConfig(
                user="u", secret="secret-with-\x1b-escape"))),
            ("SetChap", pb.SetChapRequest(chap=st.ChapConfig(  # discovery
                user="u\n", secret="a-long-enough-secret"))),
            ("DeleteTarget", pb.DeleteTargetRequest(name="good\x00")),
            ("GetTarget", pb.GetTargetRequest(name="good\u0090")),
        ]
        for name, req in cases:
            with self.subTest(rpc=name, request=str(req)[:120]):
                code, details = c.code(name, req)
                self.assertEqual(code, invalid, details)
                # The reason names the field and never echoes the control character itself.
                self.assertFalse(any(ord(ch) < 0x20 or 0x7f <= ord(ch) <= 0x9f for ch in details),
                                 repr(details))
        code, details = c.code("SetChap", cases[-4][1])
        self.assertEqual((code, details), (invalid, "chap.secret: byte 12 is control character U+001B"))
        code, details = c.code("CreateTarget", create_target("iqn.2026-11.io.iscsigw:a\u0085b"))
        self.assertEqual(details, "target.name: byte 24 is control character U+0085")

        self.assert_alive(d, c)
        self.assertEqual(self.state_file(d), state_before)
        self.assertEqual(self.assert_state_matches_api(d, c), api_before)
        log = d.read_log()
        self.assertNotIn("\x1b", log)
        self.assertNotIn("\x00", log)
        self.assertNotIn("a-long-enough-secret", log)

    def test_invalid_utf8_is_refused_at_parse_and_changes_nothing(self):
        d, c = self.start()
        c.call("CreateTarget", create_target("good"))
        state_before = self.state_file(d)
        # Python's protobuf will not build these; they are encoded by hand. proto3 `string` fields
        # must be UTF-8, so the C++ parser rejects the request before any handler sees it.
        raw = {
            "CreateTarget": field(1, field(1, b"iqn.2026-11.io.iscsigw:\xff\xfe")),
            "AddAclEntry": field(1, b"good") + field(2, field(1, b"iqn.2026-11.io.x:\xc3\x28")),
            # lun: id 1 (field 1), file (field 4) with a path holding a UTF-16 surrogate,
            # size_bytes (field 5) 1 MiB.
            "CreateLun": field(1, b"good") + field(2, varint_field(1, 1) +
                                                    field(4, field(1, b"/tmp/\xed\xa0\x80")) +
                                                    varint_field(5, MiB)),
            "SetChap": field(1, b"good") + field(2, field(1, b"\xc0\xafuser") +
                                                    field(2, b"a-long-enough-secret")),
        }
        # The same encoding with valid UTF-8 is accepted: what is refused is the bytes alone.
        self.assertEqual(c.code("CreateTarget", field(1, field(1, b"iqn.2026-11.io.iscsigw:ok")))[0],
                         grpc.StatusCode.OK)
        c.call("DeleteTarget", pb.DeleteTargetRequest(name="ok"))
        for name, body in raw.items():
            with self.subTest(rpc=name):
                code, details = c.code(name, body)
                self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT, details)
                self.assertIn("could not be parsed", details)
        # A method the service does not have is still UNIMPLEMENTED, not a parse failure.
        unknown = c.channel.unary_unary(SERVICE + "NoSuchMethod")
        with self.assertRaises(grpc.RpcError) as e:
            unknown(b"", timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        self.assert_alive(d, c)
        self.assertEqual(self.state_file(d), state_before)
        self.assertEqual([t.name for t in c.targets()], [IQN_PREFIX + "good"])


class ConcurrentChangesTest(Fixture):
    def test_conflicting_changes_from_many_clients_leave_a_consistent_state(self):
        d, c = self.start()
        c.call("CreateTarget", create_target("shared"))
        names = [f"c{k}" for k in range(3)]
        initiators = [f"{INITIATOR_PREFIX}c{k}" for k in range(3)]
        allowed = {grpc.StatusCode.OK, grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.NOT_FOUND}
        unexpected = []
        per_thread = 150

        def worker(seed):
            rnd = random.Random(seed)
            client = Client(d.grpc)
            try:
                for _ in range(per_thread):
                    op = rnd.randrange(6)
                    if op == 0:
                        name, req = "CreateTarget", create_target(rnd.choice(names))
                    elif op == 1:
                        name, req = "DeleteTarget", pb.DeleteTargetRequest(name=rnd.choice(names))
                    elif op == 2:
                        name, req = "CreateLun", null_lun(rnd.choice(["shared"] + names),
                                                          rnd.randrange(3))
                    elif op == 3:
                        name, req = "DeleteLun", pb.DeleteLunRequest(
                            target=rnd.choice(["shared"] + names), id=rnd.randrange(3))
                    elif op == 4:
                        name, req = "AddAclEntry", acl(rnd.choice(["shared"] + names),
                                                       rnd.choice(initiators))
                    else:
                        name, req = "RemoveAclEntry", pb.RemoveAclEntryRequest(
                            target=rnd.choice(["shared"] + names), initiator=rnd.choice(initiators))
                    code, details = client.code(name, req)
                    if code not in allowed:
                        unexpected.append((name, code, details))
            finally:
                client.close()

        threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertFalse(any(t.is_alive() for t in threads))
        self.assertEqual(unexpected, [])

        self.assert_alive(d, c)
        listed = self.assert_state_matches_api(d, c)
        self.assertIn(IQN_PREFIX + "shared", listed)
        for target, (luns, entries) in listed.items():
            self.assertEqual(len(set(luns)), len(luns), target)        # no duplicate LUN ids
            self.assertEqual(len(set(entries)), len(entries), target)  # no duplicate ACL entries
        c = self.restart(d)
        self.assertEqual(self.assert_state_matches_api(d, c), listed)


if __name__ == "__main__":
    unittest.main()
