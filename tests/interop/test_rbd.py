"""The Linux kernel initiator on rbd LUNs: the filesystems scenario (the kernel's block limits
against the LUN's VPD pages, ext4 on a 512-byte-block LUN and xfs on a 4096-byte-block LUN, each
carrying an fio crc32c verify and checking clean) with both LUNs on RBD images of a throwaway
cluster (iscsigw_test.ceph_cluster); afterwards the data the guest wrote is on the images, read
with `rbd export` apart from any gateway."""
import unittest

from iscsigw_test.ceph_cluster import TestCluster

import guest as g

MIB = 1 << 20
CLUSTER = TestCluster()


def setUpModule():
    CLUSTER.start(prefix="iscsigw-interop-rbd-")


def tearDownModule():
    CLUSTER.stop()


def rbd_lun(image, size, lun_id, block_size):
    return {"id": lun_id, "rbd": {"pool": "rbd", "image": image, "conf": CLUSTER.conf,
                                  "create": True},
            "sizeBytes": str(size), "blockSize": block_size}


class RbdKernelInitiatorTest(g.InteropTestCase):
    def test_ext4_and_xfs_verify_and_block_limits_on_rbd(self):
        gw = self.start_gateway([rbd_lun("kernel-ext4", 512 * MIB, 0, 512),
                                 rbd_lun("kernel-xfs", 512 * MIB, 1, 4096)])
        env = {"PORTAL": gw.guest_portals()[0], "TARGET": g.TARGET, "FIO_SIZE": "48M"}
        with g.Guest("filesystems", env) as vm:
            vm.wait(timeout=900)
        gw.stop()
        # What the guest's file systems wrote is in the images themselves: their superblocks.
        ext4 = CLUSTER.export("kernel-ext4")
        self.assertEqual(ext4[1024 + 56:1024 + 58], b"\x53\xef", "no ext4 superblock on the image")
        xfs = CLUSTER.export("kernel-xfs")
        self.assertEqual(xfs[:4], b"XFSB", "no xfs superblock on the image")


if __name__ == "__main__":
    unittest.main()
