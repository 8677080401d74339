"""A minimal iSCSI initiator for tests (RFC 7143): login with optional CHAP (any CHAP_A, mutual,
a chosen challenge), SendTargets, READ(10)/WRITE(10) with immediate data, logout, and waiting for
an Async Message. Just enough to assert exact login status codes and data round trips that
libiscsi's command-line tools cannot show. Commands go one at a time, or several in flight with
send_command/recv_response inside the target's CmdSN window. Blocking sockets with timeouts;
never sleeps.
"""
import hashlib
import os
import select
import socket
import struct
import time

ALGORITHMS = {5: "md5", 6: "sha1", 7: "sha256", 8: "sha3_256"}


class LoginError(Exception):
    def __init__(self, status, keys=None):
        super().__init__(f"login failed with status 0x{status:04x}")
        self.status = status
        self.keys = keys or {}


def _pad(data):
    return data + b"\0" * (-len(data) % 4)


def encode_keys(pairs):
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in pairs)


def decode_keys(data):
    out = {}
    for item in data.split(b"\0"):
        if item:
            k, _, v = item.decode().partition("=")
            out[k] = v
    return out


def chap_response(algorithm, ident, secret, challenge):
    h = hashlib.new(ALGORITHMS[algorithm])
    h.update(bytes([ident]) + secret.encode() + challenge)
    return h.digest()


class Pdu:
    def __init__(self, bhs, data):
        self.bhs = bhs
        self.data = data

    @property
    def opcode(self):
        return self.bhs[0] & 0x3F

    @property
    def flags(self):
        return self.bhs[1]


OPERATIONAL = [("HeaderDigest", "None"), ("DataDigest", "None"),
               ("MaxRecvDataSegmentLength", "262144"), ("ImmediateData", "Yes"),
               ("InitialR2T", "No"), ("MaxBurstLength", "262144"),
               ("FirstBurstLength", "65536"), ("DefaultTime2Wait", "0"),
               ("DefaultTime2Retain", "0"), ("ErrorRecoveryLevel", "0"),
               ("MaxConnections", "1"), ("MaxOutstandingR2T", "1"),
               ("DataPDUInOrder", "Yes"), ("DataSequenceInOrder", "Yes")]


def login_status(portal, initiator_name, target=None, source=None, timeout=10.0, **kw):
    """Logs in (Initiator.login's keywords) and closes; returns 0 or the login status."""
    c = Initiator(portal, initiator_name, timeout=timeout, source=source)
    try:
        c.login(target, **kw)
        return 0
    except LoginError as e:
        return e.status
    finally:
        c.close()


class Initiator:
    def __init__(self, portal, initiator_name, timeout=10.0, source=None):
        """source: the local address to connect from (any of 127/8 on loopback)."""
        host, _, port = portal.rpartition(":")
        self.sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.name = initiator_name
        self.isid = b"\x80" + os.urandom(5)
        self.tsih = 0
        self.itt = 1
        self.cmd_sn = 1
        self.exp_stat_sn = 0
        self.max_cmd_sn = None  # from the last PDU that carried it (RFC 7143 11.x: MaxCmdSN)
        self.target_mrdsl = 8192
        self._pending = {}  # ITT -> read buffer of each command sent but not yet answered
        self.mutual_verified = False

    # -- framing
    def send(self, bhs, data=b""):
        bhs = bytearray(bhs)
        bhs[5:8] = len(data).to_bytes(3, "big")
        self.sock.sendall(bytes(bhs) + _pad(data))

    def _recv_exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the target")
            buf += chunk
        return buf

    def recv(self):
        bhs = self._recv_exact(48)
        ahs = bhs[4] * 4
        dsl = int.from_bytes(bhs[5:8], "big")
        if ahs:
            self._recv_exact(ahs)
        data = self._recv_exact(dsl + (-dsl % 4))[:dsl]
        # Every target-to-initiator PDU but a failed login response carries MaxCmdSN at 32.
        if bhs[0] & 0x3F != 0x23 or bhs[36:38] == b"\0\0":
            self.max_cmd_sn = struct.unpack(">I", bhs[32:36])[0]
        return Pdu(bhs, data)

    def recv_skipping_nops(self):
        while True:
            p = self.recv()
            if p.opcode == 0x20 and struct.unpack(">I", p.bhs[20:24])[0] != 0xFFFFFFFF:
                self._answer_ping(p)
                continue
            return p

    def _answer_ping(self, p):
        bhs = bytearray(48)
        bhs[0] = 0x40
        bhs[1] = 0x80
        bhs[8:16] = p.bhs[8:16]
        bhs[16:20] = b"\xff\xff\xff\xff"
        bhs[20:24] = p.bhs[20:24]
        struct.pack_into(">II", bhs, 24, self.cmd_sn, self.exp_stat_sn)
        self.send(bhs)

    # -- login
    def _login_pdu(self, csg, nsg, transit, pairs):
        bhs = bytearray(48)
        bhs[0] = 0x43
        bhs[1] = (0x80 if transit else 0) | (csg << 2) | nsg
        bhs[8:14] = self.isid
        struct.pack_into(">H", bhs, 14, self.tsih)
        struct.pack_into(">I", bhs, 16, self.itt)
        struct.pack_into(">II", bhs, 24, self.cmd_sn, self.exp_stat_sn)
        self.send(bhs, encode_keys(pairs))
        r = self.recv()
        if r.opcode != 0x23:
            raise ConnectionError(f"expected a login response, got opcode 0x{r.opcode:02x}")
        status = struct.unpack(">H", r.bhs[36:38])[0]
        keys = decode_keys(r.data)
        if status != 0:
            raise LoginError(status, keys)
        self.exp_stat_sn = struct.unpack(">I", r.bhs[24:28])[0] + 1
        self.tsih = struct.unpack(">H", r.bhs[14:16])[0]
        if "MaxRecvDataSegmentLength" in keys:
            self.target_mrdsl = int(keys["MaxRecvDataSegmentLength"])
        return bool(r.flags & 0x80), keys

    def login(self, target=None, chap=None, algorithms="5", mutual=None, reflect=False):
        """chap=(user, secret); mutual=(target_user, target_secret). Raises LoginError."""
        names = [("InitiatorName", self.name)]
        names += [("TargetName", target)] if target else [("SessionType", "Discovery")]
        if chap:
            _, keys = self._login_pdu(0, 1, False, names + [("AuthMethod", "CHAP,None")])
            if keys.get("AuthMethod") != "CHAP":
                raise LoginError(-1, keys)
            _, keys = self._login_pdu(0, 1, False, [("CHAP_A", algorithms)])
            alg = int(keys["CHAP_A"])
            ident = int(keys["CHAP_I"])
            challenge = bytes.fromhex(keys["CHAP_C"][2:])
            pairs = [("CHAP_N", chap[0]),
                     ("CHAP_R", "0x" + chap_response(alg, ident, chap[1], challenge).hex())]
            my_challenge = challenge if reflect else os.urandom(16)
            if mutual or reflect:
                pairs += [("CHAP_I", "3"), ("CHAP_C", "0x" + my_challenge.hex())]
            transit, keys = self._login_pdu(0, 1, True, pairs)
            if mutual:
                want = chap_response(alg, 3, mutual[1], my_challenge)
                if keys.get("CHAP_N") != mutual[0] or keys.get("CHAP_R") != "0x" + want.hex():
                    raise AssertionError(f"target failed mutual CHAP: {keys}")
                self.mutual_verified = True
            if not transit:
                raise AssertionError(f"target did not leave the security stage: {keys}")
            pairs = OPERATIONAL
        else:
            pairs = names + OPERATIONAL
        transit, keys = self._login_pdu(1, 3, True, pairs)
        while not transit:
            transit, keys = self._login_pdu(1, 3, True, [])
        self.itt += 1
        return keys

    # -- full feature phase
    def _next_itt(self):
        itt = self.itt
        self.itt += 1
        return itt

    def send_targets(self):
        bhs = bytearray(48)
        bhs[0] = 0x44
        bhs[1] = 0x80
        struct.pack_into(">I", bhs, 16, self._next_itt())
        bhs[20:24] = b"\xff\xff\xff\xff"
        struct.pack_into(">II", bhs, 24, self.cmd_sn, self.exp_stat_sn)
        self.send(bhs, encode_keys([("SendTargets", "All")]))
        r = self.recv_skipping_nops()
        assert r.opcode == 0x24, r.opcode
        self.exp_stat_sn = struct.unpack(">I", r.bhs[24:28])[0] + 1
        return [item.decode().partition("=")[2] for item in r.data.split(b"\0")
                if item.startswith(b"TargetName=")]

    def _command(self, lun, cdb, read_len=0, data=b""):
        itt = self.send_command(lun, cdb, read_len, data)
        got, status, buf, sense = self.recv_response()
        assert got == itt, f"answer for ITT {got}, expected {itt}"
        return status, buf, sense

    def window_open(self):
        """True when the target's CmdSN window admits one more command (RFC 7143 3.2.2.1:
        CmdSN <= MaxCmdSN in serial arithmetic)."""
        if self.max_cmd_sn is None:
            return True
        return (self.max_cmd_sn - self.cmd_sn) & 0xFFFFFFFF < 0x80000000

    def send_command(self, lun, cdb, read_len=0, data=b""):
        """Sends a SCSI Command (simple task attribute, immediate data only) without waiting for
        its answer; returns its ITT. recv_response collects the answers, in any order."""
        bhs = bytearray(48)
        bhs[0] = 0x01
        bhs[1] = 0x80 | (0x40 if read_len else 0) | (0x20 if data else 0) | 0x01
        bhs[9] = lun
        itt = self._next_itt()
        struct.pack_into(">I", bhs, 16, itt)
        struct.pack_into(">I", bhs, 20, read_len or len(data))
        struct.pack_into(">II", bhs, 24, self.cmd_sn, self.exp_stat_sn)
        self.cmd_sn += 1
        bhs[32:32 + len(cdb)] = cdb
        assert len(data) <= min(self.target_mrdsl, 65536), "immediate data only"
        self._pending[itt] = bytearray(read_len)
        self.send(bhs, data)
        return itt

    def recv_response(self):
        """Waits for the next command to finish; returns (itt, status, data read, sense)."""
        while True:
            r = self.recv_skipping_nops()
            itt = struct.unpack(">I", r.bhs[16:20])[0]
            if r.opcode == 0x25:  # Data-In
                buf = self._pending[itt]
                offset = struct.unpack(">I", r.bhs[40:44])[0]
                buf[offset:offset + len(r.data)] = r.data
                if r.flags & 0x01:
                    self.exp_stat_sn = struct.unpack(">I", r.bhs[24:28])[0] + 1
                    return itt, r.bhs[3], bytes(self._pending.pop(itt)), b""
            elif r.opcode == 0x21:  # SCSI Response
                self.exp_stat_sn = struct.unpack(">I", r.bhs[24:28])[0] + 1
                return itt, r.bhs[3], bytes(self._pending.pop(itt)), r.data
            elif r.opcode == 0x32:  # Async Message: remember it, keep waiting
                self.async_events = getattr(self, "async_events", []) + [r]
            else:
                raise AssertionError(f"unexpected opcode 0x{r.opcode:02x}")

    def write(self, lun, lba, data, block=512):
        cdb = struct.pack(">BBIBHB", 0x2A, 0, lba, 0, len(data) // block, 0)
        status, _, sense = self._command(lun, cdb, data=data)
        return status, sense

    def read(self, lun, lba, blocks, block=512):
        cdb = struct.pack(">BBIBHB", 0x28, 0, lba, 0, blocks, 0)
        status, data, sense = self._command(lun, cdb, read_len=blocks * block)
        return status, data, sense

    def test_unit_ready(self, lun):
        status, _, sense = self._command(lun, bytes(6))
        return status, sense

    def read_capacity(self, lun):
        status, data, sense = self._command(lun, struct.pack(">B9x", 0x25), read_len=8)
        if status != 0:
            return status, None, sense
        last, block = struct.unpack(">II", data)
        return status, (last + 1) * block, sense

    def task_management(self, function, lun=0, ref_itt=0xFFFFFFFF, ref_cmd_sn=0):
        """Sends an immediate Task Management Function Request (RFC 7143 11.5; function 1 ABORT
        TASK .. 8 TASK REASSIGN) and returns the Response field of the answer (11.6.1)."""
        bhs = bytearray(48)
        bhs[0] = 0x42
        bhs[1] = 0x80 | function
        bhs[9] = lun
        struct.pack_into(">I", bhs, 16, self._next_itt())
        struct.pack_into(">I", bhs, 20, ref_itt)
        struct.pack_into(">II", bhs, 24, self.cmd_sn, self.exp_stat_sn)
        struct.pack_into(">I", bhs, 32, ref_cmd_sn)
        self.send(bhs)
        r = self.recv_skipping_nops()
        assert r.opcode == 0x22, f"expected a Task Management Response, got 0x{r.opcode:02x}"
        self.exp_stat_sn = struct.unpack(">I", r.bhs[24:28])[0] + 1
        return r.bhs[2]

    def wait_async(self):
        """Returns (AsyncEvent, Parameter3) of the next Async Message."""
        pending = getattr(self, "async_events", [])
        r = pending.pop(0) if pending else self.recv_skipping_nops()
        assert r.opcode == 0x32, f"expected an Async Message, got 0x{r.opcode:02x}"
        self.exp_stat_sn = struct.unpack(">I", r.bhs[24:28])[0] + 1
        return r.bhs[36], struct.unpack(">H", r.bhs[42:44])[0]

    def logout(self):
        bhs = bytearray(48)
        bhs[0] = 0x46
        bhs[1] = 0x80
        struct.pack_into(">I", bhs, 16, self._next_itt())
        struct.pack_into(">II", bhs, 24, self.cmd_sn, self.exp_stat_sn)
        self.send(bhs)
        r = self.recv_skipping_nops()
        assert r.opcode == 0x26, r.opcode
        return r.bhs[2]

    def closed(self):
        """True when the target has closed the connection (reads EOF)."""
        try:
            return self.sock.recv(65536) == b""
        except (ConnectionError, socket.timeout):
            return True

    def close(self):
        self.sock.close()

    # -- several tasks in flight with task management and logout: answers come from poll()
    def submit_tmf(self, function, lun=0, ref_itt=0xFFFFFFFF, ref_cmd_sn=0):
        """Sends an immediate Task Management Function Request (RFC 7143 11.5) without waiting for
        its answer; returns its ITT. Immediate, it carries the next CmdSN without advancing it
        (3.2.2.1); ABORT TASK (1) names its task by ITT and RefCmdSN, LOGICAL UNIT RESET is 5."""
        bhs = bytearray(48)
        bhs[0] = 0x42
        bhs[1] = 0x80 | function
        bhs[9] = lun
        itt = self._next_itt()
        struct.pack_into(">I", bhs, 16, itt)
        struct.pack_into(">I", bhs, 20, ref_itt)
        struct.pack_into(">II", bhs, 24, self.cmd_sn, self.exp_stat_sn)
        struct.pack_into(">I", bhs, 32, ref_cmd_sn)
        self.send(bhs)
        return itt

    def submit_logout(self, reason=0):
        """Sends an immediate Logout Request (RFC 7143 11.14; reason 0 closes the session) without
        waiting for its answer; returns its ITT."""
        bhs = bytearray(48)
        bhs[0] = 0x46
        bhs[1] = 0x80 | reason
        itt = self._next_itt()
        struct.pack_into(">I", bhs, 16, itt)
        struct.pack_into(">II", bhs, 24, self.cmd_sn, self.exp_stat_sn)
        self.send(bhs)
        return itt

    def poll(self, timeout):
        """Reads what the target sends within `timeout` seconds and returns it as a list of Answer
        in arrival order. Kinds: "scsi" (SCSI Response, or the Data-In carrying status; data holds
        what was read for a command from send_command), "tmf", "logout", "nop" (the answer to a
        NOP-Out of ours), "async", "reject" (itt is the rejected PDU's) and "other". Target pings
        are answered here. Keeps ExpStatSN and MaxCmdSN current and records in stat_sn_errors
        every status PDU whose StatSN is not the one expected (RFC 7143 4.2.2.2: StatSN advances by
        one per status on a connection). Raises ConnectionError when the target closes. poll keeps
        bytes it has read but not yet parsed, so the blocking receive methods must not be mixed
        with it on one connection."""
        if not hasattr(self, "_rx"):
            self._rx = bytearray()
            self.stat_sn_errors = []
        readable, _, _ = select.select([self.sock], [], [], timeout)
        if not readable:
            return []
        chunk = self.sock.recv(1 << 20)
        at = time.monotonic()
        if not chunk:
            raise ConnectionError("connection closed by the target")
        self._rx += chunk
        answers = []
        while len(self._rx) >= 48:
            ahs = self._rx[4] * 4
            dsl = int.from_bytes(self._rx[5:8], "big")
            total = 48 + ahs + dsl + (-dsl % 4)
            if len(self._rx) < total:
                break
            p = Pdu(bytes(self._rx[:48]), bytes(self._rx[48 + ahs:48 + ahs + dsl]))
            del self._rx[:total]
            answer = self._dispatch(p, at)
            if answer is not None:
                answers.append(answer)
        return answers

    def _dispatch(self, p, at):
        op = p.opcode
        itt = struct.unpack(">I", p.bhs[16:20])[0]
        self.max_cmd_sn = struct.unpack(">I", p.bhs[32:36])[0]
        status_pdu = (op in (0x21, 0x22, 0x24, 0x26, 0x32, 0x3F)
                      or (op == 0x25 and p.flags & 0x01) or (op == 0x20 and itt != 0xFFFFFFFF))
        stat_sn = struct.unpack(">I", p.bhs[24:28])[0]
        if status_pdu:
            if stat_sn != self.exp_stat_sn:
                self.stat_sn_errors.append(
                    f"opcode 0x{op:02x} ITT 0x{itt:08x}: StatSN {stat_sn}, expected "
                    f"{self.exp_stat_sn}")
            if (stat_sn + 1 - self.exp_stat_sn) & 0xFFFFFFFF < 0x80000000:
                self.exp_stat_sn = (stat_sn + 1) & 0xFFFFFFFF
        if op == 0x20:  # NOP-In
            if itt == 0xFFFFFFFF:
                if struct.unpack(">I", p.bhs[20:24])[0] != 0xFFFFFFFF:
                    self._answer_ping(p)
                return None
            return Answer("nop", p, itt, at, stat_sn)
        if op == 0x25:  # Data-In
            buf = self._pending.get(itt)
            if buf is None:
                return Answer("other", p, itt, at, stat_sn)
            offset = struct.unpack(">I", p.bhs[40:44])[0]
            buf[offset:offset + len(p.data)] = p.data
            if not p.flags & 0x01:
                return None
            self._pending.pop(itt)
            return Answer("scsi", p, itt, at, stat_sn, status=p.bhs[3], response=0,
                          data=bytes(buf))
        if op == 0x21:  # SCSI Response
            buf = self._pending.pop(itt, None)
            return Answer("scsi", p, itt, at, stat_sn, status=p.bhs[3], response=p.bhs[2],
                          data=bytes(buf or b""), sense=p.data)
        if op == 0x22:
            return Answer("tmf", p, itt, at, stat_sn, response=p.bhs[2])
        if op == 0x26:
            return Answer("logout", p, itt, at, stat_sn, response=p.bhs[2])
        if op == 0x32:
            return Answer("async", p, itt, at, stat_sn, event=p.bhs[36],
                          parameter3=struct.unpack(">H", p.bhs[42:44])[0], sense=p.data)
        if op == 0x3F:
            ref = struct.unpack(">I", p.data[16:20])[0] if len(p.data) >= 20 else 0xFFFFFFFF
            return Answer("reject", p, ref, at, stat_sn, reason=p.bhs[2])
        return Answer("other", p, itt, at, stat_sn)


def sense_key_asc(sense):
    """Sense key, ASC and ASCQ of a SCSI Response data segment (2-byte length + fixed sense)."""
    s = sense[2:]
    return s[2] & 0x0F, s[12], s[13]


class Answer:
    """One PDU that Initiator.poll dispatched: kind, itt, when its bytes were read (`at`,
    time.monotonic()), its StatSN, and per kind status/response/data/sense (scsi), response (tmf,
    logout), event/parameter3/sense (async) or reason (reject); pdu is the raw PDU."""

    def __init__(self, kind, pdu, itt, at, stat_sn, **fields):
        self.kind = kind
        self.pdu = pdu
        self.itt = itt
        self.at = at
        self.stat_sn = stat_sn
        self.status = None
        self.response = None
        self.data = b""
        self.sense = b""
        self.__dict__.update(fields)

    def __repr__(self):
        return (f"Answer({self.kind} ITT 0x{self.itt:08x} StatSN {self.stat_sn} "
                f"status {self.status} response {self.response})")
