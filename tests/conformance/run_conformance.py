#!/usr/bin/python3
"""Runs libiscsi's conformance suite (iscsi-test-cu -t ALL --dataloss --allow-sanitize) against a
fresh iscsigwd and compares every test's result with tests/conformance/expectations.txt.

Every test not listed there must PASS. A listed test carries the result it is expected to have
(SKIP or FAIL) and the reason (spec section, scope decision, or libiscsi test bug). Any difference,
in either direction, fails the run, so an expectation cannot go stale silently.

Usage, from the repository's root:
  PYTHONPATH=tests/lib tests/conformance/run_conformance.py [--store ram|file|file-direct|rbd]
      [--keep-log PATH]

--store rbd serves an RBD image of a throwaway Ceph cluster (scripts/ceph-test-cluster.sh) that
the run starts in its work directory and stops at the end. The LUN is 512e (512-byte blocks on
4096-byte physical blocks), so that the suite's unaligned cases run.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

from iscsigw_test import cu_results, harness

HERE = os.path.dirname(os.path.abspath(__file__))
INITIATOR_1 = "iqn.2007-10.com.github:sahlberg:libiscsi:iscsi-test"
INITIATOR_2 = "iqn.2007-10.com.github:sahlberg:libiscsi:iscsi-test-2"
TARGET = harness.IQN_PREFIX + "conformance"


def load_expectations(path, store):
    """Lines: '<Suite.Test> <SKIP|FAIL> [store=ram|file] <reason...>'."""
    expected = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 2)
            if len(parts) < 3:
                raise SystemExit(f"{path}:{n}: an expectation needs a test, a result and a reason")
            name, result, reason = parts
            if result not in ("SKIP", "FAIL"):
                raise SystemExit(f"{path}:{n}: result must be SKIP or FAIL, not {result}")
            if reason.startswith("store="):
                only, _, reason = reason.partition(" ")
                if only != f"store={store}":
                    continue
            if not reason.strip():
                raise SystemExit(f"{path}:{n}: {name}: the reason is missing")
            expected[name] = (result, reason)
    return expected


def main():
    workdir = tempfile.mkdtemp(prefix="iscsigw-conformance-")
    try:
        return run(workdir)
    finally:
        # The daemon's state and a 256 MiB LUN file: nothing of a run is left behind.
        shutil.rmtree(workdir, ignore_errors=True)


def run(workdir):
    ap = argparse.ArgumentParser()
    # file-direct: a file LUN with O_DIRECT; it shares the file LUN's expectations.
    ap.add_argument("--store", choices=("ram", "file", "file-direct", "rbd"), default="ram")
    ap.add_argument("--keep-log")
    args = ap.parse_args()

    size = 256 << 20
    cluster_script = os.path.join(HERE, "..", "..", "scripts", "ceph-test-cluster.sh")
    cluster_dir = os.path.join(workdir, "ceph")
    if args.store == "ram":
        lun = {"id": 0, "ram": {}, "sizeBytes": str(size), "blockSize": 512,
               "physicalBlockSize": 4096}
    elif args.store == "rbd":
        r = subprocess.run(["bash", cluster_script, "start", cluster_dir], capture_output=True,
                           text=True, timeout=300)
        if r.returncode != 0:
            raise SystemExit(f"ceph-test-cluster.sh start failed:\n{r.stderr}")
        conf = r.stdout.strip().splitlines()[-1]
        lun = {"id": 0, "rbd": {"pool": "rbd", "image": "conformance", "conf": conf,
                                "create": True},
               "sizeBytes": str(size), "blockSize": 512,
               "physicalBlockSize": 4096}
    else:
        lun = {"id": 0, "file": {"path": os.path.join(workdir, "lun0.img"), "create": True,
                                 "direct": args.store == "file-direct"},
               "sizeBytes": str(size), "blockSize": 512,
               "physicalBlockSize": 4096}
    # LUN 1: the same kind of store, read-only, for the ReadOnly suite (which skips on a
    # writable LUN). Its medium exists before the daemon starts: a read-only LUN creates none.
    ro_size = 16 << 20
    if args.store == "ram":
        ro_lun = {"id": 1, "ram": {}, "sizeBytes": str(ro_size), "blockSize": 512,
                  "readOnly": True}
    elif args.store == "rbd":
        subprocess.run(["rbd", "-c", conf, "create", "rbd/conformance-ro", "--size",
                        str(ro_size >> 20)], check=True, capture_output=True, timeout=120)
        ro_lun = {"id": 1, "rbd": {"pool": "rbd", "image": "conformance-ro", "conf": conf},
                  "blockSize": 512, "readOnly": True}
    else:
        ro_path = os.path.join(workdir, "lun1-ro.img")
        with open(ro_path, "wb") as f:
            f.truncate(ro_size)
        ro_lun = {"id": 1, "file": {"path": ro_path, "direct": args.store == "file-direct"},
                  "blockSize": 512, "readOnly": True}
    state = {"targets": [{"name": TARGET, "allowAnyInitiator": False,
                          "initiators": [INITIATOR_1, INITIATOR_2], "luns": [lun, ro_lun]}]}

    def stop_cluster():
        if args.store == "rbd":
            subprocess.run(["bash", cluster_script, "stop", cluster_dir], capture_output=True,
                           timeout=120)
            shutil.rmtree(cluster_dir, ignore_errors=True)

    try:
        daemon = harness.Daemon(state=state, state_dir=workdir).start()
    except BaseException:
        stop_cluster()
        raise
    # The URL twice: the multipath tests get two sessions (two I_T nexuses) to the same LUN.
    url = f"iscsi://{daemon.portal}/{TARGET}/0"
    try:
        p = harness.run(["iscsi-test-cu", "--dataloss", "--allow-sanitize", "-t", "ALL",
                         "-i", INITIATOR_1, "-I", INITIATOR_2, url, url], timeout=1800, check=False)
        ro = harness.run(["iscsi-test-cu", "--dataloss", "-t", "SCSI.ReadOnly", "-i", INITIATOR_1,
                          f"iscsi://{daemon.portal}/{TARGET}/1"], timeout=600, check=False)
    finally:
        rc = daemon.stop()
        stop_cluster()
    output = p.stdout + p.stderr
    if args.keep_log:
        with open(args.keep_log, "w") as f:
            f.write(output)
    results = cu_results.parse(output)
    if len(results) < 200:
        print(output[-6000:])
        print(daemon.read_log()[-6000:])
        raise SystemExit(f"iscsi-test-cu reported only {len(results)} tests (exit {p.returncode})")

    expected = load_expectations(os.path.join(HERE, "expectations.txt"),
                                 "file" if args.store == "file-direct" else args.store)
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    problems = []
    seen = set()
    for name, result, msg in results:
        if name in seen:
            continue  # a test registered twice runs twice; judge the first run
        seen.add(name)
        counts[result] += 1
        want = expected.get(name, ("PASS", ""))[0]
        if result != want:
            problems.append(f"{name}: expected {want}, got {result}" + (f" ({msg})" if msg else ""))
    for name in expected:
        if name not in seen:
            problems.append(f"{name}: listed in expectations.txt but not run by iscsi-test-cu")
    # On the read-only LUN every ReadOnly test must pass (write protection, SBC-3 4.13).
    ro_results = cu_results.parse(ro.stdout + ro.stderr)
    if not ro_results:
        problems.append("the ReadOnly run on the read-only LUN reported no test:\n" +
                        (ro.stdout + ro.stderr)[-2000:])
    for name, result, msg in ro_results:
        print(f"  read-only LUN: {result:4} {name}" + (f": {msg}" if msg else ""))
        if result != "PASS":
            problems.append(f"{name} on the read-only LUN: expected PASS, got {result}" +
                            (f" ({msg})" if msg else ""))
    total = sum(counts.values())
    print(f"iscsi-test-cu -t ALL --dataloss --allow-sanitize on a {args.store} LUN: {total} tests, "
          f"{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} really skipped")
    for name, result, msg in results:
        if result != "PASS":
            print(f"  {result:4} {name}: {msg}")
    daemon.cleanup()
    if rc != 0:
        problems.append(f"iscsigwd exited {rc} at shutdown")
    if problems:
        print("UNEXPECTED:")
        for line in problems:
            print("  " + line)
        return 1
    print("conformance: all results as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
