"""csi.v1.Node against the Linux kernel initiator: iscsigw-csi --mode node runs INSIDE the guest
(build/bin shared over 9p, --host-exec direct, so iscsiadm, mkfs and mount are the guest's) and
the host calls it over a QEMU user-net port forward, while iscsigwd and iscsigw-csi --mode
controller run on the host.

A file-system volume with mutual CHAP and a raw block volume go through the whole lifecycle:
CreateVolume, ControllerPublish, NodeStage, NodePublish, data written and read back in the guest,
ControllerExpand + NodeExpand (NodeGetVolumeStats shows the new size), NodeUnpublish, NodeUnstage,
ControllerUnpublish, DeleteVolume. Every node step is made twice (CSI idempotency), the file
system is staged a second time to show that its data survives and that mkfs does not run again,
and the node plugin is restarted between publish and expand of the block volume (its records
carry the volume over).

A second test restarts the node plugin between NodeStageVolume and NodeUnstageVolume, twice. In
the guest the plugin is a plain process and its --state-dir a directory of the guest's own file
system, never inside a container, so each case shows only this:
- records kept: a new plugin process given the same --state-dir unstages from the record the
  previous process wrote (the log has no "no record on this node"), so the records are all a
  restart needs. That the chart puts that directory on a hostPath which outlives a container
  restart or a DaemonSet upgrade is not shown here but by tests/packaging/check_csi_state_dir.py
  (on the rendered chart).
- records gone (the volumes directory removed while the plugin is stopped): the unstage is worked
  out from what open-iscsi lists of the target the volume id names, and leaves another volume's
  session to the same gateway alone.
Either way no session, node record (nor its CHAP secret) or mount of the volume is left in the
guest, and the gateway has no session of it.

Every controller step is made twice as well, through the CSI Controller. The gateway's LUN
directory is a loop-mounted XFS with reflink, so that the snapshot and the clone of the staged
file-system volume, taken after data was written and synced, are points in time; the file is then
overwritten, and a volume restored from the snapshot and the clone, each staged in the guest,
must hold the data as it was when each was taken.
"""
import hashlib
import hmac
import os
import sys
import time
import unittest
import uuid

import grpc

from iscsigw_test.csi_harness import CsiPlugin
from iscsigw_test.csi_stubs import csi_grpc, csi_pb2
from iscsigw_test.harness import BUILD, loop_xfs

import guest as g

CSI_PORT = 10000  # the node plugin's port inside the guest
# The guest's address as the gateway sees its logins: QEMU's user network connects from the
# host's loopback.
NODE_ADDRESS = "127.0.0.1"
PLUGIN = "/opt/iscsigw/bin/iscsigw-csi"
Cap = csi_pb2.VolumeCapability
MiB = 1 << 20


def mount_cap(fs_type="ext4"):
    return Cap(mount=Cap.MountVolume(fs_type=fs_type),
               access_mode=Cap.AccessMode(mode=Cap.AccessMode.SINGLE_NODE_WRITER))


def block_cap():
    return Cap(block=Cap.BlockVolume(),
               access_mode=Cap.AccessMode(mode=Cap.AccessMode.SINGLE_NODE_WRITER))


class ControllerVolumes:
    """Volumes through csi.v1.Controller (iscsigw-csi --mode controller on the host). Every call
    is made twice and must give the same answer: CSI calls are retried, so each is idempotent."""

    def __init__(self, stub, lun_dir):
        self.stub = stub
        self.lun_dir = lun_dir

    def twice(self, method, request):
        first = getattr(self.stub, method)(request, timeout=60)
        again = getattr(self.stub, method)(request, timeout=60)
        if method not in ("CreateSnapshot",):  # creation_time is the first call's either way
            assert first == again, f"{method} repeated: {first} != {again}"
        return again

    def create(self, name, size, source=None, params=None, secrets=None):
        resp = self.twice("CreateVolume", csi_pb2.CreateVolumeRequest(
            name=name, capacity_range=csi_pb2.CapacityRange(required_bytes=size),
            volume_capabilities=[mount_cap()], volume_content_source=source,
            parameters=params or {}, secrets=secrets or {}))
        return resp.volume.volume_id, dict(resp.volume.volume_context)

    def snapshot(self, volume_id, name):
        resp = self.twice("CreateSnapshot", csi_pb2.CreateSnapshotRequest(
            source_volume_id=volume_id, name=name))
        assert resp.snapshot.ready_to_use
        return resp.snapshot.snapshot_id

    def delete_snapshot(self, snapshot_id):
        self.twice("DeleteSnapshot", csi_pb2.DeleteSnapshotRequest(snapshot_id=snapshot_id))

    def publish(self, volume_id, node_id, cap):
        resp = self.twice("ControllerPublishVolume", csi_pb2.ControllerPublishVolumeRequest(
            volume_id=volume_id, node_id=node_id, volume_capability=cap))
        return dict(resp.publish_context)

    def expand(self, volume_id, size, cap):
        resp = self.twice("ControllerExpandVolume", csi_pb2.ControllerExpandVolumeRequest(
            volume_id=volume_id, capacity_range=csi_pb2.CapacityRange(required_bytes=size),
            volume_capability=cap))
        assert resp.capacity_bytes == size
        return resp.node_expansion_required

    def unpublish(self, volume_id, node_id):
        self.twice("ControllerUnpublishVolume", csi_pb2.ControllerUnpublishVolumeRequest(
            volume_id=volume_id, node_id=node_id))

    def delete(self, volume_id):
        self.twice("DeleteVolume", csi_pb2.DeleteVolumeRequest(volume_id=volume_id))
        assert not os.path.exists(os.path.join(self.lun_dir, volume_id + ".img"))


class CsiLifecycleTest(g.InteropTestCase):
    def setUp(self):
        super().setUp()
        self.controller = None
        self.vm = None

    def tearDown(self):
        if self.controller is not None:
            self.controller.cleanup()
        if self.vm is not None:
            self.vm.close()
        super().tearDown()

    # ---- the node plugin in the guest

    def start_node_plugin(self):
        # The log is kept across restarts; only lines after `n` belong to this start.
        self.vm.check(
            "touch /tmp/csi.log; n=$(wc -l </tmp/csi.log)\n"
            f"{PLUGIN} --mode node --endpoint tcp://0.0.0.0:{CSI_PORT} --host-exec direct "
            f"--node-address {NODE_ADDRESS} --state-dir /var/lib/iscsigw-csi --log-level debug >>/tmp/csi.log 2>&1 &\n"
            "echo $! >/tmp/csi.pid\n"
            "i=0; until tail -n +$((n + 1)) /tmp/csi.log | grep -q 'listening on tcp://'; do\n"
            "  i=$((i + 1)); [ $i -le 600 ] || { cat /tmp/csi.log; exit 1; }; sleep 0.1; done")
        channel = grpc.insecure_channel(f"127.0.0.1:{self.vm.forwards[CSI_PORT]}")
        grpc.channel_ready_future(channel).result(timeout=60)
        self.node = csi_grpc.NodeStub(channel)

    def stop_node_plugin(self):
        self.vm.check("pid=$(cat /tmp/csi.pid); kill $pid\n"
                      "while kill -0 $pid 2>/dev/null; do sleep 0.1; done")

    def guest_sessions(self, iqn):
        """The portals (HOST:PORT, without the portal group) the guest has a session to IQN at,
        and those it has a node record of."""
        def portals(mode, iqn_field, portal_field):
            return self.vm.check(
                f"iscsiadm -m {mode} 2>/dev/null | awk '${iqn_field} == \"{iqn}\" "
                f"{{ sub(/,.*/, \"\", ${portal_field}); print ${portal_field} }}' || true").split()
        # "tcp: [1] 10.0.2.2:3260,1 IQN (non-flash)"; "10.0.2.2:3260,-1 IQN"
        return portals("session", 4, 3), portals("node", 2, 1)

    def node_call(self, method, request, times=2, timeout=240):
        """Calls Node.METHOD TIMES times (the repeats prove idempotency); returns the last
        answer, and how long the first call took."""
        took = None
        for i in range(times):
            t0 = time.monotonic()
            try:
                resp = getattr(self.node, method)(request, timeout=timeout)
            except grpc.RpcError as e:
                raise AssertionError(self.vm.report(
                    f"{method} (call {i + 1}): {e.code()}: {e.details()}\n--- node plugin log "
                    f"---\n{self.guest_log()[-6000:]}")) from None
            if took is None:
                took = time.monotonic() - t0
        self.timings.append((method, took))
        return resp

    def guest_log(self):
        rc, out = self.vm.shell("cat /tmp/csi.log")
        return out

    def stats(self, volume_id, path):
        resp = self.node.NodeGetVolumeStats(
            csi_pb2.NodeGetVolumeStatsRequest(volume_id=volume_id, volume_path=path), timeout=60)
        return {u.unit: u for u in resp.usage}

    # ---- the test

    def test_lifecycle_through_the_node_plugin_in_the_guest(self):
        self.timings = []
        # The snapshot and the clone are taken while the volume is in use: only a LUN directory
        # that shares blocks (FICLONE) gives them a point in time, as the gateway insists.
        xfs = loop_xfs(self, 2 << 30)
        self.assertIsNotNone(xfs, "needs a loop device and mkfs.xfs (scripts/install-deps.sh)")
        lun_dir = os.path.join(xfs, "luns")
        self.gateway = g.GatewayOnKnownPorts(extra_args=("--lun-dir", lun_dir)).start()
        gw = self.gateway
        self.controller = CsiPlugin(mode="controller", gateway=gw.grpc).start()
        volumes = ControllerVolumes(
            csi_grpc.ControllerStub(grpc.insecure_channel(self.controller.target)), lun_dir)

        started = time.monotonic()
        self.vm = g.Guest("shell", {}, bin_dir=os.path.join(BUILD, "bin"), forward=(CSI_PORT,))
        self.vm.start()
        missing = self.vm.check(f"ldd {PLUGIN} | grep 'not found' || true")
        self.assertEqual(missing.strip(), "", "libraries iscsigw-csi lacks in the guest")
        self.start_node_plugin()
        print(f"csi lifecycle: guest up, node plugin serving after "
              f"{time.monotonic() - started:.0f} s", file=sys.stderr)

        info = self.node.NodeGetInfo(csi_pb2.NodeGetInfoRequest(), timeout=60)
        # The guest's /etc/iscsi/initiatorname.iscsi, and --node-address: every publish below
        # admits the guest's name from that address only.
        self.assertEqual(info.node_id, g.GUEST_IQN + "@" + NODE_ADDRESS)
        caps = self.node.NodeGetCapabilities(csi_pb2.NodeGetCapabilitiesRequest(), timeout=10)
        R = csi_pb2.NodeServiceCapability.RPC
        self.assertEqual({c.rpc.type for c in caps.capabilities},
                         {R.STAGE_UNSTAGE_VOLUME, R.EXPAND_VOLUME, R.GET_VOLUME_STATS})

        self.file_system_volume(volumes, info.node_id)
        self.block_volume(volumes, info.node_id)

        # Nothing left on either side.
        self.assertEqual(gw.ctl_json("session", "list").get("sessions", []), [])
        # iscsiadm 21: no sessions.
        self.assertEqual(self.vm.check("iscsiadm -m session >/dev/null 2>&1 || echo $?").strip(),
                         "21")
        self.assertEqual(self.vm.check("ls /var/lib/iscsigw-csi/volumes").strip(), "")
        took = self.vm.end_shell()
        print("csi lifecycle: " + ", ".join(f"{m} {t:.1f} s" for m, t in self.timings) +
              f"; guest {took:.0f} s", file=sys.stderr)

    def file_system_volume(self, volumes, node_id):
        name = "pvc-" + uuid.uuid4().hex[:12]
        size, grown = 256 * MiB, 512 * MiB
        volume_id, context = volumes.create(name, size)
        iqn = context["targetIqn"]
        user, secret = "node-user", "initiator-secret-" + uuid.uuid4().hex[:8]
        muser, msecret = "gw-user", "target-secret-" + uuid.uuid4().hex[:8]
        self.gateway.ctl("auth", "set", iqn, "--user", user,
                         "--secret-file", self.secret("chap", secret), "--mutual-user", muser,
                         "--mutual-secret-file", self.secret("mutual", msecret))
        secrets = {"node.session.auth.username": user, "node.session.auth.password": secret,
                   "node.session.auth.username_in": muser,
                   "node.session.auth.password_in": msecret}
        cap = mount_cap("ext4")
        publish_context = volumes.publish(volume_id, node_id, cap)
        staging = f"/var/lib/kubelet/plugins/staging/{name}"
        target = f"/var/lib/kubelet/pods/uid-1/volumes/{name}"
        stage = csi_pb2.NodeStageVolumeRequest(
            volume_id=volume_id, publish_context=publish_context, staging_target_path=staging,
            volume_capability=cap, secrets=secrets, volume_context=context)
        publish = csi_pb2.NodePublishVolumeRequest(
            volume_id=volume_id, publish_context=publish_context, staging_target_path=staging,
            target_path=target, volume_capability=cap, volume_context=context)
        self.vm.check(f"mkdir -p {staging}")
        self.node_call("NodeStageVolume", stage)
        self.assertEqual(self.vm.check(f"findmnt -n -o FSTYPE --mountpoint {staging}").strip(),
                         "ext4")
        sessions = self.gateway.ctl_json("session", "list").get("sessions", [])
        self.assertEqual([(s["target"], s["initiator_name"]) for s in sessions],
                         [(iqn, g.GUEST_IQN)])
        acl = self.gateway.ctl_json("acl", "list", iqn).get("entries", [])
        self.assertEqual([(e["initiator"], e.get("sources")) for e in acl],
                         [(g.GUEST_IQN, [NODE_ADDRESS])])
        self.node_call("NodePublishVolume", publish)
        data = self.vm.check(
            f"dd if=/dev/urandom of={target}/data bs=1M count=16 status=none; sync; "
            f"sha256sum {target}/data | cut -d' ' -f1").strip()
        before = self.stats(volume_id, target)
        self.assertLess(before[csi_pb2.VolumeUsage.BYTES].total, size)
        self.assertGreater(before[csi_pb2.VolumeUsage.BYTES].used, 16 * MiB)
        self.assertGreater(before[csi_pb2.VolumeUsage.INODES].total, 0)

        if volumes.expand(volume_id, grown, cap):
            resp = self.node_call("NodeExpandVolume", csi_pb2.NodeExpandVolumeRequest(
                volume_id=volume_id, volume_path=target, staging_target_path=staging,
                volume_capability=cap, capacity_range=csi_pb2.CapacityRange(required_bytes=grown)))
            self.assertEqual(resp.capacity_bytes, grown)
        after = self.stats(volume_id, target)
        self.assertGreater(after[csi_pb2.VolumeUsage.BYTES].total,
                           before[csi_pb2.VolumeUsage.BYTES].total * 3 // 2)
        # Read past the page cache (O_DIRECT): the blocks as the grown LUN holds them.
        self.assertEqual(self.vm.check(
            f"dd if={target}/data bs=1M iflag=direct status=none | sha256sum | cut -d' ' -f1"
        ).strip(), data)

        # A snapshot and a clone keep the data as it was; the volume then moves on.
        self.vm.check(f"sync -f {target}/data")
        snapshot_id = volumes.snapshot(volume_id, name + "-snap")
        clone_id, clone_context = volumes.create(
            name + "-clone", grown, csi_pb2.VolumeContentSource(
                volume=csi_pb2.VolumeContentSource.VolumeSource(volume_id=volume_id)))
        self.vm.check(f"dd if=/dev/urandom of={target}/data bs=1M count=16 status=none "
                      f"conv=notrunc; sync -f {target}/data")
        restored_id, restored_context = volumes.create(
            name + "-restored", grown, csi_pb2.VolumeContentSource(
                snapshot=csi_pb2.VolumeContentSource.SnapshotSource(snapshot_id=snapshot_id)))
        for copy_id, copy_context in [(clone_id, clone_context),
                                      (restored_id, restored_context)]:
            self.assertEqual(self.copy_checksum(volumes, node_id, copy_id, copy_context, cap,
                                                secrets), data, copy_id)
        volumes.delete_snapshot(snapshot_id)
        now = self.vm.check(f"sha256sum {target}/data | cut -d' ' -f1").strip()
        self.assertNotEqual(now, data)
        data = now

        # No secret in the node plugin's log, at debug level, after a CHAP stage.
        log = self.guest_log()
        self.assertNotIn(secret, log)
        self.assertNotIn(msecret, log)
        self.assertIn("node.session.auth.password -v <redacted>", log)

        self.node_call("NodeUnpublishVolume", csi_pb2.NodeUnpublishVolumeRequest(
            volume_id=volume_id, target_path=target))
        self.assertEqual(self.vm.check(f"test -e {target} && echo present || echo gone").strip(),
                         "gone")
        self.node_call("NodeUnstageVolume", csi_pb2.NodeUnstageVolumeRequest(
            volume_id=volume_id, staging_target_path=staging))
        self.assertEqual(self.gateway.ctl_json("session", "list").get("sessions", []), [])
        self.assertEqual(self.vm.check(f"findmnt --mountpoint {staging} || echo none").strip(),
                         "none")

        # Staged again: the file system is found, not made anew, and the data is there.
        self.node_call("NodeStageVolume", stage, times=1)
        self.node_call("NodePublishVolume", publish, times=1)
        self.assertEqual(self.vm.check(f"sha256sum {target}/data | cut -d' ' -f1").strip(), data)
        mkfs_runs = self.guest_log().count("host: mkfs.ext4")
        self.assertEqual(mkfs_runs, 1, "mkfs.ext4 ran again on a volume with a file system")
        self.node_call("NodeUnpublishVolume", csi_pb2.NodeUnpublishVolumeRequest(
            volume_id=volume_id, target_path=target), times=1)
        self.node_call("NodeUnstageVolume", csi_pb2.NodeUnstageVolumeRequest(
            volume_id=volume_id, staging_target_path=staging), times=1)
        volumes.unpublish(volume_id, node_id)
        volumes.delete(volume_id)

    def copy_checksum(self, volumes, node_id, volume_id, context, cap, secrets):
        """Stages a copy (snapshot restore or clone) on the node, read-only, and returns the
        checksum of its data file; then detaches and deletes it. A copy has no CHAP of its own
        unless the source's is set on it: the same credentials as the source, as a StorageClass
        secret would give every volume."""
        iqn = context["targetIqn"]
        self.gateway.ctl("auth", "set", iqn, "--user", secrets["node.session.auth.username"],
                         "--secret-file", self.secret("copy-chap",
                                                      secrets["node.session.auth.password"]),
                         "--mutual-user", secrets["node.session.auth.username_in"],
                         "--mutual-secret-file", self.secret(
                             "copy-mutual", secrets["node.session.auth.password_in"]))
        publish_context = volumes.publish(volume_id, node_id, cap)
        staging = f"/var/lib/kubelet/plugins/staging/{volume_id}"
        self.vm.check(f"mkdir -p {staging}")
        self.node_call("NodeStageVolume", csi_pb2.NodeStageVolumeRequest(
            volume_id=volume_id, publish_context=publish_context, staging_target_path=staging,
            volume_capability=cap, secrets=secrets, volume_context=context), times=1)
        digest = self.vm.check(f"sha256sum {staging}/data | cut -d' ' -f1").strip()
        self.node_call("NodeUnstageVolume", csi_pb2.NodeUnstageVolumeRequest(
            volume_id=volume_id, staging_target_path=staging), times=1)
        volumes.unpublish(volume_id, node_id)
        volumes.delete(volume_id)
        return digest

    def block_volume(self, volumes, node_id):
        """A raw block volume with CHAP secrets of its own (chapPerVolume): the controller and
        the node derive them from one Secret, and only the derived one reaches the guest's
        open-iscsi record."""
        name = "pvc-" + uuid.uuid4().hex[:12]
        size, grown = 64 * MiB, 128 * MiB
        master = "storage-class-secret-" + uuid.uuid4().hex[:8]
        secrets = {"node.session.auth.username": "node-user",
                   "node.session.auth.password": master}
        volume_id, context = volumes.create(name, size, params={"chapPerVolume": "true"},
                                            secrets=secrets)
        self.assertEqual(context.get("chapPerVolume"), "true")
        derived = hmac.new(master.encode(), b"iscsigw-csi chap\0" + volume_id.encode(),
                           hashlib.sha256).hexdigest()[:32]
        cap = block_cap()
        publish_context = volumes.publish(volume_id, node_id, cap)
        staging = f"/var/lib/kubelet/plugins/staging/{name}"
        target = f"/var/lib/kubelet/plugins/volumeDevices/publish/{name}/uid-2"
        self.vm.check(f"mkdir -p {staging}")
        self.node_call("NodeStageVolume", csi_pb2.NodeStageVolumeRequest(
            volume_id=volume_id, publish_context=publish_context, staging_target_path=staging,
            volume_capability=cap, volume_context=context, secrets=secrets))
        records = "grep -rl -F -e {} /etc/iscsi/nodes /var/lib/iscsi/nodes 2>/dev/null | wc -l"
        self.assertEqual(self.vm.check(records.format(master)).strip(), "0",
                         "the StorageClass secret reached the node record")
        self.assertNotEqual(self.vm.check(records.format(derived)).strip(), "0",
                            "the node record lacks the volume's own secret")
        self.node_call("NodePublishVolume", csi_pb2.NodePublishVolumeRequest(
            volume_id=volume_id, publish_context=publish_context, staging_target_path=staging,
            target_path=target, volume_capability=cap, volume_context=context))
        self.assertEqual(self.vm.check(f"test -b {target} && echo block").strip(), "block")
        data = self.vm.check(
            f"dd if=/dev/urandom of=/tmp/pattern bs=1M count=8 status=none; "
            f"dd if=/tmp/pattern of={target} bs=1M oflag=direct status=none; "
            f"dd if={target} bs=1M count=8 iflag=direct status=none | sha256sum | cut -d' ' -f1; "
            f"sha256sum /tmp/pattern | cut -d' ' -f1").split()
        self.assertEqual(data[0], data[1], "data read back from the raw block volume")
        self.assertEqual(self.stats(volume_id, target)[csi_pb2.VolumeUsage.BYTES].total, size)

        # A restarted plugin carries on from its records.
        self.stop_node_plugin()
        self.start_node_plugin()
        if volumes.expand(volume_id, grown, cap):
            resp = self.node_call("NodeExpandVolume", csi_pb2.NodeExpandVolumeRequest(
                volume_id=volume_id, volume_path=target, volume_capability=cap,
                capacity_range=csi_pb2.CapacityRange(required_bytes=grown)))
            self.assertEqual(resp.capacity_bytes, grown)
        self.assertEqual(self.stats(volume_id, target)[csi_pb2.VolumeUsage.BYTES].total, grown)
        self.assertEqual(self.vm.check(
            f"dd if={target} bs=1M count=8 iflag=direct status=none | sha256sum | cut -d' ' -f1"
        ).strip(), data[1])
        self.node_call("NodeUnpublishVolume", csi_pb2.NodeUnpublishVolumeRequest(
            volume_id=volume_id, target_path=target))
        self.assertEqual(self.vm.check(f"test -e {target} && echo present || echo gone").strip(),
                         "gone")
        self.node_call("NodeUnstageVolume", csi_pb2.NodeUnstageVolumeRequest(
            volume_id=volume_id, staging_target_path=staging))
        self.assertEqual(self.gateway.ctl_json("session", "list").get("sessions", []), [])
        volumes.unpublish(volume_id, node_id)
        volumes.delete(volume_id)

    # ---- a restart between stage and unstage

    def test_node_plugin_restart_between_stage_and_unstage(self):
        self.timings = []
        lun_dir = os.path.join(self.tmp, "luns")
        os.makedirs(lun_dir)
        self.gateway = g.GatewayOnKnownPorts(extra_args=("--lun-dir", lun_dir)).start()
        self.controller = CsiPlugin(mode="controller", gateway=self.gateway.grpc).start()
        volumes = ControllerVolumes(
            csi_grpc.ControllerStub(grpc.insecure_channel(self.controller.target)), lun_dir)
        self.vm = g.Guest("shell", {}, bin_dir=os.path.join(BUILD, "bin"), forward=(CSI_PORT,))
        self.vm.start()
        self.start_node_plugin()
        node_id = self.node.NodeGetInfo(csi_pb2.NodeGetInfoRequest(), timeout=60).node_id

        # The state directory kept across a restart of the process (the same guest directory):
        # the record the previous process wrote says what to end.
        kept = self.stage_with_chap(volumes, node_id)
        self.stop_node_plugin()
        self.start_node_plugin()
        self.unstage_and_check(volumes, node_id, kept, rebuilt=False)

        # The records gone (as for a plugin whose state was in its container): open-iscsi says
        # it, for the unstaged volume's target only.
        lost = self.stage_with_chap(volumes, node_id)
        other = self.stage_with_chap(volumes, node_id)
        self.stop_node_plugin()
        self.vm.check("rm -rf /var/lib/iscsigw-csi/volumes")
        self.start_node_plugin()
        self.unstage_and_check(volumes, node_id, lost, rebuilt=True, others=[other])
        self.unstage_and_check(volumes, node_id, other, rebuilt=True)

        self.assertEqual(self.gateway.ctl_json("session", "list").get("sessions", []), [])
        self.assertEqual(self.vm.check("iscsiadm -m session >/dev/null 2>&1 || echo $?").strip(),
                         "21")
        self.assertEqual(self.vm.check("iscsiadm -m node >/dev/null 2>&1 || echo $?").strip(),
                         "21")
        took = self.vm.end_shell()
        print("csi restart: " + ", ".join(f"{m} {t:.1f} s" for m, t in self.timings) +
              f"; guest {took:.0f} s", file=sys.stderr)

    def stage_with_chap(self, volumes, node_id):
        """A file-system volume with CHAP, created, published and staged in the guest."""
        name = "pvc-" + uuid.uuid4().hex[:12]
        volume_id, context = volumes.create(name, 64 * MiB)
        iqn = context["targetIqn"]
        secret = "initiator-secret-" + uuid.uuid4().hex[:8]
        self.gateway.ctl("auth", "set", iqn, "--user", "node-user",
                         "--secret-file", self.secret(name, secret))
        cap = mount_cap("ext4")
        publish_context = volumes.publish(volume_id, node_id, cap)
        staging = f"/var/lib/kubelet/plugins/staging/{name}"
        self.vm.check(f"mkdir -p {staging}")
        self.node_call("NodeStageVolume", csi_pb2.NodeStageVolumeRequest(
            volume_id=volume_id, publish_context=publish_context, staging_target_path=staging,
            volume_capability=cap, volume_context=context,
            secrets={"node.session.auth.username": "node-user",
                     "node.session.auth.password": secret}), times=1)
        sessions, nodes = self.guest_sessions(iqn)
        self.assertEqual(len(sessions), 1, f"sessions of {iqn}")
        self.assertEqual(nodes, sessions, f"node records of {iqn}")
        return {"id": volume_id, "iqn": iqn, "staging": staging, "secret": secret}

    def unstage_and_check(self, volumes, node_id, vol, rebuilt, others=()):
        """NodeUnstageVolume (twice) of VOL, after which the guest has no session, node record
        (nor its CHAP secret) or mount of it, and each of OTHERS still its session; then the
        volume is unpublished and deleted (which the gateway refuses while a session is left)."""
        self.node_call("NodeUnstageVolume", csi_pb2.NodeUnstageVolumeRequest(
            volume_id=vol["id"], staging_target_path=vol["staging"]))
        sessions, nodes = self.guest_sessions(vol["iqn"])
        self.assertEqual(sessions, [], f"sessions of {vol['iqn']} left in the guest")
        self.assertEqual(nodes, [], f"node records of {vol['iqn']} left in the guest")
        secrets = "grep -rl -F -e {} /etc/iscsi/nodes /var/lib/iscsi/nodes 2>/dev/null | wc -l"
        self.assertEqual(self.vm.check(secrets.format(vol["secret"])).strip(), "0",
                         "the CHAP secret is left in an open-iscsi record")
        self.assertEqual(self.vm.check(
            f"findmnt --mountpoint {vol['staging']} || echo none").strip(), "none")
        self.assertEqual(f"volume {vol['id']}: no record on this node" in self.guest_log(),
                         rebuilt, self.guest_log()[-4000:])
        for other in others:
            self.assertEqual(len(self.guest_sessions(other["iqn"])[0]), 1,
                             f"{other['iqn']}'s session, which was not unstaged")
        gateway_sessions = self.gateway.ctl_json("session", "list").get("sessions", [])
        self.assertNotIn(vol["iqn"], [s["target"] for s in gateway_sessions])
        volumes.unpublish(vol["id"], node_id)
        volumes.delete(vol["id"])


if __name__ == "__main__":
    unittest.main()
