"""Metrics end to end: iscsigwd's /metrics passes `promtool check metrics`, and a real Prometheus
server on loopback, scraping it every second, answers PromQL queries with exactly the commands and
bytes of a known workload. Also: --log-format json writes one parseable object per line.
Ports are chosen by the kernel; every wait polls with a deadline.
"""
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import unittest
import urllib.parse
import urllib.request

from iscsigw_test import no_io_uring
from iscsigw_test.harness import Daemon, IQN_PREFIX, simple_state, stop_and_clean, wait_for
from iscsigw_test.iscsi_client import Initiator, sense_key_asc

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"
TARGET = IQN_PREFIX + "metrics"
# A target of its own for the store and task-management test, so its counts are exact.
STORE_TARGET = IQN_PREFIX + "metrics-store"
RAM_SIZE = 64 << 20
NULL_SIZE = 32 << 20
FILE_SIZE = 16 << 20
MIB = 1 << 20
WRITES = 7   # WRITE(10) of one 512-byte block each
READS = 5    # READ(10) of two blocks each


def http_get(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def free_port():
    # Prometheus cannot report a port it picked itself; ask the kernel for one just before (and
    # retry with another when someone took it meanwhile: start_prometheus).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.prom_dir = tempfile.mkdtemp(prefix="iscsigw-prom-")
        state = simple_state("metrics")
        state["targets"].append(
            {"name": STORE_TARGET, "allowAnyInitiator": True,
             "luns": [{"id": 0, "ram": {}, "sizeBytes": str(RAM_SIZE), "blockSize": 512},
                      {"id": 1, "null": {}, "sizeBytes": str(NULL_SIZE), "blockSize": 512},
                      {"id": 2, "file": {"path": os.path.join(cls.prom_dir, "lun2.img"),
                                         "create": True},
                       "sizeBytes": str(FILE_SIZE), "blockSize": 512}]})
        cls.daemon = Daemon(state=state).start()
        cls.metrics = cls.daemon.ports["metrics"]
        cls.prom = None

    @classmethod
    def tearDownClass(cls):
        if cls.prom is not None:
            cls.prom.send_signal(signal.SIGTERM)
            try:
                cls.prom.wait(timeout=20)
            except subprocess.TimeoutExpired:
                cls.prom.kill()
                cls.prom.wait()
        shutil.rmtree(cls.prom_dir, ignore_errors=True)
        stop_and_clean(cls.daemon)

    def scrape(self):
        return http_get(f"http://{self.metrics}/metrics")

    def start_prometheus(self):
        cfg = os.path.join(self.prom_dir, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: iscsigw\n"
                    f"    static_configs:\n      - targets: ['{self.metrics}']\n")
        log_path = os.path.join(self.prom_dir, "prometheus.log")
        # The port is free when picked, but another process may bind it before Prometheus does:
        # then Prometheus exits naming the bind, and is started again on another port.
        attempts = 5
        for _ in range(attempts):
            port = free_port()
            with open(log_path, "w") as log:
                type(self).prom = subprocess.Popen(
                    [PROMETHEUS, f"--config.file={cfg}",
                     f"--storage.tsdb.path={self.prom_dir}/data",
                     f"--web.listen-address=127.0.0.1:{port}"],
                    stdout=log, stderr=subprocess.STDOUT)
            self.prom_url = f"http://127.0.0.1:{port}"

            def ready():
                if self.prom.poll() is not None:
                    return "exited"
                try:
                    # Its own answer, not that of whoever else may hold the port.
                    return "ready" if "Ready" in http_get(self.prom_url + "/-/ready",
                                                          timeout=1) else False
                except OSError:
                    return False
            if wait_for(ready, 60, what="prometheus ready") == "ready":
                return
            with open(log_path, errors="replace") as f:
                text = f.read()
            type(self).prom = None
            if "address already in use" not in text:
                self.fail(f"prometheus exited {text[-3000:]}")
        self.fail(f"prometheus found no free port in {attempts} attempts: {text[-3000:]}")

    def query(self, promql):
        url = self.prom_url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        body = json.loads(http_get(url))
        self.assertEqual(body["status"], "success", body)
        return [(r["metric"], float(r["value"][1])) for r in body["data"]["result"]]

    def wait_value(self, promql, expected, timeout=60):
        last = []

        def check():
            last[:] = self.query(promql)
            return len(last) == 1 and last[0][1] == expected
        try:
            wait_for(check, timeout, interval=0.2, what=promql)
        except Exception:
            self.fail(f"{promql}: expected {expected}, last answer {last}")

    def test_workload_seen_exactly_by_prometheus(self):
        # Process-wide counters may already hold the other tests' logins: measure from here.
        logins0 = self.counter('iscsigw_iscsi_logins_total{result="success"}')
        logouts0 = self.counter("iscsigw_iscsi_logouts_total")
        before = self.scrape()
        commands0 = sum_of(before, "iscsigw_iscsi_pdus_total", opcode="scsi_command",
                           direction="rx")
        data_in0 = sum_of(before, "iscsigw_iscsi_pdus_total", opcode="data_in", direction="tx")
        ini = Initiator(self.daemon.portal, "iqn.2026-11.io.test:metrics")
        ini.login(TARGET)
        # The first command of a new I_T nexus reports POWER ON (a unit attention): spend it on
        # TEST UNIT READY so every READ and WRITE below succeeds. Each TUR counts as "other".
        turs = 0
        while True:
            status, _ = ini.test_unit_ready(0)
            turs += 1
            if status == 0:
                break
            self.assertLess(turs, 5)
        for i in range(WRITES):
            status, _ = ini.write(0, i, bytes([i + 1]) * 512)
            self.assertEqual(status, 0)
        for i in range(READS):
            status, data, _ = ini.read(0, i, 2)
            self.assertEqual(status, 0)
            self.assertEqual(len(data), 1024)
        self.assertEqual(ini.logout(), 0)
        ini.close()

        text = self.scrape()
        # promtool lints the live exposition: names, types, help, histogram shape.
        r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn('iscsigw_build_info{commit="', text)
        self.assertIn("process_resident_memory_bytes ", text)

        self.start_prometheus()
        sel = f'target="{TARGET}",lun="0"'
        self.wait_value(f'iscsigw_scsi_commands_total{{{sel},class="write"}}', WRITES)
        self.wait_value(f'iscsigw_scsi_commands_total{{{sel},class="read"}}', READS)
        self.wait_value(f'iscsigw_scsi_commands_total{{{sel},class="other"}}', turs)
        self.wait_value(f'iscsigw_scsi_written_bytes_total{{{sel}}}', WRITES * 512)
        self.wait_value(f'iscsigw_scsi_read_bytes_total{{{sel}}}', READS * 1024)
        self.wait_value(f'iscsigw_scsi_command_duration_seconds_count{{{sel},class="read"}}', READS)
        self.wait_value(f'iscsigw_scsi_command_duration_seconds_bucket{{{sel},class="write",le="+Inf"}}',
                        WRITES)
        self.wait_value('sum(iscsigw_iscsi_pdus_total{opcode="scsi_command",direction="rx"})',
                        commands0 + WRITES + READS + turs)
        self.wait_value('sum(iscsigw_iscsi_pdus_total{opcode="data_in",direction="tx"})',
                        data_in0 + READS)
        self.wait_value('iscsigw_iscsi_logins_total{result="success"}', logins0 + 1)
        self.wait_value('iscsigw_iscsi_logouts_total', logouts0 + 1)
        if turs > 1:
            self.wait_value(
                f'iscsigw_scsi_check_conditions_total{{{sel},sense_key="unit_attention"}}', turs - 1)
        self.wait_value('up{job="iscsigw"}', 1)

    def test_sessions_gauge_and_failed_login(self):
        ini = Initiator(self.daemon.portal, "iqn.2026-11.io.test:gauge")
        ini.login(TARGET)
        line = f'iscsigw_iscsi_sessions{{target="{TARGET}"}} 1'
        wait_for(lambda: line in self.scrape(), 10, what=line)
        ini.logout()
        ini.close()
        line0 = f'iscsigw_iscsi_sessions{{target="{TARGET}"}} 0'
        # The series stays, at 0: a configured target with nobody logged in is not "no data".
        wait_for(lambda: line0 in self.scrape(), 10, what=line0)
        self.assertIn(f'iscsigw_iscsi_connections{{target="{TARGET}"}} 0', self.scrape())
        before = self.counter('iscsigw_iscsi_logins_total{result="target_not_found"}')
        bad = Initiator(self.daemon.portal, "iqn.2026-11.io.test:gauge")
        with self.assertRaises(Exception):
            bad.login(IQN_PREFIX + "no-such-target")
        bad.close()
        self.assertEqual(self.counter('iscsigw_iscsi_logins_total{result="target_not_found"}'),
                         before + 1)

    def test_store_task_management_and_reactor_metrics(self):
        def value(name, **labels):
            return sample(self.scrape(), name, **labels)

        t = STORE_TARGET
        # Capacity is the configured size; nothing is allocated before the first write.
        self.assertEqual(value("iscsigw_store_capacity_bytes", target=t, lun="0"), RAM_SIZE)
        self.assertEqual(value("iscsigw_store_capacity_bytes", target=t, lun="1"), NULL_SIZE)
        self.assertEqual(value("iscsigw_store_allocated_bytes", target=t, lun="0"), 0)
        self.assertEqual(value("iscsigw_store_allocated_bytes", target=t, lun="1"), 0)
        self.assertEqual(value("iscsigw_store_capacity_bytes", target=t, lun="2"), FILE_SIZE)
        file_alloc0 = value("iscsigw_store_allocated_bytes", target=t, lun="2")
        self.assertIsNotNone(file_alloc0)

        ini = Initiator(self.daemon.portal, "iqn.2026-11.io.test:metrics-store")
        ini.login(t)
        wait_for(lambda: value("iscsigw_iscsi_connections", target=t) == 1, 10,
                 what="iscsigw_iscsi_connections 1")
        self.assertEqual(value("iscsigw_iscsi_sessions", target=t), 1)
        # Connections of the earlier tests close asynchronously: wait until only this one is left.
        wait_for(lambda: sum_of(self.scrape(), "iscsigw_reactor_connections") == 1, 10,
                 what="one connection placed on the reactors")

        def drain_unit_attentions(lun):
            # Every CHECK CONDITION before GOOD here is a unit attention being reported.
            n = 0
            while True:
                status, sense = ini.test_unit_ready(lun)
                if status == 0:
                    return n
                self.assertEqual(sense_key_asc(sense)[0], 6, sense.hex())
                n += 1
                self.assertLess(n, 5)

        uas = drain_unit_attentions(0)  # power on / I_T nexus loss
        self.assertGreaterEqual(uas, 1)

        # One block in chunk 0 and one in chunk 2 of the ram store: two 1 MiB chunks allocated.
        self.assertEqual(ini.write(0, 0, b"\x11" * 512)[0], 0)
        self.assertEqual(ini.write(0, 2 * MIB // 512, b"\x22" * 512)[0], 0)
        self.assertEqual(value("iscsigw_store_allocated_bytes", target=t, lun="0"), 2 * MIB)
        # Ram stores complete in memory and are not timed; a file store's calls are.
        self.assertIsNone(value("iscsigw_store_io_duration_seconds_count", target=t, lun="0",
                                op="write"))
        drain_unit_attentions(2)
        for i in range(3):
            self.assertEqual(ini.write(2, 64 * i, bytes([i + 1]) * 4096)[0], 0)
        self.assertEqual(ini.read(2, 0, 8)[0], 0)
        self.assertEqual(value("iscsigw_store_io_duration_seconds_count", target=t, lun="2",
                               op="write"), 3)
        self.assertEqual(value("iscsigw_store_io_duration_seconds_bucket", target=t, lun="2",
                               op="write", le="+Inf"), 3)
        self.assertEqual(value("iscsigw_store_io_duration_seconds_count", target=t, lun="2",
                               op="read"), 1)
        self.assertEqual(value("iscsigw_store_io_errors_total", target=t, lun="2"), 0)
        # st_blocks of the sparse file: at least the 12 KiB just written.
        self.assertGreaterEqual(value("iscsigw_store_allocated_bytes", target=t, lun="2"),
                                file_alloc0 + 3 * 4096)
        # UNMAP (SBC-3 5.28) of all of chunk 0 gives it back.
        params = struct.pack(">HH4xQI4x", 22, 16, 0, MIB // 512)
        status, _, sense = ini._command(0, struct.pack(">B6xHB", 0x42, len(params), 0),
                                        data=params)
        self.assertEqual(status, 0, sense.hex())
        self.assertEqual(value("iscsigw_store_allocated_bytes", target=t, lun="0"), MIB)
        self.assertEqual(value("iscsigw_store_io_errors_total", target=t, lun="0"), 0)

        tmf = "iscsigw_iscsi_task_management_requests_total"
        self.assertIsNone(value(tmf, target=t, function="logical_unit_reset",
                                response="function_complete"))
        # RFC 7143 11.5.1: LOGICAL UNIT RESET (5) of LUN 0; ABORT TASK (1) of a task that never
        # existed, with a RefCmdSN outside the window.
        self.assertEqual(ini.task_management(5, lun=0), 0)
        far = ini.cmd_sn + 1000
        self.assertEqual(ini.task_management(1, lun=0, ref_itt=0x7777, ref_cmd_sn=far), 1)
        self.assertEqual(value(tmf, target=t, function="logical_unit_reset",
                               response="function_complete"), 1)
        self.assertEqual(value(tmf, target=t, function="abort_task",
                               response="task_does_not_exist"), 1)
        self.assertEqual(sum_of(self.scrape(), tmf, target=t), 2)

        # SAM-5 6.3: the reset raised a unit attention for this I_T nexus too.
        after_reset = drain_unit_attentions(0)
        self.assertEqual(after_reset, 1)
        uas += after_reset
        self.assertEqual(value("iscsigw_scsi_unit_attentions_total", target=t, lun="0"), uas)
        self.assertEqual(value("iscsigw_scsi_check_conditions_total", target=t, lun="0",
                               sense_key="unit_attention"), uas)
        self.assertEqual(ini.logout(), 0)
        ini.close()
        wait_for(lambda: value("iscsigw_iscsi_connections", target=t) in (None, 0), 10,
                 what="iscsigw_iscsi_connections 0")

        text = self.scrape()
        r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        # Every reactor thread has run handlers (accepts, logins): its CPU clock is above zero.
        reactors = sample_labels(text, "iscsigw_reactor_connections", "reactor")
        self.assertGreaterEqual(len(reactors), 1)
        for reactor in reactors:
            busy = sample(text, "iscsigw_reactor_busy_seconds_total", reactor=reactor)
            self.assertIsNotNone(busy, reactor)
            self.assertGreaterEqual(busy, 0)
        self.assertGreater(sum_of(text, "iscsigw_reactor_busy_seconds_total"), 0)

    def counter(self, series):
        for line in self.scrape().splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
        return 0.0


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(text, name):
    """(labels, value) of every sample of `name` in a text exposition."""
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) == name:
            yield dict(_LABEL.findall(m.group(2) or "")), float(m.group(3))


def sample(text, name, **labels):
    """The value of the one sample of `name` whose labels include `labels`, or None."""
    found = [v for l, v in samples(text, name) if all(l.get(k) == x for k, x in labels.items())]
    assert len(found) <= 1, f"{name}{labels}: {len(found)} samples"
    return found[0] if found else None


def sum_of(text, name, **labels):
    return sum(v for l, v in samples(text, name) if all(l.get(k) == x for k, x in labels.items()))


def sample_labels(text, name, label):
    return sorted({l[label] for l, _ in samples(text, name) if label in l})


def series(text):
    """(name, labels) of every sample line of a text exposition."""
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            yield m.group(1), dict(_LABEL.findall(m.group(2) or ""))


def rtpg_state(ini, lun):
    """The asymmetric access state REPORT TARGET PORT GROUPS answers for LUN (SPC-4 6.27)."""
    for _ in range(3):  # past a new session's unit attentions
        status, data, _ = ini._command(lun, struct.pack(">BBxxxxIxx", 0xA3, 0x0A, 64),
                                       read_len=64)
        if status == 0:
            return data[4] & 0x0F
    raise AssertionError(f"REPORT TARGET PORT GROUPS of lun {lun}: status {status}")


def good_tur(test, ini, lun):
    for _ in range(5):
        if ini.test_unit_ready(lun)[0] == 0:
            return
    test.fail(f"lun {lun} never ready")


LUNSTATE = IQN_PREFIX + "lunstate"


class LunStateMetricsTest(unittest.TestCase):
    """iscsigw_lun_online and iscsigw_lun_alua_state per LUN, the LUN directory's size and free
    space (--lun-dir on a private tmpfs, so both are exact), and io_uring in use where the host
    allows it: a ram LUN, a file LUN in --lun-dir and an rbd LUN whose cluster
    cannot be reached (a monitor address nobody listens on), which starts offline as
    docs/multi-gateway.md says and stays so."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="iscsigw-lunstate-")
        cls.addClassCleanup(shutil.rmtree, cls.dir, True)
        cls.lun_dir = os.path.join(cls.dir, "luns")
        os.makedirs(cls.lun_dir)
        # The LUN directory on a tmpfs of its own, which nothing but this gateway and this test
        # writes, so that its statvfs is exact; unmounted even when a later step fails.
        cls.no_tmpfs = None
        if os.geteuid() != 0:
            cls.no_tmpfs = "mounting a private tmpfs for --lun-dir needs root"
        else:
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs",
                                cls.lun_dir], capture_output=True, text=True)
            if r.returncode != 0:
                cls.no_tmpfs = "cannot mount a tmpfs for --lun-dir: " + r.stderr.strip()
            else:
                cls.addClassCleanup(subprocess.run, ["umount", "-l", cls.lun_dir], check=False)
        dead = os.path.join(cls.dir, "dead.conf")
        with open(dead, "w") as f:
            f.write("[global]\nmon host = [v2:127.0.0.1:9]\nauth client required = none\n"
                    "client mount timeout = 2\nlog file = /dev/null\n")
        state = simple_state("lunstate", luns=[
            {"id": 0, "ram": {}, "sizeBytes": str(RAM_SIZE), "blockSize": 512},
            {"id": 1, "file": {"path": os.path.join(cls.lun_dir, "one.img"), "create": True},
             "sizeBytes": str(FILE_SIZE), "blockSize": 512},
            {"id": 2, "rbd": {"pool": "rbd", "image": "unreachable", "conf": dead},
             "sizeBytes": str(FILE_SIZE), "blockSize": 512}])
        cls.daemon = Daemon(state=state, backing_allow=(),
                            extra_args=("--lun-dir", cls.lun_dir, "--reactors", "1")).start(
                                timeout=60)

    @classmethod
    def tearDownClass(cls):
        stop_and_clean(cls.daemon)

    def scrape(self):
        return http_get(f"http://{self.daemon.ports['metrics']}/metrics")

    def test_online_and_alua_state_per_lun(self):
        text = self.scrape()
        for lun, online in (("0", 1), ("1", 1), ("2", 0)):
            self.assertEqual(sample(text, "iscsigw_lun_online", target=LUNSTATE, lun=lun), online,
                             f"lun {lun}")
        # The API says the same: lun 2 has an offline reason, the others none.
        luns = {l["id"]: l for l in self.daemon.ctl_json("lun", "list", "lunstate")["luns"]}
        self.assertEqual(luns[0]["offline_reason"], "")
        self.assertEqual(luns[1]["offline_reason"], "")
        self.assertRegex(luns[2]["offline_reason"], r"127\.0\.0\.1:9")
        # The ALUA state is what REPORT TARGET PORT GROUPS answers: a gateway alone (no
        # --gateway-id) is active/optimized for every LUN.
        ini = Initiator(self.daemon.portal, "iqn.2026-11.io.test:lunstate")
        ini.login(LUNSTATE)
        try:
            for lun in (0, 1, 2):
                answered = rtpg_state(ini, lun)
                self.assertEqual(answered, 0)
                self.assertEqual(
                    sample(text, "iscsigw_lun_alua_state", target=LUNSTATE, lun=str(lun)),
                    answered, f"lun {lun}")
            # The offline LUN answers NOT READY, which is what 0 promises.
            status, sense = ini.test_unit_ready(2)
            while status == 2 and sense_key_asc(sense)[0] == 6:
                status, sense = ini.test_unit_ready(2)
            self.assertEqual((status, sense_key_asc(sense)[0]), (2, 2))
        finally:
            ini.close()

    def test_lun_dir_size_and_free_match_statvfs(self):
        if self.no_tmpfs:
            self.skipTest(self.no_tmpfs)
        # Nobody else writes the tmpfs: the scrape and statvfs agree to the byte.
        st = os.statvfs(self.lun_dir)
        text = self.scrape()
        self.assertEqual(sample(text, "iscsigw_lun_dir_size_bytes"), st.f_blocks * st.f_frsize)
        free = sample(text, "iscsigw_lun_dir_free_bytes")
        self.assertEqual(free, st.f_bavail * st.f_frsize)
        # 8 MiB written into the file LUN (sparse until then) and flushed: the next scrape has
        # exactly 8 MiB less free (a tmpfs allocates whole pages, and 8 MiB is a multiple).
        ini = Initiator(self.daemon.portal, "iqn.2026-11.io.test:lundir")
        ini.login(LUNSTATE)
        try:
            status, sense = ini.test_unit_ready(1)
            while status == 2 and sense_key_asc(sense)[0] == 6:  # POWER ON, spent
                status, sense = ini.test_unit_ready(1)
            self.assertEqual(status, 0)
            chunk = 8192
            for offset in range(0, 8 * MIB, chunk):
                status, _ = ini.write(1, offset // 512, b"\x01" * chunk)
                self.assertEqual(status, 0, f"WRITE at {offset}")
            status, _, _ = ini._command(1, struct.pack(">B9x", 0x35))  # SYNCHRONIZE CACHE(10)
            self.assertEqual(status, 0)
        finally:
            ini.close()
        after = sample(self.scrape(), "iscsigw_lun_dir_free_bytes")
        self.assertEqual(after, free - 8 * MIB)
        st = os.statvfs(self.lun_dir)
        self.assertEqual(after, st.f_bavail * st.f_frsize)

    def test_io_uring_enabled_on_this_host(self):
        # Where io_uring is refused (a container runtime's seccomp profile,
        # kernel.io_uring_disabled) the gateway rightly falls back; NoIoUringTest covers that.
        refused = no_io_uring.refusal()
        if refused:
            self.skipTest(f"io_uring is refused on this host ({refused})")
        text = self.scrape()
        self.assertEqual(sample(text, "iscsigw_io_uring_enabled"), 1)
        self.assertEqual(sample(text, "iscsigw_io_uring_fallbacks_total"), 0)
        self.assertNotIn("io_uring refused", self.daemon.read_log())


class NoIoUringTest(unittest.TestCase):
    """Under a seccomp filter that refuses io_uring_setup (EPERM, as a container runtime's default
    profile does): iscsigw_io_uring_enabled is 0 from start-up, before any file LUN exists; the
    refusal is logged once with its errno; every file LUN opened is counted; their I/O works."""

    def test_io_uring_refused_by_seccomp(self):
        if not no_io_uring.supported():
            self.skipTest("no seccomp filter for this architecture")
        work = tempfile.mkdtemp(prefix="iscsigw-nouring-")
        self.addCleanup(shutil.rmtree, work, True)
        daemon = Daemon(state=simple_state("nouring", luns=[]), backing_allow=(work,),
                        extra_args=("--reactors", "2"))
        daemon.args = no_io_uring.command(daemon.args)
        daemon.start()
        self.addCleanup(daemon.cleanup)
        url = f"http://{daemon.ports['metrics']}/metrics"
        text = http_get(url)
        self.assertEqual(sample(text, "iscsigw_io_uring_enabled"), 0)
        self.assertEqual(sample(text, "iscsigw_io_uring_fallbacks_total"), 0)
        refusals = re.findall(r"io_uring refused \(io_uring_setup: .*\(EPERM\)\)",
                              daemon.read_log())
        self.assertEqual(len(refusals), 1, daemon.read_log()[-3000:])

        for lun in (0, 1):
            daemon.ctl("lun", "create", "nouring", lun, "--backing", "file", "--path",
                       os.path.join(work, f"lun{lun}.img"), "--create", "--size", "4M")
        text = http_get(url)
        self.assertEqual(sample(text, "iscsigw_io_uring_enabled"), 0)
        self.assertEqual(sample(text, "iscsigw_io_uring_fallbacks_total"), 2)
        # Two stores on two reactors met the refusal: still one warning.
        self.assertEqual(len(re.findall(r"io_uring refused", daemon.read_log())), 1)

        ini = Initiator(daemon.portal, "iqn.2026-11.io.test:nouring")
        ini.login(IQN_PREFIX + "nouring")
        self.addCleanup(ini.close)
        for lun in (0, 1):
            good_tur(self, ini, lun)
            for lba in range(8):
                self.assertEqual(ini.write(lun, lba, bytes([lun * 16 + lba + 1]) * 512)[0], 0)
            status, data, _ = ini.read(lun, 0, 8)
            self.assertEqual(status, 0)
            self.assertEqual(data, b"".join(bytes([lun * 16 + i + 1]) * 512 for i in range(8)))
        text = http_get(url)
        self.assertEqual(sample(text, "iscsigw_store_io_errors_total", target=IQN_PREFIX + "nouring",
                                lun="0"), 0)
        with open(os.path.join(work, "lun1.img"), "rb") as f:
            self.assertEqual(f.read(512), bytes([17]) * 512)


DETAIL_TARGETS = 4


class MetricsDetailTest(unittest.TestCase):
    """--metrics-detail: the same workload seen at each level. At target, per-LUN families are
    summed per target; at gateway, over everything; LUN online and ALUA state stay per LUN.
    Also measures the series a LUN adds at each level (docs/operations.md)."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="iscsigw-detail-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def run_level(self, level):
        """Starts a gateway at LEVEL with DETAIL_TARGETS targets of two file LUNs each, writes to
        LUN 0 and reads LUN 1 of every target, and returns the scrape."""
        state = {"targets": []}
        for t in range(DETAIL_TARGETS):
            state["targets"].append({
                "name": IQN_PREFIX + f"detail{t}", "allowAnyInitiator": True,
                "luns": [{"id": lun, "file": {"path": os.path.join(self.dir, f"{level}-{t}-{lun}"),
                                              "create": True},
                          "sizeBytes": str(FILE_SIZE), "blockSize": 512} for lun in (0, 1)]})
        daemon = Daemon(state=state, extra_args=("--metrics-detail", level))
        daemon.start()
        self.addCleanup(daemon.cleanup)
        for t in range(DETAIL_TARGETS):
            ini = Initiator(daemon.portal, f"iqn.2026-11.io.test:detail{t}")
            ini.login(IQN_PREFIX + f"detail{t}")
            for lun in (0, 1):
                good_tur(self, ini, lun)
            for i in range(WRITES):
                self.assertEqual(ini.write(0, i, bytes([i + 1]) * 512)[0], 0)
            for i in range(READS):
                self.assertEqual(ini.read(1, i, 2)[0], 0)
            self.assertEqual(ini.logout(), 0)
            ini.close()

        # The gateway ends a session just after its Logout Response goes out: a scrape at once
        # may still count it.
        def closed():
            text = http_get(f"http://{daemon.ports['metrics']}/metrics")
            return text if sum_of(text, "iscsigw_iscsi_sessions") == 0 else None

        return wait_for(closed, 10, interval=0.1, what="the sessions closed after logout")

    def per_lun_series(self, text):
        """Samples that carry a target label, divided by the LUNs configured."""
        n = sum(1 for _, labels in series(text) if "target" in labels)
        return n / (DETAIL_TARGETS * 2)

    def test_each_level_keeps_what_it_promises(self):
        texts = {level: self.run_level(level) for level in ("lun", "target", "gateway")}
        for level, text in texts.items():
            r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                               text=True, timeout=30)
            self.assertEqual(r.returncode, 0, f"{level}: {r.stdout}{r.stderr}")
            # Online and ALUA state: one series per LUN at every level.
            for name in ("iscsigw_lun_online", "iscsigw_lun_alua_state"):
                got = sorted((l["target"], l["lun"]) for n, l in series(text) if n == name)
                self.assertEqual(got, sorted((IQN_PREFIX + f"detail{t}", str(lun))
                                             for t in range(DETAIL_TARGETS) for lun in (0, 1)),
                                 f"{level} {name}")
            for name, labels in series(text):
                if name in ("iscsigw_lun_online", "iscsigw_lun_alua_state"):
                    continue
                if level != "lun":
                    self.assertNotIn("lun", labels, f"{level}: {name}{labels}")
                if level == "gateway":
                    self.assertNotIn("target", labels, f"{level}: {name}{labels}")
            print(f"\n--metrics-detail {level}: {self.per_lun_series(text):.1f} series per LUN "
                  f"with a target label, {sum(1 for _ in series(text))} in all "
                  f"({DETAIL_TARGETS} targets x 2 LUNs)")

        lun, target, gateway = texts["lun"], texts["target"], texts["gateway"]
        t0 = IQN_PREFIX + "detail0"
        # Per LUN at lun: the writes on LUN 0, the reads on LUN 1.
        self.assertEqual(sample(lun, "iscsigw_scsi_commands_total", target=t0, lun="0",
                                **{"class": "write"}), WRITES)
        self.assertEqual(sample(lun, "iscsigw_scsi_commands_total", target=t0, lun="1",
                                **{"class": "read"}), READS)
        # Summed per target at target, over the gateway at gateway: exactly the workload.
        self.assertEqual(sample(target, "iscsigw_scsi_commands_total", target=t0,
                                **{"class": "write"}), WRITES)
        self.assertEqual(sample(target, "iscsigw_scsi_read_bytes_total", target=t0), READS * 1024)
        self.assertEqual(sample(target, "iscsigw_store_capacity_bytes", target=t0), 2 * FILE_SIZE)
        self.assertEqual(sample(gateway, "iscsigw_scsi_commands_total", **{"class": "write"}),
                         DETAIL_TARGETS * WRITES)
        self.assertEqual(sample(gateway, "iscsigw_scsi_written_bytes_total"),
                         DETAIL_TARGETS * WRITES * 512)
        self.assertEqual(sample(gateway, "iscsigw_iscsi_sessions"), 0)
        # The histograms add up: count and +Inf bucket are every read of the gateway.
        self.assertEqual(sample(gateway, "iscsigw_scsi_command_duration_seconds_count",
                                **{"class": "read"}), DETAIL_TARGETS * READS)
        self.assertEqual(sample(gateway, "iscsigw_scsi_command_duration_seconds_bucket",
                                le="+Inf", **{"class": "read"}), DETAIL_TARGETS * READS)
        self.assertEqual(sample(target, "iscsigw_scsi_command_duration_seconds_count",
                                target=t0, **{"class": "read"}), READS)
        # Coarser levels keep fewer series per LUN; gateway keeps the two per-LUN gauges only.
        self.assertLess(self.per_lun_series(target), self.per_lun_series(lun))
        self.assertEqual(self.per_lun_series(gateway), 2)

    def test_a_bad_level_stops_the_start(self):
        bad = Daemon(state=simple_state("detailbad"), extra_args=("--metrics-detail", "volume"))
        self.addCleanup(bad.cleanup)
        bad.spawn()
        rc = bad.proc.wait(timeout=20)
        self.assertNotEqual(rc, 0)
        self.assertNotEqual(rc, 1)  # CLI11's code, as any value outside a flag's list
        log = bad.read_log()
        self.assertIn("--metrics-detail", log)
        self.assertIn("volume", log)
        ref = Daemon(state=simple_state("detailbad"), extra_args=("--log-format", "yaml"))
        self.addCleanup(ref.cleanup)
        ref.spawn()
        self.assertEqual(ref.proc.wait(timeout=20), rc)


class JsonLogTest(unittest.TestCase):
    def test_every_line_is_one_json_object_with_connection_context(self):
        daemon = Daemon(state=simple_state("jsonlog"),
                        extra_args=("--log-format", "json", "--log-level", "info")).start()
        try:
            ini = Initiator(daemon.portal, "iqn.2026-11.io.test:json")
            ini.login(IQN_PREFIX + "jsonlog")
            ini.logout()
            ini.close()
        finally:
            rc = daemon.stop()
            log = daemon.read_log()
            daemon.cleanup()
        self.assertEqual(rc, 0, log[-2000:])
        lines = [l for l in log.splitlines() if l.strip()]
        self.assertGreater(len(lines), 3)
        records = [json.loads(l) for l in lines]  # raises on any line that is not JSON
        for rec in records:
            self.assertEqual(sorted(set(rec) & {"ts", "level", "logger", "msg"}),
                             ["level", "logger", "msg", "ts"], rec)
        logins = [r for r in records if r["msg"].startswith("login: initiator")]
        self.assertEqual(len(logins), 1, records)
        self.assertIn("conn", logins[0])
        self.assertIn("tsih", logins[0])
        self.assertIn("iqn.2026-11.io.test:json", logins[0]["msg"])


if __name__ == "__main__":
    unittest.main()
