#!/usr/bin/python3
"""End-to-end comparison with tgtd (Debian's tgt) on loopback, in one run on one machine.

Both targets serve a null LUN (reads return zeros, no media cost), so the figure is the target's
protocol and SCSI cost. The client is libiscsi's iscsi-perf (random READ16), with one and with two
client processes; each target is credited with its best. Target CPU time comes from
/proc/<pid>/stat (utime + stime) over the measured interval, divided by the I/Os completed.

Usage, from the repository's root:
  PYTHONPATH=tests/lib tests/bench/e2e_vs_tgtd.py [--seconds N] [--depth 32] [--blocks 8]
Prints a table and the ratios iscsigwd/tgtd. Needs root (tgtd) and the tgt package.
"""
import argparse
import os
import re
import socket
import subprocess
import sys
import time

from iscsigw_test import harness

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    """utime + stime of every thread of pid, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def run_perf(urls, seconds, depth, blocks, pid):
    """Runs one iscsi-perf per URL at once; returns (total IOPS, target CPU us per I/O)."""
    procs = [subprocess.Popen(["iscsi-perf", "-m", str(depth), "-b", str(blocks), "-t",
                               str(seconds), "-r", u], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, errors="replace")
             for u in urls]
    # Skip the first half second (logins, ramp-up) before sampling CPU.
    time.sleep(0.5)
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    outs = [p.communicate(timeout=seconds + 60)[0] for p in procs]
    cpu1, t1 = cpu_seconds(pid), time.monotonic()
    total = 0
    for out in outs:
        m = re.findall(r"iops average (\d+)", out.replace("\r", "\n"))
        if not m:
            raise RuntimeError(f"iscsi-perf failed:\n{out[-2000:]}")
        total += int(m[-1])
    ios = total * (t1 - t0)
    return total, (cpu1 - cpu0) * 1e6 / ios if ios else float("nan")


def start_tgtd(port, bstype="null", backing="/dev/null/", name="null"):
    """tgtd on 127.0.0.1:port with LUN 1 on `backing` through its `bstype` store; returns
    (process, LUN URL)."""
    ctl = str(900 + port % 100)
    proc = subprocess.Popen(["tgtd", "-f", "-C", ctl, "--iscsi", f"portal=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def adm(*args):
        return subprocess.run(["tgtadm", "-C", ctl, "--lld", "iscsi", *args],
                              capture_output=True, text=True)

    harness.wait_for(lambda: adm("--op", "show", "--mode", "target").returncode == 0,
                     what="tgtd's control socket")
    iqn = f"iqn.2026-11.org.tgt:{name}"
    for args in (["--op", "new", "--mode", "target", "--tid", "1", "-T", iqn],
                 ["--op", "new", "--mode", "logicalunit", "--tid", "1", "--lun", "1",
                  "--bstype", bstype, "-b", backing, "--device-type", "disk"],
                 ["--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL"]):
        r = adm(*args)
        if r.returncode != 0:
            raise RuntimeError(f"tgtadm {' '.join(args)}: {r.stderr}")
    return proc, f"iscsi://127.0.0.1:{port}/{iqn}/1"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--depth", type=int, default=32)
    ap.add_argument("--blocks", type=int, default=8)
    args = ap.parse_args()

    tgt_proc, tgt_url = start_tgtd(free_port())
    state = {"targets": [{"name": harness.IQN_PREFIX + "bench", "allowAnyInitiator": True,
                          "luns": [{"id": 0, "null": {}, "sizeBytes": str(1 << 40),
                                    "blockSize": 512}]}]}
    gw = harness.Daemon(state=state, extra_args=["--log-level", "warn"]).start()
    gw_url = gw.url("bench", 0)
    results = {}
    try:
        for name, pid, url in (("tgtd", tgt_proc.pid, tgt_url), ("iscsigwd", gw.proc.pid, gw_url)):
            for clients in (1, 2):
                results[(name, clients)] = run_perf([url] * clients, args.seconds, args.depth,
                                                    args.blocks, pid)
    finally:
        gw.stop()
        gw.cleanup()
        tgt_proc.kill()  # tgtd in the foreground ignores SIGTERM
        tgt_proc.wait()

    size = args.blocks * 512
    print(f"random READ16 {size // 1024} KiB, QD{args.depth} per client, {args.seconds}s, "
          f"null LUN, loopback, {os.cpu_count()} cores")
    print(f"{'target':10} {'clients':>7} {'IOPS':>9} {'target CPU us/IO':>17}")
    for (name, clients), (iops, us) in results.items():
        print(f"{name:10} {clients:7} {iops:9} {us:17.2f}")
    best = {n: max(results[(n, c)][0] for c in (1, 2)) for n in ("tgtd", "iscsigwd")}
    cpu = {n: min(results[(n, c)][1] for c in (1, 2)) for n in ("tgtd", "iscsigwd")}
    print(f"best IOPS ratio iscsigwd/tgtd: {best['iscsigwd'] / best['tgtd']:.2f}x "
          f"({best['iscsigwd']} vs {best['tgtd']})")
    print(f"target CPU per I/O ratio iscsigwd/tgtd: {cpu['iscsigwd'] / cpu['tgtd']:.2f}x "
          f"({cpu['iscsigwd']:.2f} us vs {cpu['tgtd']:.2f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
