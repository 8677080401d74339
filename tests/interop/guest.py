"""Host side of the kernel-initiator tests: boots the Debian 12 guest (guest_image.sh) under QEMU
with one scenario script, and meets it at the scenario's steps.

The guest runs with -accel tcg (a KVM guest hangs in its firmware on these machines) and
-netdev user, where the host's loopback is 10.0.2.2: a gateway listening on 127.0.0.1:P is
10.0.2.2:P in the guest. The root image is opened with -snapshot and never written.
"""
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from iscsigw_test import harness

HERE = os.path.dirname(os.path.abspath(__file__))

HOST_FROM_GUEST = "10.0.2.2"
TARGET = harness.IQN_PREFIX + "interop"
GUEST_IQN = "iqn.2026-11.io.iscsigw.interop:guest"


def guest_image():
    """The cached image directory, built on first use (minutes; then instant)."""
    p = subprocess.run(["bash", os.path.join(HERE, "guest_image.sh")], capture_output=True,
                       text=True)
    if p.returncode != 0:
        raise RuntimeError(f"guest_image.sh failed:\n{p.stderr[-4000:]}")
    return p.stdout.strip().splitlines()[-1]


def free_port():
    """A port free on 127.0.0.1 now, for a gateway that must be started on a known port."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GuestFailed(AssertionError):
    pass


def write_scenario(directory, scenario, env):
    """The files a scenario's run directory starts with: its name and its variables."""
    with open(os.path.join(directory, "scenario"), "w") as f:
        f.write(scenario)
    with open(os.path.join(directory, "env"), "w") as f:
        for k, v in env.items():
            f.write(f"{k}={shlex.quote(str(v))}\n")
        f.write("export " + " ".join(env) + "\n")


def boot_env(env, bin_dir):
    env = dict(env)
    env.setdefault("INITIATOR_NAME", GUEST_IQN)
    env["GATEWAY_HOST"] = HOST_FROM_GUEST
    if bin_dir:
        env["BIN_SHARE"] = "/opt/iscsigw/bin"
    return env


class Guest:
    """One boot of the guest running tests/interop/scenarios/SCENARIO.sh with ENV; or, made by
    GuestSeries.guest, one scenario of a series on a boot that serves several in turn."""

    def __init__(self, scenario, env, memory_mb=1024, cpus=2, bin_dir=None, forward=(),
                 series=None):
        """bin_dir: a host directory the guest sees read-only at /opt/iscsigw/bin (the build
        tree's binaries, for a program that must run in the guest). forward: guest TCP ports
        the host reaches on 127.0.0.1 (QEMU hostfwd); self.forwards maps each to its host port."""
        self.scenario = scenario
        self.series = series
        self.proc = None
        self.started = None
        self.passed = False
        env = boot_env(env, bin_dir)
        if series is not None:
            self.run_dir = series.next_dir()
            self.env = env
            self.console_path = series.console_path
            return
        self.image = guest_image()
        self.run_dir = tempfile.mkdtemp(prefix=f"iscsigw-interop-{scenario}-")
        write_scenario(self.run_dir, scenario, env)
        self.forwards = {port: free_port() for port in forward}
        netdev = "user,id=n0" + "".join(f",hostfwd=tcp:127.0.0.1:{host}-:{guest}"
                                        for guest, host in self.forwards.items())
        self.console_path = os.path.join(self.run_dir, "console.log")
        self.args = [
            "qemu-system-x86_64", "-accel", "tcg", "-machine", "q35", "-cpu", "max",
            "-smp", str(cpus), "-m", str(memory_mb), "-nographic", "-no-reboot",
            "-kernel", os.path.join(self.image, "vmlinuz"),
            "-initrd", os.path.join(self.image, "initrd.img"),
            "-append", "console=ttyS0 net.ifnames=0 panic=-1 loglevel=4",
            "-drive", f"file={os.path.join(self.image, 'disk.img')},if=virtio,format=raw,snapshot=on",
            "-netdev", netdev, "-device", "virtio-net-pci,netdev=n0",
            "-virtfs", f"local,path={HERE},mount_tag=suite,security_model=none,readonly=on",
            "-virtfs", f"local,path={self.run_dir},mount_tag=run,security_model=none",
            "-serial", f"file:{self.console_path}", "-monitor", "none", "-display", "none",
        ]
        if bin_dir:
            self.args += ["-virtfs", f"local,path={bin_dir},mount_tag=bin,security_model=none,"
                                     "readonly=on"]
        self.args = [a for a in self.args if a != "-nographic"]

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def start(self):
        self.started = time.monotonic()
        if self.series is not None:
            self.proc = self.series.run(self)
            return self
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return self

    def _path(self, name):
        return os.path.join(self.run_dir, name)

    def console(self):
        return harness.read_text(self.console_path)

    def dmesg(self):
        return harness.read_text(self._path("dmesg"),
                                 "(no dmesg: the guest did not reach the end of its scenario)")

    def report(self, why):
        """The failure message: why, the console's tail and the kernel log."""
        return (f"{why}\n--- guest console ({self.scenario}, last 8000 chars) ---\n"
                f"{self.console()[-8000:]}\n--- guest dmesg (last 12000 chars) ---\n"
                f"{self.dmesg()[-12000:]}")

    def step(self, name, timeout=300):
        """Waits until the guest reaches `step NAME`; returns a function that lets it go on
        (with an optional answer the guest prints)."""
        ready = self._path(name + ".ready")
        deadline = time.monotonic() + timeout
        while not os.path.exists(ready):
            if self.proc.poll() is not None:
                raise GuestFailed(self.report(f"guest ended before step {name}"))
            if self.series is not None and os.path.exists(self._path("result")):
                raise GuestFailed(self.report(f"scenario {self.scenario} ended before step "
                                              f"{name}"))
            if time.monotonic() > deadline:
                raise GuestFailed(self.report(f"guest did not reach step {name} in {timeout}s"))
            time.sleep(0.1)

        def go(answer=""):
            tmp = self._path(name + ".go.tmp")
            with open(tmp, "w") as f:
                f.write(answer)
            os.rename(tmp, self._path(name + ".go"))
        return go

    def wait(self, timeout=600):
        """Waits for the guest to power off (in a series: for the scenario to end); raises
        GuestFailed unless the scenario passed."""
        if self.series is not None:
            deadline = time.monotonic() + timeout
            while not os.path.exists(self._path("result")):
                if self.proc.poll() is not None:
                    raise GuestFailed(self.report("guest ended in the middle of the scenario"))
                if time.monotonic() > deadline:
                    raise GuestFailed(self.report(f"scenario still running after {timeout}s"))
                time.sleep(0.1)
            return self._result()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise GuestFailed(self.report(f"guest still running after {timeout}s"))
        return self._result()

    def _result(self):
        try:
            with open(self._path("result")) as f:
                rc = int(f.read().strip())
        except (OSError, ValueError) as e:
            # qemu's stderr is read only once it has exited: while it runs (a series' boot goes
            # on after each scenario) the read would never end.
            err = ""
            if self.proc.poll() is not None and self.proc.stderr:
                err = self.proc.stderr.read().decode(errors="replace")
            raise GuestFailed(self.report(f"no result from the guest ({e}; qemu: {err[-2000:]})"))
        if rc != 0:
            raise GuestFailed(self.report(f"scenario {self.scenario} exited {rc}"))
        self.passed = True
        return time.monotonic() - self.started

    def shell(self, command, timeout=300):
        """Runs COMMAND with sh -eu in a guest that serves commands (scenarios/shell.sh) and
        returns (exit status, stdout and stderr). One command at a time, in order."""
        n = getattr(self, "_shell_n", 0)
        self.step(f"cmd{n}", timeout=timeout)(command)
        self.step(f"cmd{n + 1}", timeout=timeout)
        self._shell_n = n + 1
        with open(self._path(f"cmd{n}.out"), errors="replace") as f:
            out = f.read()
        with open(self._path(f"cmd{n}.rc")) as f:
            return int(f.read().strip()), out

    def check(self, command, timeout=300):
        """shell(), raising GuestFailed unless the command exits 0; returns its output."""
        rc, out = self.shell(command, timeout)
        if rc != 0:
            raise GuestFailed(self.report(f"guest command failed ({rc}): {command}\n{out}"))
        return out

    def end_shell(self, timeout=600):
        """Lets a shell scenario finish and waits for the guest to power off."""
        n = getattr(self, "_shell_n", 0)
        self.step(f"cmd{n}")("exit")
        return self.wait(timeout)

    def close(self):
        if self.series is not None:
            # A scenario that failed or was left half-way may have left anything behind: the
            # next one boots afresh.
            if not self.passed:
                self.series.close(kill=True)
            return
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc is not None and self.proc.stderr:
            self.proc.stderr.close()
        if os.environ.get("ISCSIGW_INTEROP_KEEP"):
            print(f"guest run directory kept: {self.run_dir}", file=sys.stderr)
        else:
            shutil.rmtree(self.run_dir, ignore_errors=True)


class GuestSeries:
    """One boot of the guest serving several scenarios in turn (guest_init.sh, "series"): each
    guest() is a Guest whose scenario runs on this boot, in a run directory of its own. A boot
    costs the TCG guest seconds of kernel, udev and iscsid; the scenarios of one test file share
    one. After a scenario that did not pass the boot is discarded and the next one boots afresh."""

    def __init__(self, memory_mb=1024, cpus=2, bin_dir=None, env=None):
        self.options = dict(memory_mb=memory_mb, cpus=cpus, bin_dir=bin_dir)
        self.env = boot_env(env or {}, bin_dir)
        self.boot = None   # the Guest whose process serves the series, while one runs
        self.n = 0
        self.boots = 0

    @property
    def console_path(self):
        return self.boot.console_path if self.boot else os.devnull

    def guest(self, scenario, env):
        if env.get("INITIATOR_NAME", GUEST_IQN) != self.env["INITIATOR_NAME"]:
            raise ValueError("a series' scenarios share the boot's initiator name")
        if self.boot is None or self.boot.proc.poll() is not None:
            self.close()
            self.boot = Guest("series", self.env, **self.options).start()
            self.boots += 1
            self.n = 0
        return Guest(scenario, env, series=self)

    def next_dir(self):
        d = os.path.join(self.boot.run_dir, f"s{self.n}")
        self.n += 1
        return d

    @staticmethod
    def hand(directory, scenario, env):
        """Makes DIRECTORY with its scenario files in one step (a rename), so that the guest,
        which waits for DIRECTORY/scenario, never reads it half written."""
        os.mkdir(directory + ".tmp")
        write_scenario(directory + ".tmp", scenario, env)
        os.rename(directory + ".tmp", directory)

    def run(self, guest):
        """Hands the guest's scenario to the boot; returns the boot's process."""
        self.hand(guest.run_dir, guest.scenario, guest.env)
        return self.boot.proc

    def close(self, kill=False):
        """Powers the boot off after its last scenario; kill: at once, whatever it is doing."""
        boot, self.boot = self.boot, None
        if boot is None:
            return
        if not kill and boot.proc.poll() is None:
            try:
                self.hand(os.path.join(boot.run_dir, f"s{self.n}"), "poweroff", {})
                boot.proc.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                pass
        boot.close()


class GatewayOnKnownPorts(harness.Daemon):
    """iscsigwd on portals chosen beforehand, advertising them as the guest reaches them, so that
    it can be killed and restarted on the same addresses."""

    def __init__(self, portals=1, state=None, state_dir=None, extra_args=()):
        self.iscsi_ports = [free_port() for _ in range(portals)]
        args = []
        for p in self.iscsi_ports:
            args += ["--portal", f"127.0.0.1:{p}", "--advertise", f"{HOST_FROM_GUEST}:{p}"]
        super().__init__(state=state, state_dir=state_dir, extra_args=tuple(args) + tuple(extra_args))
        # The base class listens on an extra 127.0.0.1:0 portal; this gateway has only its own.
        i = self.args.index("--portal")
        del self.args[i:i + 2]

    def guest_portals(self):
        return [f"{HOST_FROM_GUEST}:{p}" for p in self.iscsi_ports]


def file_lun(path, size, lun_id=0, block_size=512, **extra):
    """A file-backed LUN for the bootstrap state (protobuf JSON of iscsigw.v1.Lun)."""
    return dict({"id": lun_id, "file": {"path": path, "create": True}, "sizeBytes": str(size),
                 "blockSize": block_size}, **extra)


class InteropTestCase(unittest.TestCase):
    """A gateway per test (start_gateway) with its LUN files in a temporary directory; guest()
    runs a scenario, on one boot for all of the class's tests when SERIES is set."""
    SERIES = False

    @classmethod
    def setUpClass(cls):
        cls.series = GuestSeries() if cls.SERIES else None

    @classmethod
    def tearDownClass(cls):
        if cls.series is not None:
            boots = cls.series.boots
            cls.series.close()
            print(f"{cls.__name__}: its scenarios ran on {boots} boot(s) of the guest",
                  file=sys.stderr)

    def guest(self, scenario, env, **kw):
        if self.series is not None and not kw:
            return self.series.guest(scenario, env)
        return Guest(scenario, env, **kw)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="iscsigw-interop-luns-")
        self.gateway = None

    def tearDown(self):
        if self.gateway is not None:
            self.gateway.cleanup()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start_gateway(self, luns, portals=1, allow_any=False, initiators=(GUEST_IQN,), **kw):
        state = {"targets": [{"name": TARGET, "allowAnyInitiator": allow_any,
                              "initiators": list(initiators), "luns": luns}]}
        self.gateway = GatewayOnKnownPorts(portals=portals, state=state, **kw).start()
        return self.gateway

    def secret(self, name, value):
        """A secret file for iscsigwctl --secret-file."""
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(value)
        return path
