"""A loop block device over a sparse backing file, as the benchmark's block target, and an ext4 filesystem on
one, made as localkube provisions a Filesystem volume (a fair target to compare a DataVolume with)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

from localkube.storage.hostvolumes import MKFS_EXT4


class LoopDevice:
    """Attached on construction; :meth:`close` detaches it (loop devices outlive the process that made them)."""

    def __init__(self, backing: Path, *, size: int) -> None:
        self.backing = backing
        with backing.open("wb") as f:
            f.truncate(size)
        attached = subprocess.run(["losetup", "-f", "--show", str(backing)], check=True, capture_output=True,
                                  text=True)
        self.path = Path(attached.stdout.strip())

    def discard(self) -> None:
        """Every run starts on an unallocated backing file, as on a new volume, not on the last run's blocks."""
        subprocess.run(["blkdiscard", "-f", str(self.path)], check=True, capture_output=True)

    def close(self) -> None:
        subprocess.run(["losetup", "-d", str(self.path)], check=False)
        self.backing.unlink(missing_ok=True)


@contextlib.contextmanager
def ext4_volume(backing: Path, *, size: int) -> Iterator[Path]:
    """A directory on a fresh ext4 filesystem over a loop device, unmounted and detached afterwards."""
    loop = LoopDevice(backing, size=size)
    mountpoint = backing.with_suffix(".mnt")
    try:
        subprocess.run([*MKFS_EXT4, str(loop.path)], check=True)
        mountpoint.mkdir()
        subprocess.run(["mount", str(loop.path), str(mountpoint)], check=True)
        try:
            yield mountpoint
        finally:
            subprocess.run(["umount", str(mountpoint)], check=False)
    finally:
        loop.close()
        with contextlib.suppress(OSError):
            mountpoint.rmdir()
