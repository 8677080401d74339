"""h. Failover between two gateways on one rbd image (scenarios/failover.sh), with the Linux kernel
initiator and dm-multipath by ALUA: fio verify on the map while the host kills the gateway of the
optimized path with -9 and later starts it again on the same portal and state. The scenario
reports the verified writes across the failover and the longest write fio saw (the I/O pause);
the test prints both and bounds the pause. First, a reservation taken with sg_persist through
one gateway's path must fence writes through the other's."""
import signal
import sys
import time
import unittest

from iscsigw_test.ceph_cluster import TestCluster

import guest as g

LUN_BYTES = 256 << 20
CLUSTER = TestCluster()
# What the pause may take: the dead connection noticed (NOP-Out every 2 s, 5 s timeout, or at once
# when the kill resets it), fast_io_fail_tmo 5 s, the surviving gateway's 2 s of waiting writes
# and 2 s probe of the dead holder, and the guest's TCG emulation on top.
PAUSE_BOUND = 30.0


def setUpModule():
    CLUSTER.start(prefix="iscsigw-interop-failover-")


def tearDownModule():
    CLUSTER.stop()


class RbdFailoverTest(unittest.TestCase):
    def setUp(self):
        self.gateways = []

    def tearDown(self):
        for gw in self.gateways:
            gw.cleanup()

    def start(self, gateway_id):
        state = {"targets": [{"name": g.TARGET, "initiators": [g.GUEST_IQN], "luns": [
            {"id": 0, "blockSize": 512,
             "rbd": {"pool": "rbd", "image": "failover", "conf": CLUSTER.conf}}]}]}
        gw = g.GatewayOnKnownPorts(state=state, extra_args=["--gateway-id", str(gateway_id)])
        return gw.start(timeout=60)

    def test_fio_verify_rides_out_the_optimized_gateway_killed(self):
        CLUSTER.rbd("create", "rbd/failover", "--size", f"{LUN_BYTES >> 20}M")
        self.gateways = [self.start(1), self.start(2)]
        portals = [gw.guest_portals()[0] for gw in self.gateways]
        env = dict(PORTALS=" ".join(portals), TARGET=g.TARGET, LUN_BYTES=LUN_BYTES)
        with g.Guest("failover", env) as vm:
            go = vm.step("io-running", timeout=900)
            with open(vm._path("owner")) as f:
                owner = portals.index(f.read().strip())
            victim = self.gateways[owner]
            killed = time.monotonic()
            victim.stop(sig=signal.SIGKILL)
            go(f"killed gateway {owner + 1}\n")
            go = vm.step("restart", timeout=900)
            victim.start(timeout=60)  # the same portal, state and gateway id
            go(f"gateway {owner + 1} started again {time.monotonic() - killed:.0f} s after the "
               f"kill\n")
            took = vm.wait(timeout=900)
            with open(vm._path("result.failover")) as f:
                writes, pause = f.read().split()
        survivor = self.gateways[1 - owner].read_log()
        self.assertIn("broke the exclusive lock", survivor)
        print(f"failover scenario: {took:.0f} s; gateway {owner + 1} killed; {writes} verified "
              f"writes across the failover; longest write {pause} s", file=sys.stderr)
        self.assertGreater(int(writes), 0)
        self.assertLess(float(pause), PAUSE_BOUND)


if __name__ == "__main__":
    unittest.main()
