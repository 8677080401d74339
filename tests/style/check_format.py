"""Every C++ source of the project (tests/style/sources.py) is formatted as the repository's
.clang-format says: `clang-format --dry-run --Werror` over each, with the Debian clang-format that
scripts/install-deps.sh installs (CLANG_FORMAT names another binary). Exit 1 listing each file
that clang-format would change; `clang-format -i FILE` fixes it.

PENDING names files held back from the check for a while, each with its reason: a file whose code
is being moved on another branch is formatted once that lands, not under it. An entry whose file
is formatted (or gone) fails the check too, so the list only shrinks."""
import os
import shutil
import subprocess
import sys

from sources import REPO, cpp_sources

# path -> why it is not checked yet.
PENDING = {
}
BATCH = 50


def unformatted(files, repo=REPO, clang_format=None):
    """The files (relative to repo) that clang-format would change."""
    clang_format = clang_format or os.environ.get("CLANG_FORMAT", "clang-format")
    bad = []
    for i in range(0, len(files), BATCH):
        batch = files[i:i + BATCH]
        r = subprocess.run([clang_format, "--dry-run", "--Werror", "--style=file", *batch],
                           cwd=repo, capture_output=True, text=True)
        if r.returncode == 0:
            continue
        # One batch failed: ask each file, so that the report names exactly the unformatted ones.
        for f in batch:
            r = subprocess.run([clang_format, "--dry-run", "--Werror", "--style=file", f],
                               cwd=repo, capture_output=True, text=True)
            if r.returncode != 0:
                bad.append(f)
    return bad


def main():
    clang_format = os.environ.get("CLANG_FORMAT", "clang-format")
    if not shutil.which(clang_format):
        print(f"format: {clang_format} not found (scripts/install-deps.sh installs it)")
        return 1
    files = cpp_sources()
    if not files:
        print("format: no sources found")
        return 1
    checked = [f for f in files if f not in PENDING]
    bad = unformatted(checked, clang_format=clang_format)
    for f in bad:
        print(f"{f}: not formatted (clang-format -i {f})")
    stale = [f for f in sorted(PENDING) if f not in files or not unformatted([f])]
    for f in stale:
        print(f"{f}: formatted or gone: remove its PENDING entry in tests/style/check_format.py")
    print(f"format: {len(checked)} files checked, {len(bad)} unformatted, "
          f"{len(PENDING)} pending, {len(stale)} stale pending")
    return 1 if bad or stale else 0


if __name__ == "__main__":
    sys.exit(main())
