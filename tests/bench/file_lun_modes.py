#!/usr/bin/python3
"""A file LUN on this machine's disk through the page cache and with `direct` (O_DIRECT), against
tgtd's rdwr store on the same file, in one run: uncached 4 KiB random reads (iscsi-perf), then
4 KiB random writes without and with FUA (build/bin/iscsi_load). The page cache is dropped before
each read measurement and written back before each write measurement.

Usage, from the repository's root:
  PYTHONPATH=tests/lib tests/bench/file_lun_modes.py [--seconds 10] [--depth 32] [--size-gib 4]
Needs root (tgtd, drop_caches), `scripts/install-deps.sh --bench` and a build with iscsi_load.
"""
import argparse
import os
import subprocess
import sys

from iscsigw_test import harness

from e2e_vs_tgtd import free_port, run_perf, start_tgtd
from file_lun_read import data_file, drop_caches
from suite import iscsi_load


def load(url, pid, seconds, depth, fua):
    """4 KiB random writes with iscsi_load; returns (IOPS, p50 us, p99 us, target CPU us/IO)."""
    subprocess.run(["sync"], check=True)
    r = iscsi_load(url, ["--rw", "randwrite", "--bs", "4096", "--qd", str(depth)]
                   + (["--fua"] if fua else []), seconds, pid)
    return round(r["iops"]), r["p50"], r["p99"], r["cpu_us"]


def measure(name, url, pid, args, rows):
    drop_caches()
    iops, us = run_perf([url], args.seconds, args.depth, 8, pid)
    rows.append((name, "randread", iops, float("nan"), float("nan"), us))
    for fua in (False, True):
        rows.append((name, "randwrite" + (" FUA" if fua else ""))
                    + load(url, pid, args.seconds, args.depth, fua))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--depth", type=int, default=32)
    ap.add_argument("--size-gib", type=int, default=4)
    args = ap.parse_args()
    path = data_file(args.size_gib)
    rows = []

    tgt_proc, tgt_url = start_tgtd(free_port(), "rdwr", path, "file")
    try:
        measure("tgtd rdwr", tgt_url, tgt_proc.pid, args, rows)
    finally:
        tgt_proc.kill()
        tgt_proc.wait()
    for direct in (False, True):
        state = {"targets": [{"name": harness.IQN_PREFIX + "bench", "allowAnyInitiator": True,
                              "luns": [{"id": 0, "file": {"path": path, "direct": direct},
                                        "sizeBytes": str(args.size_gib << 30),
                                        "blockSize": 512}]}]}
        gw = harness.Daemon(state=state, extra_args=["--log-level", "warn"],
                            backing_allow=(os.path.dirname(path),)).start()
        try:
            measure("iscsigwd" + (" direct" if direct else " page cache"), gw.url("bench", 0),
                    gw.proc.pid, args, rows)
        finally:
            gw.stop()
            gw.cleanup()

    print(f"4 KiB random I/O, QD{args.depth}, {args.seconds}s, {args.size_gib} GiB file at {path}, "
          f"{os.cpu_count()} cores")
    print(f"{'target':22} {'workload':14} {'IOPS':>8} {'p50 us':>8} {'p99 us':>8} {'CPU us/IO':>10}")
    for name, work, iops, p50, p99, us in rows:
        print(f"{name:22} {work:14} {iops:8} {p50:8.0f} {p99:8.0f} {us:10.2f}")
    tgt = {work: iops for name, work, iops, *_ in rows if name == "tgtd rdwr"}
    for name, work, iops, *_ in rows:
        if name != "tgtd rdwr":
            print(f"{name}, {work}: {iops / tgt[work]:.2f}x tgtd")
    return 0


if __name__ == "__main__":
    sys.exit(main())
