#!/usr/bin/python3
"""One version per release (docs/contributing.md, "Releases"), in the three places that name it:

  - CMakeLists.txt's `project(iscsigw VERSION X.Y.Z ...)`, which the binaries report
    (server/build_info.h: --version, iscsigw_build_info);
  - helm/iscsigw/Chart.yaml's `version` and `appVersion` (the image tag the chart pulls);
  - CHANGELOG.md's newest released section;

must be the same X.Y.Z. And CHANGELOG.md keeps the form a release relies on (Keep a Changelog):
`## [Unreleased]` first, then `## [X.Y.Z] - YYYY-MM-DD` sections, newest first (versions and
dates), each version once.

Usage: check_versions.py [--self-test]
Exit 1 with one line per problem. --self-test breaks each rule in a copy of the three files and
fails unless each break is reported, and unless the copy as it is passes."""
import os
import re
import shutil
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CMAKE = "CMakeLists.txt"
CHART = "helm/iscsigw/Chart.yaml"
CHANGELOG = "CHANGELOG.md"
SEMVER = r"(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)"
PROJECT = re.compile(r"^project\(iscsigw\s+VERSION\s+(\S+)", re.M)
CHART_FIELD = r'^{}:\s*"?([^"\s#]+)"?\s*(?:#.*)?$'
SECTION = re.compile(r"^## (.*)$", re.M)
RELEASE = re.compile(r"^\[(" + SEMVER + r")\] - ([0-9]{4}-[0-9]{2}-[0-9]{2})$")


def read(repo, rel, problems=None):
    """The file's text; "" with a problem appended when it cannot be read."""
    try:
        with open(os.path.join(repo, rel)) as f:
            return f.read()
    except OSError as e:
        if problems is None:
            raise
        problems.append(f"{rel}: {e.strerror}")
        return ""


def key(version):
    return tuple(int(p) for p in version.split("."))


def changelog_releases(text, problems):
    """[(version, date)] of CHANGELOG.md's released sections in file order; problems appended."""
    headings = SECTION.findall(text)
    if not headings or headings[0] != "[Unreleased]":
        problems.append(f"{CHANGELOG}: its first section is not '## [Unreleased]' (found "
                        f"{headings[0] if headings else 'no section'!r})")
    releases = []
    for i, h in enumerate(headings):
        if h == "[Unreleased]":
            if i != 0:
                problems.append(f"{CHANGELOG}: '## [Unreleased]' must be the first section, once")
            continue
        m = RELEASE.match(h)
        if not m:
            problems.append(f"{CHANGELOG}: section '## {h}' is not '## [X.Y.Z] - YYYY-MM-DD'")
            continue
        releases.append(m.groups())
    for (newer, newer_date), (older, older_date) in zip(releases, releases[1:]):
        if key(newer) <= key(older):
            problems.append(f"{CHANGELOG}: {newer} is listed above {older}: newest first, each "
                            "version once")
        if newer_date < older_date:
            problems.append(f"{CHANGELOG}: {newer} ({newer_date}) is dated before {older} "
                            f"({older_date})")
    return releases


def check(repo=REPO):
    problems = []
    m = PROJECT.search(read(repo, CMAKE, problems))
    cmake = m.group(1) if m else None
    if cmake is None or not re.fullmatch(SEMVER, cmake):
        problems.append(f"{CMAKE}: no project(iscsigw VERSION X.Y.Z ...) (found {cmake!r})")
    chart = read(repo, CHART, problems)
    found = {CMAKE: cmake}
    for field in ("version", "appVersion"):
        m = re.search(CHART_FIELD.format(field), chart, re.M)
        found[f"{CHART} {field}"] = m.group(1) if m else None
    releases = changelog_releases(read(repo, CHANGELOG, problems), problems)
    found[f"{CHANGELOG} newest release"] = releases[0][0] if releases else None
    for where, version in found.items():
        if version is None:
            problems.append(f"{where}: missing")
        elif cmake is not None and version != cmake:
            problems.append(f"{where} is {version}, {CMAKE} says {cmake}: one version for all "
                            "(docs/contributing.md, Releases)")
    return problems


def self_test():
    """(missed, unexpected): breaks each rule in a copy; returns what went unreported, and what
    the unbroken copy reported."""
    breaks = [
        (CMAKE, "the project version", None, "CHANGELOG.md newest release is"),
        (CHART, r"^appVersion:.*$", 'appVersion: "9.9.9"', "Chart.yaml appVersion is 9.9.9"),
        (CHART, r"^version:.*$", "version: 9.9.9", "Chart.yaml version is 9.9.9"),
        (CHANGELOG, r"^## \[Unreleased\]$", "## Unreleased", "first section is not"),
        (CHANGELOG, r"^## \[(" + SEMVER + r")\] - ", "## [\\1] ", "is not '## [X.Y.Z] - YYYY"),
        (CHANGELOG, r"^## \[Unreleased\]\n", "## [Unreleased]\n\n## [0.0.0] - 2000-01-01\n",
         "CHANGELOG.md newest release is 0.0.0"),
        (CHANGELOG, r"\Z", "\n## [99.0.0] - 2000-01-01\n", "is listed above 99.0.0"),
        (CHANGELOG, r"\Z", "\n## [0.0.0] - 2999-01-01\n", "is dated before 0.0.0"),
        (CHANGELOG, r"\Z", "\n## [Unreleased]\n", "must be the first section, once"),
    ]
    missed, unexpected = [], []
    with tempfile.TemporaryDirectory(prefix="iscsigw-check-versions-") as tmp:
        def copy():
            for rel in (CMAKE, CHART, CHANGELOG):
                os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
                shutil.copyfile(os.path.join(REPO, rel), os.path.join(tmp, rel))
        copy()
        unexpected = check(tmp)
        for rel, pattern, replacement, expected in breaks:
            copy()
            text = read(tmp, rel)
            if replacement is None:
                # The project version one patch above itself.
                version = PROJECT.search(text).group(1)
                major, minor, patch = key(version)
                changed = text.replace(f"VERSION {version}", f"VERSION {major}.{minor}.{patch + 1}",
                                       1)
            else:
                changed = re.sub(pattern, replacement, text, count=1, flags=re.M)
            assert changed != text, f"self-test: {rel} has nothing that matches {pattern!r}"
            with open(os.path.join(tmp, rel), "w") as f:
                f.write(changed)
            found = check(tmp)
            if not any(expected in p for p in found):
                missed.append(f"{rel} ~ {pattern!r}: expected '{expected}', got {found}")
    return missed, unexpected


def main():
    if sys.argv[1:] == ["--self-test"]:
        missed, unexpected = self_test()
        for m in missed:
            print(f"self-test: not caught: {m}")
        for u in unexpected:
            print(f"self-test: the unbroken copy reported: {u}")
        print(f"versions self-test: {len(missed)} break(s) missed")
        return 1 if missed or unexpected else 0
    if sys.argv[1:]:
        sys.exit(__doc__)
    problems = check()
    for p in problems:
        print(p)
    print(f"versions: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
