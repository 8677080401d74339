"""The project's own C++ sources (.cc and .h) that the style checks read: the files git tracks
under the source directories when the tree is a git checkout, else every such file found by
walking those directories (a tarball, a container build context)."""
import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIRS = ("base", "dataplane", "controlplane", "rpc", "server", "csi", "tests")
EXTENSIONS = (".cc", ".h")


def cpp_sources(repo=REPO, extensions=EXTENSIONS):
    """Sorted paths relative to repo."""
    try:
        out = subprocess.run(["git", "-C", repo, "ls-files", "-z", "--", *DIRS],
                             capture_output=True, check=True).stdout.decode()
        files = [f for f in out.split("\0") if f]
        # Only a tree that is the checkout's top: a copy inside another repository lists nothing.
        top = subprocess.run(["git", "-C", repo, "rev-parse", "--show-toplevel"],
                             capture_output=True, check=True).stdout.decode().strip()
        if os.path.realpath(top) != os.path.realpath(repo):
            files = None
    except (OSError, subprocess.CalledProcessError):
        files = None
    if files is None:
        files = []
        for top in DIRS:
            for base, dirs, names in os.walk(os.path.join(repo, top)):
                dirs.sort()
                files += [os.path.relpath(os.path.join(base, n), repo) for n in names]
    return sorted(f for f in files
                  if f.endswith(extensions) and os.path.isfile(os.path.join(repo, f)))
