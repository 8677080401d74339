"""b, c, d. File systems on the Linux kernel initiator: the block limits the kernel applies match
the LUN's VPD pages, ext4 and xfs carry an fio verify and check clean; fstrim gives space back
through UNMAP; an online resize reaches the mounted file system."""
import os
import unittest

import guest as g

MIB = 1 << 20


class FileSystemsTest(g.InteropTestCase):
    SERIES = True  # its scenarios share one boot of the guest

    def env(self, gw, **kw):
        return dict(kw, PORTAL=gw.guest_portals()[0], TARGET=g.TARGET)

    def test_b_ext4_and_xfs_verify_and_block_limits(self):
        gw = self.start_gateway([g.file_lun(os.path.join(self.tmp, "b0.img"), 512 * MIB),
                                 g.file_lun(os.path.join(self.tmp, "b1.img"), 512 * MIB, lun_id=1,
                                            block_size=4096)])
        with self.guest("filesystems", self.env(gw, FIO_SIZE="48M")) as vm:
            vm.wait(timeout=900)

    def allocated(self, gw):
        return gw.metric("iscsigw_store_allocated_bytes", {"target": g.TARGET, "lun": "0"})

    def test_c_fstrim_unmaps(self):
        gw = self.start_gateway([g.file_lun(os.path.join(self.tmp, "c.img"), 512 * MIB)])
        with self.guest("discard", self.env(gw)) as vm:
            vm.step("written")()
            written = self.allocated(gw)
            vm.step("trimmed")()
            trimmed = self.allocated(gw)
            vm.wait()
        # 96 MiB were written then deleted: fstrim must hand at least most of it back.
        self.assertGreater(written - trimmed, 80 * MIB,
                           f"allocated {written} bytes before fstrim, {trimmed} after")

    def test_d_online_resize(self):
        old, new = 256 * MIB, 768 * MIB
        gw = self.start_gateway([g.file_lun(os.path.join(self.tmp, "d.img"), old)])
        with self.guest("resize", self.env(gw, OLD_BYTES=old, NEW_BYTES=new)) as vm:
            go = vm.step("grow")
            gw.ctl("lun", "resize", g.TARGET, "0", str(new))
            go()
            vm.wait()
        self.assertEqual(os.path.getsize(os.path.join(self.tmp, "d.img")), new)


if __name__ == "__main__":
    unittest.main()
