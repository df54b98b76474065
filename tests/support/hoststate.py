"""What a local cluster leaves on the machine: mounts and loop devices of its workdir, as the machine reports them."""

from __future__ import annotations

import subprocess
from pathlib import Path

from localkube.storage.hostvolumes import loops_of, mounts_under


def leftovers(workdir: Path) -> tuple[list[str], list[str]]:
    """(mount points, loop devices) of this workdir, as the machine reports them."""
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if str(workdir) in line.split()[4]]
    loops = [line for line in subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout.splitlines()
             if str(workdir) in line]
    return mounts, loops


def force_release(workdir: Path) -> None:
    """What a failed test must not leave on the machine (a passing one leaves nothing to do here)."""
    for point in mounts_under(workdir):
        subprocess.run(["umount", "--lazy", str(point)], check=False)
    for image in (workdir / "volumes").glob("*.img"):
        for device in loops_of(image):
            subprocess.run(["losetup", "-d", device], check=False)
