#!/usr/bin/python3
"""Parses iscsi-test-cu (CUnit verbose) output into one result per test: PASS, FAIL or SKIP.

CUnit counts a skipped test as passed; libiscsi's tests mark a skip by printing "[SKIPPED] ..."
inside the test's output, before CUnit's closing "passed". Text printed after a test's verdict
(suite teardown) belongs to no test.
"""
import re
import sys

TEST_RE = re.compile(r"^\s*Test: (\S+) \.\.\.", re.M)
SUITE_RE = re.compile(r"^Suite: (\S+)", re.M)
VERDICT_RE = re.compile(r"(?:^|\.\.\.)[ \t]*(passed|FAILED)\b", re.M)


def parse(text):
    """Returns a list of (suite.test, result, first skip/fail message)."""
    marks = [(m.start(), "suite", m.group(1), m.end()) for m in SUITE_RE.finditer(text)]
    marks += [(m.start(), "test", m.group(1), m.end()) for m in TEST_RE.finditer(text)]
    marks.sort()
    results = []
    suite = "?"
    for i, (start, kind, name, end) in enumerate(marks):
        if kind == "suite":
            suite = name
            continue
        stop = marks[i + 1][0] if i + 1 < len(marks) else len(text)
        body = text[end - 3:stop]  # keep the "..." so a verdict right after it matches
        v = VERDICT_RE.search(body)
        output = body[: v.start()] if v else body
        if v is None or v.group(1) == "FAILED":
            tail = body[v.end():] if v else body
            msg = next((l.strip() for l in tail.splitlines() if l.strip()), "")
            results.append((f"{suite}.{name}", "FAIL", msg))
        elif "[SKIPPED]" in output:
            msg = output[output.index("[SKIPPED]") + len("[SKIPPED]"):].strip().splitlines()[0]
            results.append((f"{suite}.{name}", "SKIP", msg))
        else:
            results.append((f"{suite}.{name}", "PASS", ""))
    return results


def main():
    text = open(sys.argv[1], errors="replace").read()
    for name, result, msg in parse(text):
        print(f"{result}\t{name}\t{msg}")


if __name__ == "__main__":
    main()
