"""What the binaries say they are (server/build_info.h, docs/contributing.md "Releases"):
`--version` of iscsigwd, iscsigwctl and iscsigw-csi prints "PROGRAM VERSION (commit COMMIT)" on
stdout and exits 0, VERSION the project version of CMakeLists.txt and COMMIT the commit the tree
was built from; and a running gateway says the same in iscsigw_build_info, GetGatewayInfo and the
log line that says it is up. A build left behind by a commit fails here: the commit is read at
build time, so `ninja` after a commit must bring it up to date."""
import re
import unittest
import urllib.request

from iscsigw_test.build_info import expected_commit, project_version
from iscsigw_test.harness import Daemon, binary, run, simple_state, stop_and_clean

PROGRAMS = ("iscsigwd", "iscsigwctl", "iscsigw-csi")
BUILD_INFO = re.compile(r'^iscsigw_build_info\{commit="([^"]*)",version="([^"]*)"\} 1$', re.M)


class VersionFlagTest(unittest.TestCase):
    def test_each_binary_prints_the_project_version_and_the_commit(self):
        want = f"{project_version()} (commit {expected_commit()})"
        for program in PROGRAMS:
            with self.subTest(program=program):
                p = run([binary(program), "--version"], timeout=30)
                self.assertEqual(p.stdout, f"{program} {want}\n")
                self.assertEqual(p.stderr, "")

    def test_iscsigwctl_version_needs_neither_a_command_nor_a_server(self):
        # require_subcommand(1) must not refuse it, and nothing is dialled: the server named
        # here does not exist.
        p = run([binary("iscsigwctl"), "--server", "unix:/nonexistent/iscsigw.sock", "--version"],
                timeout=30)
        self.assertEqual(p.stdout, f"iscsigwctl {project_version()} (commit {expected_commit()})\n")


class RunningGatewayTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(state=simple_state("version")).start()

    @classmethod
    def tearDownClass(cls):
        stop_and_clean(cls.daemon)

    def test_build_info_metric_gateway_info_and_log_agree_with_version_flag(self):
        line = run([binary("iscsigwd"), "--version"], timeout=30).stdout.strip()
        m = re.fullmatch(r"iscsigwd (\S+) \(commit (\S+)\)", line)
        self.assertIsNotNone(m, line)
        version, commit = m.groups()
        self.assertEqual((version, commit), (project_version(), expected_commit()))

        url = f"http://{self.daemon.ports['metrics']}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            samples = BUILD_INFO.findall(r.read().decode())
        self.assertEqual(samples, [(commit, version)])

        self.assertEqual(self.daemon.ctl_json("gateway", "info")["version"], version)
        self.assertIn(f"{line}: ", self.daemon.read_log())


if __name__ == "__main__":
    unittest.main()
