"""Moves what the import writes on to the disk while it is written, instead of all of it at the end.

Left alone, the kernel keeps the written image dirty in the page cache until the final fsync: its own
flusher only starts at a share of the whole host's memory (gigabytes) or after 30 s. The fsync then waits
for the whole image while nothing else runs (0.25 s of a 1 s import of 512 MiB, here), and the pod's memory
cgroup is charged for all of it, which is how CDI's importer pods get OOM-killed (cdi#3017). So every tick
the target is told POSIX_FADV_DONTNEED: Linux starts writing back its dirty pages without waiting for them,
and drops the pages already written. The disk works beside the download and the conversion, the final
fsync waits for the last tick's data only, and the import never holds more than a few ticks of page cache.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from types import TracebackType

log = logging.getLogger(__name__)

TICK = 0.05  # seconds: at 1 GB/s a tick's data is 50 MiB, what the final fsync waits for at worst


class Writeback:
    """While open, keeps ``path`` (a file the writer may not have created yet, or a block device) written back."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="writeback", daemon=True)

    def __enter__(self) -> Writeback:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        fd = None
        try:
            while not self._stop.wait(TICK):
                if fd is None:
                    try:
                        fd = os.open(self._path, os.O_RDONLY)
                    except FileNotFoundError:
                        continue  # qemu-img creates the file once it has opened its source
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError as error:  # only the early writeback is lost: the final fsync still makes the image durable
            log.debug("no early writeback of %s: %s", self._path, error)
        finally:
            if fd is not None:
                os.close(fd)
