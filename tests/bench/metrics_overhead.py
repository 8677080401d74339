#!/usr/bin/python3
"""Cost of the hot-path metrics: iscsigwd with per-command counting on against the same binary
with --metrics-counting=false, in one run, on a null LUN with iscsi-perf (4 KiB random READ16,
QD32), the way e2e_vs_tgtd.py measures. Runs alternate on/off several times so machine noise hits
both alike; prints the median IOPS and target CPU per I/O of each and the overhead in percent.

Usage, from the repository's root:
  PYTHONPATH=tests/lib tests/bench/metrics_overhead.py [--seconds N] [--rounds R] [--depth 32]
      [--blocks 8]
"""
import argparse
import os
import statistics
import sys

import e2e_vs_tgtd
from e2e_vs_tgtd import harness


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--depth", type=int, default=32)
    ap.add_argument("--blocks", type=int, default=8)
    args = ap.parse_args()

    state = {"targets": [{"name": harness.IQN_PREFIX + "bench", "allowAnyInitiator": True,
                          "luns": [{"id": 0, "null": {}, "sizeBytes": str(1 << 40),
                                    "blockSize": 512}]}]}
    daemons = {
        "on": harness.Daemon(state=state, extra_args=["--log-level", "warn"]).start(),
        "off": harness.Daemon(state=state, extra_args=["--log-level", "warn",
                                                        "--metrics-counting=false"]).start(),
    }
    results = {"on": [], "off": []}
    try:
        for _ in range(args.rounds):
            for mode in ("on", "off"):
                d = daemons[mode]
                results[mode].append(e2e_vs_tgtd.run_perf([d.url("bench", 0)], args.seconds,
                                                          args.depth, args.blocks, d.proc.pid))
    finally:
        for d in daemons.values():
            d.stop()
            d.cleanup()

    print(f"random READ16 {args.blocks * 512 // 1024} KiB, QD{args.depth}, {args.seconds}s x "
          f"{args.rounds} rounds per mode, null LUN, loopback, {os.cpu_count()} cores")
    med = {}
    for mode, runs in results.items():
        iops = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        med[mode] = (iops, cpu)
        print(f"counting {mode:3}: IOPS {[r[0] for r in runs]} median {iops:.0f}; "
              f"target CPU us/IO median {cpu:.2f}")
    print(f"IOPS cost of counting: {(1 - med['on'][0] / med['off'][0]) * 100:+.2f}%")
    print(f"CPU per I/O cost of counting: {(med['on'][1] / med['off'][1] - 1) * 100:+.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
