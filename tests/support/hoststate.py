"""What a local cluster leaves on the machine: mounts and loop devices of its workdir, and processes, as the
machine reports them."""

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


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``: the children of each of its threads (the importer starts qemu-img from a
    worker thread), recursively."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            children = [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue  # the thread ended meanwhile
        for child in children:
            found += [child, *descendants(child)]
    return found


def started(pid: int) -> str | None:
    """When the process began (clock ticks since boot), or None when it is gone or a zombie: with its pid, it
    names one process even after the kernel hands the pid out again."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields[19]
