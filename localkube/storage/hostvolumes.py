"""Host operations behind local volumes: sparse files, loop devices, ext4, mounts. Needs root."""

from __future__ import annotations

import asyncio
import ctypes
import errno
import fcntl
import os
import shutil
import struct
import subprocess
from pathlib import Path

_TOOLS = ("losetup", "mkfs.ext4", "unshare")
_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


class HostError(RuntimeError):
    """A host command failed; the message carries its stderr."""


def host_capabilities_missing() -> str | None:
    """One line saying why volumes and pod sandboxes cannot work here, or None when they can."""
    if os.geteuid() != 0:
        return "localkube volumes and pods need root (loop devices, mounts, mount namespaces)"
    if not Path("/dev/loop-control").exists():
        return "localkube volumes need loop devices and /dev/loop-control is missing"
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        return f"localkube needs {', '.join(missing)} on PATH"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True,
                           text=True)
    if probe.returncode != 0:
        return f"localkube pods need mount namespaces: unshare --mount failed: {probe.stderr.strip()}"
    return None


async def run(*argv: str) -> str:
    process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.PIPE)
    out, err = await process.communicate()
    if process.returncode != 0:
        raise HostError(f"{' '.join(argv)} failed ({process.returncode}): {err.decode().strip()}")
    return out.decode()


def make_sparse_file(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.truncate(size)


# Loop devices are attached and detached with the ioctls, not losetup(8): a process each took 4 ms, on the way to
# every claim's Bound and again at its release, against a fraction of a millisecond (<linux/loop.h>).
_LOOP_CTL_GET_FREE, _LOOP_CONFIGURE, _LOOP_CLR_FD = 0x4C82, 0x4C0A, 0x4C01
# struct loop_config: fd, block_size, then struct loop_info64 (five u64, four u32, lo_file_name[64], the crypt
# name, key and init fields) and eight reserved u64; lo_file_name is what `losetup -a` shows.
_LOOP_CONFIG = struct.Struct("=II5Q4I64s64s32s2Q8Q")


def attach_loop(backing: Path) -> str:
    """The loop device now attached to backing. On the caller's thread: the two ioctls take 0.1 ms, and a
    thread's answer waited up to 5 ms for the interpreter lock while the event loop was busy."""
    backing_fd = os.open(backing, os.O_RDWR | os.O_CLOEXEC)
    try:
        config = _LOOP_CONFIG.pack(backing_fd, 0, *[0] * 9, str(backing).encode()[:63], b"", b"", *[0] * 10)
        control = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
        try:
            for _ in range(16):  # another program may take the free device between our two calls
                device = f"/dev/loop{fcntl.ioctl(control, _LOOP_CTL_GET_FREE)}"
                device_fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
                try:
                    fcntl.ioctl(device_fd, _LOOP_CONFIGURE, config)
                    return device
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        raise HostError(f"attaching {backing} to {device} failed: {exc.strerror}") from exc
                finally:
                    os.close(device_fd)
            raise HostError(f"no free loop device for {backing}: each one found was taken first")
        finally:
            os.close(control)
    finally:
        os.close(backing_fd)


async def detach_loop(device: str) -> None:
    await asyncio.to_thread(_detach_loop, device)


def _detach_loop(device: str) -> None:
    # If a pod's mount namespace still holds the device, the kernel detaches it when that lets go.
    fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, _LOOP_CLR_FD)
    except OSError as exc:
        raise HostError(f"detaching {device} failed: {exc.strerror}") from exc
    finally:
        os.close(fd)


# For a device over a freshly made sparse file, which reads as zeros throughout: discarding it or zeroing its
# journal and inode tables again is wasted time. assume_storage_prezeroed skips both and marks the inode tables
# zeroed, so no kernel thread zeroes them later under the pod's import either (1.2 GiB: 6 against 13 ms; writing
# the tables, as lazy_itable_init=0 did, was most of it).
MKFS_EXT4 = ("mkfs.ext4", "-q", "-F", "-E", "nodiscard,assume_storage_prezeroed=1")


async def make_ext4(device: str) -> None:
    await run(*MKFS_EXT4, device)


# A volume is bound while its filesystem is still being made: the provisioner holds an exclusive lock on the
# backing file until the filesystem is mounted, and the kubelet takes a shared one before a pod may use it, as a
# CSI node plugin formats at staging. Making ext4 took 10 to 14 ms on the way to every Filesystem claim's Bound;
# now it runs while the claim's user makes its pod and the pod is scheduled.
def lock_for_staging(backing: Path) -> int:
    """The exclusive lock on a backing file (its descriptor, closed once staging is over)."""
    fd = os.open(backing, os.O_RDONLY | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


async def staged(backing: Path) -> None:
    """Returns once no staging of the backing file is under way."""
    fd = os.open(backing, os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_SH)
    finally:
        os.close(fd)


# Mounts are made and removed with the system calls, not mount(8) and umount(8): those took 4.4 and 2 ms (a
# process, libmount reading the mount table) against 0.5 ms each, on the way to every claim's Bound.
async def mount(device: str, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    await asyncio.to_thread(_mount, device, target)


def _mount(device: str, target: Path) -> None:
    if _libc.mount(device.encode(), str(target).encode(), b"ext4", 0, None) != 0:
        raise HostError(f"mount {device} on {target} failed: {os.strerror(ctypes.get_errno())}")


async def unmount(target: Path) -> None:
    await asyncio.to_thread(_unmount, target)


def _unmount(target: Path) -> None:
    if _libc.umount2(str(target).encode(), 0) == 0:
        return
    if ctypes.get_errno() == errno.EBUSY:
        # Busy (a shell sits in it, a file is open): detach it from the tree now, the kernel frees it when
        # the last user goes, and its loop device with it (detaching a busy loop device is deferred too).
        if _libc.umount2(str(target).encode(), _MNT_DETACH) == 0:
            return
    raise HostError(f"umount {target} failed: {os.strerror(ctypes.get_errno())}")


def mounts_under(root: Path) -> list[Path]:
    """Mount points at or below root in this mount namespace, deepest first (the order to unmount them)."""
    prefix = str(root.resolve())
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            found.append(Path(point))
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def loops_of(backing: Path) -> list[str]:
    """Loop devices attached to a backing file (left over from a run that did not stop cleanly)."""
    done = subprocess.run(["losetup", "--associated", str(backing), "--output", "NAME", "--noheadings"],
                          capture_output=True, text=True)
    return done.stdout.split()


async def release_leftovers(root: Path) -> None:
    """Unmounts and detaches whatever an earlier run left under root, so a workdir can be reused."""
    for point in mounts_under(root):
        await unmount(point)
    for backing in root.glob("*.img"):
        for device in loops_of(backing):
            await detach_loop(device)
