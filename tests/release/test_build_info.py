"""cmake/build_info.cmake, which every build runs to write the version and commit the binaries
report (server/build_info.h, docs/contributing.md "Releases"): the commit is git's HEAD at that
build, so a new commit shows without a reconfigure; an unchanged one leaves the file untouched, so
the build recompiles and relinks nothing; a tree that is not a git checkout, or is one only as a
directory inside another, says "unknown"; a commit named by ISCSIGW_COMMIT wins; and nothing that
could break the C++ string or the metric's label gets in."""
import os
import re
import shutil
import subprocess
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "cmake", "build_info.cmake")
GIT_ENV = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com",
               GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")


class BuildInfoScriptTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="iscsigw-build-info-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        self.src = os.path.join(self.dir, "src")
        os.mkdir(self.src)
        self.out = os.path.join(self.dir, "build", "build_info_generated.cc")

    def git(self, *args):
        return subprocess.run(["git", "-C", self.src, *args], env=GIT_ENV, check=True,
                              capture_output=True, text=True).stdout.strip()

    def commit(self, text):
        with open(os.path.join(self.src, "file"), "w") as f:
            f.write(text)
        self.git("add", "file")
        self.git("commit", "-q", "-m", text)
        return self.git("rev-parse", "--short=12", "HEAD")

    def generate(self, source=None, commit="", version="1.2.3", check=True):
        p = subprocess.run(["cmake", f"-DSOURCE_DIR={source or self.src}", f"-DOUTPUT={self.out}",
                            f"-DVERSION={version}", f"-DCOMMIT={commit}", "-P", SCRIPT],
                           capture_output=True, text=True)
        if check:
            self.assertEqual(p.returncode, 0, p.stderr)
        return p

    def generated(self):
        with open(self.out) as f:
            text = f.read()
        version = re.search(r'BuildVersion\(\) \{ return "([^"]*)"; \}', text).group(1)
        commit = re.search(r'BuildCommit\(\) \{ return "([^"]*)"; \}', text).group(1)
        return version, commit

    def test_a_new_commit_is_written_and_an_unchanged_one_leaves_the_file_alone(self):
        self.git("init", "-q")
        first = self.commit("one")
        self.generate()
        self.assertEqual(self.generated(), ("1.2.3", first))
        self.assertRegex(first, r"^[0-9a-f]{12}$")
        # An old timestamp, so that a rewrite would show even within the clock's resolution.
        os.utime(self.out, (1_000_000_000, 1_000_000_000))
        self.generate()
        self.assertEqual(os.stat(self.out).st_mtime, 1_000_000_000)
        second = self.commit("two")
        self.assertNotEqual(second, first)
        self.generate()
        self.assertEqual(self.generated(), ("1.2.3", second))
        self.assertNotEqual(os.stat(self.out).st_mtime, 1_000_000_000)

    def test_outside_a_git_checkout_the_commit_is_unknown(self):
        self.generate()
        self.assertEqual(self.generated(), ("1.2.3", "unknown"))

    def test_a_directory_inside_another_checkout_is_not_that_checkout(self):
        self.git("init", "-q")
        self.commit("one")
        inner = os.path.join(self.src, "unpacked")
        os.mkdir(inner)
        self.generate(source=inner)
        self.assertEqual(self.generated(), ("1.2.3", "unknown"))

    def test_a_given_commit_wins_over_git(self):
        self.git("init", "-q")
        self.commit("one")
        self.generate(commit="0123456789ab")
        self.assertEqual(self.generated(), ("1.2.3", "0123456789ab"))

    def test_a_commit_or_version_that_would_break_the_literal_is_refused(self):
        for commit, version in (('a"b', "1.2.3"), ("a b", "1.2.3"), ("abc", '1.2"3'),
                                ("abc", "1.2\\3")):
            with self.subTest(commit=commit, version=version):
                p = self.generate(commit=commit, version=version, check=False)
                self.assertNotEqual(p.returncode, 0)
                self.assertIn("may hold only", p.stderr)
                self.assertFalse(os.path.exists(self.out))


if __name__ == "__main__":
    unittest.main()
