#!/usr/bin/python3
"""Makes the fuzzers' seed corpora from real traffic: libiscsi's tools (iscsi-ls for discovery and
SendTargets, iscsi-inq, and iscsi-test-cu suites covering every parameter list) talk to iscsigwd
through a recording TCP proxy; each connection's initiator-to-target bytes are cut into PDUs and
written as seeds in each fuzz target's input format (see the *_fuzz.cc files):

  corpus/frame/  whole streams          corpus/text/  login and text data segments
  corpus/login/  a connection's logins  corpus/scsi/  SCSI commands with their Data-Out
  corpus/state/  the repository's state and bootstrap files
  corpus/session/  hand-written only (CHAP logins, reinstatement, TSIHs): kept as they are

Usage, from the repository's root:
  PYTHONPATH=tests/lib tests/fuzz/capture_seeds.py [--build DIR]
Run it again after a protocol change and commit the result.
"""
import argparse
import hashlib
import os
import re
import socket
import struct
import threading

from iscsigw_test import harness

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

SUITES = ["ALL.Inquiry", "ALL.ReadCapacity16", "ALL.Read10.Simple", "ALL.Write10.Simple",
          "ALL.Unmap", "ALL.WriteSame16", "ALL.CompareAndWrite", "ALL.ModeSense6",
          "ALL.PrinReadKeys", "ALL.ProutRegister", "ALL.ProutReserve", "ALL.ProutPreempt",
          "ALL.ExtendedCopy", "ALL.ReceiveCopyResults", "ALL.GetLBAStatus", "ALL.Sanitize",
          "ALL.ReportSupportedOpcodes", "ALL.Verify10", "ALL.StartStopUnit"]
MAX_SEED = 16 << 10
# Enough variety for the fuzzers to start from, small enough to keep in the repository.
PER_KIND = {"frame": 24, "scsi-sequence": 24}


def per_kind(kind):
    if kind.startswith("scsi-") and kind != "scsi-sequence":
        return PER_OPCODE
    return PER_KIND.get(kind, 1 << 30)
PER_OPCODE = 6  # single SCSI commands per (operation code, service action)


class Recorder:
    """A TCP proxy to `upstream` that keeps each connection's client-to-server bytes."""

    def __init__(self, upstream):
        self.upstream = upstream
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.streams = []
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            host, port = self.upstream.rsplit(":", 1)
            u = socket.create_connection((host, int(port)))
            buf = bytearray()
            with self.lock:
                self.streams.append(buf)
            threading.Thread(target=self.pump, args=(c, u, buf), daemon=True).start()
            threading.Thread(target=self.pump, args=(u, c, None), daemon=True).start()

    @staticmethod
    def pump(src, dst, record):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if record is not None:
                    record += data
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def pdus(stream):
    """Splits a digest-free stream into (bhs, data) pairs; stops at anything that does not fit."""
    out = []
    i = 0
    while i + 48 <= len(stream):
        bhs = bytes(stream[i:i + 48])
        ahs = bhs[4] * 4
        dlen = int.from_bytes(bhs[5:8], "big")
        total = 48 + ahs + dlen + (-dlen % 4)
        if i + total > len(stream):
            break
        out.append((bhs, bytes(stream[i + 48 + ahs:i + 48 + ahs + dlen])))
        i += total
    return out


def write(dirname, blob, written, kind=None):
    kind = kind or dirname
    if written.get(kind, 0) >= per_kind(kind):
        return
    blob = blob[:MAX_SEED]
    name = hashlib.sha1(blob).hexdigest()[:16]
    d = os.path.join(HERE, "corpus", dirname)
    with open(os.path.join(d, name), "wb") as f:
        f.write(blob)
    written[kind] = written.get(kind, 0) + 1


def seeds_from(stream, written):
    ps = pdus(stream)
    if not ps:
        return
    write("frame", bytes([0, 4, 37]) + bytes(stream), written)
    login = bytearray([0x10])  # CHAP offered by the target, one-way
    by_itt = {}
    for bhs, data in ps:
        op = bhs[0] & 0x3F
        if op in (0x03, 0x04):  # Login, Text request
            if data:
                write("text", data, written)
        if op == 0x03:
            csg = (bhs[1] >> 2) & 3
            transit = (bhs[1] >> 7) & 1
            login += bytes([csg | (transit << 2)]) + struct.pack("<H", len(data)) + data
        elif op == 0x01:  # SCSI Command: CDB, expected length, immediate data
            itt = bhs[16:20]
            by_itt[itt] = [bhs, bytearray(data)]
        elif op == 0x05:  # Data-Out: append to its command
            itt = bhs[16:20]
            if itt in by_itt:
                by_itt[itt][1] += data
    if len(login) > 1:
        write("login", bytes(login), written)
    cmds = bytearray()
    for bhs, data in by_itt.values():
        lun = bhs[9] & 1  # flat addressing of LUN 0 or 1
        expected = int.from_bytes(bhs[20:24], "big")
        shift = 0
        while (expected >> shift) > 0xFFFF:
            shift += 1
        sel = (1 if lun else 0) << 1 | min(shift, 7) << 3 | (0x40 if data else 0)
        one = bytes([sel]) + bhs[32:48] + struct.pack("<H", expected >> shift)
        if data:
            d = bytes(data[:2048])
            one += struct.pack("<H", len(d)) + d
        op = bhs[32]
        action = bhs[33] & 0x1F if op in (0x5E, 0x5F, 0x83, 0x84, 0x9E, 0xA3, 0x48) else 0
        write("scsi", one, written, kind=f"scsi-{op:02x}-{action:02x}")  # each command alone
        if len(cmds) < 12 * 40:
            cmds += one
    if cmds:
        write("scsi", bytes(cmds), written, kind="scsi-sequence")  # the connection's first ones


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=harness.BUILD)
    args = ap.parse_args()
    os.environ["ISCSIGW_BUILD"] = args.build
    for d in ("frame", "text", "login", "scsi", "state"):
        # Captured seeds are named by their hash and replaced; hand-written ones, named for what
        # they hold, are kept.
        os.makedirs(os.path.join(HERE, "corpus", d), exist_ok=True)
        for name in os.listdir(os.path.join(HERE, "corpus", d)):
            if re.fullmatch(r"[0-9a-f]{16}", name):
                os.remove(os.path.join(HERE, "corpus", d, name))
    luns = [{"id": 0, "ram": {}, "sizeBytes": str(64 << 20), "blockSize": 512},
            {"id": 1, "ram": {}, "sizeBytes": str(64 << 20), "blockSize": 512}]
    gw = harness.Daemon(state=harness.simple_state("seeds", luns=luns),
                        extra_args=["--log-level", "warn"]).start()
    rec = Recorder(gw.portal)
    portal = f"127.0.0.1:{rec.port}"
    url = f"iscsi://{portal}/{harness.IQN_PREFIX}seeds/0"
    try:
        harness.run(["iscsi-ls", "-s", f"iscsi://{portal}"], check=False)
        harness.run(["iscsi-inq", "-e", "1", "-c", "0xb0", url], check=False)
        for suite in SUITES:
            p = harness.run(["iscsi-test-cu", "--dataloss", "--allow-sanitize", "-t", suite,
                             "-i", harness.INITIATOR, "-I", harness.INITIATOR + "-2", url, url],
                            timeout=300, check=False)
            if "Run Summary" not in p.stdout + p.stderr:
                raise RuntimeError(f"iscsi-test-cu -t {suite} did not run:\n{p.stdout}{p.stderr}")
    finally:
        gw.stop()
        gw.cleanup()
    written = {}
    with rec.lock:
        streams = list(rec.streams)
    for s in streams:
        seeds_from(s, written)
    for src in ("deploy/examples/demo.json", "deploy/base/bootstrap.json",
                "deploy/overlays/demo/bootstrap.json"):
        with open(os.path.join(REPO, src), "rb") as f:
            write("state", f.read(), written)
    counts = {d: len(os.listdir(os.path.join(HERE, "corpus", d)))
              for d in ("frame", "text", "login", "scsi", "state")}
    print(f"{len(streams)} connections recorded; seeds: "
          + ", ".join(f"{k} {v}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
