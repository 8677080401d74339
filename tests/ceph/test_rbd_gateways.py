"""Two gateways exporting one rbd image (the module's throwaway cluster), each with its own
--gateway-id:

- each is a target port group of its own: REPORT TARGET PORT GROUPS names the gateway's group
  and its relative port, both its gateway id; librbd's cache is off in both;
- libiscsi's MultipathIO tests across the two gateways: a write through one reads back through
  the other, COMPARE AND WRITE is atomic across them;
- persistent reservations shared through the image's object in RADOS: one taken through a gateway
  fences writes through the other as soon as it completes, a gateway that starts later loads it,
  and libiscsi's reservation suites pass with their second initiator on the other gateway;
  RESERVE(6) is not offered;
- the holder of the image's exclusive lock is active/optimized, the other active/non-optimized;
  the first gateway to open the image finds the lock free and claims it, before any write;
- a write through the non-optimized gateway takes the lock over from the live holder: the two
  states swap, and the sessions of the gateway whose state changed get ASYMMETRIC ACCESS STATE
  CHANGED (2Ah/06h); each gateway reads what the other wrote;
- kill -9 of the holder: a write through the other gateway waits for the dead holder's lock, which
  is broken once the dead client does not answer (no waiting for the OSDs' 30 s watch timeout);
  the data the killed gateway had flushed reads back through the survivor, which is now
  active/optimized, and the restarted gateway comes back active/non-optimized.
"""
import json
import os
import re
import signal
import struct
import sys
import threading
import time
import unittest

from iscsigw_test import abort_storm, cu_results, fence_check, harness
from iscsigw_test.ceph_cluster import TestCluster, stop_process
from iscsigw_test.iscsi_client import Initiator, sense_key_asc

TARGET = harness.IQN_PREFIX + "shared"
CLUSTER = TestCluster()
AO, ANO = 0x0, 0x1
ACCESS_STATE_CHANGED = (0x6, 0x2A, 0x06)
# What the lock watch needs at most to see a change (500 ms) and the gateway to report it once it
# has held 4 s (looks 250 ms apart): about 4.5 s. The bound is only there against a hang: what is
# checked is that the unit attention comes and that it is the only one.
STATE_SETTLES = 30.0


def setUpModule():
    CLUSTER.start(prefix="iscsigw-rbd-gw-")


def tearDownModule():
    CLUSTER.stop()


def pattern(n, seed):
    return bytes((seed + i * 13 + (i >> 9)) & 0xFF for i in range(n))


def rtpg(ini):
    """(asymmetric access state, supported states, target port group, relative port ids) of the
    one descriptor REPORT TARGET PORT GROUPS returns."""
    status, data, sense = ini._command(0, bytes([0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]),
                                       read_len=256)
    assert status == 0, f"RTPG: status {status:#x}, sense {sense_key_asc(sense)}"
    length = struct.unpack(">I", data[:4])[0]
    assert length == 12, f"one descriptor with one port expected, {length} bytes"
    d = data[4:]
    return d[0] & 0x0F, d[1], struct.unpack(">H", d[2:4])[0], struct.unpack(">H", d[10:12])[0]


def unit_attentions(ini):
    """The unit attentions pending for this nexus, in order (TEST UNIT READY until GOOD)."""
    seen = []
    for _ in range(10):
        status, sense = ini.test_unit_ready(0)
        if status == 0:
            return seen
        seen.append(sense_key_asc(sense))
    raise AssertionError(f"TEST UNIT READY never GOOD: {seen}")


class GatewayPairTest(unittest.TestCase):
    """Two gateways (self.gateways) and the iSCSI sessions a test opened (self.sessions)."""

    def tearDown(self):
        for ini in self.sessions:
            ini.close()
        for gw in self.gateways:
            gw.cleanup()


class TwoGatewaysTest(GatewayPairTest):
    def setUp(self):
        self.image = f"shared-{self._testMethodName[-24:]}"
        CLUSTER.rbd("create", f"rbd/{self.image}", "--size", "64M")
        self.gateways = [self.start_gateway(i) for i in (1, 2)]
        self.sessions = []

    def start_gateway(self, gateway_id, state_dir=None, fault=None, target=TARGET):
        # An admin socket per process, to ask each gateway's librbd for its options.
        conf = os.path.join(CLUSTER.dir, "gateways.conf")
        sock = os.path.join(CLUSTER.dir, "run", "gw-$pid.asok")
        with open(CLUSTER.conf) as src, open(conf, "w") as dst:
            dst.write(src.read() + f"\n[client]\nadmin socket = {sock}\n")
        lun = {"id": 0, "blockSize": 512, "rbd": {"pool": "rbd", "image": self.image, "conf": conf}}
        if fault:
            lun["fault"] = fault
        state = {"targets": [{"name": target, "allowAnyInitiator": True, "luns": [lun]}]}
        gw = harness.Daemon(state=state, state_dir=state_dir,
                            extra_args=["--gateway-id", str(gateway_id)])
        # A test that restarts a gateway replaces its Daemon: each one's directory goes at the end.
        self.addCleanup(gw.cleanup)
        gw.start(timeout=60)
        return gw

    def login(self, gw):
        ini = Initiator(gw.portal, harness.INITIATOR, timeout=60)
        ini.login(TARGET)
        self.sessions.append(ini)
        self.assertEqual(unit_attentions(ini), [(0x6, 0x29, 0x00)])  # power on, reset
        return ini

    def wait_change(self, ini, want, what):
        """Waits for ASYMMETRIC ACCESS STATE CHANGED on `ini`'s nexus, the only unit attention;
        then REPORT TARGET PORT GROUPS must give the new state `want`."""
        deadline = time.monotonic() + STATE_SETTLES
        while True:
            seen = unit_attentions(ini)
            if seen:
                self.assertEqual(seen, [ACCESS_STATE_CHANGED], what)
                break
            if time.monotonic() > deadline:
                self.fail(f"{what}: no unit attention within {STATE_SETTLES} s")
            time.sleep(0.1)
        self.assertEqual(rtpg(ini)[0], want, what)

    def write_flushed(self, ini, lba, data):
        self.assertEqual(ini.write(0, lba, data), (0, b""))
        status, _, _ = ini._command(0, bytes([0x35] + [0] * 9))  # SYNCHRONIZE CACHE(10)
        self.assertEqual(status, 0)

    def access_states(self):
        """The access state each gateway's API reports for the LUN (lun get)."""
        return [gw.ctl_json("lun", "get", TARGET, 0)["access_state"] for gw in self.gateways]

    def alua_metrics(self):
        """iscsigw_lun_alua_state of the LUN on each gateway's /metrics."""
        return [int(gw.metric("iscsigw_lun_alua_state", {"target": TARGET, "lun": "0"}))
                for gw in self.gateways]

    def rbd_option(self, gw, name):
        sock = os.path.join(CLUSTER.dir, "run", f"gw-{gw.proc.pid}.asok")
        out = harness.run(["ceph", "--admin-daemon", sock, "config", "get", name]).stdout
        return json.loads(out)[name]

    def test_multipath_io_across_the_two_gateways(self):
        for gw in self.gateways:
            self.assertEqual(self.rbd_option(gw, "rbd_cache"), "false")
        urls = [gw.url(TARGET) for gw in self.gateways]
        out = harness.run(["iscsi-test-cu", "--dataloss", "-t", "ALL.MultipathIO"] + urls,
                          timeout=300, check=False).stdout
        results = {name: result for name, result, _ in cu_results.parse(out)}
        self.assertIn("found matching LU device identifier for all (2) paths", out)
        self.assertEqual(results, {
            "MultipathIO.Simple": "PASS",
            "MultipathIO.CompareAndWrite": "PASS",
            "MultipathIO.CompareAndWriteAsync": "PASS",
            # The unit attention of a LOGICAL UNIT RESET (SAM-5 5.8) reaches the nexuses of
            # the other gateway through the shared object.
            "MultipathIO.Reset": "PASS",
        }, out[-3000:])

    def test_a_reservation_through_one_gateway_fences_writes_through_the_other(self):
        a, b = self.login(self.gateways[0]), self.login(self.gateways[1])
        block = pattern(512, 7)
        self.assertEqual(b.write(0, 8, block), (0, b""))
        register = bytes([0x5F, 0x00, 0, 0, 0, 0, 0, 0, 24, 0])
        key = bytes(7) + b"\xa1"
        status, _, sense = a._command(0, register, data=bytes(8) + key + bytes(8))
        self.assertEqual((status, sense), (0, b""))
        reserve_we = bytes([0x5F, 0x01, 0x01, 0, 0, 0, 0, 0, 24, 0])
        status, _, sense = a._command(0, reserve_we, data=key + bytes(16))
        self.assertEqual((status, sense), (0, b""))
        # At once: the command completed after gateway 2 applied the reservation.
        self.assertEqual(b.write(0, 8, block)[0], 0x18)  # RESERVATION CONFLICT
        self.assertEqual(a.write(0, 8, block), (0, b""))
        status, data, _ = b._command(0, bytes([0x5E, 0x01, 0, 0, 0, 0, 0, 0, 64, 0]), read_len=64)
        self.assertEqual(status, 0)
        self.assertEqual((data[8:16], data[21]), (key, 0x01))  # holder's key, WRITE EXCLUSIVE
        # RESERVE(6), a reservation of one I_T nexus, is not offered where gateways share a LUN.
        status, _, sense = b._command(0, bytes([0x16, 0, 0, 0, 0, 0]))
        self.assertEqual((status, sense_key_asc(sense)), (2, (0x5, 0x20, 0x00)))
        # A gateway that starts while the reservation exists fences from its first command.
        self.gateways[1].stop()
        self.gateways[1] = self.start_gateway(2)
        b = self.login(self.gateways[1])
        self.assertEqual(b.write(0, 8, block)[0], 0x18)
        release = bytes([0x5F, 0x02, 0x01, 0, 0, 0, 0, 0, 24, 0])
        status, _, sense = a._command(0, release, data=key + bytes(16))
        self.assertEqual((status, sense), (0, b""))
        self.assertEqual(b.write(0, 8, block), (0, b""))

    def victim_and_preemptor(self, delay):
        """Gateway 1 again, its writes to the first blocks starting `delay` s late (fence_check);
        the victim logged in through it holds a reservation, the preemptor through gateway 2 is
        registered."""
        self.gateways[0].stop()
        self.gateways[0] = self.start_gateway(1, fault=fence_check.delayed_writes(delay))
        victim, preemptor = self.login(self.gateways[0]), self.login(self.gateways[1])
        fence_check.victim_reserves(self, victim, preemptor)
        return victim, preemptor

    def test_a_fence_through_one_gateway_answers_once_the_others_aborted_write_has_landed(self):
        # SPC-4 5.13.11.2.4 and SAM-5 5.6 across gateways: PREEMPT AND ABORT, and LOGICAL UNIT
        # RESET, through gateway 2 are answered only once the write of the nexus they abort on
        # gateway 1, where writes to the first blocks start 1.5 s late, has left its store.
        delay = 1.5
        victim, preemptor = self.victim_and_preemptor(delay)
        answers = [fence_check.check_no_write_lands_after(
            self, victim, preemptor,
            lambda: fence_check.prout(self, preemptor, 0x05,  # PREEMPT AND ABORT
                                      fence_check.KEY_B + fence_check.KEY_A + bytes(8)),
            delay, "PREEMPT AND ABORT")]
        self.assertEqual(unit_attentions(victim), [(0x6, 0x2A, 0x05)])  # REGISTRATIONS PREEMPTED
        fence_check.prout(self, preemptor, 0x03, fence_check.KEY_B + bytes(16))  # CLEAR

        def lun_reset():
            self.assertEqual(preemptor.task_management(5, lun=0), 0)  # Function complete
        answers.append(fence_check.check_no_write_lands_after(
            self, victim, preemptor, lun_reset, delay, "LOGICAL UNIT RESET"))
        print(f"answered {answers[0]:.2f} s (PREEMPT AND ABORT) and {answers[1]:.2f} s "
              f"(LOGICAL UNIT RESET) after the write on the other gateway (store delay "
              f"{delay} s)", file=sys.stderr)

    def test_task_sets_across_gateways_with_a_write_in_flight(self):
        # One task set for every I_T nexus of the logical unit (control mode page TST=000b), the
        # nexuses through the other gateway included. ABORT TASK SET (SAM-5 7.2) ends the tasks
        # of its own I_T nexus only: the write in flight on gateway 1 completes GOOD. CLEAR TASK
        # SET (SAM-5 7.4) ends every task: that write is aborted, no response comes for it, the
        # function is answered only once the write has left gateway 1's store, and the writer's
        # nexus is told (COMMANDS CLEARED BY ANOTHER INITIATOR: TAS=0).
        delay = 1.5
        self.gateways[0].stop()
        self.gateways[0] = self.start_gateway(1, fault=fence_check.delayed_writes(delay))
        writer, other = self.login(self.gateways[0]), self.login(self.gateways[1])

        def answers(itt, what):
            """The SCSI answers the writer gets (read with poll) until the one for `itt`."""
            got, deadline = [], time.monotonic() + delay + 30
            while time.monotonic() < deadline:
                got += [a for a in writer.poll(0.1) if a.kind == "scsi"]
                if got and got[-1].itt == itt:
                    return [(a.itt, a.status, sense_key_asc(a.sense) if a.status else None)
                            for a in got]
            self.fail(f"{what}: no answer for ITT {itt:#x} within {delay + 30} s; got {got}")

        data = os.urandom(fence_check.BLOCKS * 512)
        itt = writer.send_command(0, fence_check.WRITE_10, data=data)
        time.sleep(0.3)  # received, and waiting in gateway 1's store
        self.assertEqual(other.task_management(2, lun=0), 0)  # ABORT TASK SET: Function complete
        what = "ABORT TASK SET through gateway 2 ended a task of another I_T nexus"
        self.assertEqual(answers(itt, what), [(itt, 0, None)], what)
        self.assertEqual(fence_check.read_blocks(self, other), data)

        def clear_task_set():
            self.assertEqual(other.task_management(4, lun=0), 0)  # Function complete
        answered = fence_check.check_no_write_lands_after(self, writer, other, clear_task_set,
                                                          delay, "CLEAR TASK SET")
        # The next answer the writer gets is its TEST UNIT READY's, not the aborted write's.
        tur = writer.send_command(0, bytes(6))
        what = "an answer for the write CLEAR TASK SET aborted"
        self.assertEqual(answers(tur, what), [(tur, 2, (0x6, 0x2F, 0x00))], what)
        print(f"CLEAR TASK SET answered {answered:.2f} s after the write on the other gateway "
              f"(store delay {delay} s)", file=sys.stderr)

    def test_the_abort_storm_through_both_gateways(self):
        # The abort storm (iscsigw_test/abort_storm.py) with two writers logged in to each
        # gateway, the LUN RESETs sent through gateway 1, and sessions killed on both: no write
        # acknowledged GOOD is lost, and no aborted write lands after the target said it had
        # ended. (The storm settles each write a reset may have ended with an ABORT TASK of its
        # own, so a reset answered early is for test_a_fence_through_one_gateway_... to see.)
        storm = abort_storm
        for i in (0, 1):
            self.gateways[i].stop()
            self.gateways[i] = self.start_gateway(i + 1, fault={"delayMs": storm.DELAY_MS},
                                                  target=storm.TARGET)
        storm.run_storm(self, self.gateways, seconds=30)

    def preempt_while_gateway_1_is_stopped(self, delay, while_stopped=lambda: None):
        """The victim's write admitted by gateway 1 and waiting `delay` s in its store; gateway 1
        stopped (SIGSTOP), while_stopped() run, a PREEMPT through gateway 2, gateway 1 resumed.
        Fails unless gateway 1 was fenced: its write must not land, and must fail NOT READY,
        MANUAL INTERVENTION REQUIRED. Returns how long the PREEMPT took to answer."""
        victim, preemptor = self.victim_and_preemptor(delay)
        before = fence_check.read_blocks(self, preemptor)
        itt = victim.send_command(0, fence_check.WRITE_10,
                                  data=os.urandom(fence_check.BLOCKS * 512))
        time.sleep(0.3)  # admitted, and waiting in gateway 1's store
        # Both gateways watch the image's reservation object (the premise: one to be told).
        harness.wait_for(lambda: self.reservation_watchers() == 2, 10,
                         what="both gateways watching")
        pid = self.gateways[0].proc.pid
        stop_process(pid)
        try:
            while_stopped()
            t0 = time.monotonic()
            fence_check.prout(self, preemptor, 0x04,  # PREEMPT
                              fence_check.KEY_B + fence_check.KEY_A + bytes(8))
            waited = time.monotonic() - t0
        finally:
            os.kill(pid, signal.SIGCONT)
        time.sleep(delay + 1.0)  # the write's turn in gateway 1 is overdue: it runs on resuming
        self.assertTrue(fence_check.read_blocks(self, preemptor) == before,
                        "the preempted nexus's write landed through the stopped gateway after "
                        f"the PREEMPT was answered ({waited:.3f} s after it was sent)")
        got, status, _, sense = victim.recv_response()
        self.assertEqual((got, status, sense_key_asc(sense)), (itt, 2, (0x2, 0x04, 0x03)))
        return waited

    def test_a_gateway_that_does_not_answer_a_reservation_change_is_fenced(self):
        # Gateway 1 stopped (SIGSTOP) while a PREEMPT is made through gateway 2: it cannot
        # acknowledge the change, and, alive, it could go on admitting the preempted nexus's
        # writes. The PREEMPT is answered once its client is blocklisted, after the 5 s it had to
        # answer, so that the write it admitted before it stopped fails when it resumes.
        waited = self.preempt_while_gateway_1_is_stopped(1.5)
        self.assertGreater(waited, 4.5, "answered before gateway 1 could have acknowledged")
        self.assertIn("blocklisted", self.gateways[1].read_log())

    def test_the_holders_gateway_killed_during_its_release_leaves_both_gateways_agreeing(self):
        # The holder releases its reservation through gateway 1, which writes the change into
        # the image's reservation object, tells gateway 2 (stopped, so that the change waits for
        # its acknowledgement) and is killed (kill -9) before the RELEASE is answered. Gateway 2,
        # resumed, applies the change it was told of; gateway 1, restarted, reads it: both
        # report no reservation and admit the other initiator's writes, and the holder's retry of
        # the RELEASE (same I_T nexus) is answered GOOD: there is nothing left to release.
        holder, other = self.login(self.gateways[0]), self.login(self.gateways[1])
        fence_check.victim_reserves(self, holder, other)
        self.assertEqual(other.write(0, 8, pattern(512, 5))[0], 0x18)  # RESERVATION CONFLICT
        image_id = json.loads(CLUSTER.rbd("info", f"rbd/{self.image}", "--format",
                                          "json").stdout)["id"]

        def reservations():
            return harness.run(["rados", "-c", CLUSTER.conf, "-p", "rbd", "get",
                                f"iscsigw_lun.{image_id}", "/dev/stdout"]).stdout

        before = reservations()
        release = bytes([0x5F, 0x02, 0x01, 0, 0, 0, 0, 0, 24, 0])
        pid = self.gateways[1].proc.pid
        stop_process(pid)
        try:
            holder.send_command(0, release, data=fence_check.KEY_A + bytes(16))
            harness.wait_for(lambda: reservations() != before, 10,
                             what="the RELEASE written into the reservation object")
            # Gateway 1 writes the object and notifies at once, then waits up to 5 s for the
            # acknowledgement gateway 2 cannot send: a moment later it is in that wait.
            time.sleep(0.2)
            self.assertEqual([a for a in holder.poll(0) if a.kind == "scsi"], [],
                             "the RELEASE was answered before gateway 2 acknowledged it")
            self.gateways[0].stop(signal.SIGKILL)
        finally:
            os.kill(pid, signal.SIGCONT)
        self.sessions.remove(holder)
        holder.close()

        def reservation(ini):
            """(status, reservation holder's key or None) from READ RESERVATION."""
            status, data, _ = ini._command(0, bytes([0x5E, 0x01, 0, 0, 0, 0, 0, 0, 64, 0]),
                                           read_len=64)
            held = struct.unpack(">I", data[4:8])[0] >= 16
            return status, data[8:16] if held else None

        harness.wait_for(lambda: reservation(other) == (0, None), 10,
                         what="gateway 2 applying the RELEASE it was told of")
        self.assertEqual(other.write(0, 8, pattern(512, 6)), (0, b""))
        self.gateways[0] = self.start_gateway(1)
        isid = holder.isid
        holder = Initiator(self.gateways[0].portal, harness.INITIATOR, timeout=60)
        holder.isid = isid  # the same I_T nexus, registered with KEY_A
        holder.login(TARGET)
        self.sessions.append(holder)
        unit_attentions(holder)
        self.assertEqual(reservation(holder), (0, None))
        self.assertEqual(holder.write(0, 8, pattern(512, 7)), (0, b""))
        fence_check.prout(self, holder, 0x02, fence_check.KEY_A + bytes(16))  # the retry: GOOD
        self.assertEqual((reservation(holder), reservation(other)), ((0, None), (0, None)))
        for ini in (holder, other):  # READ KEYS: a release keeps both registrations
            status, data, _ = ini._command(0, bytes([0x5E, 0x00, 0, 0, 0, 0, 0, 0, 64, 0]),
                                           read_len=64)
            self.assertEqual((status, sorted([data[8:16], data[16:24]])),
                             (0, [fence_check.KEY_A, fence_check.KEY_B]))

    def reservation_watchers(self):
        """How many clients watch the image's reservation object."""
        image_id = json.loads(CLUSTER.rbd("info", f"rbd/{self.image}", "--format",
                                          "json").stdout)["id"]
        return harness.run(["rados", "-c", CLUSTER.conf, "-p", "rbd", "listwatchers",
                            f"iscsigw_lun.{image_id}"]).stdout.count("watcher=")

    def test_a_gateway_whose_watch_timed_out_is_fenced_before_a_preempt_is_answered(self):
        # Gateway 1 stopped for longer than the OSDs' watch timeout (5 s here, for watches made
        # from now on): its watch of the reservation object is gone, so a notify no longer waits
        # for it, and it has not heard so. It is still one of the image's gateways: the PREEMPT
        # through gateway 2 fences it before GOOD.
        ceph = ["ceph", "-c", CLUSTER.conf, "config"]
        harness.run(ceph + ["set", "osd", "osd_client_watch_timeout", "5"])
        self.addCleanup(harness.run, ceph + ["rm", "osd", "osd_client_watch_timeout"])
        self.preempt_while_gateway_1_is_stopped(  # gateway 1 watches from its restart there
            1.5, lambda: harness.wait_for(lambda: self.reservation_watchers() == 1, 60,
                                          interval=0.5, what="gateway 1's watch timed out"))
        self.assertIn("no longer watches it", self.gateways[1].read_log())

    def test_a_gateway_whose_image_comes_online_later_enforces_the_reservations(self):
        # Gateway 2 starts while the image does not exist yet (offline, retrying); gateway 1
        # starts once it does, and a WRITE EXCLUSIVE reservation is taken through it. When the
        # image opens on gateway 2, gateway 2 has the shared reservations: it refuses the
        # others' writes and reports the holder, as a gateway that started online does.
        for gw in self.gateways:
            gw.stop()
        self.image += "-late"
        self.gateways[1] = self.start_gateway(2)
        b = Initiator(self.gateways[1].portal, harness.INITIATOR, timeout=60)
        b.login(TARGET)
        self.sessions.append(b)
        for _ in range(3):  # past the power-on unit attention
            status, sense = b.test_unit_ready(0)
            if status != 2 or sense_key_asc(sense)[0] != 0x6:
                break
        self.assertEqual((status, sense_key_asc(sense)), (2, (0x2, 0x04, 0x01)))  # offline
        CLUSTER.rbd("create", f"rbd/{self.image}", "--size", "64M")
        self.gateways[0] = self.start_gateway(1)
        a = self.login(self.gateways[0])
        fence_check.prout(self, a, 0x00, bytes(8) + fence_check.KEY_A + bytes(8))  # REGISTER
        fence_check.prout(self, a, 0x01, fence_check.KEY_A + bytes(16))  # RESERVE
        harness.wait_for(lambda: b.test_unit_ready(0)[0] == 0, timeout=60, interval=0.2,
                         what="gateway 2's LUN online, with the shared state read")
        self.assertEqual(b.write(0, 8, pattern(512, 3))[0], 0x18)  # RESERVATION CONFLICT
        status, data, _ = b._command(0, bytes([0x5E, 0x01, 0, 0, 0, 0, 0, 0, 64, 0]), read_len=64)
        self.assertEqual(status, 0)
        self.assertEqual((data[8:16], data[21]), (fence_check.KEY_A, 0x01))
        self.assertEqual(a.write(0, 8, pattern(512, 4)), (0, b""))

    def test_an_image_without_the_exclusive_lock_feature_is_refused(self):
        # Nothing would fence a former writer's late writes: the LUN stays offline, saying why,
        # until the feature is enabled; then it comes online by itself.
        self.gateways[0].stop()
        self.image += "-nolock"
        CLUSTER.rbd("create", f"rbd/{self.image}", "--size", "64M", "--image-feature", "layering")
        self.gateways[0] = self.start_gateway(1)
        reason = self.gateways[0].ctl_json("lun", "get", TARGET, 0)["offline_reason"]
        self.assertIn("lacks the exclusive-lock feature", reason)
        self.assertIn(f"rbd feature enable rbd/{self.image} exclusive-lock", reason)
        CLUSTER.rbd("feature", "enable", f"rbd/{self.image}", "exclusive-lock")
        harness.wait_for(
            lambda: self.gateways[0].ctl_json("lun", "get", TARGET, 0)["offline_reason"] == "",
            timeout=60, interval=0.5, what="the LUN online once the feature is enabled")

    def test_libiscsi_reservation_suites_through_both_gateways(self):
        # libiscsi's second initiator (its mpath_sd2_get_or_clone) logs in through the second URL:
        # the reservation is taken through one gateway, its access and ownership tested through
        # the other.
        urls = [gw.url(TARGET) for gw in self.gateways]
        suites = ["ALL.PrinReadKeys", "ALL.PrinReportCapabilities", "ALL.ProutRegister",
                  "ALL.ProutReserve", "ALL.ProutClear", "ALL.ProutPreempt"]
        out = harness.run(["iscsi-test-cu", "--dataloss", "-t", ",".join(suites)] + urls,
                          timeout=600, check=False).stdout
        results = {name: result for name, result, _ in cu_results.parse(out)}
        self.assertIn("found matching LU device identifier for all (2) paths", out)
        self.assertEqual(len(results), 19, out[-3000:])
        failed = {name: r for name, r in results.items() if r != "PASS"}
        self.assertEqual(failed, {}, out[-3000:])

    def test_the_lock_holder_is_optimized_and_the_lock_follows_writes(self):
        a, b = (self.login(gw) for gw in self.gateways)
        # Each gateway its own group and port. Gateway 1, started first, claimed the free lock
        # when it opened the image: no write needed, no state change to report.
        self.assertEqual(rtpg(a), (AO, 0x03, 1, 1))
        self.assertEqual(rtpg(b), (ANO, 0x03, 2, 2))
        self.assertEqual(self.access_states(), ["active/optimized", "active/non-optimized"])
        # The metric is what REPORT TARGET PORT GROUPS answers, as the SPC-4 code.
        self.assertEqual(self.alua_metrics(), [AO, ANO])
        self.assertEqual([gw.metric("iscsigw_lun_online", {"target": TARGET, "lun": "0"})
                          for gw in self.gateways], [1, 1])

        one = pattern(8 * 512, 1)
        self.write_flushed(a, 0, one)
        self.assertEqual(b.read(0, 0, 8), (0, one, b""))  # reads need no lock

        two = pattern(8 * 512, 2)
        started = time.monotonic()
        self.write_flushed(b, 8, two)  # the live holder hands the lock over
        handover = time.monotonic() - started
        self.wait_change(a, ANO, "gateway 1 after gateway 2 wrote")
        self.wait_change(b, AO, "gateway 2 after it wrote")
        self.assertEqual(a.read(0, 0, 16), (0, one + two, b""))
        self.assertEqual(self.access_states(), ["active/non-optimized", "active/optimized"])
        self.assertEqual(self.alua_metrics(), [ANO, AO])
        table = self.gateways[0].ctl("lun", "list", TARGET).stdout
        self.assertRegex(table, r"ALUA +SERIAL\n.* online +non-optimized ", table)
        print(f"\nlock handed over to a write of the other gateway in {handover:.3f} s")
        self.assertLess(handover, 10.0)

    def test_a_killed_holder_loses_the_lock_to_the_other_gateway(self):
        a, b = (self.login(gw) for gw in self.gateways)
        self.assertEqual(rtpg(b)[0], ANO)  # gateway 1 holds the lock
        before = pattern(64 * 512, 3)
        self.write_flushed(a, 0, before)

        self.gateways[0].stop(sig=9)
        a.close()
        self.sessions.remove(a)
        after = pattern(8 * 512, 4)
        started = time.monotonic()
        self.write_flushed(b, 64, after)
        failover = time.monotonic() - started
        print(f"\nwrite through gateway 2 waited {failover:.3f} s for the killed holder's lock")
        # The lock watch: 2 s of no progress, then 2 s for the dead client to answer a notify;
        # far below the OSDs' 30 s watch timeout that librbd alone would wait for. Measured 6 s;
        # 20 s leaves a loaded machine room and still tells the lock watch from the 30 s.
        log = self.gateways[1].read_log()
        self.assertLess(failover, 20.0, log[-3000:])
        self.assertIn("broke the exclusive lock", self.gateways[1].read_log())
        self.wait_change(b, AO, "gateway 2 once it holds the lock")
        self.assertEqual(b.read(0, 0, 72), (0, before + after, b""))

        # The killed gateway restarts (same state dir, same id): the lock stays where it is.
        self.gateways[0] = self.start_gateway(1, state_dir=self.gateways[0].state_dir)
        self.gateways[0].owns_dir = True
        a = self.login(self.gateways[0])
        self.assertEqual(rtpg(a), (ANO, 0x03, 1, 1))
        self.assertEqual(a.read(0, 0, 72), (0, before + after, b""))
        self.assertEqual(rtpg(b)[0], AO)


class SharedConfigurationTest(GatewayPairTest):
    """--shared-config: the rbd targets live in one RADOS object that both gateways watch."""

    def setUp(self):
        # A RADOS namespace of its own per test: a fresh iscsigw_config object.
        self.where = f"rbd/cfg-{self._testMethodName[-20:]}"
        self.conf = CLUSTER.conf
        self.gateways = [self.start_gateway(i) for i in (1, 2)]
        self.sessions = []

    def start_gateway(self, gateway_id, state_dir=None, state=None):
        gw = harness.Daemon(state=state, state_dir=state_dir, extra_args=[
            "--gateway-id", str(gateway_id), "--shared-config", self.where,
            "--shared-config-conf", self.conf, "--rbd-conf", self.conf])
        self.addCleanup(gw.cleanup)
        gw.start(timeout=60)
        harness.wait_for(lambda: re.search(r"shared configuration in \S+: version \d+",
                                           gw.read_log()), 30,
                         what="the shared configuration read")
        return gw

    def names(self, gw):
        return sorted(t["name"] for t in gw.ctl_json("target", "list").get("targets", []))

    def served_within(self, gw, want, seconds=5.0):
        """Waits (at most `seconds`) until `gw` lists exactly the targets `want`; returns the
        time it took. A change reaches the other gateways by the object's notify, in tens of
        milliseconds; without it only by the reread every kSharedRereadSeconds (30 s,
        state_store.h). 5 s tells the two apart (a change missed by the notify would pass one
        check by chance at most one time in six, never the several in each test) and leaves a
        loaded machine seconds of room."""
        want = sorted(harness.IQN_PREFIX + n for n in want)
        started = time.monotonic()
        while self.names(gw) != want:
            self.assertLess(time.monotonic() - started, seconds,
                            f"{gw.grpc} lists {self.names(gw)}, not {want}")
            time.sleep(0.02)
        return time.monotonic() - started

    def create_rbd_target(self, gw, name):
        gw.ctl("target", "create", name, "--allow-any-initiator")
        gw.ctl("lun", "create", name, 0, "--backing", "rbd", "--pool", "rbd", "--image",
               f"img-{name}", "--ceph-conf", self.conf, "--create", "--size", "16M")

    def test_a_change_through_one_gateway_is_served_by_the_other(self):
        a, b = self.gateways
        self.create_rbd_target(a, "one")
        took = self.served_within(b, ["one"])
        print(f"\ntarget and LUN created through gateway 1 listed by gateway 2 after {took:.3f} s")
        ini = Initiator(b.portal, harness.INITIATOR, timeout=60)
        self.sessions.append(ini)
        ini.login(harness.IQN_PREFIX + "one")
        unit_attentions(ini)
        self.assertEqual(ini.write(0, 0, pattern(512, 9)), (0, b""))
        # A LUN added, an ACL entry and CHAP set through gateway 2 reach gateway 1.
        b.ctl("lun", "create", "one", 1, "--backing", "rbd", "--pool", "rbd", "--image",
              "img-one-1", "--ceph-conf", self.conf, "--create", "--size", "8M")
        b.ctl("acl", "add", "one", harness.INITIATOR)
        b.ctl("acl", "allow-any", "one", "off")
        harness.wait_for(lambda: len(a.ctl_json("target", "get", "one")["luns"]) == 2 and
                         a.ctl_json("target", "get", "one").get("acl"), 5.0,
                         what="gateway 1 serving LUN 1 and the ACL")  # as served_within
        t = a.ctl_json("target", "get", "one")
        self.assertFalse(t.get("allow_any_initiator", False))
        self.assertEqual([e["initiator"] for e in t["acl"]], [harness.INITIATOR])
        # Data written through gateway 2 reads back through gateway 1.
        ini_a = Initiator(a.portal, harness.INITIATOR, timeout=60)
        self.sessions.append(ini_a)
        ini_a.login(harness.IQN_PREFIX + "one")
        unit_attentions(ini_a)
        self.assertEqual(ini_a.read(0, 0, 1), (0, pattern(512, 9), b""))
        # Local targets stay local: a RAM target on gateway 1 is not on gateway 2, and neither
        # kind of target takes the other kind of LUN.
        a.ctl("target", "create", "mine", "--allow-any-initiator")
        a.ctl("lun", "create", "mine", 0, "--backing", "ram", "--size", "1M")
        r = a.ctl("lun", "create", "mine", 1, "--backing", "rbd", "--pool", "rbd", "--image",
                  "img-mixed", "--ceph-conf", self.conf, check=False)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("cannot share a target", r.stderr)
        r = b.ctl("lun", "create", "one", 2, "--backing", "ram", "--size", "1M", check=False)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("is shared by the gateways", r.stderr)
        self.assertEqual(self.names(a), [harness.IQN_PREFIX + n for n in ("mine", "one")])
        self.assertEqual(self.names(b), [harness.IQN_PREFIX + "one"])
        # The state files keep the local targets only.
        for gw, local in ((a, ["mine"]), (b, [])):
            with open(os.path.join(gw.state_dir, "state.json")) as f:
                names = [t["name"] for t in json.load(f).get("targets", [])]
            self.assertEqual(names, [harness.IQN_PREFIX + n for n in local])
        # Deleted through gateway 1: its sessions on gateway 2 cannot be counted from there, so
        # only with force; gateway 2 then asks its initiator to log out, and the images go.
        ini_a.close()
        self.sessions.remove(ini_a)
        r = a.ctl("target", "delete", "one", check=False)
        self.assertEqual(r.returncode, 9, r.stderr)
        self.assertIn("delete it with force", r.stderr)
        self.assertEqual(len(b.ctl_json("session", "list").get("sessions", [])), 1)
        a.ctl("target", "delete", "one", "--force")
        self.served_within(b, [], seconds=8.0)
        harness.wait_for(lambda: not b.ctl_json("session", "list").get("sessions"), 8.0,
                         what="gateway 2's session of the deleted target gone")
        self.assertIn("asked to log out", b.read_log())
        images = CLUSTER.rbd("ls", "rbd").stdout.split()
        self.assertNotIn("img-one", images)
        self.assertNotIn("img-one-1", images)

    def test_concurrent_changes_through_both_gateways_are_all_kept(self):
        a, b = self.gateways
        names = {a: [f"a{i}" for i in range(4)], b: [f"b{i}" for i in range(4)]}
        errors = []

        def create(gw):
            try:
                for n in names[gw]:
                    self.create_rbd_target(gw, n)
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(e)

        threads = [threading.Thread(target=create, args=(gw,)) for gw in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        every = names[a] + names[b]
        for gw in (a, b):
            self.served_within(gw, every)
        # A gateway restarted while another changed the configuration loads the change.
        b.stop()
        a.ctl("target", "delete", "a0", "--force")
        self.create_rbd_target(a, "later")
        self.gateways[1] = self.start_gateway(2, state_dir=b.state_dir)
        self.gateways[1].owns_dir = True
        b.owns_dir = False
        want = [n for n in every if n != "a0"] + ["later"]
        self.served_within(self.gateways[1], want)
        self.served_within(a, want)

    def test_bootstrapped_rbd_targets_move_into_the_shared_configuration(self):
        # The chart's way: every replica declares the same rbd target.
        CLUSTER.rbd("create", f"rbd/boot-{self.where[-8:]}", "--size", "16M")
        state = {"targets": [{"name": "boot", "allowAnyInitiator": True, "luns": [
            {"id": 0, "rbd": {"pool": "rbd", "image": f"boot-{self.where[-8:]}",
                              "conf": self.conf}}]}]}
        for gw in self.gateways:
            gw.cleanup()
        self.gateways = [self.start_gateway(i, state=state) for i in (1, 2)]
        def local_targets(gw):
            with open(os.path.join(gw.state_dir, "state.json")) as f:
                return json.load(f).get("targets", [])

        for gw in self.gateways:
            self.served_within(gw, ["boot"], seconds=5.0)
            # Moved into the object (right after the first read) and out of the state file.
            harness.wait_for(lambda: local_targets(gw) == [], 5.0,
                             what="the state file without the bootstrapped rbd target")
        # One copy in the object: a change through either gateway is seen by the other.
        self.gateways[1].ctl("acl", "add", "boot", harness.INITIATOR)
        harness.wait_for(lambda: self.gateways[0].ctl_json("target", "get", "boot").get("acl"),
                         5.0, what="gateway 1 serving the ACL set through gateway 2")

    def test_a_read_only_change_reopens_the_live_lun_in_place_on_the_other_gateway(self):
        # Gateway 2 restarts declaring the shared target's LUN read-only; gateway 1, serving it,
        # reopens its store in place (docs/live-lun-changes.md): the same LUN, its nexuses told,
        # its reservations still those of the shared object.
        image = f"ro-{self.where[-8:]}"
        CLUSTER.rbd("create", f"rbd/{image}", "--size", "16M")

        def declared(read_only):
            lun = {"id": 0, "readOnly": read_only,
                   "rbd": {"pool": "rbd", "image": image, "conf": self.conf}}
            return {"targets": [{"name": "ro", "allowAnyInitiator": True, "luns": [lun]}]}

        for gw in self.gateways:
            gw.cleanup()
        self.gateways = [self.start_gateway(i, state=declared(False)) for i in (1, 2)]
        a, b = self.gateways
        for gw in self.gateways:
            self.served_within(gw, ["ro"])
        ini = Initiator(a.portal, harness.INITIATOR, timeout=60)
        self.sessions.append(ini)
        ini.login(harness.IQN_PREFIX + "ro")
        unit_attentions(ini)
        data = pattern(4096, 7)
        self.assertEqual(ini.write(0, 8, data), (0, b""))
        fence_check.prout(self, ini, 0x00, bytes(8) + fence_check.KEY_A + bytes(8))  # REGISTER

        b.stop()
        self.gateways[1] = self.start_gateway(2, state_dir=b.state_dir, state=declared(True))
        self.gateways[1].owns_dir = True
        b.owns_dir = False
        b = self.gateways[1]
        # Gateway 1 learns of it through the object. Its nexus hears MODE PARAMETERS CHANGED (the
        # WP bit); meanwhile, while the store reopens, NOT READY, BECOMING READY.
        deadline = time.monotonic() + 10.0
        while True:
            status, sense = ini.test_unit_ready(0)
            got = sense_key_asc(sense) if status else None
            if got == (0x6, 0x2A, 0x01):
                break
            self.assertIn(got, (None, (0x2, 0x04, 0x01)), "gateway 1's answer to TEST UNIT READY")
            self.assertLess(time.monotonic(), deadline,
                            "gateway 1 never reported the LUN's new write protection")
            time.sleep(0.05)
        status, sense = ini.write(0, 8, pattern(512, 1))
        self.assertEqual((status, sense_key_asc(sense)), (2, (0x7, 0x27, 0x00)))  # WRITE PROTECTED
        self.assertEqual(ini.read(0, 8, 8), (0, data, b""))
        # The registration is still there, and the reopened LUN listens to the new store's
        # object: a reservation through gateway 2 is answered once gateway 1 has applied it, so
        # gateway 1 reports it at once (a gateway that did not answer the notify would have been
        # fenced, and its next read refused).
        other = Initiator(b.portal, harness.INITIATOR + "-b", timeout=60)
        self.sessions.append(other)
        other.login(harness.IQN_PREFIX + "ro")
        unit_attentions(other)
        fence_check.prout(self, other, 0x00, bytes(8) + fence_check.KEY_B + bytes(8))
        started = time.monotonic()
        fence_check.prout(self, other, 0x01, fence_check.KEY_B + bytes(16))  # RESERVE
        took = time.monotonic() - started
        status, keys, _ = ini._command(0, bytes([0x5E, 0x00, 0, 0, 0, 0, 0, 0, 64, 0]),
                                       read_len=64)
        self.assertEqual(status, 0)
        self.assertEqual(sorted([keys[8:16], keys[16:24]]),
                         sorted([fence_check.KEY_A, fence_check.KEY_B]))
        status, held, _ = ini._command(0, bytes([0x5E, 0x01, 0, 0, 0, 0, 0, 0, 64, 0]),
                                       read_len=64)
        self.assertEqual((status, held[8:16]), (0, fence_check.KEY_B))
        self.assertEqual(ini.read(0, 8, 8), (0, data, b""))
        print(f"\nRESERVE through gateway 2 answered in {took:.3f} s, gateway 1 reopened in place")
        self.assertIn("store reopened, read-only", a.read_log())


if __name__ == "__main__":
    unittest.main()
