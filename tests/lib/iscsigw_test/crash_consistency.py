"""Crash consistency: kill -9 the daemon while four initiators write to a file LUN, restart it on the
same state dir, and read back every block those initiators touched.

What is proven, for the write cache on (WCE=1, the default) and off (WCE=0, set with MODE SELECT):
  - WCE=1: every block holds the last generation that was acknowledged as durable (a WRITE with FUA
    answered GOOD, or a GOOD write followed by a GOOD SYNCHRONIZE CACHE sent after that answer), or a
    later one that was acknowledged or still in flight. Never an older one, never anything else.
  - WCE=0: every block holds the last generation acknowledged at all (any WRITE answered GOOD), or the
    one still in flight when the daemon died.
  - Blocks next to the written regions are still zeros (no write landed in the wrong place), and
    what the restarted daemon serves is what is in the LUN file.

For WRITE ATOMIC(16) (SBC-4), a second scenario: each writer rewrites whole slots of SLOT_BLOCKS
blocks, one atomic write per slot at a time, with FUA. After the restart every slot holds exactly
one write's blocks, all of them (never some blocks of one write and some of another: no torn
write), and that write is the last one acknowledged for the slot or the one in flight. A file LUN
completes at its next open an atomic write the kill cut short (its journal, AtomicJournal); the
unit tests (backing_test AtomicJournalTest) stop a write at that point deterministically and tear
the range by hand, which this scenario cannot.

What is not proven: power loss. kill -9 ends the process, not the kernel; data the daemon has handed
to the page cache survives it whether or not it was fdatasync'ed. So this checks the gateway's own
ordering and acknowledgement logic (no GOOD before the write reached the kernel, FUA/WCE=0 writes
and SYNCHRONIZE CACHE answered only after their I/O, no write left in a queue of the daemon's own),
not that fdatasync/O_DSYNC reach the disk: that would need a VM or a block device that drops its
cache.
"""
import functools
import hashlib
import random
import shutil
import signal
import struct
import tempfile
import threading
import time

from .harness import IQN_PREFIX, Daemon, rbd_files, wait_for
from .iscsi_client import Initiator, sense_key_asc

MiB = 1 << 20
TARGET = IQN_PREFIX + "crash"
BLOCK = 512
LUN_BYTES = 64 * MiB

WRITERS = 4
REGION_BLOCKS = 256        # each writer's own blocks; small, so every block is rewritten many times
REGION_STRIDE = 4096       # writer w owns [w * STRIDE + GUARD, + REGION_BLOCKS)
GUARD_BLOCKS = 8           # around each region: must read back as zeros
MAX_WRITE_BLOCKS = 8       # one WRITE(10) covers 1..8 blocks, all as immediate data
DEPTH = 4                  # commands in flight per session
FUA_PERCENT = 30           # share of writes sent with FUA
SYNC_EVERY = (8, 24)       # a SYNCHRONIZE CACHE after this many writes (random in the range)

WRITE_SECONDS = 2.5        # writing before the kill, at the least
MIN_ACKED_PER_WRITER = 100  # and at least this many GOOD writes per writer
KILL_DEADLINE = 30.0

MAGIC = b"ISCSIGWC"
HEADER = struct.Struct(">8sIIQQ")  # magic, writer, run nonce, lba, generation


def block_image(nonce, writer, lba, gen):
    """The 512 bytes generation `gen` of block `lba` holds: a header naming it and bytes derived
    from the header, so a read-back tells which generation landed and whether it is whole."""
    header = HEADER.pack(MAGIC, writer, nonce, lba, gen)
    return header + hashlib.shake_256(header).digest(BLOCK - HEADER.size)


def decode_block(data, nonce, writer, lba):
    """Generation held by one block read back: 0 for zeros (never written), None for anything
    that is not exactly a generation of this writer's block `lba`."""
    if data == bytes(BLOCK):
        return 0
    magic, w, n, l, gen = HEADER.unpack_from(data)
    if (magic, w, n, l) != (MAGIC, writer, nonce, lba) or gen == 0:
        return None
    return gen if data == block_image(nonce, writer, lba, gen) else None


SLOT_BLOCKS = 64            # WRITE ATOMIC scenario: one atomic write covers one whole slot


def write_atomic16(lba, blocks, fua):
    # SBC-4 WRITE ATOMIC(16): WRPROTECT/DPO/FUA in byte 1, ATOMIC BOUNDARY 0, TRANSFER LENGTH in
    # bytes 12-13.
    return struct.pack(">BBQHHBB", 0x9C, 0x08 if fua else 0, lba, 0, blocks, 0, 0)


def write10(lba, blocks, fua):
    # SBC-3 5.41: FUA is byte 1 bit 3.
    return struct.pack(">BBIBHB", 0x2A, 0x08 if fua else 0, lba, 0, blocks, 0)


def sync_cache10(lba, blocks):
    # SBC-3 5.22: IMMED=0, so GOOD means the cache was flushed.
    return struct.pack(">BBIBHB", 0x35, 0, lba, 0, blocks, 0)


def mode_sense_caching(pc=0):
    # SPC-4 6.12 MODE SENSE(10): DBD=1, page control `pc`, caching page 08h.
    return struct.pack(">BBBBxxxHB", 0x5A, 0x08, (pc << 6) | 0x08, 0, 255, 0)


def mode_select_caching(wce, save):
    """MODE SELECT(10) CDB and parameter list setting the caching page's WCE (SBC-3 6.4.5)."""
    page = bytearray(20)
    page[0], page[1] = 0x08, 18
    page[2] = 0x04 if wce else 0
    params = bytes(8) + bytes(page)  # mode parameter header (10), no block descriptor
    cdb = struct.pack(">BBxxxxxHB", 0x55, 0x10 | (0x01 if save else 0), len(params), 0)
    return cdb, params


def clear_unit_attentions(c, lun=0, tries=8):
    """TEST UNIT READY until GOOD: a new I_T nexus starts with POWER ON OCCURRED pending."""
    for _ in range(tries):
        status, sense = c.test_unit_ready(lun)
        if status == 0:
            return
        if status != 2 or sense_key_asc(sense)[0] != 0x6:
            raise AssertionError(f"TEST UNIT READY: status {status:#x} sense {sense.hex()}")
    raise AssertionError(f"unit attentions did not clear after {tries} TEST UNIT READY")


def atomic_limits(portal):
    """(MAXIMUM ATOMIC TRANSFER LENGTH, ATOMIC ALIGNMENT) from LUN 0's Block Limits VPD page."""
    c = Initiator(portal, "iqn.2026-11.io.iscsigw.test:crash-limits")
    c.login(TARGET)
    clear_unit_attentions(c)
    status, data, sense = c._command(0, struct.pack(">BBBHB", 0x12, 0x01, 0xB0, 64, 0),
                                     read_len=64)
    c.logout()
    c.close()
    if status != 0 or len(data) < 52:
        raise AssertionError(f"INQUIRY Block Limits: status {status:#x} sense {sense.hex()}")
    return struct.unpack(">II", data[44:52])


def read_wce(c, pc=0):
    status, data, sense = c._command(0, mode_sense_caching(pc), read_len=255)
    if status != 0:
        raise AssertionError(f"MODE SENSE(10): status {status:#x} sense {sense.hex()}")
    bd_len = struct.unpack(">H", data[6:8])[0]
    page = data[8 + bd_len:]
    assert page[0] & 0x3F == 0x08, f"expected the caching page, got {page[:2].hex()}"
    return bool(page[2] & 0x04)


class SessionWriter(threading.Thread):
    """What both writers share: their session, the counts the scenario reads, and how a run ends
    (the connection dying at the kill)."""

    def __init__(self, kind, portal, index, nonce, seed):
        super().__init__(name=f"{kind}-{index}", daemon=True)
        self.kind = kind
        self.portal = portal
        self.index = index
        self.nonce = nonce
        self.rng = random.Random(seed)
        self.ready = threading.Event()
        self.stop_at = None          # monotonic deadline, a safety net if the kill never comes
        self.writes_sent = 0
        self.writes_acked = 0
        self.fua_acked = 0
        self.syncs_acked = 0
        self.synced_blocks = 0
        self.error = None            # a failure before the connection died
        self.ended_by = None         # the exception that ended the loop
        self.commands_in_flight_at_end = 0

    def connect(self):
        """A logged-in session with its unit attentions cleared; None (and error set) if not."""
        try:
            c = Initiator(self.portal, f"iqn.2026-11.io.iscsigw.test:{self.kind}-{self.index}")
            c.login(TARGET)
            clear_unit_attentions(c)
            return c
        except Exception as e:  # reported by the test
            self.error = f"{self.kind} {self.index} setup: {e!r}"
            return None
        finally:
            self.ready.set()

    def run(self):
        c = self.connect()
        if c is None:
            return
        self.pending = {}            # itt -> the subclass's record of the command, kind first
        try:
            while self.stop_at is None or time.monotonic() < self.stop_at:
                self.fill(c)
                itt, status, _, sense = c.recv_response()
                op = self.pending.pop(itt)
                if status != 0:
                    self.error = (f"{self.kind} {self.index}: {op[0]} answered status "
                                  f"{status:#x} sense {sense.hex()}")
                    return
                self.answered(op)
            self.error = f"{self.kind} {self.index}: still writing at the safety deadline (no kill)"
        except (OSError, ConnectionError) as e:
            # The daemon died: whatever was sent and not answered stays in flight.
            self.ended_by = e
            self.commands_in_flight_at_end = len(self.pending)
        except Exception as e:  # reported by the test
            self.error = f"{self.kind} {self.index}: {e!r}"
        finally:
            c.close()

    def fill(self, c):
        """Sends commands while DEPTH and the command window allow."""
        raise NotImplementedError

    def answered(self, op):
        """Books a command answered GOOD."""
        raise NotImplementedError


class Writer(SessionWriter):
    """One session writing its own region with DEPTH commands in flight until the connection dies.

    Only this thread touches the per-block state while it runs; the test reads it after join().
    Writes to one block never overlap in time (a block is not reused until its write is answered),
    so the generations of a block land in the order they were sent.
    """

    def __init__(self, portal, index, nonce, seed):
        super().__init__("crash-writer", portal, index, nonce, seed)
        self.base = index * REGION_STRIDE + GUARD_BLOCKS
        # Per block of the region (index = lba - base).
        self.acked = [[0] for _ in range(REGION_BLOCKS)]  # generations answered GOOD (0: zeros)
        self.durable = [0] * REGION_BLOCKS                 # last generation known durable
        self.in_flight = [None] * REGION_BLOCKS            # generation sent, not answered
        self.unsynced = {}                                 # block -> GOOD non-FUA gen, not synced
        self.gen = 0
        self.until_sync = self.rng.randint(*SYNC_EVERY)

    def fill(self, c):
        # pending: itt -> ("write", first, n, gen, fua) | ("sync", snapshot)
        while len(self.pending) < DEPTH and c.window_open():
            sync_busy = any(p[0] == "sync" for p in self.pending.values())
            if self.until_sync <= 0 and not sync_busy:
                # Covers the writes answered GOOD so far, not those still in flight.
                snapshot = dict(self.unsynced)
                itt = c.send_command(0, sync_cache10(self.base, REGION_BLOCKS))
                self.pending[itt] = ("sync", snapshot)
                self.until_sync = self.rng.randint(*SYNC_EVERY)
                continue
            first, n = self._free_extent()
            self.gen += 1
            gen = self.gen
            fua = self.rng.randrange(100) < FUA_PERCENT
            data = b"".join(block_image(self.nonce, self.index, self.base + b, gen)
                            for b in range(first, first + n))
            for b in range(first, first + n):
                self.in_flight[b] = gen
            self.writes_sent += 1
            itt = c.send_command(0, write10(self.base + first, n, fua), data=data)
            self.pending[itt] = ("write", first, n, gen, fua)
            self.until_sync -= 1

    def answered(self, op):
        if op[0] == "sync":
            self.syncs_acked += 1
            for b, g in op[1].items():
                if g > self.durable[b]:
                    self.durable[b] = g
                    self.synced_blocks += 1
                if self.unsynced.get(b) == g:
                    del self.unsynced[b]
            return
        _, first, n, g, fua = op
        self.writes_acked += 1
        self.fua_acked += fua
        for b in range(first, first + n):
            self.in_flight[b] = None
            self.acked[b].append(g)
            if fua:
                self.durable[b] = g
                self.unsynced.pop(b, None)
            else:
                self.unsynced[b] = g

    def going(self):
        """Enough written for the kill: writes, FUA writes and a SYNCHRONIZE CACHE answered."""
        return self.writes_acked >= MIN_ACKED_PER_WRITER and self.syncs_acked and self.fua_acked

    def _free_extent(self):
        while True:
            n = self.rng.randint(1, MAX_WRITE_BLOCKS)
            first = self.rng.randrange(REGION_BLOCKS - n + 1)
            if all(self.in_flight[b] is None for b in range(first, first + n)):
                return first, n

    def check(self, data, write_cache):
        """Compares the region read back (REGION_BLOCKS blocks) with what was acknowledged; returns
        (failures, counts)."""
        failures = []
        counts = {"blocks": 0, "at_last_acked": 0, "at_in_flight": 0, "older_than_acked": 0}
        for b in range(REGION_BLOCKS):
            lba = self.base + b
            got = decode_block(data[b * BLOCK:(b + 1) * BLOCK], self.nonce, self.index, lba)
            last_acked = self.acked[b][-1]
            # WCE=0: every write answered GOOD is durable (SBC-3 6.4.5: with WCE=0 the device
            # server completes a write only once the data is on the medium).
            floor = self.durable[b] if write_cache else last_acked
            allowed = {g for g in self.acked[b] if g >= floor}
            if self.in_flight[b] is not None:
                allowed.add(self.in_flight[b])
            counts["blocks"] += 1
            if got is None:
                failures.append(f"lba {lba} (writer {self.index}): not any generation written "
                                f"there (garbage or torn); durable {self.durable[b]}, "
                                f"last acked {last_acked}, in flight {self.in_flight[b]}")
            elif got not in allowed:
                failures.append(f"lba {lba} (writer {self.index}): generation {got}, expected one "
                                f"of {sorted(allowed)} (durable {self.durable[b]}, last acked "
                                f"{last_acked}, in flight {self.in_flight[b]})")
            elif got == self.in_flight[b]:
                counts["at_in_flight"] += 1
            elif got == last_acked:
                counts["at_last_acked"] += 1
            else:
                counts["older_than_acked"] += 1  # allowed with WCE=1 only: acked, never synced
        return failures, counts


class AtomicWriter(SessionWriter):
    """One session rewriting the slots of its region with WRITE ATOMIC(16) FUA, DEPTH in flight,
    never two writes to one slot at once, until the connection dies. The attributes the scenario
    reads are Writer's. `alignment` is the LUN's ATOMIC ALIGNMENT (Block Limits VPD page): the
    region and every slot start on a multiple of it (an rbd LUN's is its 4 MiB object, so there a
    writer has one slot), and the region's blocks outside the slots must stay zeros."""

    def __init__(self, portal, index, nonce, seed, alignment=0):
        super().__init__("atomic-writer", portal, index, nonce, seed)
        a = max(alignment, 1)
        if a == 1:
            self.base = index * REGION_STRIDE + GUARD_BLOCKS
        else:
            self.base = index * max(REGION_STRIDE, 2 * a) + a
        step = -(-SLOT_BLOCKS // a) * a
        self.slot_at = [k * step for k in range(REGION_BLOCKS // step + 1)
                        if k * step + SLOT_BLOCKS <= REGION_BLOCKS]  # from base
        assert self.slot_at, f"no slot of {SLOT_BLOCKS} blocks aligned to {a} in the region"
        self.slots = len(self.slot_at)
        self.acked = [[0] for _ in range(self.slots)]  # per slot: generations answered GOOD
        self.in_flight = [None] * self.slots
        self.gen = 0

    def going(self):
        return self.writes_acked >= MIN_ACKED_PER_WRITER

    def fill(self, c):
        # pending: itt -> ("write atomic", slot, gen)
        while len(self.pending) < min(DEPTH, self.slots) and c.window_open():
            slot = self.rng.choice([k for k in range(self.slots) if self.in_flight[k] is None])
            self.gen += 1
            first = self.base + self.slot_at[slot]
            data = b"".join(block_image(self.nonce, self.index, first + b, self.gen)
                            for b in range(SLOT_BLOCKS))
            self.in_flight[slot] = self.gen
            self.writes_sent += 1
            itt = c.send_command(0, write_atomic16(first, SLOT_BLOCKS, True), data=data)
            self.pending[itt] = ("write atomic", slot, self.gen)

    def answered(self, op):
        _, slot, g = op
        self.writes_acked += 1
        self.fua_acked += 1
        self.in_flight[slot] = None
        self.acked[slot].append(g)

    def check(self, data, write_cache):
        """Every slot holds all the blocks of one write: the last acknowledged (each was FUA, so
        durable) or the one in flight."""
        del write_cache  # FUA writes: durable either way
        failures = []
        # Every block of the region is verified: a slot's against its writes, the rest as zeros.
        counts = {"blocks": REGION_BLOCKS, "at_last_acked": 0, "at_in_flight": 0,
                  "older_than_acked": 0}
        in_slots = {at + b for at in self.slot_at for b in range(SLOT_BLOCKS)}
        for b in range(REGION_BLOCKS):
            if b not in in_slots and data[b * BLOCK:(b + 1) * BLOCK] != bytes(BLOCK):
                failures.append(f"lba {self.base + b} (writer {self.index}): written, outside "
                                f"every slot")
        for k in range(self.slots):
            at = self.slot_at[k]
            first = self.base + at
            gens = [decode_block(data[(at + b) * BLOCK:(at + b + 1) * BLOCK],
                                 self.nonce, self.index, first + b) for b in range(SLOT_BLOCKS)]
            last_acked = self.acked[k][-1]
            allowed = {last_acked} | ({self.in_flight[k]} if self.in_flight[k] else set())
            if len(set(gens)) != 1:
                failures.append(f"slot at lba {first} (writer {self.index}): torn, blocks hold "
                                f"generations {sorted(set(g for g in gens if g is not None))}"
                                f"{' and garbage' if None in gens else ''}; last acked "
                                f"{last_acked}, in flight {self.in_flight[k]}")
            elif gens[0] not in allowed:
                failures.append(f"slot at lba {first} (writer {self.index}): generation "
                                f"{gens[0]}, expected one of {sorted(allowed)}")
            elif gens[0] == self.in_flight[k]:
                counts["at_in_flight"] += SLOT_BLOCKS
            else:
                counts["at_last_acked"] += SLOT_BLOCKS
        return failures, counts


class CrashScenario:
    """Four pipelined writers mixing WRITE(10), WRITE(10) FUA and SYNCHRONIZE CACHE(10) on LUN 0,
    SIGKILL mid-run, restart on the same state dir, read back and compare (see the module text).
    A store's test case says what LUN 0 is (lun_spec) and how to read the store straight, without
    the daemon (backing_reader), to check that the daemon serves what the store holds."""

    def lun_spec(self, state_dir):
        """LUN 0's backing, as in the state file: {"file": {...}} or {"rbd": {...}}."""
        raise NotImplementedError

    def backing_reader(self, state_dir, spec):
        """A function (first_block, blocks) -> bytes reading the store after the restart."""
        raise NotImplementedError

    def test_write_cache_on_keeps_every_write_acknowledged_durable(self):
        """WCE=1: FUA writes and writes covered by a later SYNCHRONIZE CACHE survive kill -9."""
        self.run_scenario(write_cache=True)

    def test_write_cache_off_keeps_every_write_acknowledged(self):
        """WCE=0 (MODE SELECT): every write answered GOOD survives kill -9."""
        self.run_scenario(write_cache=False)

    def test_atomic_writes_are_whole_and_durable(self):
        """WRITE ATOMIC(16) FUA: no slot torn, none older than its last acknowledged write."""
        self.run_scenario(write_cache=True, writer=AtomicWriter)

    def run_scenario(self, write_cache, writer=None):
        writer = writer or Writer
        label = f"WCE={int(write_cache)}" + (" WRITE ATOMIC" if writer is AtomicWriter else "")
        state_dir = tempfile.mkdtemp(prefix="iscsigw-crash-")
        self.addCleanup(shutil.rmtree, state_dir, ignore_errors=True)
        spec = self.lun_spec(state_dir)
        state = {"targets": [{"name": TARGET, "allowAnyInitiator": True, "luns": [
            dict(spec, id=0, sizeBytes=str(LUN_BYTES), blockSize=BLOCK)]}]}
        d = Daemon(state=state, state_dir=state_dir).start()
        self.addCleanup(d.cleanup)

        control = Initiator(d.portal, "iqn.2026-11.io.iscsigw.test:crash-control")
        control.login(TARGET)
        clear_unit_attentions(control)
        self.assertTrue(read_wce(control), f"{label}: a file LUN starts with the write cache on")
        if not write_cache:
            # SP=0: current values only. The restarted daemon is only read from, so whether WCE=0
            # survives the restart does not matter for the check; it does not (asserted below):
            # without SP=1 the saved values stay the defaults, and at power on the current values
            # are the saved ones (SPC-4 7.5.1; mode_pages.cc ModePages::Restore, lun_state.cc).
            # With SP=1 the saved WCE=0 goes to <state-dir>/lun-state/ before MODE SELECT
            # completes, and the restarted LUN comes up with WCE=0 (checked by hand, kill -9
            # included).
            cdb, params = mode_select_caching(wce=False, save=False)
            status, _, sense = control._command(0, cdb, data=params)
            self.assertEqual(status, 0, f"MODE SELECT(10) WCE=0: sense {sense.hex()}")
            self.assertFalse(read_wce(control), "MODE SENSE still reports WCE=1 after MODE SELECT")
        control.logout()
        control.close()

        nonce = random.getrandbits(32)
        seed = random.getrandbits(64)
        if writer is AtomicWriter:
            # The LUN's atomic limits (SBC-4 6.6.4): slots must fit and start aligned.
            limits = atomic_limits(d.portal)
            self.assertGreaterEqual(limits[0], SLOT_BLOCKS, "MAXIMUM ATOMIC TRANSFER LENGTH")
            writer = functools.partial(AtomicWriter, alignment=limits[1])
        writers = [writer(d.portal, i, nonce, seed + i) for i in range(WRITERS)]
        start = time.monotonic()
        for w in writers:
            w.stop_at = start + KILL_DEADLINE + 10
            w.start()
        for w in writers:
            wait_for(w.ready.is_set, 15, what=f"writer {w.index} logged in")
            self.assertIsNone(w.error)
        began = time.monotonic()

        def enough_written():
            failed = [w.error for w in writers if w.error]
            if failed:
                raise AssertionError(f"{label}: a writer failed before the kill: {failed}")
            return time.monotonic() - began >= WRITE_SECONDS and all(w.going() for w in writers)

        wait_for(enough_written, KILL_DEADLINE, what=f"{label}: writers to get going")
        self.assertTrue(all(w.is_alive() for w in writers), "a writer stopped before the kill")
        writing_for = time.monotonic() - began
        self.assertEqual(d.stop(signal.SIGKILL), -signal.SIGKILL)
        for w in writers:
            w.join(15)
            self.assertFalse(w.is_alive(), f"writer {w.index} did not notice the dead daemon")
            self.assertIsNone(w.error)
            self.assertIsNotNone(w.ended_by, f"writer {w.index} ended without a connection error")
        in_flight = sum(w.commands_in_flight_at_end for w in writers)
        self.assertGreater(in_flight, 0, "no command was in flight at the kill: not mid-run")

        # Restart from state.json alone (no bootstrap): the target and its file LUN come back.
        # With the flag the state's rbd LUN needs (its conf), as the first start had.
        confs, _ = rbd_files(state)
        d2 = Daemon(state_dir=state_dir,
                    extra_args=[arg for c in confs for arg in ("--rbd-conf", c)]).start()
        self.addCleanup(d2.cleanup)
        reader = Initiator(d2.portal, "iqn.2026-11.io.iscsigw.test:crash-reader")
        reader.login(TARGET)
        clear_unit_attentions(reader)
        # Found: WCE=0 set with SP=0 does not survive a restart; the saved value (SP=1) would.
        self.assertTrue(read_wce(reader), f"{label}: the restarted LUN starts from saved WCE=1")

        failures, totals = [], {}
        span = GUARD_BLOCKS + REGION_BLOCKS + GUARD_BLOCKS
        backing = self.backing_reader(state_dir, spec)
        for w in writers:
            first = w.base - GUARD_BLOCKS
            status, data, sense = reader.read(0, first, span)
            self.assertEqual(status, 0, f"READ(10) at {first}: sense {sense.hex()}")
            self.assertEqual(data, backing(first, span),
                             f"writer {w.index}: the daemon does not serve what the store holds")
            guards = data[:GUARD_BLOCKS * BLOCK] + data[-GUARD_BLOCKS * BLOCK:]
            self.assertEqual(guards, bytes(len(guards)),
                             f"writer {w.index}: a write landed outside its region")
            region = data[GUARD_BLOCKS * BLOCK:(GUARD_BLOCKS + REGION_BLOCKS) * BLOCK]
            wrong, counts = w.check(region, write_cache)
            failures += wrong
            for k, v in counts.items():
                totals[k] = totals.get(k, 0) + v
        reader.logout()
        reader.close()
        # A file LUN's open completes an atomic write the kill cut short (file_store.cc).
        completed = d2.read_log().count("completed an atomic write")
        self.assertEqual(d2.stop(), 0, "the restarted daemon did not stop cleanly")

        acked = sum(w.writes_acked for w in writers)
        print(f"\n  {label}: wrote for {writing_for:.1f}s; writes sent "
              f"{sum(w.writes_sent for w in writers)}, acknowledged {acked} "
              f"(FUA {sum(w.fua_acked for w in writers)}), SYNCHRONIZE CACHE acknowledged "
              f"{sum(w.syncs_acked for w in writers)} (made {sum(w.synced_blocks for w in writers)}"
              f" block generations durable); commands in flight at the kill {in_flight}; blocks "
              f"verified {totals['blocks']}: at last acked {totals['at_last_acked']}, at in-flight "
              f"{totals['at_in_flight']}, older acked {totals['older_than_acked']}; atomic "
              f"writes completed at the restart {completed}", flush=True)
        self.assertFalse(failures, f"{label}: {len(failures)} blocks wrong after kill -9:\n"
                         + "\n".join(failures[:20]))
        self.assertGreaterEqual(acked, WRITERS * MIN_ACKED_PER_WRITER)
        self.assertEqual(totals["blocks"], WRITERS * REGION_BLOCKS)
