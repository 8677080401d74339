"""Files behind file LUNs, end to end: the LUN directory (--lun-dir), backing files removed with
the LUN that created them, snapshots and clones that keep the data as it was, and the directory's
capacity. Driven through iscsigwctl against the real iscsigwd; data through the iSCSI client."""
import os
import shutil
import subprocess
import tempfile
import time
import unittest

import grpc

from iscsigw_test.csi_stubs import gateway_pb2 as pb
from iscsigw_test.csi_stubs import state_pb2 as st
from iscsigw_test.harness import IQN_PREFIX, INITIATOR, Daemon, loop_xfs, simple_state
from iscsigw_test.iscsi_client import Initiator

MiB = 1 << 20
OLD = bytes((i * 7 + 3) & 0xFF for i in range(4096))
NEW = bytes((i * 11 + 5) & 0xFF for i in range(4096))

# iscsigwctl exit codes are gRPC status codes.
INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED = 3, 5, 6, 7
FAILED_PRECONDITION, OUT_OF_RANGE = 9, 11


def open_files(d):
    """The paths the daemon has open now (its /proc fd links)."""
    fd_dir = f"/proc/{d.proc.pid}/fd"
    out = []
    for fd in os.listdir(fd_dir):
        try:
            out.append(os.readlink(os.path.join(fd_dir, fd)))
        except FileNotFoundError:
            pass
    return out


class Fixture(unittest.TestCase):
    def start(self, lun_dir=True, **kw):
        extra = list(kw.pop("extra_args", ()))
        if lun_dir:
            self.lun_dir = lun_dir if isinstance(lun_dir, str) else tempfile.mkdtemp(
                prefix="iscsigw-luns-")
            if not isinstance(lun_dir, str):
                self.addCleanup(shutil.rmtree, self.lun_dir, True)
            extra += ["--lun-dir", self.lun_dir]
        d = Daemon(extra_args=extra, **kw).start()
        self.addCleanup(d.cleanup)
        return d

    def fail_code(self, d, code, *args):
        p = d.ctl(*args, check=False)
        self.assertEqual(p.returncode, code, p.stderr)
        return p.stderr

    def file_lun(self, d, target, path, size="16M", *more):
        d.ctl("target", "create", target)
        d.ctl("acl", "add", target, INITIATOR)
        d.ctl("lun", "create", target, "0", "--backing", "file", "--path", path, "--create",
              "--size", size, *more)

    def write(self, d, target, lba, data):
        c = Initiator(d.portal, INITIATOR)
        c.login(IQN_PREFIX + target)
        c.test_unit_ready(0)
        self.assertEqual(c.write(0, lba, data)[0], 0)
        c.logout()
        c.close()

    def read(self, d, target, lba, blocks=8):
        c = Initiator(d.portal, INITIATOR)
        c.login(IQN_PREFIX + target)
        c.test_unit_ready(0)
        status, data, _ = c.read(0, lba, blocks)
        self.assertEqual(status, 0)
        c.logout()
        c.close()
        return data


class LunDirTest(Fixture):
    def test_relative_path_lands_in_the_lun_dir_and_is_removed_with_its_lun(self):
        d = self.start()
        self.assertEqual(d.ctl_json("gateway", "info")["lun_dir"], self.lun_dir)
        self.file_lun(d, "rel", "rel.img")
        lun = d.ctl_json("lun", "get", "rel", "0")
        path = os.path.join(self.lun_dir, "rel.img")
        self.assertEqual(lun["file"]["path"], path)
        self.assertTrue(lun["file"]["created"])
        self.assertEqual(os.path.getsize(path), 16 * MiB)
        self.assertIn("backing file or image removed", d.ctl("lun", "delete", "rel", "0").stdout)
        self.assertFalse(os.path.exists(path))

    def test_a_deleted_lun_lets_go_of_its_file_while_a_session_stays(self):
        # Regression: the login kept its copy of the target's configuration for the life of the
        # connection, and with it every LUN of that time: a deleted LUN's file stayed open (its
        # blocks never freed) until the initiator logged out.
        d = self.start()
        self.file_lun(d, "held", "held.img")
        path = os.path.join(self.lun_dir, "held.img")
        c = Initiator(d.portal, INITIATOR)
        c.login(IQN_PREFIX + "held")
        self.addCleanup(c.close)
        c.test_unit_ready(0)
        self.assertEqual(c.write(0, 0, OLD)[0], 0)
        self.assertIn(path, open_files(d))
        self.assertIn("backing file or image removed", d.ctl("lun", "delete", "held", "0").stdout)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(p.startswith(path) for p in open_files(d)):
            time.sleep(0.05)
        self.assertEqual([p for p in open_files(d) if p.startswith(path)], [],
                         "the deleted LUN's file is still open while its session stays")
        status, _ = c.test_unit_ready(0)
        self.assertEqual(status, 2)  # LOGICAL UNIT NOT SUPPORTED (or a unit attention first)

    def test_a_lun_deleted_while_another_has_a_command_in_flight_is_let_go(self):
        # Regression: a configuration replaced while a command was in flight was kept until a
        # later change found the session idle, and with it the deleted LUN's open file.
        lun_dir = tempfile.mkdtemp(prefix="iscsigw-luns-")
        self.addCleanup(shutil.rmtree, lun_dir, True)
        path = os.path.join(lun_dir, "busy1.img")
        d = self.start(lun_dir=lun_dir, state=simple_state("busy", luns=[
            {"id": 0, "ram": {}, "sizeBytes": str(8 * MiB), "blockSize": 512,
             "fault": {"delayMs": 1500}},
            {"id": 1, "file": {"path": path, "create": True},
             "sizeBytes": str(8 * MiB), "blockSize": 512}]))
        c = Initiator(d.portal, INITIATOR)
        c.login(IQN_PREFIX + "busy")
        self.addCleanup(c.close)
        for lun in (0, 1):
            c.test_unit_ready(lun)
        self.assertEqual(c.write(1, 0, OLD)[0], 0)
        self.assertTrue(any(p.startswith(path) for p in open_files(d)))
        itt = c.send_command(0, bytes([0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0]), read_len=512)
        d.ctl("lun", "delete", "busy", "1")  # while the READ of lun 0 waits in its store
        got, status, _, _ = c.recv_response()
        self.assertEqual((got, status), (itt, 0))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(p.startswith(path) for p in open_files(d)):
            time.sleep(0.05)
        self.assertFalse(any(p.startswith(path) for p in open_files(d)),
                         "the deleted LUN's file is still open after the session went idle")

    def test_relative_paths_that_escape_or_without_a_lun_dir_are_refused(self):
        d = self.start()
        d.ctl("target", "create", "esc")
        # snapshots/ is the gateway's: a LUN there could be removed by a snapshot, or remove one.
        err = self.fail_code(d, INVALID_ARGUMENT, "lun", "create", "esc", "0", "--backing",
                             "file", "--path", os.path.join(self.lun_dir, "snapshots", "s"),
                             "--create", "--size", "1M")
        self.assertIn("snapshot directory", err)
        for bad in ["../x.img", "a/../../x.img", "./x.img", "a//b.img", "snapshots/s"]:
            err = self.fail_code(d, INVALID_ARGUMENT, "lun", "create", "esc", "0", "--backing",
                                 "file", "--path", bad, "--create", "--size", "1M")
            self.assertIn("the gateway's" if bad.startswith("snapshots") else "relative path",
                          err)
        self.assertFalse(os.path.exists(os.path.join(os.path.dirname(self.lun_dir), "x.img")))
        plain = self.start(lun_dir=False)
        plain.ctl("target", "create", "esc")
        err = self.fail_code(plain, INVALID_ARGUMENT, "lun", "create", "esc", "0", "--backing",
                             "file", "--path", "x.img", "--create", "--size", "1M")
        self.assertIn("--lun-dir", err)
        self.fail_code(plain, FAILED_PRECONDITION, "gateway", "capacity")
        self.fail_code(plain, FAILED_PRECONDITION, "snapshot", "create", "s", "esc:0")

    def test_capacity_is_the_lun_dir_file_system(self):
        d = self.start()
        cap = d.ctl_json("gateway", "capacity")
        vfs = os.statvfs(self.lun_dir)
        self.assertEqual(int(cap["total_bytes"]), vfs.f_blocks * vfs.f_frsize)
        # Other writers share the file system: free space is compared within 64 MiB.
        self.assertLess(abs(int(cap["available_bytes"]) - vfs.f_bavail * vfs.f_frsize), 64 * MiB)
        self.assertEqual(cap["lun_dir"], self.lun_dir)


class BackingPathsTest(Fixture):
    """docs/security.md, "Backing paths": a file LUN lives beneath --lun-dir or a --backing-allow
    directory, or is a --backing-allow device; whatever an API call names, nothing else is opened,
    created or removed, and the refusal names the flags."""

    def confined(self, *allow):
        """A gateway whose only allowed paths are its LUN directory and ALLOW."""
        return self.start(backing_allow=allow)

    def try_lun(self, d, target, path, code, *more):
        err = self.fail_code(d, code, "lun", "create", target, "0", "--backing", "file",
                             "--path", path, *more)
        return err

    def test_paths_outside_are_permission_denied_and_touch_nothing(self):
        other = tempfile.mkdtemp(prefix="iscsigw-allowed-")
        outside = tempfile.mkdtemp(prefix="iscsigw-outside-")
        for d_ in (other, outside):
            self.addCleanup(shutil.rmtree, d_, True)
        secret = os.path.join(outside, "secret.img")
        with open(secret, "wb") as f:
            f.write(b"S" * MiB)
        d = self.confined(other)
        d.ctl("target", "create", "fence")
        os.symlink(secret, os.path.join(self.lun_dir, "link.img"))
        os.symlink(outside, os.path.join(other, "dir"))
        attempts = [
            "/etc/passwd",                                    # anything on the host
            secret,                                           # a file beside the allowed ones
            os.path.join(self.lun_dir, "link.img"),           # a symlink planted inside
            os.path.join(other, "dir", "secret.img"),         # a symlinked directory inside
            self.lun_dir + "/../" + os.path.basename(outside) + "/secret.img",  # ".."
            self.lun_dir + "x/secret.img",                    # a sibling sharing the prefix
            "link.img",                                       # relative, through the link
        ]
        for path in attempts:
            err = self.try_lun(d, "fence", path, PERMISSION_DENIED, "--size", "1M")
            self.assertIn("--backing-allow", err, path)
            # Creating there is refused as well, and creates nothing outside.
            self.try_lun(d, "fence", path, PERMISSION_DENIED, "--create", "--size", "1M")
        created = os.path.join(outside, "new.img")
        self.try_lun(d, "fence", created, PERMISSION_DENIED, "--create", "--size", "1M")
        self.assertFalse(os.path.exists(created))
        self.assertEqual(os.listdir(outside), ["secret.img"])
        self.assertNotIn(secret, open_files(d))
        # The allowed ones work: the LUN directory and the --backing-allow directory.
        self.file_lun(d, "inside", os.path.join(other, "ok.img"), "4M")
        self.write(d, "inside", 0, OLD)
        self.assertEqual(self.read(d, "inside", 0), OLD)
        self.file_lun(d, "rel", "rel.img", "4M")
        self.assertTrue(os.path.exists(os.path.join(self.lun_dir, "rel.img")))

    def test_a_gateway_without_allowed_paths_serves_no_file_lun(self):
        d = self.start(lun_dir=False, backing_allow=())
        d.ctl("target", "create", "none")
        path = os.path.join(tempfile.gettempdir(), f"iscsigw-none-{os.getpid()}.img")
        err = self.try_lun(d, "none", path, PERMISSION_DENIED, "--create", "--size", "1M")
        self.assertIn("--lun-dir", err)
        self.assertFalse(os.path.exists(path))
        d.ctl("lun", "create", "none", "0", "--backing", "ram", "--size", "1M")  # others still work

    def test_a_device_is_allowed_by_name_and_only_that_device(self):
        work = tempfile.mkdtemp(prefix="iscsigw-dev-")
        self.addCleanup(shutil.rmtree, work, True)
        img = os.path.join(work, "disk.img")
        with open(img, "wb") as f:
            f.truncate(8 * MiB)
        p = subprocess.run(["losetup", "-f", "--show", img], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, "losetup: " + p.stderr)  # scripts/install-deps.sh: mount
        dev = p.stdout.strip()
        self.addCleanup(subprocess.run, ["losetup", "-d", dev], check=False)
        d = self.confined(dev)
        d.ctl("target", "create", "blk")
        d.ctl("acl", "add", "blk", INITIATOR)
        d.ctl("lun", "create", "blk", "0", "--backing", "file", "--path", dev)
        self.write(d, "blk", 0, NEW)
        with open(dev, "rb") as f:  # the device's own page cache: the write is there
            self.assertEqual(f.read(len(NEW)), NEW)
        # Another device, and a node of the same device under another name, are refused.
        d.ctl("target", "create", "blk2")
        other = "/dev/loop" + str(int(dev[len("/dev/loop"):]) + 1)
        self.try_lun(d, "blk2", other, PERMISSION_DENIED)
        node = os.path.join(work, "alias")
        os.mknod(node, 0o600 | 0o060000, os.stat(dev).st_rdev)
        self.try_lun(d, "blk2", node, PERMISSION_DENIED)

    def test_a_state_with_a_path_no_longer_allowed_does_not_start(self):
        work = tempfile.mkdtemp(prefix="iscsigw-was-")
        self.addCleanup(shutil.rmtree, work, True)
        img = os.path.join(work, "old.img")
        with open(img, "wb") as f:
            f.truncate(MiB)
        state = simple_state("was", luns=[{"id": 0, "file": {"path": img}}])
        d = Daemon(state=state, backing_allow=())
        self.addCleanup(d.cleanup)
        d.spawn()
        self.assertNotEqual(d.proc.wait(timeout=30), 0)
        self.assertIn("--backing-allow", d.read_log())

    def test_bad_flags_stop_the_start(self):
        for args in (["--backing-allow", "relative/dir"], ["--backing-allow", "/nonexistent/x"],
                     ["--rbd-allow", "pool/ns/extra"], ["--rbd-allow", "/ns"]):
            d = Daemon(extra_args=args)
            self.addCleanup(d.cleanup)
            d.spawn()
            self.assertEqual(d.proc.wait(timeout=30), 2, args)


class RbdPolicyTest(Fixture):
    """rbd LUNs: only the pools --rbd-allow names, and only the confs and keyrings the daemon was
    started with. Refused before anything reaches a cluster, so no cluster is needed here."""

    def test_pools_confs_and_keyrings_come_from_the_flags(self):
        d = self.start(lun_dir=False, rbd_allow=("tenant/ns1",),
                       extra_args=["--rbd-conf", "/etc/iscsigw-test/ceph.conf"])
        d.ctl("target", "create", "r")

        def rbd(pool, *more):
            return self.fail_code(d, PERMISSION_DENIED, "lun", "create", "r", "0", "--backing",
                                  "rbd", "--pool", pool, "--image", "i", *more)

        self.assertIn("--rbd-allow", rbd("rbd"))
        self.assertIn("--rbd-allow", rbd("tenant"))  # the pool's default namespace: not named
        self.assertIn("--rbd-allow", rbd("tenant", "--namespace", "ns2"))
        err = rbd("tenant", "--namespace", "ns1", "--ceph-conf", "/tmp/mine.conf")
        self.assertIn("--rbd-conf", err)
        err = rbd("tenant", "--namespace", "ns1", "--keyring", "/etc/shadow")
        self.assertIn("--rbd-keyring", err)
        self.assertNotIn("/etc/shadow", err)
        self.assertIn("rbd LUNs the pools tenant/ns1", d.read_log())
        plain = self.start(lun_dir=False, rbd_allow=())
        plain.ctl("target", "create", "r")
        err = self.fail_code(plain, PERMISSION_DENIED, "lun", "create", "r", "0", "--backing",
                             "rbd", "--pool", "rbd", "--image", "i")
        self.assertIn("--rbd-allow", err)


class BackingRemovalTest(Fixture):
    def test_keep_backing_keeps_the_file(self):
        d = self.start()
        self.file_lun(d, "keep", "keep.img")
        out = d.ctl("lun", "delete", "keep", "0", "--keep-backing").stdout
        self.assertNotIn("removed", out)
        self.assertTrue(os.path.exists(os.path.join(self.lun_dir, "keep.img")))

    def test_a_file_the_lun_was_given_is_never_removed(self):
        d = self.start()
        given = os.path.join(self.lun_dir, "given.img")
        with open(given, "wb") as f:
            f.truncate(8 * MiB)
        # create is set, but the file was there: the gateway did not make it.
        self.file_lun(d, "given", given, "8M")
        self.assertFalse(d.ctl_json("lun", "get", "given", "0")["file"]["created"])
        d.ctl("lun", "delete", "given", "0")
        self.assertTrue(os.path.exists(given))

    def test_created_is_output_only(self):
        d = self.start()
        victim = os.path.join(self.lun_dir, "victim.img")
        with open(victim, "wb") as f:
            f.truncate(MiB)
        d.ctl("target", "create", "forge")
        # A client cannot claim the gateway made a file: the request's created is dropped.
        req = pb.CreateLunRequest(target="forge")
        req.lun.id = 0
        req.lun.file.path = victim
        req.lun.file.created = True
        req.lun.size_bytes = MiB
        with grpc.insecure_channel(d.grpc) as ch:
            create = ch.unary_unary("/iscsigw.v1.GatewayService/CreateLun",
                                    request_serializer=pb.CreateLunRequest.SerializeToString,
                                    response_deserializer=st.Lun.FromString)
            self.assertFalse(create(req, timeout=10).file.created)
        d.ctl("lun", "delete", "forge", "0")
        self.assertTrue(os.path.exists(victim))

    def test_delete_target_removes_the_files_of_its_luns(self):
        d = self.start()
        self.file_lun(d, "tgt", "t0.img")
        d.ctl("lun", "create", "tgt", "1", "--backing", "file", "--path", "t1.img", "--create",
              "--size", "4M")
        d.ctl("lun", "create", "tgt", "2", "--backing", "ram", "--size", "4M")
        self.assertIn("2 backing file(s) or image(s) removed",
                      d.ctl("target", "delete", "tgt").stdout)
        self.assertEqual(sorted(os.listdir(self.lun_dir)), ["snapshots"])
        self.file_lun(d, "tgt2", "t2.img")
        d.ctl("target", "delete", "tgt2", "--keep-backing")
        self.assertTrue(os.path.exists(os.path.join(self.lun_dir, "t2.img")))

    def test_removal_survives_a_restart(self):
        # created is persisted: a LUN made before a restart still takes its file with it.
        d = self.start()
        self.file_lun(d, "persist", "p.img")
        self.assertEqual(d.stop(), 0)
        d2 = self.start(lun_dir=self.lun_dir, state_dir=d.state_dir)
        d2.ctl("lun", "delete", "persist", "0")
        self.assertFalse(os.path.exists(os.path.join(self.lun_dir, "p.img")))


class SnapshotTest(Fixture):
    def test_snapshot_and_clones_hold_the_data_as_it_was(self):
        d = self.start()
        self.file_lun(d, "src", "src.img")
        self.write(d, "src", 100, OLD)
        snap = d.ctl_json("snapshot", "create", "s1", "src:0")
        self.assertEqual(snap["source_target"], IQN_PREFIX + "src")
        self.assertEqual(int(snap["size_bytes"]), 16 * MiB)
        self.assertTrue(os.path.exists(snap["path"]))
        self.assertEqual(os.path.dirname(snap["path"]), os.path.join(self.lun_dir, "snapshots"))
        self.write(d, "src", 100, NEW)

        # A clone of the snapshot has the old data, at a larger size; one of the LUN the new.
        d.ctl("target", "create", "fromsnap")
        d.ctl("acl", "add", "fromsnap", INITIATOR)
        d.ctl("lun", "create", "fromsnap", "0", "--backing", "file", "--path", "c1.img",
              "--create", "--size", "32M", "--from-snapshot", "s1")
        self.assertEqual(int(d.ctl_json("lun", "get", "fromsnap", "0")["size_bytes"]), 32 * MiB)
        self.assertEqual(self.read(d, "fromsnap", 100), OLD)
        d.ctl("target", "create", "fromlun")
        d.ctl("acl", "add", "fromlun", INITIATOR)
        d.ctl("lun", "create", "fromlun", "0", "--backing", "file", "--path", "c2.img",
              "--create", "--from-lun", "src:0")
        self.assertEqual(int(d.ctl_json("lun", "get", "fromlun", "0")["size_bytes"]), 16 * MiB)
        self.assertEqual(self.read(d, "fromlun", 100), NEW)
        self.assertEqual(self.read(d, "src", 100), NEW)
        # The clone is a copy: writing it leaves the source alone.
        self.write(d, "fromlun", 100, OLD)
        self.assertEqual(self.read(d, "src", 100), NEW)

        # The snapshot outlives its LUN and a restart.
        d.ctl("target", "delete", "src")
        self.assertEqual(d.stop(), 0)
        d2 = self.start(lun_dir=self.lun_dir, state_dir=d.state_dir)
        listed = d2.ctl_json("snapshot", "list")["snapshots"]
        self.assertEqual([s["name"] for s in listed], ["s1"])
        d2.ctl("snapshot", "delete", "s1")
        self.assertFalse(os.path.exists(snap["path"]))
        self.fail_code(d2, NOT_FOUND, "snapshot", "delete", "s1")

    def test_create_is_idempotent_by_name_and_errors_say_why(self):
        d = self.start()
        self.file_lun(d, "a", "a.img")
        self.file_lun(d, "b", "b.img")
        first = d.ctl_json("snapshot", "create", "same", "a:0")
        self.assertEqual(d.ctl_json("snapshot", "create", "same", "a:0"), first)
        err = self.fail_code(d, ALREADY_EXISTS, "snapshot", "create", "same", "b:0")
        self.assertIn("exists, of lun 0 of " + IQN_PREFIX + "a", err)
        self.fail_code(d, NOT_FOUND, "snapshot", "create", "x", "a:7")
        self.fail_code(d, NOT_FOUND, "snapshot", "create", "x", "nosuch:0")
        for bad in [".hidden", "a/b", "x" * 129]:
            self.fail_code(d, INVALID_ARGUMENT, "snapshot", "create", bad, "a:0")
        d.ctl("lun", "create", "a", "1", "--backing", "ram", "--size", "1M")
        self.fail_code(d, FAILED_PRECONDITION, "snapshot", "create", "r", "a:1")
        d.ctl_json("snapshot", "create", "other", "b:0")
        only_b = d.ctl_json("snapshot", "list", "--lun", "b:0")["snapshots"]
        self.assertEqual([s["name"] for s in only_b], ["other"])

        d.ctl("target", "create", "c")
        clone = ["lun", "create", "c", "0", "--backing", "file", "--path", "c.img", "--create"]
        err = self.fail_code(d, OUT_OF_RANGE, *clone, "--size", "8M", "--from-snapshot", "same")
        self.assertIn("smaller than the source", err)
        self.assertFalse(os.path.exists(os.path.join(self.lun_dir, "c.img")))
        self.fail_code(d, INVALID_ARGUMENT, *clone, "--block-size", "4096", "--from-snapshot",
                       "same")
        self.fail_code(d, NOT_FOUND, *clone, "--from-snapshot", "nosuch")
        self.fail_code(d, INVALID_ARGUMENT, "lun", "create", "c", "0", "--backing", "file",
                       "--path", "c.img", "--from-snapshot", "same")  # no --create
        # An existing file is never overwritten by a clone.
        with open(os.path.join(self.lun_dir, "c.img"), "wb") as f:
            f.write(b"keep me")
        self.fail_code(d, ALREADY_EXISTS, *clone, "--from-snapshot", "same")
        with open(os.path.join(self.lun_dir, "c.img"), "rb") as f:
            self.assertEqual(f.read(), b"keep me")

    def test_a_lun_in_use_is_not_copied_where_blocks_cannot_be_shared(self):
        # ext4 (the test directory's file system) cannot share blocks: a copy of a LUN that a
        # session may be writing would not be a point in time, so it is refused until the
        # session is gone. (ReflinkTest takes them with a session, where FICLONE works.)
        d = self.start()
        if d.ctl_json("gateway", "capacity")["shares_blocks"]:
            self.skipTest("the LUN directory shares blocks here")
        self.file_lun(d, "busy", "busy.img")
        c = Initiator(d.portal, INITIATOR)
        c.login(IQN_PREFIX + "busy")
        err = self.fail_code(d, FAILED_PRECONDITION, "snapshot", "create", "b1", "busy:0")
        self.assertIn("in use by 1 session(s)", err)
        d.ctl("target", "create", "copy")
        err = self.fail_code(d, FAILED_PRECONDITION, "lun", "create", "copy", "0", "--backing",
                             "file", "--path", "copy.img", "--create", "--from-lun", "busy:0")
        self.assertIn("not a point in time", err)
        self.assertEqual(sorted(os.listdir(self.lun_dir)), ["busy.img", "snapshots"])
        self.assertEqual(os.listdir(os.path.join(self.lun_dir, "snapshots")), [])
        c.logout()
        c.close()
        d.ctl("snapshot", "create", "b1", "busy:0")

    def test_a_sparse_lun_gives_a_sparse_snapshot(self):
        d = self.start()
        self.file_lun(d, "sparse", "sparse.img", "256M")
        self.write(d, "sparse", 1000, OLD)
        snap = d.ctl_json("snapshot", "create", "sp", "sparse:0")
        st = os.stat(snap["path"])
        self.assertEqual(st.st_size, 256 * MiB)
        self.assertLess(st.st_blocks * 512, 4 * MiB)
        with open(snap["path"], "rb") as f:
            f.seek(1000 * 512)
            self.assertEqual(f.read(4096), OLD)


class ReflinkTest(Fixture):
    def test_snapshots_and_clones_share_blocks_where_the_file_system_can(self):
        mnt = loop_xfs(self)
        if mnt is None:
            self.skipTest("no loop device to mount an XFS on")
        d = self.start(lun_dir=os.path.join(mnt, "luns"))
        self.assertTrue(d.ctl_json("gateway", "capacity")["shares_blocks"])
        self.file_lun(d, "rl", "rl.img", "64M", "--thick")
        self.write(d, "rl", 8, OLD)
        free = os.statvfs(mnt).f_bavail
        # With a session logged in: FICLONE is a point in time, so a LUN in use may be copied.
        c = Initiator(d.portal, INITIATOR)
        c.login(IQN_PREFIX + "rl")
        self.addCleanup(c.close)
        snap = d.ctl_json("snapshot", "create", "rs", "rl:0")
        self.assertTrue(snap["shares_blocks"])
        # A 64 MiB thick file copied by sharing blocks costs next to nothing.
        self.assertLess((free - os.statvfs(mnt).f_bavail) * os.statvfs(mnt).f_frsize, 4 * MiB)
        c.logout()
        self.write(d, "rl", 8, NEW)
        d.ctl("target", "create", "rc")
        d.ctl("acl", "add", "rc", INITIATOR)
        d.ctl("lun", "create", "rc", "0", "--backing", "file", "--path", "rc.img", "--create",
              "--from-snapshot", "rs")
        self.assertEqual(self.read(d, "rc", 8), OLD)
        self.assertEqual(self.read(d, "rl", 8), NEW)
        # The daemon closes its files before the file system is unmounted.
        d.ctl("target", "delete", "rc")
        d.ctl("target", "delete", "rl")
        d.ctl("snapshot", "delete", "rs")
        self.assertEqual(d.stop(), 0)


if __name__ == "__main__":
    unittest.main()
