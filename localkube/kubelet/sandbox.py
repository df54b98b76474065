"""`python -I -S sandbox.py ERROR_FD KUBELET_PID`, then SPEC on stdin: becomes one container process (standard
library only).

It is started before its container is known (spawner.py) and waits for SPEC, one line on stdin. It then sends
its stdout and stderr to the container's log file, takes /dev/null as stdin, enters a private mount namespace
and builds the container's view there: a tmpfs root holding bind mounts
of every top-level directory of the host (so the host's programs and libraries are all there, images are
never pulled), a fresh /dev with the usual character devices, then the pod's volumes at their mountPaths and
volumeDevices at their devicePaths. It chroots into that root, enters workingDir and execs the command, so the
process the kubelet started *is* the container. Building the root on a tmpfs means mount points like /data or
/dev/termination-log are never created on the host, where other pods (or other programs) would see them.

ERROR_FD tells the kubelet how the start went: SPEC_TAKEN as soon as SPEC is read, then either the failure
before exec (a missing command, a mount that fails) or nothing: exec closes the descriptor (it is close-on-exec).
Nothing at all means the sandbox died before it read SPEC; a container that ran, however briefly, said SPEC_TAKEN.
Runs as root, the only user; runAsUser/runAsGroup are not applied (fsGroup is, by the kubelet, on volumes).

It imports only what is built into the interpreter, and ctypes: every container start pays for its imports,
and json, pathlib and typing (re, fnmatch, urllib, ...) took 15 of its 26 ms of CPU. So SPEC is the spec dict
in marshal format, hex-encoded (:func:`encode_spec`): the kubelet runs this file with its own interpreter, so
both ends speak the same marshal version.
"""

from __future__ import annotations

import ctypes
import marshal
import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers honour the name)
if TYPE_CHECKING:
    from typing import Any

_CLONE_NEWNS = 0x00020000
_MS_RDONLY = 1
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
_DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
              "stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx"}

_MNT_DETACH = 2
_PR_SET_PDEATHSIG, _SIGKILL = 1, 9
SPEC_TAKEN = b"+"

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = (lambda v: None if v is None else str(v).encode())
    if _libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} on {target}: {os.strerror(errno)}")


def _bind(source: str, target: str, *, read_only: bool = False) -> None:
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))
    _mount(source, target, None, _MS_BIND | _MS_REC)
    if read_only:
        _mount(None, target, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY)


def _build_root(root: str) -> None:
    _mount("tmpfs", root, "tmpfs", 0, "mode=755")
    for entry in os.scandir("/"):
        target = os.path.join(root, entry.name)
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), target)
        elif entry.name == "dev":
            _build_dev(target)
        elif entry.is_dir() or entry.is_file():
            _bind(entry.path, target)


def _build_dev(dev: str) -> None:
    os.mkdir(dev)
    _mount("tmpfs", dev, "tmpfs", 0, "mode=755")
    for node in _DEV_NODES:
        if os.path.exists(f"/dev/{node}"):
            _bind(f"/dev/{node}", f"{dev}/{node}")
    _bind("/dev/pts", f"{dev}/pts")
    os.mkdir(f"{dev}/shm")
    _mount("tmpfs", f"{dev}/shm", "tmpfs", 0, "mode=1777")
    for name, link in _DEV_LINKS.items():
        os.symlink(link, f"{dev}/{name}")


def _drop_foreign_volumes(keep: set[str]) -> None:
    """Detaches, in this namespace only, every loop-device filesystem the pod does not use: the namespace
    started as a copy of all the host's mounts, and a copy would keep other volumes' loop devices busy (their
    provisioner could not detach them) for as long as this container runs."""
    points = []
    with open("/proc/self/mountinfo") as mountinfo:
        lines = mountinfo.read().splitlines()
    for line in lines:
        fields = line.split()
        source = fields[fields.index("-") + 2]
        point = fields[4].replace("\\040", " ")
        if source.startswith("/dev/loop") and point not in keep:
            points.append(point)
    for point in sorted(points, key=len, reverse=True):
        _libc.umount2(point.encode(), _MNT_DETACH)


def enter(spec: dict[str, Any]) -> None:
    """Builds the container's filesystem view and execs; returns only by raising."""
    if _libc.unshare(_CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS) failed: mount namespaces are unavailable")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing we mount may propagate back to the host
    root = spec["root"]
    _build_root(root)
    keep = set()
    for mount in spec["mounts"]:
        target = os.path.join(root, mount["target"].lstrip("/"))
        _bind(mount["source"], target, read_only=mount.get("readOnly", False))
        keep.add(target)
    _drop_foreign_volumes(keep)
    os.chroot(root)
    working_dir = spec.get("workingDir") or "/"
    os.makedirs(working_dir, exist_ok=True)
    os.chdir(working_dir)
    argv, env = spec["argv"], spec["env"]
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot run {argv[0]!r}: {exc.strerror}") from None


def encode_spec(spec: dict[str, Any]) -> str:
    """SPEC as this file takes it (plain dicts, lists, strings, numbers and booleans only)."""
    return marshal.dumps(spec).hex()


def _take_stdio(log: str) -> None:
    """stdout and stderr to the end of the container's log file, stdin from /dev/null."""
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open("/dev/null", os.O_RDONLY)
    for fd, target in ((out, 1), (out, 2), (null, 0)):
        os.dup2(fd, target)
    os.close(out)
    os.close(null)


def _die_with(kubelet: int) -> None:
    """The container is killed when the kubelet's thread that started it ends, whatever ends it: a kubelet killed
    with SIGKILL cannot stop its pods, and they ran on, each holding its volume's mount, with no one to reap them.
    The setting outlives exec. The kubelet may have died before it was made: then nothing would ever send it."""
    _libc.prctl(_PR_SET_PDEATHSIG, _SIGKILL)
    if os.getppid() != kubelet:
        os._exit(0)


def main() -> None:
    error_fd, kubelet = int(sys.argv[1]), int(sys.argv[2])
    _die_with(kubelet)
    os.set_inheritable(error_fd, False)
    line = sys.stdin.buffer.readline()
    if not line:  # the kubelet stopped without a container for this sandbox
        os._exit(0)
    os.write(error_fd, SPEC_TAKEN)
    try:
        spec = marshal.loads(bytes.fromhex(line.decode().strip()))
        _take_stdio(spec["log"])
        enter(spec)
    except OSError as exc:
        detail = exc.strerror or str(exc)
        if exc.filename:
            detail = f"{exc.filename}: {detail}"
        os.write(error_fd, detail.encode()[:4096])
        os._exit(128)


if __name__ == "__main__":
    main()
