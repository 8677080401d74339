"""No heap allocation per I/O: iscsigwd under heaptrack, once with a short load and once with a
long one, on a RAM and a file LUN at queue depths 1 and 32. Both runs start, log in and stop the
same way, so the allocations the long run makes beyond the short one are the ones its extra I/O
cost; there must be next to none.
"""
import glob
import os
import re
import shutil
import signal
import subprocess
import tempfile
import unittest

from iscsigw_test.harness import Daemon, IQN_PREFIX, perf, wait_for

SANITIZED = os.environ.get("ISCSIGW_SANITIZED") == "1"
SHORT_S, LONG_S = 1, 4
# Allocations allowed per extra I/O: a thousandth, far below one per command or per socket read
# (at queue depth 1 each command is a read of its own).
PER_IO_BOUND = 0.001


def daemon_under(pid):
    """The iscsigwd process among pid's children (heaptrack also runs its interpreter)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            for child in f.read().split():
                with open(f"/proc/{child}/comm") as c:
                    if c.read().strip() == "iscsigwd":
                        return int(child)
    except OSError:
        pass
    return None


class AllocationTest(unittest.TestCase):
    def run_load(self, seconds):
        """Starts the daemon under heaptrack, runs the load, stops it; returns (allocations, I/Os)."""
        work = tempfile.mkdtemp(prefix="iscsigw-alloc-")
        self.addCleanup(shutil.rmtree, work, True)
        state = {"targets": [{"name": IQN_PREFIX + "alloc", "allowAnyInitiator": True, "luns": [
            {"id": 0, "ram": {}, "sizeBytes": str(64 << 20), "blockSize": 512},
            {"id": 1, "file": {"path": os.path.join(work, "lun1.img"), "create": True},
             "sizeBytes": str(64 << 20), "blockSize": 512}]}]}
        d = Daemon(state=state, extra_args=("--log-level", "warn"))
        out = os.path.join(work, "heaptrack")
        d.args = ["heaptrack", "-o", out] + d.args
        d.start(timeout=60)
        ios = 0
        try:
            for lun in (0, 1):
                for depth in (1, 32):
                    ios += perf(d.url("alloc", lun), seconds=seconds, depth=depth) * seconds
            # heaptrack runs iscsigwd as its child; the daemon gets the signal, heaptrack then
            # writes its record and exits.
            daemon_pid = wait_for(lambda: daemon_under(d.proc.pid), what="iscsigwd under heaptrack")
            os.kill(daemon_pid, signal.SIGTERM)
            self.assertEqual(d.proc.wait(60), 0, d.read_log()[-2000:])
        finally:
            if d.proc.poll() is None:
                # Not stopped: kill the daemon too, which would outlive heaptrack.
                if (pid := daemon_under(d.proc.pid)) is not None:
                    os.kill(pid, signal.SIGKILL)
                d.proc.kill()
            d.proc.wait()
            d.proc = None
            d.log.close()
            d.cleanup()
        files = glob.glob(out + "*")
        self.assertTrue(files, "heaptrack wrote no record")
        text = subprocess.run(["heaptrack_print", "-n", "5", files[0]], capture_output=True,
                              text=True, check=True).stdout
        m = re.search(r"^calls to allocation functions: (\d+)", text, re.M)
        self.assertIsNotNone(m, text[-2000:])
        return int(m.group(1)), ios, text

    @unittest.skipIf(SANITIZED, "heaptrack and AddressSanitizer both replace malloc")
    def test_no_heap_allocation_per_io(self):
        short_allocs, short_ios, _ = self.run_load(SHORT_S)
        long_allocs, long_ios, text = self.run_load(LONG_S)
        extra_ios = long_ios - short_ios
        extra_allocs = long_allocs - short_allocs
        print(f"\nshort run: {short_allocs} allocations, {short_ios} I/Os; long run: {long_allocs} "
              f"allocations, {long_ios} I/Os; {extra_allocs} allocations for {extra_ios} more "
              f"I/Os ({extra_allocs / extra_ios:.6f} per I/O)", flush=True)
        self.assertGreater(extra_ios, 10000)
        self.assertLess(extra_allocs / extra_ios, PER_IO_BOUND,
                        "the data path allocates per I/O; heaptrack's top call sites:\n" +
                        text[text.find("MOST CALLS"):][:4000])


if __name__ == "__main__":
    unittest.main()
