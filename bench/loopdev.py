"""A loop block device over a sparse backing file, as the benchmark's block target."""

from __future__ import annotations

import subprocess
from pathlib import Path


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
