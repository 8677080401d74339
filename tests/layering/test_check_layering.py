"""The layering check catches what it exists to catch: each test copies the project's sources into
a temporary tree, plants one upward include (quoted or angled), a source in a directory no module
names, or an include of tests/, and expects exactly that line reported; the tree as it is reports
nothing."""
import os
import shutil
import tempfile
import unittest

import check_layering

TOPS = check_layering.SOURCES


class LayeringCheckTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="iscsigw-layering-")
        self.addCleanup(shutil.rmtree, self.tmp)
        for top in TOPS:
            shutil.copytree(os.path.join(check_layering.REPO, top), os.path.join(self.tmp, top),
                            ignore=shutil.ignore_patterns("*.o", "*.a", "__pycache__"))

    def plant(self, rel, line):
        path = os.path.join(self.tmp, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a") as f:
            f.write("\n" + line + "\n")

    def assert_caught(self, rel, expected):
        found = check_layering.violations(self.tmp)
        self.assertEqual(len(found), 1, found)
        self.assertTrue(found[0].startswith(rel), found)
        self.assertIn(expected, found[0])

    def test_the_tree_as_it_is_passes(self):
        self.assertEqual(check_layering.violations(self.tmp), [])

    def test_the_scsi_engine_including_the_iscsi_layer_is_caught(self):
        self.plant("dataplane/scsi/planted.h", '#include "dataplane/iscsi/connection.h"')
        self.assert_caught("dataplane/scsi/planted.h",
                           "dataplane/scsi may not include dataplane/iscsi/connection.h")

    def test_an_angled_upward_include_is_caught(self):
        self.plant("dataplane/backing/planted.cc", "#include <dataplane/api/dataplane.h>")
        self.assert_caught("dataplane/backing/planted.cc", "may not include dataplane/api/")

    def test_the_scsi_engine_including_the_rbd_store_is_caught(self):
        self.plant("dataplane/scsi/planted.cc", '#include "dataplane/backing/rbd/rbd_store.h"')
        self.assert_caught("dataplane/scsi/planted.cc",
                           "may not include dataplane/backing/rbd/rbd_store.h")

    def test_the_control_plane_including_the_server_is_caught(self):
        self.plant("controlplane/state/planted.cc", '#include "server/flags.h"')
        self.assert_caught("controlplane/state/planted.cc", "may not include server/flags.h")

    def test_base_including_anything_of_the_project_is_caught(self):
        self.plant("base/planted.h", '#include "dataplane/runtime/reactor_pool.h"')
        self.assert_caught("base/planted.h", "base may not include dataplane/runtime/")

    def test_a_source_including_tests_is_caught(self):
        self.plant("csi/planted.cc", '#include "tests/common/fake_shared_object.h"')
        self.assert_caught("csi/planted.cc", "may not include tests/")

    def test_a_directory_no_module_names_is_caught(self):
        self.plant("dataplane/nvme/planted.cc", '#include "base/status.h"')
        self.assert_caught("dataplane/nvme/planted.cc", "no layer for dataplane/nvme/")


if __name__ == "__main__":
    unittest.main()
