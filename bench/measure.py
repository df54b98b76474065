"""How the benchmark measures: wall time with the page cache flushed, peak memory per process, data blocks."""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from tests.support.hoststate import descendants

BLOCK = 4096
_ZERO_BLOCK = bytes(BLOCK)


def add_work_options(parser: argparse.ArgumentParser, *, holds: str) -> None:
    """--workdir, --keep and --json-out, which every benchmark takes: ``holds`` says what its work dir holds."""
    parser.add_argument("--workdir", type=Path, default=Path("/var/tmp"), help=f"where the work dir ({holds}) is made")
    parser.add_argument("--keep", action="store_true", help="keep the work dir")
    parser.add_argument("--json-out", type=Path, help="also write the figures here as JSON")


@contextlib.contextmanager
def work_dir(parent: Path, *, prefix: str, keep: bool) -> Iterator[Path]:
    """A fresh directory for one benchmark's images, servers and targets; removed afterwards unless kept."""
    work = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield work
    finally:
        if keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def sh(cmd: str) -> None:
    """One shell pipeline; pipefail so a failing curl is not hidden by the decompressor after it."""
    subprocess.run(["bash", "-c", f"set -o pipefail; {cmd}"], check=True, stdout=subprocess.DEVNULL)


def _exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def exit_on_sigterm() -> None:
    """A SIGTERM unwinds through the finally blocks, so servers are stopped and loop devices detached."""
    signal.signal(signal.SIGTERM, _exit)


class Turns(dict[str, float]):
    """Median seconds of each side, and every turn's seconds (``runs``) to pair the sides turn by turn."""

    def __init__(self, runs: dict[str, list[float]]) -> None:
        super().__init__({name: statistics.median(values) for name, values in runs.items()})
        self.runs = runs

    def ratio(self, numerator: str, denominator: str) -> float:
        """The median of the turns' ratios, not the ratio of the medians: the two medians can come from
        different turns, and so from different states of the machine. In one bench the first eight of fifteen
        turns ran under a burst of outside load (1.0 to 1.9 s a run, 0.6 to 0.7 s after it): the DataVolume's
        median fell among the quiet turns and `cdi import`'s among the loaded ones, and their ratio read 0.72,
        where the quiet turns' own ratios were 0.96 to 1.09 and the median of all fifteen 1.07. Both sides of one
        turn run within seconds of each other."""
        return statistics.median(n / d for n, d in zip(self.runs[numerator], self.runs[denominator], strict=True))


def in_turns(runs: int, sides: dict[str, Callable[[int], float]]) -> Turns:
    """Each side run once per turn (it gets the turn's number and returns its seconds), ``runs`` turns.

    The sides take turns, so a burst of load from other work on the machine spreads over all of them instead
    of spoiling one; each starts after a sync. Who goes first rotates from turn to turn: in a fixed order one
    side always ran right after the same one and paid for whatever it left the disk busy with (ours after CDI's
    pipeline, which writes twice as much and deletes a scratch file on a filesystem mounted with discard); a
    number of runs that is a multiple of the number of sides gives each the same share of places. Each turn's
    figures go to stderr, to show the spread.
    """
    times: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for turn in range(runs):
        for name in names[turn % len(names):] + names[:turn % len(names)]:
            os.sync()
            times[name].append(sides[name](turn))
        print(f"  run {turn + 1}: " + ", ".join(f"{name} {times[name][-1]:.2f} s" for name in names), file=sys.stderr)
    return Turns(times)


def medians(variants: dict[str, Callable[[], None]], *, setup: Callable[[], None], runs: int) -> Turns:
    """Median seconds of each variant (see :func:`in_turns`), each after ``setup`` and a sync, and including a
    final sync (CDI's pipeline ends with one): the page cache cannot be dropped."""

    def timed(run: Callable[[], None]) -> Callable[[int], float]:
        def side(_: int) -> float:
            setup()
            os.sync()
            start = time.monotonic()
            run()
            os.sync()
            return time.monotonic() - start

        return side

    return in_turns(runs, {name: timed(run) for name, run in variants.items()})


@dataclass
class PeakRss:
    own: int  # bytes: the command's own process
    children: dict[str, int]  # bytes: the highest peak among its descendants, by command name
    tree_max: int  # bytes: the kernel's figure for the largest process of the tree (wait4), a check on polling


def thread_cpu(native_id: int) -> float:
    """CPU seconds (user + system) one thread of this process has used so far."""
    fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    """CPU seconds of the children reaped so far (and of theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def peak_rss_of(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass  # exited between listing and reading
    return 0


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def peak_rss(cmd: Sequence[str]) -> PeakRss:
    """Run ``cmd`` and follow each process's VmHWM (the kernel's own high-water mark) while it lives.

    getrusage and wait4 fold a reaped child's peak into its parent's, so only polling /proc tells the
    importer's own memory apart from qemu-img's.
    """
    process = subprocess.Popen(list(cmd), stdout=subprocess.DEVNULL)
    own = 0
    seen: dict[int, tuple[str, int]] = {}  # pid: (command name, its peak)
    while True:
        own = max(own, peak_rss_of(process.pid))
        for child in descendants(process.pid):
            name, hwm = _comm(child), peak_rss_of(child)
            if not hwm:
                continue  # gone before we could read it
            # exec starts a new high-water mark under a new name: a fork of the importer that became
            # qemu-img counts as qemu-img only
            last_name, last_hwm = seen.get(child, (name, 0))
            seen[child] = (name, max(hwm, last_hwm) if name == last_name else hwm)
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(0.01)
    children: dict[str, int] = {}
    for name, hwm in seen.values():
        children[name] = max(children.get(name, 0), hwm)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, list(cmd))
    return PeakRss(own=own, children=children, tree_max=usage.ru_maxrss * 1024)


def _nonzero(chunk: memoryview) -> int:
    blocks = (chunk[at : at + BLOCK] for at in range(0, len(chunk), BLOCK))
    return sum(len(block) for block in blocks if not _ZERO_BLOCK.startswith(block))


def data_bytes(path: Path) -> tuple[int, int]:
    """(allocated bytes, bytes in 4 KiB blocks that are not all zero) of a file.

    Only the extents SEEK_DATA reports are read: a hole holds no data by definition, and skipping them
    keeps this fast on a mostly empty 4 GiB disk.
    """
    nonzero = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        allocated = os.fstat(fd).st_blocks * 512
        offset = 0
        while offset < size:
            try:
                start = os.lseek(fd, offset, os.SEEK_DATA)
            except OSError:
                break  # ENXIO: only a hole is left
            end = os.lseek(fd, start, os.SEEK_HOLE)
            os.lseek(fd, start, os.SEEK_SET)
            left = end - start
            while left > 0:
                chunk = memoryview(os.read(fd, min(left, 8 << 20)))
                nonzero += _nonzero(chunk)
                left -= len(chunk)
            offset = end
    finally:
        os.close(fd)
    return allocated, nonzero
