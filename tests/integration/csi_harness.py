"""Runs build/bin/iscsigw-csi for the CSI tests.

The plugin binds its endpoint (tcp://127.0.0.1:0 unless told otherwise) and prints
"iscsigw-csi: listening on ENDPOINT" on stdout once it serves; start() polls its output file for
that line with a deadline and returns the gRPC target to dial.
"""
import os
import re
import shutil
import signal
import subprocess
import tempfile

from harness import binary, wait_for

_LISTENING = re.compile(r"^iscsigw-csi: listening on (\S+)$", re.M)


class CsiPlugin:
    """One iscsigw-csi process; its stdout and stderr go to one file in its own directory."""

    def __init__(self, mode="controller", gateway=None, endpoint="tcp://127.0.0.1:0",
                 extra_args=(), env=None):
        self.dir = tempfile.mkdtemp(prefix="iscsigw-csi-test-")
        self.log_path = os.path.join(self.dir, "iscsigw-csi.log")
        self.args = [binary("iscsigw-csi"), "--endpoint", endpoint,
                     "--state-dir", os.path.join(self.dir, "state"), "--log-level", "debug"]
        if mode:  # None: left to ISCSIGW_CSI_MODE or the default
            self.args += ["--mode", mode]
        if gateway:
            self.args += ["--gateway", gateway]
        self.args += list(extra_args)
        self.env = dict(os.environ, **(env or {}))
        self.proc = None
        self.endpoint = None

    def start(self, timeout=15.0):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=self.env)

        def listening():
            m = _LISTENING.search(self.read_log())
            if m:
                return m.group(1)
            if self.proc.poll() is not None:
                raise RuntimeError(f"iscsigw-csi exited with {self.proc.returncode}:\n"
                                   f"{self.read_log()}")
            return None

        self.endpoint = wait_for(listening, timeout, what="iscsigw-csi's listening line")
        return self

    @property
    def target(self):
        """The endpoint as a grpc target: HOST:PORT or unix:///path."""
        if self.endpoint.startswith("tcp://"):
            return self.endpoint[len("tcp://"):]
        return self.endpoint

    def read_log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self, sig=signal.SIGTERM, timeout=20.0):
        """Signals the plugin and returns its exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"iscsigw-csi did not stop within {timeout}s after {sig}")
        finally:
            self.log.close()
            self.proc = None

    def cleanup(self):
        if self.proc is not None:
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
