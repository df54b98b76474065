"""Runs a chunk iterator in a thread of its own, a few chunks ahead of whoever consumes it.

Receiving, decompressing and writing each spend their time in C code that releases the GIL (socket reads,
zlib / lzma / zstd, pwrite). In one thread they take turns; on a thread each they overlap, as the processes
of `curl | zstd -d > file` do. The queue is bounded, so memory stays at ``depth`` chunks per stage.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator

DEPTH = 4
_POLL = 0.1  # how often a producer blocked on a full queue looks whether its consumer has gone
_END = object()


def ahead(chunks: Iterable[bytes], *, depth: int = DEPTH, name: str = "prefetch") -> Iterator[bytes]:
    """The same chunks, in order, produced by a thread; its exception is raised here, at the same point."""
    items: queue.Queue[object] = queue.Queue(maxsize=depth)
    gone = threading.Event()  # the consumer stopped early: the producer ends at its next chunk

    def put(item: object) -> bool:
        while not gone.is_set():
            try:
                items.put(item, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for chunk in chunks:
                if not put(chunk):
                    return
        except BaseException as error:  # noqa: BLE001 - raised again in the consumer's thread
            put(error)
            return
        put(_END)

    producer = threading.Thread(target=produce, name=name, daemon=True)
    producer.start()
    try:
        while (item := items.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]
    finally:
        # No join: the producer may sit in a network read; it notices at its next chunk and ends.
        gone.set()
