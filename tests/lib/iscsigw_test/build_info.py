"""What a tree's binaries should say they are (server/build_info.h): the project version of
CMakeLists.txt, and the commit cmake/build_info.cmake finds: the build's ISCSIGW_COMMIT when
given, else the repository's HEAD (12 hex digits), else "unknown" (docs/contributing.md,
"Releases")."""
import os
import re
import subprocess

from iscsigw_test.harness import BUILD, REPO


def project_version(repo=REPO):
    with open(os.path.join(repo, "CMakeLists.txt")) as f:
        return re.search(r"^project\(iscsigw VERSION ([0-9]+\.[0-9]+\.[0-9]+)\b", f.read(),
                         re.M).group(1)


def cached_commit(build=BUILD):
    """ISCSIGW_COMMIT in the build's CMakeCache.txt; "" when unset."""
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            m = re.search(r"^ISCSIGW_COMMIT:\w+=(.*)$", f.read(), re.M)
    except OSError:
        return ""
    return m.group(1).strip() if m else ""


def expected_commit(repo=REPO, build=BUILD):
    given = cached_commit(build)
    if given:
        return given
    p = subprocess.run(["git", "rev-parse", "--show-toplevel", "--short=12", "HEAD"], cwd=repo,
                       capture_output=True, text=True)
    lines = p.stdout.split()
    if p.returncode != 0 or len(lines) != 2 or os.path.realpath(lines[0]) != os.path.realpath(repo):
        return "unknown"
    return lines[1]
