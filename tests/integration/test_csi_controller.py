"""iscsigw-csi's Controller service against a real gateway: every Controller RPC, their repeats
(idempotency) and their error codes, and what each does on the gateway (targets, aliases, ACLs,
CHAP, files in the LUN directory, sizes), through stubs generated from proto/.

A gateway that listens on a wildcard address and advertises nothing gets no volumes (every node
would log in to itself).
Read-only publish is refused: the gateway has no read-only ACL entry.
A volume still published, or with a session, is not deleted.
The driver lists and deletes only its own snapshots, never an operator's.
A volume deleted and made again with the very same request is made again.
A snapshot or a copy the gateway refuses (a volume in use, where blocks cannot be shared) is
FAILED_PRECONDITION with the gateway's reason.
A volume's content source is part of what makes a repeat the same volume, across a restart.

Data written with the iSCSI client shows that snapshots and clones hold the data as it was. The
plugin also reaches the gateway over TLS, says UNAVAILABLE when it cannot reach it, and answers
RESOURCE_EXHAUSTED when its queue of calls is full.
"""
import hashlib
import hmac
import os
import shutil
import socket
import subprocess
import tempfile
import unittest

import grpc

from iscsigw_test.csi_harness import CsiPlugin
from iscsigw_test.csi_stubs import csi_grpc, csi_pb2, gateway_grpc, gateway_pb2, state_pb2
from iscsigw_test.harness import INITIATOR, IQN_PREFIX, Daemon, wait_for
from iscsigw_test.iscsi_client import Initiator, login_status

MiB = 1 << 20
GiB = 1 << 30
OLD = bytes((i * 7 + 3) & 0xFF for i in range(4096))
NEW = bytes((i * 11 + 5) & 0xFF for i in range(4096))
OTHER_NODE = "iqn.2026-11.io.iscsigw.test:other-node"
CHAP = {"node.session.auth.username": "csi-user",
        "node.session.auth.password": "csi-secret-0123",
        "node.session.auth.username_in": "csi-target",
        "node.session.auth.password_in": "csi-mutual-4567"}

Code = grpc.StatusCode
Mode = csi_pb2.VolumeCapability.AccessMode
Rpc = csi_pb2.ControllerServiceCapability.RPC


def cap(mode=Mode.SINGLE_NODE_WRITER, block=False):
    c = csi_pb2.VolumeCapability(access_mode=csi_pb2.VolumeCapability.AccessMode(mode=mode))
    if block:
        c.block.SetInParent()
    else:
        c.mount.fs_type = "ext4"
    return c


def create_request(name, required=16 * MiB, limit=0, params=None, secrets=None, caps=None,
                   snapshot=None, volume=None):
    req = csi_pb2.CreateVolumeRequest(name=name, parameters=params or {}, secrets=secrets or {})
    if required is not None:
        req.capacity_range.required_bytes = required
        req.capacity_range.limit_bytes = limit
    req.volume_capabilities.extend([cap()] if caps is None else caps)
    if snapshot:
        req.volume_content_source.snapshot.snapshot_id = snapshot
    if volume:
        req.volume_content_source.volume.volume_id = volume
    return req


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Base(unittest.TestCase):
    def assertCode(self, code, fn, *args, **kw):
        with self.assertRaises(grpc.RpcError) as err:
            fn(*args, timeout=kw.pop("timeout", 30), **kw)
        self.assertEqual(err.exception.code(), code, err.exception.details())
        return err.exception.details()


class ControllerTest(Base):
    """One gateway with a LUN directory and one controller for every test; names differ."""

    @classmethod
    def setUpClass(cls):
        cls.lun_dir = tempfile.mkdtemp(prefix="iscsigw-csi-luns-")
        cls.daemon = Daemon(extra_args=["--lun-dir", cls.lun_dir]).start()
        cls.plugin = CsiPlugin(mode="controller", gateway=cls.daemon.grpc).start()
        cls.channel = grpc.insecure_channel(cls.plugin.target)
        cls.ctl = csi_grpc.ControllerStub(cls.channel)
        cls.gw_channel = grpc.insecure_channel(cls.daemon.grpc)
        cls.gw = gateway_grpc.GatewayServiceStub(cls.gw_channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.gw_channel.close()
        rc = cls.plugin.stop()
        log = cls.plugin.read_log()
        cls.plugin.cleanup()
        cls.daemon.cleanup()
        shutil.rmtree(cls.lun_dir, ignore_errors=True)
        if rc != 0:
            raise AssertionError(f"iscsigw-csi exited {rc} at SIGTERM:\n{log[-4000:]}")

    # -- helpers
    def create(self, name, **kw):
        return self.ctl.CreateVolume(create_request(name, **kw), timeout=30).volume

    def delete(self, volume_id):
        self.ctl.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id=volume_id), timeout=30)

    def publish(self, volume_id, node=INITIATOR, timeout=30, **kw):
        return self.ctl.ControllerPublishVolume(csi_pb2.ControllerPublishVolumeRequest(
            volume_id=volume_id, node_id=node, volume_capability=cap(), **kw), timeout=timeout)

    def unpublish(self, volume_id, node=INITIATOR):
        self.ctl.ControllerUnpublishVolume(csi_pb2.ControllerUnpublishVolumeRequest(
            volume_id=volume_id, node_id=node), timeout=30)

    def target(self, volume_id):
        return self.gw.GetTarget(gateway_pb2.GetTargetRequest(name=volume_id), timeout=10)

    def target_exists(self, volume_id):
        try:
            self.target(volume_id)
            return True
        except grpc.RpcError as e:
            self.assertEqual(e.code(), Code.NOT_FOUND)
            return False

    def file(self, volume_id):
        return os.path.join(self.lun_dir, volume_id + ".img")

    def session(self, volume_id, chap=None, mutual=None):
        c = Initiator(self.daemon.portal, INITIATOR)
        c.login(IQN_PREFIX + volume_id, chap=chap, mutual=mutual)
        c.test_unit_ready(0)  # the unit attention of a new LUN
        return c

    def write(self, volume_id, lba, data):
        c = self.session(volume_id)
        self.assertEqual(c.write(0, lba, data)[0], 0)
        c.logout()
        c.close()

    def read(self, volume_id, lba, blocks=8):
        c = self.session(volume_id)
        status, data, _ = c.read(0, lba, blocks)
        self.assertEqual(status, 0)
        c.logout()
        c.close()
        return data

    def all_volumes(self, max_entries=0):
        out, token = [], ""
        while True:
            resp = self.ctl.ListVolumes(csi_pb2.ListVolumesRequest(
                max_entries=max_entries, starting_token=token), timeout=30)
            if max_entries:
                self.assertLessEqual(len(resp.entries), max_entries)
            out += resp.entries
            token = resp.next_token
            if not token:
                return out

    # -- capabilities
    def test_capabilities_are_what_the_controller_implements(self):
        resp = self.ctl.ControllerGetCapabilities(csi_pb2.ControllerGetCapabilitiesRequest(),
                                                  timeout=10)
        self.assertEqual({c.rpc.type for c in resp.capabilities},
                         {Rpc.CREATE_DELETE_VOLUME, Rpc.PUBLISH_UNPUBLISH_VOLUME, Rpc.LIST_VOLUMES,
                          Rpc.GET_CAPACITY, Rpc.CREATE_DELETE_SNAPSHOT, Rpc.LIST_SNAPSHOTS,
                          Rpc.CLONE_VOLUME, Rpc.EXPAND_VOLUME, Rpc.LIST_VOLUMES_PUBLISHED_NODES})
        # No read-only ACL on the gateway: read-only publish is not offered.
        self.assertNotIn(Rpc.PUBLISH_READONLY, {c.rpc.type for c in resp.capabilities})

    # -- CreateVolume / DeleteVolume
    def test_a_volume_is_a_target_with_lun_0_on_a_file_in_the_lun_dir(self):
        name = "pvc-6f1c0f9e-0000-4000-8000-000000000001"
        v = self.create(name, required=10 * MiB + 1)
        self.assertEqual(v.volume_id, name)
        self.assertEqual(v.capacity_bytes, 10 * MiB + 512)  # rounded up to the block size
        self.assertEqual(dict(v.volume_context), {"targetIqn": IQN_PREFIX + name, "lun": "0",
                                                  "portals": self.daemon.portal,
                                                  "blockSize": "512"})
        self.assertFalse(v.HasField("content_source"))
        t = self.target(name)
        self.assertEqual(t.alias, "csi:" + name)
        self.assertFalse(t.allow_any_initiator)
        self.assertEqual(len(t.acl), 0)
        self.assertEqual([lun.id for lun in t.luns], [0])
        lun = t.luns[0]
        self.assertEqual(lun.file.path, self.file(name))
        self.assertTrue(lun.file.created)
        self.assertFalse(lun.file.thick)
        self.assertEqual(lun.size_bytes, 10 * MiB + 512)
        self.assertEqual(os.path.getsize(self.file(name)), 10 * MiB + 512)

        # The same name again is the same volume; a compatible range too.
        self.assertEqual(self.create(name, required=10 * MiB + 1), v)
        self.assertEqual(self.create(name, required=10 * MiB, limit=11 * MiB), v)
        # A size or parameters the volume does not have: ALREADY_EXISTS.
        self.assertCode(Code.ALREADY_EXISTS, self.ctl.CreateVolume,
                        create_request(name, required=20 * MiB))
        self.assertCode(Code.ALREADY_EXISTS, self.ctl.CreateVolume,
                        create_request(name, required=10 * MiB + 1, params={"blockSize": "4096"}))
        self.assertCode(Code.ALREADY_EXISTS, self.ctl.CreateVolume,
                        create_request(name, required=10 * MiB + 1,
                                       params={"provisioning": "thick"}))

        self.delete(name)
        self.assertFalse(self.target_exists(name))
        self.assertFalse(os.path.exists(self.file(name)))
        self.delete(name)  # idempotent
        # Made again with the very same request: the gateway remembers the first one's
        # request_ids, and must not answer from that memory of a deleted volume.
        again = self.create(name, required=10 * MiB + 1)
        self.assertEqual(again, v)
        self.assertEqual([lun.id for lun in self.target(name).luns], [0])
        self.assertEqual(os.path.getsize(self.file(name)), 10 * MiB + 512)
        self.delete(name)
        self.assertFalse(self.target_exists(name))
        self.delete("no-such-volume")
        self.delete("Not A Volume Id")
        self.assertCode(Code.INVALID_ARGUMENT, self.ctl.DeleteVolume,
                        csi_pb2.DeleteVolumeRequest())

    def test_names_that_are_not_target_names_are_hashed(self):
        for name in ["My Volume_1", "iqn.2026-11.io.iscsigw:x", "x" * 65]:
            v = self.create(name, required=MiB)
            want = "vol-" + hashlib.sha256(name.encode()).hexdigest()[:32]
            self.assertEqual(v.volume_id, want)
            self.assertEqual(self.target(want).alias, "csi:" + name)
            self.assertEqual(v.volume_context["targetIqn"], IQN_PREFIX + want)
            self.assertEqual(self.create(name, required=MiB).volume_id, want)
            self.delete(want)
            self.assertFalse(os.path.exists(self.file(want)))

    def test_defaults_and_parameters(self):
        v = self.create("pvc-defaults", required=None)
        self.assertEqual(v.capacity_bytes, GiB)
        self.assertEqual(os.stat(self.file(v.volume_id)).st_size, GiB)
        self.assertLess(os.stat(self.file(v.volume_id)).st_blocks * 512, MiB)  # thin: sparse
        self.delete(v.volume_id)

        v = self.create("pvc-params", required=5000,
                        params={"blockSize": "4096", "provisioning": "thick", "direct": "true",
                                "csi.storage.k8s.io/fstype": "xfs"})
        self.assertEqual(v.capacity_bytes, 8192)
        self.assertEqual(v.volume_context["blockSize"], "4096")
        lun = self.target(v.volume_id).luns[0]
        self.assertEqual((lun.block_size, lun.file.thick, lun.file.direct), (4096, True, True))
        self.delete(v.volume_id)

    def test_create_volume_refusals_leave_nothing_behind(self):
        cases = [
            (Code.INVALID_ARGUMENT, create_request("")),
            (Code.INVALID_ARGUMENT, create_request("pvc-bad", caps=[])),
            (Code.INVALID_ARGUMENT, create_request("pvc-bad",
                                                   caps=[cap(Mode.MULTI_NODE_MULTI_WRITER)])),
            (Code.INVALID_ARGUMENT, create_request("pvc-bad",
                                                   caps=[cap(), cap(Mode.MULTI_NODE_READER_ONLY)])),
            (Code.INVALID_ARGUMENT, create_request("pvc-bad", params={"fsType": "ext4"})),
            (Code.INVALID_ARGUMENT, create_request("pvc-bad", params={"blockSize": "1024"})),
            (Code.INVALID_ARGUMENT, create_request("pvc-bad", params={"provisioning": "lazy"})),
            (Code.INVALID_ARGUMENT, create_request("pvc-bad", required=2 * MiB, limit=MiB)),
            (Code.INVALID_ARGUMENT, create_request(
                "pvc-bad", secrets={"node.session.auth.username": "only-a-user"})),
            # The gateway's own check: CHAP secrets of at least 12 bytes.
            (Code.INVALID_ARGUMENT, create_request(
                "pvc-bad", secrets={"node.session.auth.username": "u",
                                    "node.session.auth.password": "short"})),
            (Code.OUT_OF_RANGE, create_request("pvc-bad", required=1000, limit=1000)),
            (Code.NOT_FOUND, create_request("pvc-bad", snapshot="no-such-snapshot")),
            (Code.NOT_FOUND, create_request("pvc-bad", volume="no-such-volume")),
        ]
        for code, req in cases:
            with self.subTest(req=str(req)):
                self.assertCode(code, self.ctl.CreateVolume, req)
        self.assertFalse(self.target_exists("pvc-bad"))
        self.assertFalse(os.path.exists(self.file("pvc-bad")))

    def test_a_target_of_that_name_that_is_no_volume_is_not_taken(self):
        self.gw.CreateTarget(gateway_pb2.CreateTargetRequest(
            target=state_pb2.Target(name="not-csi")), timeout=10)
        self.assertCode(Code.ALREADY_EXISTS, self.ctl.CreateVolume, create_request("not-csi"))
        # Nor is it a volume to delete, publish or list.
        self.assertCode(Code.NOT_FOUND, self.publish, "not-csi")
        self.delete("not-csi")
        self.assertTrue(self.target_exists("not-csi"))
        self.assertNotIn("not-csi", [e.volume.volume_id for e in self.all_volumes()])
        self.gw.DeleteTarget(gateway_pb2.DeleteTargetRequest(name="not-csi"), timeout=10)

    # -- CHAP
    def test_chap_from_the_provisioner_secret_guards_the_target(self):
        v = self.create("pvc-chap", secrets=CHAP)
        chap = self.target(v.volume_id).chap
        self.assertEqual((chap.user, chap.mutual_user), ("csi-user", "csi-target"))
        self.assertTrue(chap.secret_set and chap.mutual_secret_set)
        self.publish(v.volume_id)
        self.assertNotEqual(login_status(self.daemon.portal, INITIATOR,
                                         IQN_PREFIX + v.volume_id), 0)
        c = self.session(v.volume_id, chap=("csi-user", "csi-secret-0123"),
                         mutual=("csi-target", "csi-mutual-4567"))
        self.assertTrue(c.mutual_verified)
        c.logout()
        c.close()
        self.assertEqual(self.create("pvc-chap", secrets=CHAP), v)
        self.unpublish(v.volume_id)
        self.delete(v.volume_id)
        for secret in ("csi-secret-0123", "csi-mutual-4567"):
            self.assertNotIn(secret, self.plugin.read_log())
            self.assertNotIn(secret, self.daemon.read_log())

    def test_a_volume_with_its_own_chap_takes_only_its_derived_secrets(self):
        """chapPerVolume: the target's secrets are HMAC-SHA256 of the Secret's, keyed per
        volume (docs/security.md), so the Secret's own password opens no volume and one volume's
        secret opens no other."""
        def own(secret, label, volume_id):
            return hmac.new(secret.encode(), label + b"\0" + volume_id.encode(),
                            hashlib.sha256).hexdigest()[:32]
        params = {"chapPerVolume": "true"}
        a = self.create("pvc-own-chap-a", secrets=CHAP, params=params)
        b = self.create("pvc-own-chap-b", secrets=CHAP, params=params)
        self.assertEqual(a.volume_context["chapPerVolume"], "true")
        self.assertEqual(self.target(a.volume_id).alias, "csi:pvc-own-chap-a <own chap>")
        self.assertEqual(self.create("pvc-own-chap-a", secrets=CHAP, params=params), a)
        # The same name without the parameter is another volume.
        self.assertCode(Code.ALREADY_EXISTS, self.ctl.CreateVolume,
                        create_request("pvc-own-chap-a", secrets=CHAP))
        self.assertCode(Code.INVALID_ARGUMENT, self.ctl.CreateVolume,
                        create_request("pvc-own-chap-c", params=params))
        listed = {e.volume.volume_id: e.volume for e in self.all_volumes()}
        self.assertEqual(listed[a.volume_id].volume_context["chapPerVolume"], "true")
        for v in (a, b):
            self.publish(v.volume_id)
        user, secret = CHAP["node.session.auth.username"], CHAP["node.session.auth.password"]
        muser, msecret = (CHAP["node.session.auth.username_in"],
                          CHAP["node.session.auth.password_in"])
        a_secret = own(secret, b"iscsigw-csi chap", a.volume_id)
        a_mutual = own(msecret, b"iscsigw-csi mutual chap", a.volume_id)
        b_secret = own(secret, b"iscsigw-csi chap", b.volume_id)
        # From an address of their own: three failures lock the name out there for a while.
        for target, wrong in ((a, secret), (a, b_secret), (b, a_secret)):
            self.assertEqual(login_status(self.daemon.portal, INITIATOR,
                                          IQN_PREFIX + target.volume_id, source="127.0.0.6",
                                          chap=(user, wrong)), 0x0201, target.volume_id)
        c = self.session(a.volume_id, chap=(user, a_secret), mutual=(muser, a_mutual))
        self.assertTrue(c.mutual_verified)
        c.logout()
        c.close()
        c = self.session(b.volume_id, chap=(user, b_secret))
        c.logout()
        c.close()
        for v in (a, b):
            self.unpublish(v.volume_id)
            self.delete(v.volume_id)
        for text in (self.plugin.read_log(), self.daemon.read_log()):
            for s in (secret, msecret, a_secret, a_mutual, b_secret):
                self.assertNotIn(s, text)

    # -- publish / unpublish
    def test_a_node_that_reports_its_address_is_admitted_from_it_only(self):
        """node_id NAME@ADDR (iscsigw-csi --node-address): the ACL entry admits the name from
        that address only; the same name from another address is refused at login."""
        v = self.create("pvc-node-address")
        node = INITIATOR + "@127.0.0.3"
        self.publish(v.volume_id, node)
        self.publish(v.volume_id, node)  # the same request again: OK
        acl = self.gw.ListAclEntries(gateway_pb2.ListAclEntriesRequest(target=v.volume_id),
                                     timeout=10)
        self.assertEqual([(e.initiator, list(e.sources)) for e in acl.entries],
                         [(INITIATOR, ["127.0.0.3"])])
        listed = {e.volume.volume_id: e for e in self.all_volumes()}
        self.assertEqual(list(listed[v.volume_id].status.published_node_ids), [node])
        iqn = IQN_PREFIX + v.volume_id
        self.assertEqual(login_status(self.daemon.portal, INITIATOR, iqn, source="127.0.0.3"), 0)
        for other in ("127.0.0.1", "127.0.0.4"):
            self.assertEqual(login_status(self.daemon.portal, INITIATOR, iqn, source=other),
                             0x0202, other)
        self.no_sessions(v.volume_id)
        # The node's address changed: its entry is replaced, not doubled, and the old address
        # is refused from then on.
        moved = INITIATOR + "@127.0.0.4"
        self.publish(v.volume_id, moved)
        acl = self.gw.ListAclEntries(gateway_pb2.ListAclEntriesRequest(target=v.volume_id),
                                     timeout=10)
        self.assertEqual([(e.initiator, list(e.sources)) for e in acl.entries],
                         [(INITIATOR, ["127.0.0.4"])])
        self.assertEqual(login_status(self.daemon.portal, INITIATOR, iqn, source="127.0.0.3"),
                         0x0202)
        self.assertEqual(login_status(self.daemon.portal, INITIATOR, iqn, source="127.0.0.4"), 0)
        self.no_sessions(v.volume_id)
        # Another node is still refused, with or without an address.
        self.assertCode(Code.FAILED_PRECONDITION, self.publish, v.volume_id,
                        OTHER_NODE + "@127.0.0.4")
        for bad in (INITIATOR + "@gw.example", INITIATOR + "@127.0.0.0/8", "@127.0.0.4"):
            self.assertCode(Code.INVALID_ARGUMENT, self.publish, v.volume_id, bad)
        # Unpublish by any of the node's ids removes the initiator's entry.
        self.unpublish(v.volume_id, node)
        self.assertEqual(len(self.target(v.volume_id).acl), 0)
        self.delete(v.volume_id)

    def no_sessions(self, volume_id):
        wait_for(lambda: not self.gw.ListSessions(gateway_pb2.ListSessionsRequest(
            target=volume_id), timeout=10).sessions, what=f"the sessions of {volume_id} to end")

    def acl_of(self, volume_id):
        return [(e.initiator, list(e.sources)) for e in self.gw.ListAclEntries(
            gateway_pb2.ListAclEntriesRequest(target=volume_id), timeout=10).entries]

    def test_a_node_that_starts_reporting_its_address_keeps_its_session(self):
        """An entry made before the node reported its address (an older node plugin) becomes
        address-bound at the next publish, without cutting the node's session."""
        v = self.create("pvc-address-upgrade")
        self.publish(v.volume_id)  # node id without an address: any source
        iqn = IQN_PREFIX + v.volume_id
        c = Initiator(self.daemon.portal, INITIATOR, source="127.0.0.3")
        c.login(iqn)
        c.test_unit_ready(0)
        self.publish(v.volume_id, INITIATOR + "@127.0.0.3")
        self.assertEqual(self.acl_of(v.volume_id), [(INITIATOR, ["127.0.0.3"])])
        self.assertEqual(c.test_unit_ready(0)[0], 0)  # the session goes on
        self.assertEqual(login_status(self.daemon.portal, INITIATOR, iqn, source="127.0.0.5"),
                         0x0202)
        # Back to an id without an address (the node plugin's flag removed): any source again.
        self.publish(v.volume_id)
        self.assertEqual(self.acl_of(v.volume_id), [(INITIATOR, [])])
        self.assertEqual(c.test_unit_ready(0)[0], 0)
        c.logout()
        c.close()
        self.unpublish(v.volume_id, INITIATOR + "@127.0.0.3")
        self.assertEqual(self.acl_of(v.volume_id), [])
        self.delete(v.volume_id)

    def test_another_machine_with_the_same_initiator_name_is_another_node(self):
        """Two machines carrying one initiator name (a cloned image) differ by address: while the
        first has a session, publishing to the second is refused and unpublishing from it leaves
        the first alone."""
        v = self.create("pvc-cloned-name")
        first, second = INITIATOR + "@127.0.0.3", INITIATOR + "@127.0.0.4"
        self.publish(v.volume_id, first)
        c = Initiator(self.daemon.portal, INITIATOR, source="127.0.0.3")
        c.login(IQN_PREFIX + v.volume_id)
        c.test_unit_ready(0)
        self.assertCode(Code.FAILED_PRECONDITION, self.publish, v.volume_id, second)
        self.unpublish(v.volume_id, second)
        self.assertEqual(self.acl_of(v.volume_id), [(INITIATOR, ["127.0.0.3"])])
        self.assertEqual(c.test_unit_ready(0)[0], 0)
        # The first node's own unpublish ends its session and its entry.
        self.unpublish(v.volume_id, first)
        self.no_sessions(v.volume_id)
        c.close()
        self.assertEqual(self.acl_of(v.volume_id), [])
        self.delete(v.volume_id)

    def test_publish_puts_the_node_in_the_acl_and_unpublish_drops_it(self):
        v = self.create("pvc-publish")
        # Nobody published it yet: no initiator may log in.
        self.assertNotEqual(
            login_status(self.daemon.portal, INITIATOR, IQN_PREFIX + v.volume_id), 0)
        resp = self.publish(v.volume_id)
        self.assertEqual(dict(resp.publish_context), {})
        self.publish(v.volume_id)  # the same request again: OK
        acl = self.gw.ListAclEntries(gateway_pb2.ListAclEntriesRequest(target=v.volume_id),
                                     timeout=10)
        self.assertEqual([e.initiator for e in acl.entries], [INITIATOR])
        self.assertFalse(acl.allow_any_initiator)
        # Single-node volumes: another node is refused while the first one has it.
        self.assertCode(Code.FAILED_PRECONDITION, self.publish, v.volume_id, OTHER_NODE)
        listed = {e.volume.volume_id: e for e in self.all_volumes()}
        self.assertEqual(list(listed[v.volume_id].status.published_node_ids), [INITIATOR])

        c = self.session(v.volume_id)
        self.unpublish(v.volume_id)
        # drop_sessions: the node's session ends with its ACL entry.
        wait_for(lambda: not self.gw.ListSessions(gateway_pb2.ListSessionsRequest(
            target=v.volume_id), timeout=10).sessions, what="the session to be dropped")
        c.close()
        self.assertEqual(len(self.gw.ListAclEntries(gateway_pb2.ListAclEntriesRequest(
            target=v.volume_id), timeout=10).entries), 0)
        self.unpublish(v.volume_id)  # idempotent
        self.publish(v.volume_id, OTHER_NODE)
        # No node_id: unpublished from every node.
        self.ctl.ControllerUnpublishVolume(
            csi_pb2.ControllerUnpublishVolumeRequest(volume_id=v.volume_id), timeout=30)
        self.assertEqual(len(self.target(v.volume_id).acl), 0)
        self.delete(v.volume_id)
        self.unpublish(v.volume_id)  # the volume is gone: OK

        self.assertCode(Code.NOT_FOUND, self.publish, "no-such-volume")
        self.assertCode(Code.INVALID_ARGUMENT, self.publish, "")
        self.assertCode(Code.INVALID_ARGUMENT, self.publish, "pvc-publish", "")
        self.assertCode(Code.INVALID_ARGUMENT, self.ctl.ControllerPublishVolume,
                        csi_pb2.ControllerPublishVolumeRequest(volume_id="pvc-publish",
                                                               node_id=INITIATOR))
        self.assertCode(Code.INVALID_ARGUMENT, self.ctl.ControllerUnpublishVolume,
                        csi_pb2.ControllerUnpublishVolumeRequest(node_id=INITIATOR))

    def test_read_only_publish_is_refused(self):
        # The gateway has no read-only ACL entry: a node published "read-only" could write.
        v = self.create("pvc-readonly")
        self.assertIn("read-only publish is not supported",
                      self.assertCode(Code.INVALID_ARGUMENT, self.publish, v.volume_id,
                                      readonly=True))
        self.assertEqual(len(self.target(v.volume_id).acl), 0)
        # Nor is a node already in the ACL published again read-only.
        self.publish(v.volume_id)
        self.assertCode(Code.INVALID_ARGUMENT, self.publish, v.volume_id, readonly=True)
        self.assertEqual([e.initiator for e in self.target(v.volume_id).acl], [INITIATOR])
        self.unpublish(v.volume_id)
        self.delete(v.volume_id)

    def test_delete_refuses_a_volume_in_use(self):
        v = self.create("pvc-in-use")
        self.publish(v.volume_id)
        self.write(v.volume_id, 10, OLD)
        c = self.session(v.volume_id)
        # Published: the node may still have it mounted; nothing is dropped.
        self.assertIn(INITIATOR, self.assertCode(Code.FAILED_PRECONDITION, self.ctl.DeleteVolume,
                                                 csi_pb2.DeleteVolumeRequest(
                                                     volume_id=v.volume_id)))
        self.assertTrue(self.target_exists(v.volume_id))
        self.assertTrue(os.path.exists(self.file(v.volume_id)))
        self.assertEqual(len(self.gw.ListSessions(gateway_pb2.ListSessionsRequest(
            target=v.volume_id), timeout=10).sessions), 1)
        self.assertEqual(c.read(0, 10, 8)[1], OLD)  # the session still works
        c.logout()
        c.close()
        self.unpublish(v.volume_id)

        # Not published, but a session (an operator opened the target): still in use.
        self.gw.SetAllowAnyInitiator(gateway_pb2.SetAllowAnyInitiatorRequest(
            target=v.volume_id, allow_any_initiator=True), timeout=10)
        c = self.session(v.volume_id)
        self.assertIn("session", self.assertCode(Code.FAILED_PRECONDITION, self.ctl.DeleteVolume,
                                                 csi_pb2.DeleteVolumeRequest(
                                                     volume_id=v.volume_id)))
        self.assertTrue(self.target_exists(v.volume_id))
        c.logout()
        c.close()
        wait_for(lambda: not self.gw.ListSessions(gateway_pb2.ListSessionsRequest(
            target=v.volume_id), timeout=10).sessions, what="the session to end")
        self.delete(v.volume_id)
        self.assertFalse(self.target_exists(v.volume_id))
        self.assertFalse(os.path.exists(self.file(v.volume_id)))

    # -- ValidateVolumeCapabilities
    def test_validate_confirms_single_node_capabilities_only(self):
        v = self.create("pvc-validate")
        validate = self.ctl.ValidateVolumeCapabilities
        req = csi_pb2.ValidateVolumeCapabilitiesRequest(
            volume_id=v.volume_id, volume_context=v.volume_context,
            volume_capabilities=[cap(), cap(Mode.SINGLE_NODE_READER_ONLY, block=True)])
        resp = validate(req, timeout=30)
        self.assertEqual(list(resp.confirmed.volume_capabilities), list(req.volume_capabilities))
        self.assertEqual(dict(resp.confirmed.volume_context), dict(v.volume_context))
        for caps, params in [([cap(Mode.MULTI_NODE_MULTI_WRITER)], {}),
                             ([cap()], {"blockSize": "4096"}),
                             ([cap()], {"nonsense": "1"})]:
            resp = validate(csi_pb2.ValidateVolumeCapabilitiesRequest(
                volume_id=v.volume_id, volume_capabilities=caps, parameters=params), timeout=30)
            self.assertFalse(resp.HasField("confirmed"))
            self.assertTrue(resp.message)
        self.assertCode(Code.NOT_FOUND, validate, csi_pb2.ValidateVolumeCapabilitiesRequest(
            volume_id="no-such-volume", volume_capabilities=[cap()]))
        self.assertCode(Code.INVALID_ARGUMENT, validate, csi_pb2.ValidateVolumeCapabilitiesRequest(
            volume_id=v.volume_id))
        self.assertCode(Code.INVALID_ARGUMENT, validate, csi_pb2.ValidateVolumeCapabilitiesRequest(
            volume_capabilities=[cap()]))
        self.delete(v.volume_id)

    # -- ListVolumes
    def test_list_volumes_pages_through_csi_targets_only(self):
        names = [f"pvc-list-{i}" for i in range(5)]
        made = {n: self.create(n, required=MiB) for n in names}
        self.gw.CreateTarget(gateway_pb2.CreateTargetRequest(
            target=state_pb2.Target(name="pvc-list-plain")), timeout=10)
        paged = self.all_volumes(max_entries=2)
        ids = [e.volume.volume_id for e in paged]
        self.assertEqual(len(ids), len(set(ids)))
        self.assertEqual(ids, sorted(ids))
        self.assertNotIn("pvc-list-plain", ids)
        for n in names:
            entry = next(e for e in paged if e.volume.volume_id == n)
            self.assertEqual(entry.volume.capacity_bytes, MiB)
            self.assertEqual(dict(entry.volume.volume_context), dict(made[n].volume_context))
        self.assertEqual([e.volume.volume_id for e in self.all_volumes()], ids)
        # A token whose volume is gone still continues after it.
        token = ""
        while True:
            page = self.ctl.ListVolumes(csi_pb2.ListVolumesRequest(
                max_entries=1, starting_token=token), timeout=30)
            if page.entries[0].volume.volume_id == names[0]:
                break
            token = page.next_token
        self.delete(names[0])
        rest = self.ctl.ListVolumes(csi_pb2.ListVolumesRequest(
            starting_token=page.next_token), timeout=30)
        self.assertEqual([e.volume.volume_id for e in rest.entries],
                         ids[ids.index(names[0]) + 1:])
        self.assertCode(Code.ABORTED, self.ctl.ListVolumes,
                        csi_pb2.ListVolumesRequest(starting_token="invalid-token"))
        self.assertCode(Code.INVALID_ARGUMENT, self.ctl.ListVolumes,
                        csi_pb2.ListVolumesRequest(max_entries=-1))
        for n in names:
            self.delete(n)
        self.gw.DeleteTarget(gateway_pb2.DeleteTargetRequest(name="pvc-list-plain"), timeout=10)

    # -- ControllerExpandVolume
    def test_expand_grows_the_lun_and_never_shrinks_it(self):
        v = self.create("pvc-expand")
        expand = self.ctl.ControllerExpandVolume

        def req(required, limit=0, block=False):
            r = csi_pb2.ControllerExpandVolumeRequest(volume_id=v.volume_id)
            r.capacity_range.required_bytes = required
            r.capacity_range.limit_bytes = limit
            r.volume_capability.CopyFrom(cap(block=block))
            return r

        self.publish(v.volume_id)
        c = self.session(v.volume_id)
        resp = expand(req(20 * MiB + 1), timeout=30)
        self.assertEqual(resp.capacity_bytes, 20 * MiB + 512)
        self.assertTrue(resp.node_expansion_required)  # a file system to grow
        self.assertEqual(self.target(v.volume_id).luns[0].size_bytes, 20 * MiB + 512)
        self.assertEqual(os.path.getsize(self.file(v.volume_id)), 20 * MiB + 512)
        # The logged-in node sees the new size (after the capacity-changed unit attention).
        c.test_unit_ready(0)
        self.assertEqual(c.read_capacity(0)[1], 20 * MiB + 512)
        c.logout()
        c.close()
        resp = expand(req(24 * MiB, block=True), timeout=30)
        # Block too: the node's initiator must rescan to see the new size.
        self.assertEqual((resp.capacity_bytes, resp.node_expansion_required), (24 * MiB, True))
        # Already as large: OK with the size it has (CSI spec); a LUN never shrinks.
        resp = expand(req(24 * MiB), timeout=30)
        self.assertEqual(resp.capacity_bytes, 24 * MiB)
        self.assertEqual(expand(req(MiB), timeout=30).capacity_bytes, 24 * MiB)
        self.assertCode(Code.OUT_OF_RANGE, expand, req(MiB, limit=2 * MiB))
        self.assertCode(Code.OUT_OF_RANGE, expand, req(30 * MiB + 1, limit=30 * MiB + 1))
        self.assertEqual(self.target(v.volume_id).luns[0].size_bytes, 24 * MiB)
        self.assertCode(Code.NOT_FOUND, expand, csi_pb2.ControllerExpandVolumeRequest(
            volume_id="no-such-volume", capacity_range=csi_pb2.CapacityRange(required_bytes=1)))
        self.assertCode(Code.INVALID_ARGUMENT, expand,
                        csi_pb2.ControllerExpandVolumeRequest(volume_id=v.volume_id))
        self.unpublish(v.volume_id)
        self.delete(v.volume_id)

    # -- GetCapacity
    def test_capacity_is_the_free_space_of_the_lun_dir(self):
        resp = self.ctl.GetCapacity(csi_pb2.GetCapacityRequest(volume_capabilities=[cap()]),
                                    timeout=30)
        vfs = os.statvfs(self.lun_dir)
        self.assertLess(abs(resp.available_capacity - vfs.f_bavail * vfs.f_frsize), 64 * MiB)
        self.assertGreater(resp.available_capacity, 0)
        resp = self.ctl.GetCapacity(csi_pb2.GetCapacityRequest(
            volume_capabilities=[cap(Mode.MULTI_NODE_MULTI_WRITER)]), timeout=30)
        self.assertEqual(resp.available_capacity, 0)
        self.assertCode(Code.INVALID_ARGUMENT, self.ctl.GetCapacity,
                        csi_pb2.GetCapacityRequest(parameters={"bogus": "1"}))

    # -- snapshots and clones
    def test_snapshots_and_clones_hold_the_data_as_it_was(self):
        src = self.create("pvc-snap-src")
        self.publish(src.volume_id)
        self.write(src.volume_id, 100, OLD)
        snap_req = csi_pb2.CreateSnapshotRequest(source_volume_id=src.volume_id,
                                                 name="snapshot-6f1c0f9e-1")
        snap = self.ctl.CreateSnapshot(snap_req, timeout=30).snapshot
        self.assertEqual(snap.snapshot_id, "csi-snapshot-6f1c0f9e-1")
        self.assertEqual(snap.source_volume_id, src.volume_id)
        self.assertEqual(snap.size_bytes, 16 * MiB)
        self.assertTrue(snap.ready_to_use)
        self.assertGreater(snap.creation_time.seconds, 0)
        self.assertTrue(os.path.exists(os.path.join(self.lun_dir, "snapshots", snap.snapshot_id)))
        self.assertEqual(self.ctl.CreateSnapshot(snap_req, timeout=30).snapshot, snap)
        self.write(src.volume_id, 100, NEW)

        # From the snapshot: the old data, the snapshot's size unless asked for more.
        from_snap = self.create("pvc-from-snap", required=None, snapshot=snap.snapshot_id)
        self.assertEqual(from_snap.capacity_bytes, 16 * MiB)
        self.assertEqual(from_snap.content_source.snapshot.snapshot_id, snap.snapshot_id)
        self.publish(from_snap.volume_id)
        self.assertEqual(self.read(from_snap.volume_id, 100), OLD)
        bigger = self.create("pvc-from-snap-32", required=32 * MiB, snapshot=snap.snapshot_id)
        self.assertEqual(bigger.capacity_bytes, 32 * MiB)
        self.assertEqual(self.create("pvc-from-snap-32", required=32 * MiB,
                                     snapshot=snap.snapshot_id), bigger)
        self.publish(bigger.volume_id)
        self.assertEqual(self.read(bigger.volume_id, 100), OLD)
        # Smaller than the source: OUT_OF_RANGE, and nothing left behind.
        self.assertCode(Code.OUT_OF_RANGE, self.ctl.CreateVolume,
                        create_request("pvc-from-snap-small", required=8 * MiB,
                                       snapshot=snap.snapshot_id))
        self.assertFalse(self.target_exists("pvc-from-snap-small"))
        # A clone of the volume: its data now; a copy, so writes stay apart.
        clone = self.create("pvc-clone", required=None, volume=src.volume_id)
        self.assertEqual(clone.content_source.volume.volume_id, src.volume_id)
        self.publish(clone.volume_id)
        self.assertEqual(self.read(clone.volume_id, 100), NEW)
        self.write(clone.volume_id, 100, OLD)
        self.assertEqual(self.read(src.volume_id, 100), NEW)

        # The same name for another source; unknown sources; missing fields.
        self.assertCode(Code.ALREADY_EXISTS, self.ctl.CreateSnapshot, csi_pb2.CreateSnapshotRequest(
            source_volume_id=clone.volume_id, name=snap_req.name))
        self.assertCode(Code.NOT_FOUND, self.ctl.CreateSnapshot, csi_pb2.CreateSnapshotRequest(
            source_volume_id="no-such-volume", name="s"))
        self.assertCode(Code.INVALID_ARGUMENT, self.ctl.CreateSnapshot,
                        csi_pb2.CreateSnapshotRequest(source_volume_id=src.volume_id))
        self.assertCode(Code.INVALID_ARGUMENT, self.ctl.CreateSnapshot,
                        csi_pb2.CreateSnapshotRequest(name="s"))
        # A name the gateway cannot hold is hashed.
        odd = self.ctl.CreateSnapshot(csi_pb2.CreateSnapshotRequest(
            source_volume_id=clone.volume_id, name="snap/of clone"), timeout=30).snapshot
        self.assertEqual(odd.snapshot_id,
                         "csi-snap-" + hashlib.sha256(b"snap/of clone").hexdigest())
        # An operator's own snapshot on the gateway is not the driver's to list or delete.
        self.gw.CreateSnapshot(gateway_pb2.CreateSnapshotRequest(
            name="nightly", lun=gateway_pb2.LunRef(target=src.volume_id, id=0)), timeout=30)

        # ListSnapshots: filtered, paged.
        def listed(**kw):
            out, token = [], ""
            while True:
                r = self.ctl.ListSnapshots(csi_pb2.ListSnapshotsRequest(starting_token=token, **kw),
                                           timeout=30)
                out += [e.snapshot for e in r.entries]
                token = r.next_token
                if not token:
                    return out

        self.assertEqual(listed(snapshot_id=snap.snapshot_id), [snap])
        self.assertEqual([s.snapshot_id for s in listed(source_volume_id=clone.volume_id)],
                         [odd.snapshot_id])
        everything = listed(max_entries=1)
        self.assertEqual(sorted(s.snapshot_id for s in everything),
                         sorted([snap.snapshot_id, odd.snapshot_id]))
        self.assertEqual({s.snapshot_id: s.source_volume_id for s in everything},
                         {snap.snapshot_id: src.volume_id, odd.snapshot_id: clone.volume_id})
        self.assertEqual(listed(snapshot_id="nightly"), [])
        self.assertEqual([s.snapshot_id for s in listed(source_volume_id=src.volume_id)],
                         [snap.snapshot_id])
        self.ctl.DeleteSnapshot(csi_pb2.DeleteSnapshotRequest(snapshot_id="nightly"), timeout=30)
        self.assertEqual([s.name for s in self.gw.ListSnapshots(gateway_pb2.ListSnapshotsRequest(
            name="nightly"), timeout=10).snapshots], ["nightly"])
        self.assertEqual(listed(snapshot_id="no-such-snapshot"), [])
        self.assertEqual(listed(source_volume_id="no-such-volume"), [])
        self.assertCode(Code.ABORTED, self.ctl.ListSnapshots,
                        csi_pb2.ListSnapshotsRequest(starting_token="invalid-token"))

        # The snapshot outlives its source volume; deleting it removes its file.
        self.unpublish(src.volume_id)
        self.delete(src.volume_id)
        self.assertEqual(listed(snapshot_id=snap.snapshot_id)[0].size_bytes, 16 * MiB)
        for s in (snap, odd):
            self.ctl.DeleteSnapshot(csi_pb2.DeleteSnapshotRequest(snapshot_id=s.snapshot_id),
                                    timeout=30)
            self.ctl.DeleteSnapshot(csi_pb2.DeleteSnapshotRequest(snapshot_id=s.snapshot_id),
                                    timeout=30)  # idempotent
        self.assertEqual(os.listdir(os.path.join(self.lun_dir, "snapshots")), ["nightly"])
        self.assertEqual(listed(), [])
        self.gw.DeleteSnapshot(gateway_pb2.DeleteSnapshotRequest(name="nightly"), timeout=10)
        self.ctl.DeleteSnapshot(csi_pb2.DeleteSnapshotRequest(snapshot_id="no/such"), timeout=30)
        self.assertCode(Code.INVALID_ARGUMENT, self.ctl.DeleteSnapshot,
                        csi_pb2.DeleteSnapshotRequest())
        for v in (from_snap, bigger, clone):
            self.unpublish(v.volume_id)
            self.delete(v.volume_id)
            self.assertFalse(os.path.exists(self.file(v.volume_id)))

    def test_a_volume_in_use_is_copied_only_where_blocks_are_shared(self):
        # A sparse copy of a LUN that a node may be writing is no point in time: where the LUN
        # directory cannot share blocks the gateway refuses it, and the CO is told why.
        if self.gw.GetCapacity(gateway_pb2.GetCapacityRequest(), timeout=10).shares_blocks:
            self.skipTest("the LUN directory shares blocks here")
        src = self.create("pvc-busy-src")
        self.publish(src.volume_id)
        c = self.session(src.volume_id)
        snap_req = csi_pb2.CreateSnapshotRequest(source_volume_id=src.volume_id,
                                                 name="snapshot-busy")
        self.assertIn("in use by 1 session(s)", self.assertCode(
            Code.FAILED_PRECONDITION, self.ctl.CreateSnapshot, snap_req))
        self.assertIn("not a point in time", self.assertCode(
            Code.FAILED_PRECONDITION, self.ctl.CreateVolume,
            create_request("pvc-busy-clone", required=None, volume=src.volume_id)))
        self.assertFalse(self.target_exists("pvc-busy-clone"))
        self.assertFalse(os.path.exists(self.file("pvc-busy-clone")))
        c.logout()
        c.close()
        wait_for(lambda: not self.gw.ListSessions(gateway_pb2.ListSessionsRequest(
            target=src.volume_id), timeout=10).sessions, what="the session to end")
        snap = self.ctl.CreateSnapshot(snap_req, timeout=30).snapshot
        self.ctl.DeleteSnapshot(csi_pb2.DeleteSnapshotRequest(snapshot_id=snap.snapshot_id),
                                timeout=30)
        self.unpublish(src.volume_id)
        self.delete(src.volume_id)

    def test_the_content_source_is_part_of_the_volume(self):
        src = self.create("pvc-origin-src")
        snap = self.ctl.CreateSnapshot(csi_pb2.CreateSnapshotRequest(
            source_volume_id=src.volume_id, name="snapshot-origin"), timeout=30).snapshot
        restored = self.create("pvc-origin", required=None, snapshot=snap.snapshot_id)
        self.assertEqual(self.target("pvc-origin").alias,
                         f"csi:pvc-origin <from snapshot {snap.snapshot_id}>")
        self.assertEqual(self.create("pvc-origin", required=None, snapshot=snap.snapshot_id),
                         restored)
        # The same name with another source, or none: another volume.
        for req in (create_request("pvc-origin", required=None),
                    create_request("pvc-origin", required=None, volume=src.volume_id)):
            with self.subTest(req=str(req)):
                self.assertIn("pvc-origin <from snapshot",
                              self.assertCode(Code.ALREADY_EXISTS, self.ctl.CreateVolume, req))
        plain = self.create("pvc-origin-plain")
        self.assertCode(Code.ALREADY_EXISTS, self.ctl.CreateVolume, create_request(
            "pvc-origin-plain", snapshot=snap.snapshot_id))
        clone = self.create("pvc-origin-clone", required=None, volume=src.volume_id)
        self.assertEqual(self.target(clone.volume_id).alias,
                         f"csi:pvc-origin-clone <from volume {src.volume_id}>")
        self.assertCode(Code.ALREADY_EXISTS, self.ctl.CreateVolume, create_request(
            "pvc-origin-clone", required=None, snapshot=snap.snapshot_id))

        # A source larger than limit_bytes cannot be copied into the range: nothing is made.
        for kw in ({"snapshot": snap.snapshot_id}, {"volume": src.volume_id}):
            with self.subTest(**kw):
                self.assertIn("limit_bytes", self.assertCode(
                    Code.OUT_OF_RANGE, self.ctl.CreateVolume,
                    create_request("pvc-origin-big", required=0, limit=8 * MiB, **kw)))
                self.assertFalse(self.target_exists("pvc-origin-big"))
        within = self.create("pvc-origin-fits", required=0, limit=16 * MiB,
                             snapshot=snap.snapshot_id)
        self.assertEqual(within.capacity_bytes, 16 * MiB)

        for v in (restored, plain, clone, within, src):
            self.delete(v.volume_id)
        self.ctl.DeleteSnapshot(csi_pb2.DeleteSnapshotRequest(snapshot_id=snap.snapshot_id),
                                timeout=30)


class WithoutLunDirTest(Base):
    def test_volumes_and_capacity_need_the_lun_dir(self):
        d = Daemon()
        self.addCleanup(d.cleanup)
        d.start()
        plugin = CsiPlugin(mode="controller", gateway=d.grpc).start()
        self.addCleanup(plugin.cleanup)
        with grpc.insecure_channel(plugin.target) as ch:
            ctl = csi_grpc.ControllerStub(ch)
            self.assertIn("--lun-dir", self.assertCode(Code.FAILED_PRECONDITION, ctl.CreateVolume,
                                                       create_request("pvc-nodir")))
            self.assertIn("--lun-dir", self.assertCode(Code.FAILED_PRECONDITION, ctl.GetCapacity,
                                                       csi_pb2.GetCapacityRequest()))
        self.assertNotIn("pvc-nodir", d.ctl("target", "list").stdout)


class OriginAcrossRestartTest(Base):
    def test_the_content_source_is_kept_by_the_gateway(self):
        lun_dir = tempfile.mkdtemp(prefix="iscsigw-csi-luns-")
        self.addCleanup(shutil.rmtree, lun_dir, True)
        d = Daemon(extra_args=["--lun-dir", lun_dir])
        self.addCleanup(d.cleanup)
        d.start()
        plugin = CsiPlugin(mode="controller", gateway=d.grpc).start()
        self.addCleanup(plugin.cleanup)
        with grpc.insecure_channel(plugin.target) as ch:
            ctl = csi_grpc.ControllerStub(ch)
            src = ctl.CreateVolume(create_request("pvc-src"), timeout=30).volume
            snap = ctl.CreateSnapshot(csi_pb2.CreateSnapshotRequest(
                source_volume_id=src.volume_id, name="s1"), timeout=30).snapshot
            copy = ctl.CreateVolume(create_request("pvc-copy", snapshot=snap.snapshot_id),
                                    timeout=30).volume
        self.assertEqual(plugin.stop(), 0)
        d.stop()
        d.start()  # a new gateway process and a new controller: only the gateway's state knows
        plugin = CsiPlugin(mode="controller", gateway=d.grpc).start()
        self.addCleanup(plugin.cleanup)
        with grpc.insecure_channel(plugin.target) as ch:
            ctl = csi_grpc.ControllerStub(ch)
            self.assertCode(Code.ALREADY_EXISTS, ctl.CreateVolume, create_request("pvc-copy"))
            self.assertCode(Code.ALREADY_EXISTS, ctl.CreateVolume,
                            create_request("pvc-copy", volume=src.volume_id))
            again = ctl.CreateVolume(create_request("pvc-copy", snapshot=snap.snapshot_id),
                                     timeout=30).volume
            self.assertEqual(again.volume_id, copy.volume_id)
            self.assertEqual(again.capacity_bytes, copy.capacity_bytes)
            self.assertEqual(again.content_source, copy.content_source)
        self.assertEqual(plugin.stop(), 0)
        d.stop()


class WildcardPortalTest(Base):
    def test_a_gateway_on_a_wildcard_address_must_advertise(self):
        lun_dir = tempfile.mkdtemp(prefix="iscsigw-csi-luns-")
        self.addCleanup(shutil.rmtree, lun_dir, True)
        # 127.0.0.1 (the harness's portal) and 0.0.0.0: a volume_context would hand out both.
        d = Daemon(extra_args=["--lun-dir", lun_dir, "--portal", "0.0.0.0:0"])
        self.addCleanup(d.cleanup)
        d.start()
        plugin = CsiPlugin(mode="controller", gateway=d.grpc).start()
        self.addCleanup(plugin.cleanup)
        with grpc.insecure_channel(plugin.target) as ch:
            ctl = csi_grpc.ControllerStub(ch)
            msg = self.assertCode(Code.FAILED_PRECONDITION, ctl.CreateVolume,
                                  create_request("pvc-wild"))
            self.assertRegex(msg, r"the gateway listens on 0\.0\.0\.0:\d+ and advertises "
                                  r"nothing: start iscsigwd with --advertise")
        self.assertNotIn("pvc-wild", d.ctl("target", "list").stdout)
        self.assertFalse(os.path.exists(os.path.join(lun_dir, "pvc-wild.img")))
        self.assertEqual(plugin.stop(), 0)
        d.stop()

        # Told what to advertise, the gateway's volumes name that address.
        d = Daemon(extra_args=["--lun-dir", lun_dir, "--portal", "0.0.0.0:0",
                               "--advertise", "192.0.2.10:3260"])
        self.addCleanup(d.cleanup)
        d.start()
        plugin = CsiPlugin(mode="controller", gateway=d.grpc).start()
        self.addCleanup(plugin.cleanup)
        with grpc.insecure_channel(plugin.target) as ch:
            ctl = csi_grpc.ControllerStub(ch)
            v = ctl.CreateVolume(create_request("pvc-wild"), timeout=30).volume
            self.assertEqual(v.volume_context["portals"], "192.0.2.10:3260")
            ctl.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id=v.volume_id), timeout=30)
        self.assertEqual(plugin.stop(), 0)
        d.stop()


class FullLunDirTest(Base):
    def test_no_space_is_resource_exhausted_and_leaves_nothing_behind(self):
        work = tempfile.mkdtemp(prefix="iscsigw-csi-tmpfs-")
        self.addCleanup(shutil.rmtree, work, True)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", work],
                          capture_output=True).returncode != 0:
            self.skipTest("cannot mount a tmpfs (needs root)")
        self.addCleanup(subprocess.run, ["umount", work], check=False)
        d = Daemon(extra_args=["--lun-dir", work])
        self.addCleanup(d.cleanup)
        d.start()
        plugin = CsiPlugin(mode="controller", gateway=d.grpc).start()
        self.addCleanup(plugin.cleanup)
        with grpc.insecure_channel(plugin.target) as ch:
            ctl = csi_grpc.ControllerStub(ch)
            self.assertCode(Code.RESOURCE_EXHAUSTED, ctl.CreateVolume,
                            create_request("pvc-full", required=64 * MiB,
                                           params={"provisioning": "thick"}))
            listed = ctl.ListVolumes(csi_pb2.ListVolumesRequest(), timeout=30)
            self.assertEqual(len(listed.entries), 0)
            self.assertEqual(os.listdir(work), ["snapshots"])
            # A retry that fits starts clean.
            v = ctl.CreateVolume(create_request("pvc-full", required=8 * MiB,
                                                params={"provisioning": "thick"}),
                                 timeout=30).volume
            self.assertEqual(v.capacity_bytes, 8 * MiB)
            ctl.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id=v.volume_id), timeout=30)
        d.stop()


class UnreachableGatewayTest(Base):
    def test_every_gateway_call_is_unavailable(self):
        plugin = CsiPlugin(mode="controller", gateway=f"127.0.0.1:{closed_port()}").start()
        self.addCleanup(plugin.cleanup)
        with grpc.insecure_channel(plugin.target) as ch:
            ctl = csi_grpc.ControllerStub(ch)
            for call, req in [(ctl.CreateVolume, create_request("pvc-x")),
                              (ctl.DeleteVolume, csi_pb2.DeleteVolumeRequest(volume_id="pvc-x")),
                              (ctl.ListVolumes, csi_pb2.ListVolumesRequest()),
                              (ctl.GetCapacity, csi_pb2.GetCapacityRequest()),
                              (ctl.ListSnapshots, csi_pb2.ListSnapshotsRequest())]:
                self.assertCode(Code.UNAVAILABLE, call, req)
            # What needs no gateway still answers.
            ctl.ControllerGetCapabilities(csi_pb2.ControllerGetCapabilitiesRequest(), timeout=10)
        self.assertEqual(plugin.stop(), 0)


class QueueTest(Base):
    def test_a_full_queue_is_resource_exhausted_and_stale_calls_are_skipped(self):
        # A gateway that accepts connections and never answers holds the worker for the
        # gateway timeout (10 s); meanwhile at most 64 calls wait.
        silent = socket.socket()
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        self.addCleanup(silent.close)
        plugin = CsiPlugin(mode="controller",
                           gateway="127.0.0.1:%d" % silent.getsockname()[1]).start()
        self.addCleanup(plugin.cleanup)
        with grpc.insecure_channel(plugin.target) as ch:
            ctl = csi_grpc.ControllerStub(ch)
            calls = [ctl.ListVolumes.future(csi_pb2.ListVolumesRequest(), timeout=4)
                     for _ in range(100)]
            codes = []
            for c in calls:
                try:
                    c.result()
                    codes.append(Code.OK)
                except grpc.RpcError as e:
                    codes.append(e.code())
        self.assertGreaterEqual(codes.count(Code.RESOURCE_EXHAUSTED), 100 - 64 - 1)
        self.assertEqual(set(codes), {Code.RESOURCE_EXHAUSTED, Code.DEADLINE_EXCEEDED})
        # The calls whose callers gave up while queued never reached the gateway.
        wait_for(lambda: "the caller gave up while the call was queued" in plugin.read_log(),
                 timeout=30, what="stale calls to be skipped")
        self.assertEqual(plugin.stop(), 0)


class TlsGatewayTest(Base):
    def test_the_controller_reaches_a_tls_gateway(self):
        work = tempfile.mkdtemp(prefix="iscsigw-csi-tls-")
        self.addCleanup(shutil.rmtree, work, True)

        def sh(*args):
            subprocess.run(args, check=True, capture_output=True, cwd=work)

        sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
           "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=iscsigw csi test ca")
        service = "iscsigw-grpc.storage.svc"
        sh("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
           "-out", "server.csr", "-subj", f"/CN={service}")
        with open(os.path.join(work, "ext.cnf"), "w") as f:
            f.write(f"subjectAltName=DNS:{service}\n")
        sh("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
           "-CAcreateserial", "-days", "2", "-out", "server.pem", "-extfile", "ext.cnf")
        lun_dir = os.path.join(work, "luns")
        d = Daemon(extra_args=["--lun-dir", lun_dir, "--tls-cert",
                               os.path.join(work, "server.pem"), "--tls-key",
                               os.path.join(work, "server.key")])
        self.addCleanup(d.cleanup)
        d.start()
        tls = CsiPlugin(mode="controller", gateway=d.grpc,
                        extra_args=["--tls-ca", os.path.join(work, "ca.pem"),
                                    "--tls-server-name", service]).start()
        self.addCleanup(tls.cleanup)
        plain = CsiPlugin(mode="controller", gateway=d.grpc).start()
        self.addCleanup(plain.cleanup)
        with grpc.insecure_channel(tls.target) as ch:
            ctl = csi_grpc.ControllerStub(ch)
            v = ctl.CreateVolume(create_request("pvc-tls"), timeout=30).volume
            self.assertEqual(v.volume_context["portals"], d.portal)
            self.assertTrue(os.path.exists(os.path.join(lun_dir, "pvc-tls.img")))
            ctl.DeleteVolume(csi_pb2.DeleteVolumeRequest(volume_id="pvc-tls"), timeout=30)
            self.assertFalse(os.path.exists(os.path.join(lun_dir, "pvc-tls.img")))
        # Without the CA the handshake fails: the gateway is unreachable to this plugin.
        with grpc.insecure_channel(plain.target) as ch:
            self.assertCode(Code.UNAVAILABLE, csi_grpc.ControllerStub(ch).CreateVolume,
                            create_request("pvc-tls"))
        self.assertEqual(tls.stop(), 0)
        self.assertEqual(plain.stop(), 0)


if __name__ == "__main__":
    unittest.main()
