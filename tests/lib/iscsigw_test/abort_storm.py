"""Abort storm: task management and session kills against pipelined, verified writers.

Four sessions write with verification while a fifth, for a minute (ISCSIGW_STORM_SECONDS), at
random, asks a writer to ABORT TASK one of its own in-flight WRITEs (ABORT TASK names a task of
the issuing I_T nexus only), issues LOGICAL UNIT RESET, or kills a writer's session through the API
(iscsigwctl session kill). The LUN's store is delayed (fault injection, every store call starts
DELAY_MS later) so that aborts hit writes that have not reached the store yet.

Bookkeeping per writer: it owns RANGES ranges of RANGE_BLOCKS blocks, at most one command in flight
per range; every WRITE(10) stamps each block with (writer, connection, LBA, generation, token) and
random bytes. A range's content is known after a write answered GOOD; a write aborted (ABORT TASK
answered, LUN RESET), lost with its connection, or answered with an error makes the range
"unresolved". After the TMF response (or the Logout Response, or the next login, which reinstates
the session: same initiator name and ISID), the writer

  1. reads the range (a probe): every block must be the last GOOD generation or one of the
     unresolved writes. The store starts a write DELAY_MS after it received it, so a write sent at t
     cannot be in the store before t + DELAY_MS: when the probe finds the data of an aborted write
     whose TMF response (Logout Response, login) came before t + DELAY_MS, that write landed after
     the target said it was gone. A fixed delay keeps the store's calls in order, so a rewrite alone
     would always land after such a write and hide it; the probe is what sees it.
  2. rewrites the range with a new generation until GOOD.

After a LUN RESET (whose response reaches the controller at T), each writer sends ABORT TASK for
every command it sent before T and has no answer for: the response settles each one ("Function
complete" or "Task does not exist" without a SCSI Response: aborted; a SCSI Response first: it
completed). At the end every range must read back exactly its last GOOD generation.

Also checked, each a failure: every TMF is answered (ABORT TASK 0 or 1, LUN RESET 0); no SCSI
Response arrives for a task after the TMF response that aborted it or said it did not exist (RFC
7143 11.5.1: a task the target has received is never "Task does not exist"); no Reject; StatSN
advances by one per status on every connection; a session the API kills is dropped within its
logout timeout when the initiator ignores the request (RFC 7143 11.9.1); a login that reinstates a
session succeeds the first time (the target answers it once the old session's tasks are gone, it
does not refuse it). And the storm must have hit: at least SECONDS/6 random ABORT TASKs, and
SECONDS/12 LUN RESETs and session kills, each ended a write still in flight; with fewer, the
final checks would hold whether or not aborts work at all.
ISCSIGW_STORM_SEED reproduces a run's choices; ISCSIGW_STORM_DELAY_MS changes the delay (0: no fault
injection, for a build without it; the timing check is then off).
"""
import os
import queue
import random
import struct
import sys
import threading
import time
import traceback

from .harness import IQN_PREFIX, wait_for
from .iscsi_client import Initiator, LoginError

MiB = 1 << 20
SECONDS = float(os.environ.get("ISCSIGW_STORM_SECONDS", "60"))
DELAY_MS = int(os.environ.get("ISCSIGW_STORM_DELAY_MS", "40"))
SEED = int(os.environ.get("ISCSIGW_STORM_SEED", str(random.randrange(1 << 30))))

TARGET = IQN_PREFIX + "storm"
WRITERS = 4
QUEUE_DEPTH = 8
BLOCK = 512
RANGE_BLOCKS = 8
RANGES = 256  # per writer
REGION_BLOCKS = 16384  # each writer's part of the LUN
LUN_BYTES = 64 * MiB
STALL_SECONDS = 20.0  # a command or TMF without an answer for this long is lost
DRAIN_SECONDS = 60.0
MAGIC = b"STORMBLK"
HEADER = struct.Struct(">8sIIQQQ")  # magic, writer, connection, LBA, generation, token
ABORT_TASK, LUN_RESET = 1, 5
TMF_NAMES = {0: "Function complete", 1: "Task does not exist"}


def writer_name(i):
    return f"iqn.2026-11.io.iscsigw.test:storm-writer{i}"


class Storm:
    """What the threads share: counters, failures, the clock and the stop signals."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.lock = threading.Lock()
        self.counts = {}
        self.hits = {}
        self.failures = []
        self.failure_count = 0
        self.anomalies = []
        self.t0 = time.monotonic()
        self.end = None
        self.stop = threading.Event()  # the storm is over: drain
        self.abort = threading.Event()  # a thread died: everyone stops
        self.barrier = threading.Barrier(WRITERS + 1, action=self._start_clock)

    def _start_clock(self):
        self.end = time.monotonic() + self.seconds

    def count(self, key, n=1):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def get(self, key):
        with self.lock:
            return self.counts.get(key, 0)

    def hit(self, key, what):
        """Counts `key` once per distinct `what` (a LUN RESET's number)."""
        with self.lock:
            seen = self.hits.setdefault(key, set())
            if what not in seen:
                seen.add(what)
                self.counts[key] = self.counts.get(key, 0) + 1

    def fail(self, message):
        with self.lock:
            self.failure_count += 1
            if len(self.failures) < 40:
                self.failures.append(f"[+{self.rel(time.monotonic())}] {message}")

    def anomaly(self, message):
        with self.lock:
            if len(self.anomalies) < 40:
                self.anomalies.append(f"[+{self.rel(time.monotonic())}] {message}")

    def die(self, message):
        self.fail(message)
        self.abort.set()
        self.barrier.abort()

    def rel(self, t):
        return f"{t - self.t0:.3f}s" if t is not None else "?"


class Write:
    __slots__ = ("writer", "gen", "rng", "itt", "cmd_sn", "conn", "sent", "data", "outcome",
                 "cause", "done_at")

    def __init__(self, writer, gen, rng, itt, cmd_sn, conn, sent, data):
        self.writer, self.gen, self.rng, self.itt, self.cmd_sn = writer, gen, rng, itt, cmd_sn
        self.conn, self.sent, self.data = conn, sent, data
        self.outcome = "in flight"
        self.cause = ""
        self.done_at = None

    def describe(self, storm):
        text = (f"gen {self.gen} (WRITE ITT 0x{self.itt:08x} CmdSN {self.cmd_sn} on connection "
                f"{self.conn}, sent at +{storm.rel(self.sent)}: {self.outcome}")
        if self.cause:
            text += f", {self.cause}"
        return text + ")"


class Suspect:
    """A write whose range it may or may not have changed. assured_at: when the target said it
    was over (TMF response, Logout Response, next login); None until that is known."""
    __slots__ = ("write", "assured_at", "unit_attention")

    def __init__(self, write, assured_at, unit_attention=False):
        self.write, self.assured_at, self.unit_attention = write, assured_at, unit_attention


class Range:
    __slots__ = ("index", "lba", "good", "suspects", "busy", "probed")

    def __init__(self, index, lba):
        self.index, self.lba = index, lba
        self.good = None  # the Write whose content the range holds (last GOOD)
        self.suspects = []  # writes since `good` that were not answered GOOD
        self.busy = None  # the command in flight on it
        self.probed = True


class Cmd:
    __slots__ = ("kind", "itt", "cmd_sn", "sent", "rng", "write", "abort_itt", "stalled")

    def __init__(self, kind, itt, cmd_sn, sent, rng, write=None):
        self.kind, self.itt, self.cmd_sn, self.sent, self.rng = kind, itt, cmd_sn, sent, rng
        self.write = write
        self.abort_itt = None
        self.stalled = False


class Tmf:
    __slots__ = ("itt", "cmd", "sent", "reset_no", "stalled")

    def __init__(self, itt, cmd, sent, reset_no):
        self.itt, self.cmd, self.sent, self.reset_no = itt, cmd, sent, reset_no
        self.stalled = False


class _Reconnect(Exception):
    """Leave this connection: outstanding writes are settled at `assured_at` (None: next login)."""

    def __init__(self, cause, assured_at=None):
        super().__init__(cause)
        self.cause, self.assured_at = cause, assured_at


def stamp(writer, conn, lba, gen, token):
    return HEADER.pack(MAGIC, writer, conn, lba, gen, token)


def parse_block(block):
    """(writer, connection, lba, gen) from a block's stamp, or None."""
    magic, writer, conn, lba, gen, _ = HEADER.unpack_from(block)
    return (writer, conn, lba, gen) if magic == MAGIC else None


def sense_text(sense):
    if len(sense) < 16:
        return "no sense"
    s = sense[2:]
    return f"sense key 0x{s[2] & 0x0F:x} ASC/ASCQ 0x{s[12]:02x}/0x{s[13]:02x}"


def is_unit_attention(status, sense):
    return status == 0x02 and len(sense) >= 5 and sense[4] & 0x0F == 0x06


class Writer:
    """One session writing its own ranges; runs in its own thread."""

    def __init__(self, storm, index, portal):
        self.storm, self.index, self.portal = storm, index, portal
        self.name = writer_name(index)
        self.isid = b"\x80" + os.urandom(4) + bytes([index])
        self.base = index * REGION_BLOCKS
        self.ranges = [Range(i, self.base + i * RANGE_BLOCKS) for i in range(RANGES)]
        self.needs = set(range(RANGES))  # ranges to probe and/or write before they are known
        self.writes = {}  # gen -> Write
        self.gen = 0
        self.inbox = queue.Queue()
        self.rng = random.Random(SEED * 16 + index)
        self.conn = 0
        self.ini = None
        self.awaiting_login = []  # suspects settled by the next login
        self.thread = threading.Thread(target=self.run, name=f"writer{index}", daemon=True)

    # -- connection
    def connect(self, why):
        def attempt():
            ini = None
            try:
                ini = Initiator(self.portal, self.name)
                ini.isid = self.isid
                ini.login(TARGET)
                return ini
            except (LoginError, OSError, ConnectionError) as e:
                self.storm.count("login retries")
                self.storm.fail(f"writer {self.index}: login after {why} failed "
                                f"({e.__class__.__name__}: {e}); retrying")
                self.last_login_error = e
                if ini is not None:
                    ini.close()
                return None

        self.last_login_error = None
        self.ini = wait_for(attempt, timeout=30, interval=0.05,
                            what=f"writer {self.index} to log in again after {why}")
        self.conn += 1
        self.login_at = time.monotonic()
        for s in self.awaiting_login:
            s.assured_at = self.login_at
            s.write.cause += f"; next login (same ISID) done at +{self.storm.rel(self.login_at)}"
        self.awaiting_login = []
        self.outstanding = {}  # ITT -> Cmd
        self.tmfs = {}  # ITT -> Tmf
        self.aborted = {}  # ITT -> (TMF ITT, response, time) of tasks taken as aborted
        self.logout_itt = None
        self.logout_deadline = None
        self.ignoring_until = None
        self.reconnect = None  # a _Reconnect to raise once the current batch of answers is done
        self.next_stall_check = time.monotonic() + 1.0

    def leave(self, cause, assured_at):
        """Forget this connection; its unanswered writes become suspects of their ranges."""
        if "session kill" in cause and any(c.kind == "write" for c in self.outstanding.values()):
            self.storm.count("session kills that ended writes in flight")
        for cmd in self.outstanding.values():
            r = self.ranges[cmd.rng]
            r.busy = None
            if cmd.kind != "write":
                continue
            w = cmd.write
            w.outcome = "no answer"
            w.cause = cause
            s = self.add_suspect(r, w, assured_at)
            if assured_at is None:
                self.awaiting_login.append(s)
            self.storm.count("writes lost with their connection")
        for tmf in self.tmfs.values():
            if assured_at is not None:  # a Logout Response came after the TMF
                self.storm.fail(
                    f"writer {self.index}: ABORT TASK ITT 0x{tmf.itt:08x} (of ITT "
                    f"0x{tmf.cmd.itt:08x}) sent at +{self.storm.rel(tmf.sent)} got no TMF "
                    f"response before the Logout Response")
            else:
                self.storm.count("TMFs unanswered when the connection went")
        stat_errors = getattr(self.ini, "stat_sn_errors", [])
        for e in stat_errors:
            self.storm.fail(f"writer {self.index} connection {self.conn}: {e}")
        self.storm.count("StatSN out of sequence", len(stat_errors))
        self.ini.close()
        self.outstanding, self.tmfs, self.aborted = {}, {}, {}

    def add_suspect(self, r, w, assured_at, unit_attention=False):
        s = Suspect(w, assured_at, unit_attention)
        r.suspects.append(s)
        r.probed = False
        self.needs.add(r.index)
        return s

    # -- thread
    def run(self):
        try:
            self.connect("start")
            self.pump("fill", False, lambda: not self.needs and not self.outstanding, 120)
            self.storm.barrier.wait(timeout=180)
            self.pump("storm", True, self.storm.stop.is_set, self.storm.seconds + 120)
            self.pump("drain", False, self.drained, DRAIN_SECONDS)
            if not self.storm.abort.is_set():
                self.logout()
        except threading.BrokenBarrierError:
            pass
        except Exception:
            self.storm.die(f"writer {self.index} died:\n{traceback.format_exc()}")

    def drained(self):
        return (not self.needs and not self.outstanding and not self.tmfs
                and self.logout_itt is None)

    def pump(self, phase, random_writes, until, seconds):
        deadline = time.monotonic() + seconds
        while not until():
            if self.storm.abort.is_set():
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"writer {self.index}: {phase} phase not done after {seconds}s: "
                    f"{len(self.outstanding)} commands and {len(self.tmfs)} TMFs in flight, "
                    f"{len(self.needs)} ranges unresolved")
            try:
                self.step(random_writes)
            except _Reconnect as e:
                self.leave(e.cause, e.assured_at)
                self.connect(e.cause)
            except (ConnectionError, OSError) as e:
                ignoring = self.ignoring_until is not None
                cause = (f"connection {self.conn} closed ({e.__class__.__name__}: {e})"
                         + (" after the target asked for a logout we ignored (session kill)"
                            if ignoring else ""))
                self.storm.count("connections dropped by the target" if ignoring
                                 else "connections lost otherwise")
                self.leave(cause, None)
                self.connect(cause)

    def step(self, random_writes):
        now = time.monotonic()
        while True:
            try:
                msg = self.inbox.get_nowait()
            except queue.Empty:
                break
            self.on_message(msg)
        if self.ignoring_until is not None and now > self.ignoring_until:
            self.storm.fail(f"writer {self.index}: target did not drop connection {self.conn} "
                            f"within 10 s of the logout timeout it gave (AsyncEvent 1)")
            raise _Reconnect(f"writer closed connection {self.conn}: the target asked for a "
                             f"logout and did not drop it")
        if self.logout_itt is not None and now > self.logout_deadline:
            self.storm.fail(f"writer {self.index}: no Logout Response for ITT "
                            f"0x{self.logout_itt:08x} within 10s")
            raise _Reconnect("Logout Response missing")
        if self.logout_itt is None and self.reconnect is None:
            self.fill_queue(random_writes)
        for a in self.ini.poll(0.005):
            self.on_answer(a)
        if self.reconnect is not None:
            raise self.reconnect  # after the whole batch: answers read with it still count
        if now > self.next_stall_check:
            self.next_stall_check = now + 1.0
            self.check_stalls(now)

    def check_stalls(self, now):
        for cmd in list(self.outstanding.values()):
            if not cmd.stalled and now - cmd.sent > STALL_SECONDS and cmd.abort_itt is None:
                cmd.stalled = True
                what = cmd.write.describe(self.storm) if cmd.write else "probe READ"
                self.storm.fail(f"writer {self.index}: ITT 0x{cmd.itt:08x} ({what}) unanswered "
                                f"for {STALL_SECONDS}s; aborting it")
                if self.logout_itt is None:
                    self.send_abort(cmd, None)
        for tmf in self.tmfs.values():
            if not tmf.stalled and now - tmf.sent > STALL_SECONDS:
                tmf.stalled = True
                self.storm.fail(f"writer {self.index}: ABORT TASK ITT 0x{tmf.itt:08x} (of ITT "
                                f"0x{tmf.cmd.itt:08x}) unanswered for {STALL_SECONDS}s")

    # -- sending
    def fill_queue(self, random_writes):
        while len(self.outstanding) < QUEUE_DEPTH and self.ini.window_open():
            r = self.pick(random_writes)
            if r is None:
                return
            if r.suspects and not r.probed:
                self.send_probe(r)
            else:
                self.send_write(r)

    def pick(self, random_writes):
        for i in self.needs:
            if self.ranges[i].busy is None:
                return self.ranges[i]
        if not random_writes:
            return None
        for _ in range(8):
            r = self.ranges[self.rng.randrange(RANGES)]
            if r.busy is None and r.index not in self.needs:
                return r
        return None

    def send_write(self, r):
        self.gen += 1
        token = self.rng.getrandbits(64)
        payload = bytearray(os.urandom(RANGE_BLOCKS * BLOCK))
        for k in range(RANGE_BLOCKS):
            payload[k * BLOCK:k * BLOCK + HEADER.size] = stamp(self.index, self.conn, r.lba + k,
                                                               self.gen, token)
        payload = bytes(payload)
        cdb = struct.pack(">BBIBHB", 0x2A, 0, r.lba, 0, RANGE_BLOCKS, 0)
        cmd_sn, itt = self.ini.cmd_sn, self.ini.itt
        sent = time.monotonic()
        w = Write(self.index, self.gen, r.index, itt, cmd_sn, self.conn, sent, payload)
        self.writes[self.gen] = w
        r.busy = itt
        self.outstanding[itt] = Cmd("write", itt, cmd_sn, sent, r.index, w)
        self.storm.count("writes issued")
        got = self.ini.send_command(0, cdb, data=payload)
        assert got == itt, (got, itt)

    def send_probe(self, r):
        cdb = struct.pack(">BBIBHB", 0x28, 0, r.lba, 0, RANGE_BLOCKS, 0)
        cmd_sn, itt = self.ini.cmd_sn, self.ini.itt
        sent = time.monotonic()
        r.busy = itt
        self.outstanding[itt] = Cmd("probe", itt, cmd_sn, sent, r.index)
        self.storm.count("probe reads")
        got = self.ini.send_command(0, cdb, read_len=RANGE_BLOCKS * BLOCK)
        assert got == itt, (got, itt)

    def send_abort(self, cmd, reset_no):
        itt = self.ini.submit_tmf(ABORT_TASK, lun=0, ref_itt=cmd.itt, ref_cmd_sn=cmd.cmd_sn)
        cmd.abort_itt = itt
        self.tmfs[itt] = Tmf(itt, cmd, time.monotonic(), reset_no)
        self.storm.count("TMF ABORT TASK issued" if reset_no is None
                         else "TMF ABORT TASK issued after a LUN RESET")

    def on_message(self, msg):
        if self.logout_itt is not None or self.reconnect is not None:
            return  # leaving this connection: that settles every task
        if msg[0] == "abort":
            writes = [c for c in self.outstanding.values()
                      if c.kind == "write" and c.abort_itt is None]
            if not writes:
                self.storm.count("abort requests finding no write in flight")
                return
            self.send_abort(self.rng.choice(writes), None)
        elif msg[0] == "reset":
            _, reset_no, answered_at = msg
            for cmd in list(self.outstanding.values()):
                if cmd.sent < answered_at and cmd.abort_itt is None:
                    self.send_abort(cmd, reset_no)

    # -- receiving
    def on_answer(self, a):
        if a.kind == "scsi":
            self.on_scsi(a)
        elif a.kind == "tmf":
            self.on_tmf(a)
        elif a.kind == "async":
            self.on_async(a)
        elif a.kind == "logout":
            self.on_logout(a)
        elif a.kind == "reject":
            self.storm.fail(f"writer {self.index}: Reject reason 0x{a.reason:02x} for ITT "
                            f"0x{a.itt:08x}")
        elif a.kind != "nop":
            self.storm.fail(f"writer {self.index}: unexpected PDU opcode 0x{a.pdu.opcode:02x} "
                            f"ITT 0x{a.itt:08x}")

    def on_scsi(self, a):
        st = self.storm
        cmd = self.outstanding.pop(a.itt, None)
        if cmd is None:
            gone = self.aborted.get(a.itt)
            if gone is None:
                st.fail(f"writer {self.index}: SCSI Response for ITT 0x{a.itt:08x}, which is not "
                        f"in flight on connection {self.conn}")
                return
            tmf_itt, response, at, what = gone
            text = (f"writer {self.index}: SCSI Response (status 0x{a.status:02x}) at "
                    f"+{st.rel(a.at)} for ITT 0x{a.itt:08x} ({what}) after ABORT TASK ITT "
                    f"0x{tmf_itt:08x} was answered '{TMF_NAMES.get(response, response)}' at "
                    f"+{st.rel(at)}")
            if response == 0:
                st.count("responses after the TMF response that aborted the task")
                st.fail(text + ": an aborted task answered")
            else:
                st.count("responses after 'Task does not exist'")
                st.fail(text + ": the target said the task did not exist, then answered it")
            return
        r = self.ranges[cmd.rng]
        r.busy = None
        ok = a.status == 0 and a.response == 0
        if cmd.kind == "probe":
            if ok:
                self.check_probe(r, a.data, cmd)
            else:
                st.count("probe reads failed")
            r.probed = True
            return
        w = cmd.write
        w.done_at = a.at
        if ok:
            w.outcome = "GOOD"
            st.count("writes acknowledged GOOD")
            if r.suspects and r.good is not None:
                st.count("ranges rewritten")
            if r.good is not None:
                r.good.data = None
            for s in r.suspects:
                s.write.data = None
            r.good = w
            r.suspects = []
            self.needs.discard(r.index)
        else:
            ua = is_unit_attention(a.status, a.sense)
            w.outcome = (f"status 0x{a.status:02x} response 0x{a.response:02x} "
                         f"{sense_text(a.sense)} at +{st.rel(a.at)}")
            st.count("writes answered CHECK CONDITION/UNIT ATTENTION" if ua
                     else "writes answered with another error")
            self.add_suspect(r, w, None, unit_attention=ua)

    def on_tmf(self, a):
        st = self.storm
        tmf = self.tmfs.pop(a.itt, None)
        if tmf is None:
            st.fail(f"writer {self.index}: TMF response for ITT 0x{a.itt:08x}, not a TMF of ours")
            return
        name = TMF_NAMES.get(a.response, f"response {a.response}")
        st.count(f"ABORT TASK answered '{name}'")
        if a.response not in (0, 1):
            st.fail(f"writer {self.index}: ABORT TASK ITT 0x{tmf.itt:08x} of ITT "
                    f"0x{tmf.cmd.itt:08x} answered {a.response}, expected 0 (Function complete) "
                    f"or 1 (Task does not exist)")
        cmd = tmf.cmd
        if self.outstanding.get(cmd.itt) is not cmd:
            # Its SCSI Response came first: the task completed before the abort.
            if a.response == 0:
                st.count("ABORT TASK 'Function complete' for a task already answered")
            return
        del self.outstanding[cmd.itt]
        r = self.ranges[cmd.rng]
        r.busy = None
        cause = (f"ABORT TASK ITT 0x{tmf.itt:08x} answered '{name}' at +{st.rel(a.at)}"
                 + (f" (sent after LUN RESET #{tmf.reset_no})" if tmf.reset_no else ""))
        what = cmd.write.describe(st) if cmd.write else "probe READ"
        self.aborted[cmd.itt] = (tmf.itt, a.response, a.at, what)
        if a.response == 1 and tmf.reset_no is None:
            st.count("ABORT TASK 'Task does not exist' for a task never answered, no LUN RESET "
                     "known yet")
        if a.response == 0 and a.at < cmd.sent + DELAY_MS / 1000.0:
            st.count("ABORT TASK 'Function complete' sooner than the store delay")
        if cmd.kind == "write":
            if tmf.reset_no is None and a.response == 0:
                st.count("random ABORT TASKs that ended a write in flight")
            elif tmf.reset_no is not None:
                st.hit("LUN RESETs that ended writes in flight", tmf.reset_no)
            cmd.write.outcome = "aborted"
            cmd.write.cause = cause
            cmd.write.done_at = a.at
            self.add_suspect(r, cmd.write, a.at)
            st.count("writes aborted")
        else:
            st.count("probe reads aborted")

    def on_async(self, a):
        st = self.storm
        if a.event != 1:
            st.count(f"Async Messages event {a.event}")
            return
        st.count("logout requests (session kills) seen")
        if (self.logout_itt is not None or self.ignoring_until is not None
                or self.reconnect is not None):
            return
        choice = self.rng.random()
        if choice < 0.5:
            st.count("kill reactions: logout")
            self.logout_itt = self.ini.submit_logout(0)
            self.logout_deadline = time.monotonic() + 10
        elif choice < 0.75:
            st.count("kill reactions: drop the connection")
            self.reconnect = _Reconnect(f"writer closed connection {self.conn} without logging "
                                        f"out when asked (session kill)")
        else:
            st.count("kill reactions: ignore until dropped")
            self.ignoring_until = time.monotonic() + a.parameter3 + 10

    def on_logout(self, a):
        if a.itt != self.logout_itt:
            self.storm.fail(f"writer {self.index}: Logout Response for ITT 0x{a.itt:08x}, "
                            f"expected 0x{self.logout_itt:08x}")
        if a.response != 0:
            self.storm.fail(f"writer {self.index}: Logout Response {a.response}, expected 0")
        self.reconnect = _Reconnect(f"in flight at the Logout Request (session kill); Logout "
                                    f"Response at +{self.storm.rel(a.at)}", a.at)

    def check_probe(self, r, data, cmd):
        """A range read back while unresolved: each block is the last GOOD write or one of the
        writes since; an aborted write whose data is there must have landed before the target
        said it was over."""
        st = self.storm
        allowed = {}
        if r.good is not None:
            allowed[r.good.gen] = r.good
        for s in r.suspects:
            allowed[s.write.gen] = s.write
        seen = set()
        for k in range(RANGE_BLOCKS):
            block = data[k * BLOCK:(k + 1) * BLOCK]
            found = parse_block(block)
            if r.good is None and block == bytes(BLOCK):
                continue  # never written yet: the RAM store's zeros
            w = allowed.get(found[3]) if found and found[0] == self.index else None
            if w is None or w.data is None or w.data[k * BLOCK:(k + 1) * BLOCK] != block:
                st.count("probe reads with unexpected data")
                st.fail(f"writer {self.index}: probe READ ITT 0x{cmd.itt:08x} of range "
                        f"{r.index} LBA {r.lba + k}: found {self.describe_block(block)}; "
                        f"expected {r.good.describe(st) if r.good else 'nothing yet'} or one of "
                        f"{[s.write.gen for s in r.suspects]}")
                return
            seen.add(w.gen)
        for s in r.suspects:
            w = s.write
            early = s.assured_at is not None and s.assured_at < w.sent + DELAY_MS / 1000.0
            if early:
                # The target settled it before its store could have written it: had it still
                # been on its way to the store, this probe would see it.
                st.count("probed writes settled within the store delay")
            if w.gen not in seen:
                continue
            if s.unit_attention:
                st.count("resurrected writes")
                st.fail(f"writer {self.index}: range {r.index} (LBA {r.lba}) holds "
                        f"{w.describe(st)}, a write terminated with UNIT ATTENTION, which is "
                        f"never processed (SAM-5 5.14); seen by probe READ ITT 0x{cmd.itt:08x}")
            elif early:
                st.count("resurrected writes")
                st.fail(f"writer {self.index}: range {r.index} (LBA {r.lba}) holds "
                        f"{w.describe(st)}: it was sent at +{st.rel(w.sent)}, so the store "
                        f"(delay {DELAY_MS} ms) could not write it before "
                        f"+{st.rel(w.sent + DELAY_MS / 1000.0)}, yet the target had said it "
                        f"was over at +{st.rel(s.assured_at)}: it landed after that; seen by "
                        f"probe READ ITT 0x{cmd.itt:08x} sent at +{st.rel(cmd.sent)}")
            else:
                st.count("unresolved writes that had landed before the target settled them")

    def describe_block(self, block):
        found = parse_block(block)
        if found is None:
            return "zeros" if block == bytes(BLOCK) else f"unstamped data {block[:16].hex()}..."
        writer, conn, lba, gen = found
        if writer != self.index:
            return f"writer {writer}'s gen {gen} for LBA {lba}"
        w = self.writes.get(gen)
        body = "" if w is None or w.data is None else " (block bytes differ from what was sent)"
        return (f"stamp LBA {lba} " + (w.describe(self.storm) if w else f"unknown gen {gen}")
                + body)

    def logout(self):
        itt = self.ini.submit_logout(0)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for a in self.ini.poll(0.05):
                if a.kind == "logout" and a.itt == itt:
                    self.ini.close()
                    return
                if a.kind not in ("nop", "async"):
                    self.storm.fail(f"writer {self.index}: {a} while logging out at the end")
        self.storm.fail(f"writer {self.index}: no Logout Response at the end")
        self.ini.close()


class Controller:
    """The fifth session, through the first gateway: LUN RESETs of its own, ABORT TASK requests
    to the writers, and session kills through the API of the gateway a writer is logged in to."""

    def __init__(self, storm, daemons, writers):
        self.storm, self.daemons, self.writers = storm, daemons, writers
        self.rng = random.Random(SEED * 16 + 15)
        self.resets = 0
        self.thread = threading.Thread(target=self.run, name="controller", daemon=True)

    def run(self):
        try:
            ini = Initiator(self.daemons[0].portal, "iqn.2026-11.io.iscsigw.test:storm-controller")
            ini.login(TARGET)
            self.ini = ini
            self.storm.barrier.wait(timeout=180)
            while time.monotonic() < self.storm.end and not self.storm.abort.is_set():
                x = self.rng.random()
                if x < 0.7:
                    self.rng.choice(self.writers).inbox.put(("abort",))
                    self.storm.count("ABORT TASK requests to writers")
                elif x < 0.85:
                    self.lun_reset()
                else:
                    self.kill()
                pause = time.monotonic() + self.rng.uniform(0.02, 0.25)
                while time.monotonic() < pause:
                    for a in ini.poll(max(0.0, pause - time.monotonic())):
                        self.unexpected(a)
            ini.submit_logout(0)
            deadline = time.monotonic() + 10
            done = False
            while not done and time.monotonic() < deadline:
                for a in ini.poll(0.05):
                    if a.kind == "logout":
                        done = True
                    else:
                        self.unexpected(a)
            for e in getattr(ini, "stat_sn_errors", []):
                self.storm.fail(f"controller: {e}")
            ini.close()
        except threading.BrokenBarrierError:
            pass
        except Exception:
            self.storm.die(f"controller died:\n{traceback.format_exc()}")
        finally:
            self.storm.stop.set()

    def unexpected(self, a):
        if a.kind == "async":
            self.storm.count(f"controller Async Messages event {a.event}")
        elif a.kind != "nop":
            self.storm.fail(f"controller: unexpected {a}")

    def lun_reset(self):
        st = self.storm
        itt = self.ini.submit_tmf(LUN_RESET, lun=0)
        sent = time.monotonic()
        st.count("TMF LOGICAL UNIT RESET issued")
        while time.monotonic() - sent < STALL_SECONDS:
            for a in self.ini.poll(0.05):
                if a.kind == "tmf" and a.itt == itt:
                    if a.response != 0:
                        st.fail(f"controller: LOGICAL UNIT RESET ITT 0x{itt:08x} answered "
                                f"{a.response}, expected 0 (Function complete)")
                    self.resets += 1
                    for w in self.writers:
                        w.inbox.put(("reset", self.resets, a.at))
                    return
                self.unexpected(a)
        st.fail(f"controller: LOGICAL UNIT RESET ITT 0x{itt:08x} sent at +{st.rel(sent)} "
                f"unanswered for {STALL_SECONDS}s")

    def kill(self):
        names = {w.name for w in self.writers}
        mine = [(d, s) for d in self.daemons
                for s in d.ctl_json("session", "list").get("sessions", [])
                if s.get("initiator_name", s.get("initiatorName")) in names]
        if not mine:
            self.storm.count("kills finding no writer session")
            return
        daemon, s = self.rng.choice(mine)
        p = daemon.ctl("session", "kill", s["tsih"], "--timeout", "0", check=False)
        if p.returncode == 0:
            self.storm.count("sessions killed")
        else:
            self.storm.count("kills refused (session already gone)")
            self.storm.anomaly(f"session kill {s['tsih']}: {p.stderr.strip()}")


def verify(storm, portal, writers):
    """Reads every range on a fresh session and compares it with its last GOOD write. Returns
    (ranges verified, lost, resurrected)."""
    ini = Initiator(portal, "iqn.2026-11.io.iscsigw.test:storm-verifier")
    ini.login(TARGET)
    chunk = 16  # ranges per READ
    todo = [(w, first) for w in writers for first in range(0, RANGES, chunk)]
    attempts = {}
    inflight = {}
    verified = lost = resurrected = 0
    deadline = time.monotonic() + 120
    while todo or inflight:
        if time.monotonic() > deadline:
            raise AssertionError(f"final read-back not done: {len(todo)} reads to go, "
                                 f"{len(inflight)} in flight")
        while todo and len(inflight) < QUEUE_DEPTH and ini.window_open():
            w, first = todo.pop()
            lba = w.ranges[first].lba
            cdb = struct.pack(">BBIBHB", 0x28, 0, lba, 0, chunk * RANGE_BLOCKS, 0)
            inflight[ini.send_command(0, cdb, read_len=chunk * RANGE_BLOCKS * BLOCK)] = (w, first)
        for a in ini.poll(0.05):
            if a.kind != "scsi":
                if a.kind not in ("nop", "async"):
                    storm.fail(f"verifier: unexpected {a}")
                continue
            w, first = inflight.pop(a.itt)
            if a.status != 0:
                attempts[(w.index, first)] = attempts.get((w.index, first), 0) + 1
                if attempts[(w.index, first)] > 5:
                    raise AssertionError(f"final READ of writer {w.index} ranges {first}+: status "
                                         f"0x{a.status:02x} {sense_text(a.sense)}")
                todo.append((w, first))
                continue
            for i in range(chunk):
                r = w.ranges[first + i]
                got = a.data[i * RANGE_BLOCKS * BLOCK:(i + 1) * RANGE_BLOCKS * BLOCK]
                kind = check_final(storm, w, r, got)
                verified += kind == "ok"
                lost += kind == "lost"
                resurrected += kind == "resurrected"
    ini.logout()
    ini.close()
    return verified, lost, resurrected


def check_final(storm, w, r, got):
    if r.good is None or r.suspects:
        storm.fail(f"writer {w.index}: range {r.index} still unresolved at the end")
        return "unresolved"
    if got == r.good.data:
        return "ok"
    for k in range(RANGE_BLOCKS):
        block = got[k * BLOCK:(k + 1) * BLOCK]
        if block == r.good.data[k * BLOCK:(k + 1) * BLOCK]:
            continue
        found = parse_block(block)
        other = w.writes.get(found[3]) if found and found[0] == w.index else None
        where = (f"writer {w.index} range {r.index} LBA {r.lba + k}: expected "
                 f"{r.good.describe(storm)}, found {w.describe_block(block)}")
        if other is not None and other.outcome != "GOOD":
            storm.fail(f"resurrected write: {where}: a write the target had given up landed "
                       f"after the rewrite")
            return "resurrected"
        storm.fail(f"lost write: {where}")
        return "lost"
    return "ok"


def run_storm(test, daemons, seconds=SECONDS):
    """The storm against the LUN 0 of TARGET that `daemons` (harness.Daemon, one or several
    gateways of one logical unit) serve, its store delayed DELAY_MS: the writers log in to the
    gateways in turn, the controller through the first; `test` (a unittest.TestCase) fails on
    anything the module's docstring names."""
    storm = Storm(seconds)
    writers = [Writer(storm, i, daemons[i % len(daemons)].portal) for i in range(WRITERS)]
    controller = Controller(storm, daemons, writers)
    for t in [w.thread for w in writers] + [controller.thread]:
        t.start()
    limit = time.monotonic() + seconds + 180 + DRAIN_SECONDS
    for t in [controller.thread] + [w.thread for w in writers]:
        t.join(max(0.0, limit - time.monotonic()))
        if t.is_alive():
            storm.die(f"{t.name} still running past the test's time limit")
    verified = lost = resurrected = 0
    if not storm.abort.is_set():
        verified, lost, resurrected = verify(storm, daemons[0].portal, writers)
    c = storm.get
    figures = [
        ("seed", SEED), ("storm seconds", seconds), ("store delay ms", DELAY_MS),
        ("gateways", len(daemons)),
        ("writes issued", c("writes issued")),
        ("writes acknowledged GOOD", c("writes acknowledged GOOD")),
        ("TMF ABORT TASK (random)", c("TMF ABORT TASK issued")),
        ("TMF ABORT TASK (after LUN RESET)", c("TMF ABORT TASK issued after a LUN RESET")),
        ("TMF LOGICAL UNIT RESET", c("TMF LOGICAL UNIT RESET issued")),
        ("sessions killed", c("sessions killed")),
        ("random ABORT TASKs that ended a write in flight",
         c("random ABORT TASKs that ended a write in flight")),
        ("LUN RESETs that ended writes in flight", c("LUN RESETs that ended writes in flight")),
        ("session kills that ended writes in flight",
         c("session kills that ended writes in flight")),
        ("ranges rewritten", c("ranges rewritten")),
        ("ranges verified", verified),
        ("lost writes", lost),
        ("resurrected writes", resurrected + c("resurrected writes")),
    ]
    print("\nabort storm figures:", file=sys.stderr)
    for k, v in figures:
        print(f"  {k}: {v}", file=sys.stderr)
    with storm.lock:
        details = sorted(storm.counts.items())
    print("  details: " + ", ".join(f"{k}={v}" for k, v in details), file=sys.stderr)
    for a in storm.anomalies:
        print(f"  anomaly: {a}", file=sys.stderr)
    test.assertGreater(c("writes acknowledged GOOD"), 0)
    for d in daemons:
        test.assertIsNone(d.proc.poll(), "iscsigwd exited during the storm")
    if storm.failure_count:
        test.fail(f"{storm.failure_count} failure(s), seed {SEED} "
                  f"(ISCSIGW_STORM_SEED={SEED} to replay the choices); the first:\n"
                  + "\n".join(storm.failures))
    test.assertEqual(lost, 0)
    test.assertEqual(resurrected + c("resurrected writes"), 0)
    test.assertEqual(verified, WRITERS * RANGES)
    # The storm hit writes in flight, or the checks above prove nothing about aborts. The
    # controller acts every 0.14 s on average (70% aborts, 15% resets, 15% kills): a minute
    # makes about 300 abort requests and 60 each of resets and kills, most of which find
    # writes in flight (QUEUE_DEPTH per writer, each held DELAY_MS by the store).
    for key, floor in (("random ABORT TASKs that ended a write in flight", seconds / 6),
                       ("LUN RESETs that ended writes in flight", seconds / 12),
                       ("session kills that ended writes in flight", seconds / 12)):
        test.assertGreaterEqual(c(key), max(1, int(floor)), f"{key}: too few for the storm "
                                f"to have tested anything")
