"""Where the image goes, and how much room it has there (cdi-facts §3.8).

Three kinds, picked from the destination path: a directory (a Filesystem PVC: ``disk.img`` of the usable
size), a block device (raw bytes from offset 0, never resized) or any other path (a raw file of the
image's size, for `cdi import` users). Files are written under a hidden temporary name and renamed only
once complete and fsynced, so a failed or interrupted import never leaves something that looks finished.
"""

from __future__ import annotations

import errno
import fcntl
import math
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from importer.contract import DISK_IMAGE_NAME
from importer.errors import ImportFailed, Reason

MiB = 1 << 20
BLKGETSIZE64 = 0x80081272
BLKZEROOUT = 0x127F
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02


def usable_space(available: int, overhead: float) -> int:
    """CDI's usable size: available shrunk by the filesystem overhead, rounded down to whole MiB."""
    return (math.ceil(available / (1 + overhead)) // MiB) * MiB


@dataclass
class Target:
    kind: str  # "filesystem", "block" or "file"
    final_path: Path  # what the user sees when the import is done
    work_path: Path  # what we write to (a hidden sibling for files; the device itself for block)
    capacity: int | None  # largest virtual size accepted; None: any
    size: int | None  # final size of the file (Filesystem: the usable size); None: the image's size

    @property
    def is_block(self) -> bool:
        return self.kind == "block"

    def direct_io(self) -> bool:
        """Whether the work path takes O_DIRECT writes (a block device does; most filesystems do, some do not).

        Answered by opening the work file with O_DIRECT, which creates it empty: the writer replaces it, and a
        failed import removes it like any partial result."""
        if self.is_block:
            return True
        try:
            fd = os.open(self.work_path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
        except OSError as error:
            if error.errno == errno.EINVAL:  # the filesystem has no O_DIRECT
                return False
            raise
        os.close(fd)
        return True

    def staging_dir(self) -> Path | None:
        """Where a non-raw image may be staged while it converts: on the target's own filesystem."""
        return None if self.is_block else self.final_path.parent

    def check_fits(self, virtual_size: int | None) -> None:
        if virtual_size is not None and self.capacity is not None and virtual_size > self.capacity:
            raise ImportFailed(Reason.TargetTooSmall, f"virtual image size {virtual_size} is larger than the reported "
                               f"available storage {self.capacity}. A larger PVC is required")

    def finish(self, *, image_size: int, preallocate: bool = False, mode: int = 0o660) -> None:
        """Size, flush and publish the result."""
        if self.is_block:
            _fsync_path(self.work_path)
            return
        final = self.size if self.size is not None else image_size
        # Filesystem: grow to the usable size (never shrink: the data is there); file: the image's size.
        current = self.work_path.stat().st_size
        if current < final or (self.kind == "file" and current != final):
            os.truncate(self.work_path, final)
        if preallocate:
            # The grown part too: preallocation promises the whole volume's blocks, not only the image's.
            fd = os.open(self.work_path, os.O_WRONLY)
            try:
                os.posix_fallocate(fd, 0, max(final, current))
            finally:
                os.close(fd)
        os.chmod(self.work_path, mode)
        _fsync_path(self.work_path)
        os.replace(self.work_path, self.final_path)
        _fsync_path(self.final_path.parent)

    def discard(self) -> None:
        """Leave nothing that could pass for a finished import."""
        if self.is_block:
            # The device cannot disappear; wipe its first MiB so no partial image can be booted or mistaken.
            try:
                with open(self.work_path, "r+b", buffering=0) as dev:
                    dev.write(bytes(min(MiB, block_device_size(self.work_path))))
                    os.fsync(dev.fileno())
            except OSError:
                pass
            return
        self.work_path.unlink(missing_ok=True)


def open_target(dest: str, *, size: int | None, overhead: float) -> Target:
    """The Target for a destination path, with its capacity computed as CDI does."""
    path = Path(dest)
    if path.is_dir():
        disk = path / DISK_IMAGE_NAME
        vfs = os.statvfs(path)
        free = vfs.f_bavail * vfs.f_frsize
        if disk.exists():
            free += disk.stat().st_blocks * 512  # a previous attempt's image is replaced
        available = min(free, size) if size else free
        usable = usable_space(available, overhead)
        if usable <= 0:
            raise ImportFailed(Reason.TargetTooSmall, f"no usable space in {path} ({available} bytes available)")
        # CDI checks the virtual size against the available space, and sizes disk.img to the usable space
        # unless the image is already bigger (cdi-facts §3.8): stricter would refuse images CDI imports.
        return Target(kind="filesystem", final_path=disk, work_path=path / f".{DISK_IMAGE_NAME}.importing",
                      capacity=available, size=usable)
    if path.exists() and stat.S_ISBLK(path.stat().st_mode):
        return Target(kind="block", final_path=path, work_path=path, capacity=block_device_size(path), size=None)
    if not path.parent.is_dir():
        raise ImportFailed(Reason.InvalidArgument, f"destination directory {path.parent} does not exist")
    return Target(kind="file", final_path=path, work_path=path.parent / f".{path.name}.importing",
                  capacity=size, size=size)


def block_device_size(path: Path) -> int:
    with open(path, "rb") as dev:
        buf = fcntl.ioctl(dev.fileno(), BLKGETSIZE64, b"\0" * 8)
    return int(struct.unpack("Q", buf)[0])


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
