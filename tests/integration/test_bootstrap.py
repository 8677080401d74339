"""The --bootstrap file as a declaration, across restarts of the real iscsigwd: what the API did
stands while the declaration is unchanged (a deleted target is not resurrected), a changed
declaration is applied on the next start, and a change that cannot be made in place stops the
start with a message naming the field."""
import json
import os
import subprocess
import unittest

from iscsigw_test.harness import IQN_PREFIX, Daemon, binary

MiB = 1 << 20


def declaration(size=MiB, alias="", extra_lun=False, initiators=("iqn.2026-11.io.example:a",)):
    luns = [{"id": 0, "ram": {}, "sizeBytes": str(size)}]
    if extra_lun:
        luns.append({"id": 1, "null": {}, "sizeBytes": str(MiB)})
    return {"targets": [{"name": "decl", "alias": alias, "initiators": list(initiators),
                         "luns": luns},
                        {"name": "other", "allowAnyInitiator": True,
                         "luns": [{"id": 0, "ram": {}, "sizeBytes": str(MiB)}]}]}


class BootstrapTest(unittest.TestCase):
    def run_daemon(self, state_dir, decl):
        path = os.path.join(state_dir, "bootstrap.json")
        with open(path, "w") as f:
            json.dump(decl, f)
        d = Daemon(bootstrap=path, state_dir=state_dir).start()
        self.addCleanup(d.cleanup)
        return d

    def names(self, d):
        return sorted(t["name"] for t in d.ctl_json("target", "list")["targets"])

    def test_declarations_apply_once_and_the_api_stands_in_between(self):
        d = Daemon().start()
        self.addCleanup(d.cleanup)
        state_dir = d.state_dir
        self.assertEqual(d.stop(), 0)

        d = self.run_daemon(state_dir, declaration())
        self.assertEqual(self.names(d), [IQN_PREFIX + "decl", IQN_PREFIX + "other"])
        # Through the API: delete one declared target, grow and reconfigure the other.
        d.ctl("target", "delete", "other")
        d.ctl("lun", "resize", "decl", "0", "2M")
        d.ctl("acl", "add", "decl", "iqn.2026-11.io.example:api")
        d.ctl("lun", "create", "decl", "7", "--backing", "null", "--size", "1M")
        self.assertEqual(d.stop(), 0)

        # Same declaration: nothing comes back, nothing is undone.
        d = self.run_daemon(state_dir, declaration())
        self.assertEqual(self.names(d), [IQN_PREFIX + "decl"])
        t = d.ctl_json("target", "get", "decl")
        self.assertEqual([(l["id"], int(l["size_bytes"])) for l in t["luns"]],
                         [(0, 2 * MiB), (7, MiB)])
        self.assertEqual(sorted(e["initiator"] for e in t["acl"]),
                         ["iqn.2026-11.io.example:a", "iqn.2026-11.io.example:api"])
        self.assertEqual(d.stop(), 0)

        # A changed declaration of "decl" is applied; "other", unchanged, stays deleted.
        d = self.run_daemon(state_dir, declaration(size=4 * MiB, alias="v2", extra_lun=True,
                                                   initiators=["iqn.2026-11.io.example:b"]))
        self.assertEqual(self.names(d), [IQN_PREFIX + "decl"])
        t = d.ctl_json("target", "get", "decl")
        self.assertEqual(t["alias"], "v2")
        self.assertEqual(sorted((l["id"], int(l["size_bytes"])) for l in t["luns"]),
                         [(0, 4 * MiB), (1, MiB), (7, MiB)])
        self.assertEqual(sorted(e["initiator"] for e in t["acl"]),
                         ["iqn.2026-11.io.example:api", "iqn.2026-11.io.example:b"])
        self.assertIn("updated to its new declaration", d.read_log())
        self.assertEqual(d.stop(), 0)

        # A change that cannot be made in place stops the start and leaves the state alone.
        with open(os.path.join(state_dir, "state.json")) as f:
            before = f.read()
        path = os.path.join(state_dir, "bootstrap.json")
        with open(path, "w") as f:
            json.dump(declaration(size=MiB, alias="v2", extra_lun=True,
                                  initiators=["iqn.2026-11.io.example:b"]), f)
        p = subprocess.run([binary("iscsigwd"), "--state-dir", state_dir, "--portal",
                            "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0", "--metrics-listen",
                            "127.0.0.1:0", "--bootstrap", path],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 1)
        self.assertIn("lun 0 of " + IQN_PREFIX + "decl: size_bytes 4194304 cannot shrink",
                      p.stderr)
        with open(os.path.join(state_dir, "state.json")) as f:
            self.assertEqual(f.read(), before)


if __name__ == "__main__":
    unittest.main()
