"""Abort storm (iscsigw_test/abort_storm.py, whose docstring says what is checked) against one
daemon: four verified writers and the controller on a RAM LUN whose store calls start DELAY_MS late
(fault injection)."""
import unittest

from iscsigw_test.abort_storm import BLOCK, DELAY_MS, LUN_BYTES, TARGET, run_storm
from iscsigw_test.harness import Daemon


class AbortStormTest(unittest.TestCase):
    def test_no_acknowledged_write_lost_and_no_aborted_write_lands_late(self):
        lun = {"id": 0, "ram": {}, "sizeBytes": str(LUN_BYTES), "blockSize": BLOCK}
        if DELAY_MS:
            lun["fault"] = {"delayMs": DELAY_MS}
        state = {"targets": [{"name": TARGET, "allowAnyInitiator": True, "luns": [lun]}]}
        daemon = Daemon(state=state, extra_args=("--log-level", "info")).start()
        self.addCleanup(daemon.cleanup)
        run_storm(self, [daemon])


if __name__ == "__main__":
    unittest.main()
