"""Runs a command under a seccomp filter that refuses io_uring_setup with EPERM, as a container
runtime's default profile does, and allows every other system call:

    python3 -m iscsigw_test.no_io_uring iscsigwd --state-dir ...

The filter is classic BPF installed with prctl(2) through ctypes (no libseccomp needed), before
execv, so the command and everything it starts inherit it. It checks the architecture first: on
an architecture it does not know every call is allowed, and `command()` refuses to build the
launcher line there (the test then cannot show the refusal).
"""
import ctypes
import errno
import os
import platform
import struct
import sys

# linux/audit.h AUDIT_ARCH_* and io_uring_setup's number there (the generic table: 425 on both).
_ARCHES = {"x86_64": (0xC000003E, 425), "aarch64": (0xC00000B7, 425)}

# linux/filter.h, linux/seccomp.h
_BPF_LD_W_ABS = 0x20   # BPF_LD | BPF_W | BPF_ABS
_BPF_JEQ_K = 0x15      # BPF_JMP | BPF_JEQ | BPF_K
_BPF_RET_K = 0x06      # BPF_RET | BPF_K
_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_ERRNO = 0x00050000
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
# struct seccomp_data: nr at 0, arch at 4.
_NR, _ARCH = 0, 4


def supported():
    return platform.machine() in _ARCHES


def refusal():
    """Why this process may not use io_uring (a plain io_uring_setup(1, {}) fails: ENOSYS, EPERM
    from a seccomp filter, kernel.io_uring_disabled), or None when it may or the architecture is
    one whose system call number is not known here."""
    if not supported():
        return None
    nr = _ARCHES[platform.machine()][1]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
    fd = libc.syscall(ctypes.c_long(nr), ctypes.c_uint(1), params)
    if fd < 0:
        err = ctypes.get_errno()
        return f"io_uring_setup: {os.strerror(err)} ({errno.errorcode.get(err, err)})"
    os.close(fd)
    return None


def command(argv):
    """The launcher line that runs ARGV under the filter."""
    if not supported():
        raise RuntimeError(f"no seccomp filter for {platform.machine()}")
    return [sys.executable, os.path.abspath(__file__)] + list(argv)


def _insn(code, jt, jf, k):
    return struct.pack("HBBI", code, jt, jf, k)


def install():
    arch, nr = _ARCHES[platform.machine()]
    prog = b"".join([
        _insn(_BPF_LD_W_ABS, 0, 0, _ARCH),
        _insn(_BPF_JEQ_K, 0, 3, arch),            # another architecture: allow
        _insn(_BPF_LD_W_ABS, 0, 0, _NR),
        _insn(_BPF_JEQ_K, 0, 1, nr),
        _insn(_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO | errno.EPERM),
        _insn(_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW),
    ])
    buf = ctypes.create_string_buffer(prog, len(prog))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                           ctypes.c_ulong]
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


if __name__ == "__main__":
    install()
    os.execv(sys.argv[1], sys.argv[1:])
