#!/usr/bin/python3
"""Uncached random reads from a file LUN on this machine's disk: iscsigwd against tgtd (rdwr
store) on the same file, and fio straight on the file (libaio, O_DIRECT) as the device's ceiling,
in one run. The page cache is dropped before each measurement, so every read reaches the disk.

The file (default 4 GiB of random data under /var/tmp/iscsigw-bench) is written once and kept:
a sparse or fallocated file would read as zeros without touching the device.

Usage, from the repository's root:
  PYTHONPATH=tests/lib tests/bench/file_lun_read.py [--seconds 10] [--depth 32] [--blocks 8]
      [--size-gib 4] [--direct]
      [--iscsigwd PATH ...]   (several builds of iscsigwd, compared in one run)
Needs root (tgtd, drop_caches) and `scripts/install-deps.sh --bench` (tgt, fio, libiscsi-bin).
"""
import argparse
import json
import os
import subprocess
import sys

from iscsigw_test import harness

from e2e_vs_tgtd import free_port, run_perf, start_tgtd


def data_file(size_gib):
    d = "/var/tmp/iscsigw-bench"
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"lun-{size_gib}g.img")
    if not os.path.exists(path) or os.path.getsize(path) != size_gib << 30:
        tmp = path + ".tmp"
        subprocess.run(["dd", "if=/dev/urandom", f"of={tmp}", "bs=1M", f"count={size_gib << 10}",
                        "status=none"], check=True)
        os.rename(tmp, path)
    return path


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def fio_direct(path, seconds, depth, blocks):
    out = subprocess.run(["fio", "--name=ceiling", f"--filename={path}", "--rw=randread",
                          f"--bs={blocks * 512}", f"--iodepth={depth}", "--ioengine=libaio",
                          "--direct=1", "--time_based", f"--runtime={seconds}",
                          "--output-format=json"], capture_output=True, text=True, check=True)
    return int(json.loads(out.stdout)["jobs"][0]["read"]["iops"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--depth", type=int, default=32)
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--size-gib", type=int, default=4)
    ap.add_argument("--iscsigwd", action="append", default=[],
                    help="iscsigwd binaries to compare (default: this build's)")
    ap.add_argument("--direct", action="store_true",
                    help="each iscsigwd also with the LUN's direct (O_DIRECT) option")
    args = ap.parse_args()
    path = data_file(args.size_gib)
    binaries = args.iscsigwd or [harness.binary("iscsigwd")]

    rows = []
    drop_caches()
    rows.append(("fio libaio O_DIRECT (device)", fio_direct(path, args.seconds, args.depth,
                                                            args.blocks), float("nan")))
    tgt_proc, tgt_url = start_tgtd(free_port(), "rdwr", path, "file")
    try:
        drop_caches()
        rows.append(("tgtd rdwr",) + run_perf([tgt_url], args.seconds, args.depth, args.blocks,
                                              tgt_proc.pid))
    finally:
        tgt_proc.kill()
        tgt_proc.wait()
    runs = [(b, False) for b in binaries]
    if args.direct:
        runs += [(b, True) for b in binaries]
    for b, direct in runs:
        state = {"targets": [{"name": harness.IQN_PREFIX + "bench", "allowAnyInitiator": True,
                              "luns": [{"id": 0, "file": {"path": path, "direct": direct},
                                        "sizeBytes": str(args.size_gib << 30),
                                        "blockSize": 512}]}]}
        gw = harness.Daemon(state=state, extra_args=["--log-level", "warn"],
                            backing_allow=(os.path.dirname(path),))
        gw.args[0] = b
        gw.start()
        try:
            drop_caches()
            rows.append((f"iscsigwd {b}{' direct' if direct else ''}",) + run_perf([gw.url("bench", 0)], args.seconds,
                                                      args.depth, args.blocks, gw.proc.pid))
        finally:
            gw.stop()
            gw.cleanup()

    print(f"uncached random READ16 {args.blocks * 512 // 1024} KiB, QD{args.depth}, "
          f"{args.seconds}s, {args.size_gib} GiB file at {path}, {os.cpu_count()} cores")
    print(f"{'reader':60} {'IOPS':>8} {'target CPU us/IO':>17}")
    for name, iops, us in rows:
        print(f"{name:60} {iops:8} {us:17.2f}")
    tgt = rows[1][1]
    dev = rows[0][1]
    for name, iops, _ in rows[2:]:
        print(f"{name}: {iops / tgt:.2f}x tgtd, {iops / dev:.0%} of fio direct")
    return 0


if __name__ == "__main__":
    sys.exit(main())
