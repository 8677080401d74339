"""Crash consistency of a file LUN (iscsigw_test/crash_consistency.py, whose docstring says what is
proven and what is not): kill -9 the daemon while four initiators write, restart it on the same
state dir, read back every block."""
import os
import unittest

from iscsigw_test.crash_consistency import BLOCK, CrashScenario


class CrashConsistencyTest(CrashScenario, unittest.TestCase):
    """A file LUN made by the daemon in its state dir."""

    def lun_spec(self, state_dir):
        return {"file": {"path": os.path.join(state_dir, "lun0.img"), "create": True}}

    def backing_reader(self, state_dir, spec):
        def read(first, blocks):
            with open(spec["file"]["path"], "rb") as f:
                f.seek(first * BLOCK)
                return f.read(blocks * BLOCK)
        return read


if __name__ == "__main__":
    unittest.main()
