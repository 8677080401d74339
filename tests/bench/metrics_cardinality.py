#!/usr/bin/python3
"""Series a volume adds to /metrics at each --metrics-detail level (docs/operations.md, "Metrics
cardinality"). A volume is what the CSI driver makes: a target of its own with one file LUN.
For each level, two gateways are started, with N and 2N such volumes; every LUN sees what a
mounted file system sends (TEST UNIT READY, READ, WRITE, SYNCHRONIZE CACHE, after the unit
attention of a new session), and the difference of the two scrapes' sample counts, over N, is
the series per volume; the rest is the gateway's own. Prints a table, and the count for 1,000
volumes.

Usage, from the repository's root:
  PYTHONPATH=tests/lib tests/bench/metrics_cardinality.py [--volumes N]
"""
import argparse
import os
import re
import shutil
import tempfile
import urllib.request

from iscsigw_test import harness
from iscsigw_test.iscsi_client import Initiator

SAMPLE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? \S+$")


def scrape_count(volumes, level, work):
    state = {"targets": [
        {"name": harness.IQN_PREFIX + f"pvc-{v}", "allowAnyInitiator": True,
         "luns": [{"id": 0, "file": {"path": os.path.join(work, f"{level}-{volumes}-{v}.img"),
                                     "create": True},
                   "sizeBytes": str(16 << 20), "blockSize": 512}]} for v in range(volumes)]}
    daemon = harness.Daemon(state=state, backing_allow=(work,),
                            extra_args=["--log-level", "warn", "--metrics-detail", level,
                                        "--lun-dir", os.path.join(work, "luns")]).start(timeout=60)
    try:
        for v in range(volumes):
            ini = Initiator(daemon.portal, f"iqn.2026-11.io.test:node-{v}")
            ini.login(harness.IQN_PREFIX + f"pvc-{v}")
            for _ in range(5):
                if ini.test_unit_ready(0)[0] == 0:
                    break
            ini.write(0, 0, b"\x01" * 4096)
            ini.read(0, 0, 8)
            ini._command(0, bytes([0x35] + [0] * 9))  # SYNCHRONIZE CACHE(10)
            ini.logout()
            ini.close()
        with urllib.request.urlopen(f"http://{daemon.ports['metrics']}/metrics") as r:
            text = r.read().decode()
    finally:
        daemon.cleanup()
    return sum(1 for line in text.splitlines() if SAMPLE.match(line))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--volumes", type=int, default=10)
    args = ap.parse_args()
    n = args.volumes
    work = tempfile.mkdtemp(prefix="iscsigw-cardinality-")
    try:
        print("| `--metrics-detail` | series per volume | the gateway's own | 1,000 volumes |")
        print("| --- | --- | --- | --- |")
        for level in ("lun", "target", "gateway"):
            one, two = scrape_count(n, level, work), scrape_count(2 * n, level, work)
            per = (two - one) / n
            own = one - per * n
            print(f"| `{level}` | {per:g} | {own:g} | {own + 1000 * per:,.0f} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
