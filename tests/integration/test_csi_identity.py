"""iscsigw-csi's Identity service against a real gateway: plugin name and version,
capabilities per mode, and Probe's readiness, through stubs generated from proto/csi/v1.

Also the endpoint rules every CSI deployment relies on: a stale unix socket is replaced, a live
one is refused, and SIGTERM stops the plugin cleanly and removes its socket.
"""
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

import grpc

from iscsigw_test.build_info import project_version
from iscsigw_test.csi_harness import CsiPlugin
from iscsigw_test.csi_stubs import csi_grpc, csi_pb2, gateway_grpc, gateway_pb2
from iscsigw_test.harness import Daemon, binary, simple_state

PLUGIN_NAME = "iscsi.iscsigw.io"
Service = csi_pb2.PluginCapability.Service
Expansion = csi_pb2.PluginCapability.VolumeExpansion


def capabilities(channel):
    """The plugin's capabilities as a set of ("service", type) / ("expansion", type) pairs."""
    resp = csi_grpc.IdentityStub(channel).GetPluginCapabilities(
        csi_pb2.GetPluginCapabilitiesRequest(), timeout=10)
    out = set()
    for c in resp.capabilities:
        kind = c.WhichOneof("type")
        out.add(("service", c.service.type) if kind == "service"
                else ("expansion", c.volume_expansion.type))
    return out


def closed_port():
    """A loopback port nothing listens on (bound, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class ControllerWithGateway(unittest.TestCase):
    """--mode controller on tcp port 0, its --gateway a running iscsigwd."""

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(state=simple_state()).start()
        cls.plugin = CsiPlugin(mode="controller", gateway=cls.daemon.grpc).start()
        cls.channel = grpc.insecure_channel(cls.plugin.target)
        cls.identity = csi_grpc.IdentityStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        rc = cls.plugin.stop()
        log = cls.plugin.read_log()
        cls.plugin.cleanup()
        cls.daemon.cleanup()
        if rc != 0:
            raise AssertionError(f"iscsigw-csi exited {rc} at SIGTERM:\n{log[-4000:]}")

    def test_the_endpoint_line_names_the_bound_port(self):
        self.assertRegex(self.plugin.endpoint, r"^tcp://127\.0\.0\.1:[1-9][0-9]*$")

    def test_plugin_info_is_the_driver_name_and_the_build_version(self):
        info = self.identity.GetPluginInfo(csi_pb2.GetPluginInfoRequest(), timeout=10)
        self.assertEqual(info.name, PLUGIN_NAME)
        self.assertEqual(info.vendor_version, project_version())
        with grpc.insecure_channel(self.daemon.grpc) as ch:
            gw = gateway_grpc.GatewayServiceStub(ch).GetGatewayInfo(
                gateway_pb2.GetGatewayInfoRequest(), timeout=10)
        self.assertEqual(info.vendor_version, gw.version)

    def test_capabilities_are_controller_and_online_expansion(self):
        self.assertEqual(capabilities(self.channel),
                         {("service", Service.CONTROLLER_SERVICE),
                          ("expansion", Expansion.ONLINE)})

    def test_probe_is_ready_when_the_gateway_answers(self):
        resp = self.identity.Probe(csi_pb2.ProbeRequest(), timeout=10)
        self.assertTrue(resp.HasField("ready"))
        self.assertTrue(resp.ready.value)

    def test_controller_is_served_and_node_is_not(self):
        # The controller answers (test_csi_controller.py covers what it does).
        with self.assertRaises(grpc.RpcError) as err:
            csi_grpc.ControllerStub(self.channel).CreateVolume(
                csi_pb2.CreateVolumeRequest(name="pvc-1"), timeout=10)
        self.assertEqual(err.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        # A controller-only plugin has no Node service at all.
        with self.assertRaises(grpc.RpcError) as err:
            csi_grpc.NodeStub(self.channel).NodeGetInfo(csi_pb2.NodeGetInfoRequest(), timeout=10)
        self.assertEqual(err.exception.code(), grpc.StatusCode.UNIMPLEMENTED)


class ControllerWithoutGateway(unittest.TestCase):
    """--gateway names a closed port: the plugin serves, but is not ready."""

    def setUp(self):
        self.port = closed_port()
        self.plugin = CsiPlugin(mode="controller", gateway=f"127.0.0.1:{self.port}").start()
        self.addCleanup(self.plugin.cleanup)

    def test_probe_is_not_ready_and_says_why(self):
        with grpc.insecure_channel(self.plugin.target) as ch:
            identity = csi_grpc.IdentityStub(ch)
            resp = identity.Probe(csi_pb2.ProbeRequest(), timeout=10)
            self.assertTrue(resp.HasField("ready"))  # false, not unset (unset reads as ready)
            self.assertFalse(resp.ready.value)
            # Identity itself still answers.
            info = identity.GetPluginInfo(csi_pb2.GetPluginInfoRequest(), timeout=10)
            self.assertEqual(info.name, PLUGIN_NAME)
        log = self.plugin.read_log()
        self.assertRegex(log, rf"probe: not ready: gateway 127\.0\.0\.1:{self.port}: "
                              r"GetGatewayInfo: UNAVAILABLE")
        self.assertEqual(self.plugin.stop(), 0)

class ControllerWithSilentGateway(unittest.TestCase):
    """--gateway accepts TCP connections but never answers: the check runs into its deadline."""

    def setUp(self):
        self.silent = socket.socket()
        self.silent.bind(("127.0.0.1", 0))
        self.silent.listen(8)  # never accepted: the kernel completes the handshake, nobody talks
        self.addCleanup(self.silent.close)
        gateway = "127.0.0.1:%d" % self.silent.getsockname()[1]
        self.plugin = CsiPlugin(mode="controller", gateway=gateway).start()
        self.addCleanup(self.plugin.cleanup)

    def test_probe_answers_not_ready_within_the_callers_deadline(self):
        with grpc.insecure_channel(self.plugin.target) as ch:
            start = time.monotonic()
            # The caller's 3 s come before the plugin's own 3 s probe timeout: it must answer a
            # fifth of the caller's time (600 ms) before the caller's deadline, or the call ends
            # in DEADLINE_EXCEEDED here.
            resp = csi_grpc.IdentityStub(ch).Probe(csi_pb2.ProbeRequest(), timeout=3)
            took = time.monotonic() - start
        self.assertTrue(resp.HasField("ready"))
        self.assertFalse(resp.ready.value)
        self.assertLess(took, 3)
        self.assertIn("DEADLINE_EXCEEDED", self.plugin.read_log())
        self.assertEqual(self.plugin.stop(), 0)


class NodeOnUnixSocket(unittest.TestCase):
    """--mode node (from ISCSIGW_CSI_MODE) on a unix socket, as kubelet runs it."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="iscsigw-csi-sock-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        self.path = os.path.join(self.dir, "csi.sock")

    def start(self):
        plugin = CsiPlugin(mode=None, endpoint=f"unix://{self.path}",
                           env={"ISCSIGW_CSI_MODE": "node"})
        self.addCleanup(plugin.cleanup)
        return plugin.start()

    def test_replaces_a_stale_socket_serves_and_removes_it_at_exit(self):
        stale = socket.socket(socket.AF_UNIX)
        stale.bind(self.path)  # bound and closed, never unlinked: a killed plugin's leftover
        stale.close()
        plugin = self.start()
        self.assertEqual(plugin.endpoint, f"unix://{self.path}")
        with grpc.insecure_channel(f"unix://{self.path}") as ch:
            info = csi_grpc.IdentityStub(ch).GetPluginInfo(csi_pb2.GetPluginInfoRequest(),
                                                           timeout=10)
            self.assertEqual(info.name, PLUGIN_NAME)
            self.assertEqual(capabilities(ch), {("expansion", Expansion.ONLINE)})
            # Ready exactly when the host's iscsiadm runs (the node's readiness check).
            resp = csi_grpc.IdentityStub(ch).Probe(csi_pb2.ProbeRequest(), timeout=10)
            self.assertEqual(resp.ready.value, shutil.which("iscsiadm") is not None)
        self.assertEqual(plugin.stop(), 0)
        self.assertFalse(os.path.exists(self.path))

    def test_refuses_a_socket_another_plugin_serves(self):
        first = self.start()
        p = subprocess.run([binary("iscsigw-csi"), "--mode", "node", "--endpoint",
                            f"unix://{self.path}"], capture_output=True, text=True, timeout=30)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("another process is listening", p.stderr)
        # The first one still serves on its socket.
        with grpc.insecure_channel(f"unix://{self.path}") as ch:
            info = csi_grpc.IdentityStub(ch).GetPluginInfo(csi_pb2.GetPluginInfoRequest(),
                                                           timeout=10)
        self.assertEqual(info.name, PLUGIN_NAME)
        self.assertEqual(first.stop(), 0)

    def test_refuses_a_bad_endpoint(self):
        p = subprocess.run([binary("iscsigw-csi"), "--endpoint", "csi.sock"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--endpoint csi.sock", p.stderr)

    def test_refuses_a_node_address_that_is_not_numeric(self):
        for args, says in ((["--node-address", "node-a.local"], "--node-address node-a.local"),
                           (["--node-address", "10.0.0.5,10.0.0.0/8"], "--node-address 10.0.0.0/8"),
                           (["--node-id", "iqn.x@10.0.0.5"], "--node-id iqn.x@10.0.0.5")):
            p = subprocess.run([binary("iscsigw-csi"), "--mode", "node", "--endpoint",
                                f"unix://{self.path}"] + args,
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 2, args)
            self.assertIn(says, p.stderr)
            self.assertFalse(os.path.exists(self.path))


if __name__ == "__main__":
    unittest.main()
