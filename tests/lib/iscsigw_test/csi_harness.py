"""Runs build/bin/iscsigw-csi for the CSI tests.

The plugin binds its endpoint (tcp://127.0.0.1:0 unless told otherwise) and prints
"iscsigw-csi: listening on ENDPOINT" on stdout once it serves; start() polls its output file for
that line with a deadline and returns the gRPC target to dial.
"""
import os
import re
import shutil
import tempfile

from .harness import LoggedProcess, binary, wait_for

_LISTENING = re.compile(r"^iscsigw-csi: listening on (\S+)$", re.M)


class CsiPlugin(LoggedProcess):
    """One iscsigw-csi process; its stdout and stderr go to one file in its own directory."""

    name = "iscsigw-csi"

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
        self.endpoint = None

    def start(self, timeout=15.0):
        self.spawn()

        def listening():
            m = _LISTENING.search(self.read_log())
            if m:
                return m.group(1)
            self.exited()
            return None

        self.endpoint = wait_for(listening, timeout, what="iscsigw-csi's listening line")
        return self

    @property
    def target(self):
        """The endpoint as a grpc target: HOST:PORT or unix:///path."""
        if self.endpoint.startswith("tcp://"):
            return self.endpoint[len("tcp://"):]
        return self.endpoint

    def cleanup(self):
        if self.proc is not None:
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
