"""The style checks can fail: each is run on a copy of the tree with a planted offender, and the
function scan on the constructs that could hide a brace from it."""
import functools
import os
import shutil
import tempfile
import unittest

import check_format
import check_function_length as length
from sources import REPO, cpp_sources


def function_of(lines, name="Planted"):
    body = "\n".join(f"  total += {i};" for i in range(lines - 4))
    return f"int {name}(int total) {{\n  // planted\n{body}\n  return total;\n}}\n"


@functools.lru_cache(maxsize=None)
def tree_problems():
    """What the function-length check says of the tree itself."""
    return tuple(length.check())


class TreeCopy(unittest.TestCase):
    """A copy of the tree's C++ sources (not a git checkout: the walk finds them)."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="style-check-")
        self.addCleanup(shutil.rmtree, self.root)
        for rel in cpp_sources():
            os.makedirs(os.path.join(self.root, os.path.dirname(rel)), exist_ok=True)
            shutil.copy(os.path.join(REPO, rel), os.path.join(self.root, rel))
        shutil.copy(os.path.join(REPO, ".clang-format"), self.root)

    def plant(self, rel, text):
        with open(os.path.join(self.root, rel), "w") as f:
            f.write(text)


class FunctionLengthTest(TreeCopy):
    def test_the_copy_passes_as_the_tree_does(self):
        self.assertEqual(tuple(length.check(self.root)), tree_problems())

    def test_a_200_line_function_is_caught(self):
        self.plant("dataplane/scsi/planted.cc",
                   "namespace iscsigw::scsi {\n" + function_of(200) + "}\n")
        problems = [p for p in length.check(self.root) if p not in tree_problems()]
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("dataplane/scsi/planted.cc:2: Planted: 200 lines", problems[0])

    def test_a_100_line_function_passes(self):
        self.plant("dataplane/scsi/planted.cc",
                   "namespace iscsigw::scsi {\n" + function_of(100) + "}\n")
        self.assertEqual(tuple(length.check(self.root)), tree_problems())

    def test_an_allowed_function_past_its_ceiling_is_caught(self):
        self.plant("server/planted.cc", function_of(160, "Run"))
        allowed = {("server/planted.cc", "Run"): (155, "a planted exception")}
        problems = length.check(self.root, allowed=allowed)
        self.assertTrue(any("past the 155 it is allowed" in p for p in problems), problems)

    def test_a_stale_allowed_entry_is_caught(self):
        allowed = dict(length.ALLOWED)
        allowed[("server/planted.cc", "Gone")] = (None, "a planted exception")
        problems = length.check(self.root, allowed=allowed)
        self.assertTrue(any("server/planted.cc: Gone: no longer past" in p for p in problems),
                        problems)


class FormatTest(TreeCopy):
    def test_an_unformatted_file_is_caught(self):
        self.plant("base/planted.cc", "int   Planted( ){return 0;}\n")
        self.plant("base/formatted.cc", "int Formatted() { return 0; }\n")
        self.assertEqual(
            check_format.unformatted(["base/planted.cc", "base/formatted.cc"], repo=self.root),
            ["base/planted.cc"])


def scan(text):
    return {f.name: f.lines for f in length.functions("x.cc", text)}


class ScanTest(unittest.TestCase):
    def test_braces_in_literals_and_comments_do_not_count(self):
        text = ('int F() {\n  const char* s = "{{{";\n  char c = \'{\';\n  // {\n'
                '  /* { */\n  auto r = R"x(})x";\n  return 1\'000;\n}\n'
                'int G() {\n  return 0;\n}\n')
        self.assertEqual(scan(text), {"F": 8, "G": 3})

    def test_constructor_initialisers_and_default_arguments(self):
        text = ("Foo::Foo(int a, Bar b = Bar{1})\n    : a_{a},\n      b_(b),\n      c_{} {\n"
                "  Start();\n}\n")
        self.assertEqual(scan(text), {"Foo::Foo": 6})

    def test_classes_namespaces_and_lambdas(self):
        text = ("namespace a {\nnamespace {\nclass C : public B {\n public:\n"
                "  int Get() const override {\n    return x_;\n  }\n\n private:\n  int x_ = 0;\n"
                "};\n}  // namespace\n"
                "void Run() {\n  auto f = [&](int x) {\n    return x;\n  };\n"
                "  struct Local {\n    int y;\n  };\n  f(1);\n}\n"
                "bool operator==(const C& l, const C& r) {\n  return true;\n}\n"
                "enum class E { kA, kB };\nconst int kTable[] = {1, 2};\n"
                "template <class T>\nT Max(T a, T b) {\n  return a;\n}\n}  // namespace a\n")
        self.assertEqual(scan(text), {"Get": 3, "Run": 9, "operator==": 3, "Max": 4})

    def test_gtest_cases_are_named_by_suite_and_name(self):
        self.assertEqual(scan("TEST_F(SessionTest, RejectsCmdSn) {\n  EXPECT_TRUE(true);\n}\n"),
                         {"SessionTest.RejectsCmdSn": 3})

    def test_preprocessor_lines_are_skipped(self):
        text = "#define BLOCK(x) { x }\n#if 0\n#endif\nint F() {\n  return 0;\n}\n"
        self.assertEqual(scan(text), {"F": 3})


if __name__ == "__main__":
    unittest.main()
