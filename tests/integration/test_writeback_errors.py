"""Writeback errors from a real block device under a file LUN: a loop device whose backing file is
made immutable (chattr +i), so that the loop driver fails every write that reaches it and the page
cache's writeback of the LUN fails as a dying disk's does. Linux reports such an error once per
open file description (the next fdatasync through it gets EIO, the one after succeeds).

One initiator's write sits in the page cache (WCE=1) when the medium starts failing; another
initiator writes and flushes, and is told WRITE ERROR. The first one's SYNCHRONIZE CACHE must not
answer GOOD: its write never reached the medium (read back from the loop's backing file), and it
would take it for durable. Checked with the two sessions on one reactor (one flush group: the SCSI
layer tells every nexus of a write error once) and on two (each reactor's flushes go through a
file description of their own), and without io_uring (the flushes on the store's thread pool).
"""
import os
import struct
import subprocess
import tempfile
import unittest

from iscsigw_test import harness
from iscsigw_test.iscsi_client import Initiator, sense_key_asc

TARGET = harness.IQN_PREFIX + "wb"
WRITE_ERROR = (2, (0x3, 0x0C, 0x00))
SYNC_CACHE = struct.pack(">BBIBHB", 0x35, 0, 0, 0, 0, 0)


def pattern(n, seed):
    return bytes((seed + i * 7 + (i >> 9)) & 0xFF for i in range(n))


class WritebackErrorsTest(unittest.TestCase):
    def loop_device(self):
        """A 16 MiB loop device over a file of its own: (device, backing file)."""
        work = tempfile.mkdtemp(prefix="iscsigw-wb-")
        img = os.path.join(work, "medium.img")
        with open(img, "wb") as f:
            f.truncate(16 << 20)
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", work]))
        p = subprocess.run(["losetup", "-f", "--show", img], capture_output=True, text=True)
        if p.returncode != 0:
            self.skipTest(f"no loop device: {p.stderr.strip()}")
        dev = p.stdout.strip()
        self.addCleanup(subprocess.run, ["losetup", "-d", dev])
        return dev, img

    def fail_medium(self, img, fail):
        harness.run(["chattr", "+i" if fail else "-i", img])
        if fail:
            self.addCleanup(harness.run, ["chattr", "-i", img], check=False)

    def check_every_initiator_hears_of_the_error(self, reactors, env=None):
        dev, img = self.loop_device()
        daemon = harness.Daemon(state=harness.simple_state("wb", luns=[
            {"id": 0, "file": {"path": dev}, "blockSize": 512}]),
            extra_args=["--reactors", str(reactors), "--backing-allow", dev], env=env).start()
        self.addCleanup(daemon.cleanup)
        writer, other = (Initiator(daemon.portal, harness.INITIATOR, timeout=30) for _ in range(2))
        for ini in (writer, other):
            self.addCleanup(ini.close)
            ini.login(TARGET)
            ini.test_unit_ready(0)  # the power-on unit attention
        data = pattern(4096, reactors)
        self.assertEqual(writer.write(0, 0, data), (0, b""))  # in the page cache
        self.fail_medium(img, True)
        self.assertEqual(other.write(0, 64, pattern(4096, 9)), (0, b""))

        def flush(ini):
            status, _, sense = ini._command(0, SYNC_CACHE)
            return status, sense_key_asc(sense) if status == 2 else None

        self.assertEqual(flush(other), WRITE_ERROR)  # its flush met the error first
        self.assertEqual(flush(writer), WRITE_ERROR,
                         "the writer's SYNCHRONIZE CACHE answered as if its write were durable")
        self.assertEqual(flush(writer), (0, None))  # reported once
        self.fail_medium(img, False)
        with open(img, "rb") as f:
            medium = f.read(len(data))
        self.assertNotEqual(medium, data, "the write reached the medium: nothing was lost")

    def test_every_initiator_hears_of_a_write_error_one_reactor(self):
        self.check_every_initiator_hears_of_the_error(1)

    def test_every_initiator_hears_of_a_write_error_two_reactors(self):
        self.check_every_initiator_hears_of_the_error(2)

    def test_every_initiator_hears_of_a_write_error_without_io_uring(self):
        # Where seccomp refuses io_uring every call runs on the store's thread pool; a slot's
        # fdatasyncs still run one at a time, so none takes another's error.
        self.check_every_initiator_hears_of_the_error(1, env={"ISCSIGW_DISABLE_IO_URING": "1"})


if __name__ == "__main__":
    unittest.main()
