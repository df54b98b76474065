"""What an import has written goes on to the disk while the import runs: the page cache it holds stays small.

The source stalls near its end; meanwhile the target is looked at with cachestat(2) (Linux ≥ 6.5), which
counts the pages of one file (or block device) in the page cache. Left to the kernel, everything written so
far would still be cached and dirty there, charged to the importer pod's memory (CDI's pods are OOM-killed
this way) and waiting to be flushed at the end. (qemu-img bypasses the cache with O_DIRECT wherever the target
takes it; raw images, written by the importer itself, are written back as they go on filesystems.)
"""

from __future__ import annotations

import ctypes
import os
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import imaging
from tests.support.httpfault import Behaviour, FaultServer

MiB = 1 << 20
IMAGE = 48 * MiB  # random data: every byte of it is written
STALL_AT = 40 * MiB
WRITTEN = 32 * MiB  # written by the time we look (a conversion lags its download by a window)
CACHED_AT_MOST = 8 * MiB
_CACHESTAT = 451  # the same number on every architecture (a syscall added after the tables were unified)


def cached(path: Path) -> int:
    """Bytes of ``path`` in the page cache (clean or dirty)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        whole = ctypes.create_string_buffer(struct.pack("QQ", 0, 0), 16)  # length 0: to the end
        stat = ctypes.create_string_buffer(40)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syscall(_CACHESTAT, fd, whole, stat, 0) != 0:
            pytest.skip(f"cachestat(2) is missing (Linux < 6.5?): {os.strerror(ctypes.get_errno())}")
        pages = struct.unpack("5Q", stat.raw)[0]
        return int(pages * os.sysconf("SC_PAGE_SIZE"))
    finally:
        os.close(fd)


def wait_for(check: Callable[[], bool], *, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def on_tmpfs(path: Path) -> bool:
    kind = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True, check=True)
    return kind.stdout.strip() == "tmpfs"


@pytest.mark.parametrize(("fmt", "volume"), [("raw", "filesystem"), ("qcow2", "filesystem"), ("raw", "block"),
                                           ("qcow2", "block")])
def test_written_data_leaves_the_page_cache_during_the_import(fmt: str, volume: str, fault_server: FaultServer,
                                                              loop_device: Callable[..., Path],
                                                              tmp_path: Path) -> None:
    if on_tmpfs(tmp_path):
        pytest.skip("the test directory is on tmpfs, whose pages are the data itself and never written back")
    raw = tmp_path / "image.raw"
    with raw.open("wb") as f:
        f.write(os.urandom(IMAGE))
    image = raw if fmt == "raw" else imaging.convert(raw, tmp_path / "image.qcow2", "qcow2")
    name = fault_server.publish(image)
    fault_server.behaviours[name] = Behaviour(stall_after=STALL_AT, stall_seconds=8)
    if volume == "block":
        dest = loop_device(IMAGE + 4 * MiB)
        backing = next(tmp_path.glob("loop-backing-*"))  # where the device's data lands once written back

        def target() -> Path | None:
            return dest

        def written() -> int:
            return backing.stat().st_blocks * 512
    else:
        dest = tmp_path / "volume"
        dest.mkdir()

        def target() -> Path | None:  # the hidden file the import writes, renamed to disk.img at the end
            return next((p for p in dest.iterdir() if p.is_file()), None)

        def written() -> int:  # ext4 counts the blocks of dirty data too (delayed allocation)
            path = target()
            return path.stat().st_blocks * 512 if path else 0

    importing = subprocess.Popen([sys.executable, "-m", "cdi.cli.main", "import", "--no-progress", "--url",
                                  fault_server.url(name), "--dest", str(dest)], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: fault_server.sent(name) >= STALL_AT, seconds=60), "the source never got to its stall"
        assert wait_for(lambda: written() >= WRITTEN, seconds=5), f"only {written()} bytes written during the stall"
        path = target()
        assert path is not None
        low = wait_for(lambda: cached(path) <= CACHED_AT_MOST, seconds=2)
        assert low, f"{cached(path) // MiB} MiB of {written() // MiB} MiB written still in the page cache"
        assert importing.wait(timeout=60) == 0, importing.stderr.read() if importing.stderr else ""
    finally:
        if importing.poll() is None:
            importing.kill()
            importing.wait()
    result = dest if volume == "block" else dest / "disk.img"
    with result.open("rb") as f:
        assert f.read(IMAGE) == raw.read_bytes()
