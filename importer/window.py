"""An NBD export that needs no staging space at all: a sliding memory window over the download.

When the source can be read by range (HTTP Range, S3 ranged GET) and arrives uncompressed, nothing is
written but the result (a block device has no filesystem to stage on anyway): the sequential download
keeps only a window of bytes in memory; qemu-img's reads are served from there, wait for the download when they are just ahead of it,
and are fetched on their own by range when they fall outside. Images written by qemu-img keep data in
guest order, so nearly every read hits the window and the image crosses the network about once, while
the sequential stream still feeds the checksum. The download pauses when it runs a window ahead of
qemu-img's reads, so memory stays bounded by ``span + behind``.
"""

from __future__ import annotations

import bisect
import socket
from collections.abc import Callable

from importer.nbd import Arrival, Sender

SPAN = 32 << 20  # how far the download may run ahead of qemu-img's reads
BEHIND = 16 << 20  # how much already-read data is kept for qemu-img's out-of-order (-W) reads
LOOKAHEAD = 128 << 20  # a read further ahead than this is fetched by range instead of waited for


class Window(Arrival):
    def __init__(self, *, size: int, read_range: Callable[[int, int], bytes], span: int = SPAN,
                 behind: int = BEHIND, lookahead: int = LOOKAHEAD) -> None:
        self.size = size
        self.span = span
        self.behind = behind
        self.lookahead = lookahead
        super().__init__()
        self._read_range = read_range
        self._starts: list[int] = []
        self._chunks: list[bytes] = []
        self.consumer = 0  # end of the furthest read asked for
        self.draining = False  # qemu-img is done: the rest is only read for the checksum

    def append(self, chunk: bytes) -> None:
        with self._cond:
            while self.written - self.consumer > self.span and not self.done and not self.draining:
                self._cond.wait()
            self._starts.append(self.written)
            self._chunks.append(chunk)
            self.written += len(chunk)
            keep_from = self.written if self.draining else self.consumer - self.behind
            while self._chunks and self._starts[0] + len(self._chunks[0]) <= keep_from:
                self._starts.pop(0)
                self._chunks.pop(0)
            self._cond.notify_all()

    def drain(self) -> None:
        with self._cond:
            self.draining = True
            self._cond.notify_all()

    def close(self) -> None:
        self.finish(self.error)

    def fetch(self, offset: int, length: int) -> Sender | None:
        end = offset + length
        with self._cond:
            low = self._starts[0] if self._starts else self.written
            if low <= offset <= self.written + self.lookahead:
                # Only reads that follow the stream pace it: a far jump (a table at the end) is fetched by range.
                self.consumer = max(self.consumer, end)
                self._cond.notify_all()
                while self.written < end and not self.done:
                    self._cond.wait()
                low = self._starts[0] if self._starts else self.written
                if self.written >= end and offset >= low:
                    return _sender(self._copy(offset, end))
                if self.error is not None:
                    return None
        try:
            data = self._read_range(offset, length)
        except Exception:
            return None
        return _sender(data) if len(data) == length else None

    def _copy(self, offset: int, end: int) -> list[memoryview]:
        """Views of the held chunks covering the range: sent without copying them first."""
        i = bisect.bisect_right(self._starts, offset) - 1
        parts = []
        while offset < end:
            start, chunk = self._starts[i], self._chunks[i]
            piece = memoryview(chunk)[offset - start : end - start]
            parts.append(piece)
            offset += len(piece)
            i += 1
        return parts


def _sender(parts: list[memoryview] | bytes) -> Sender:
    def send(conn: socket.socket) -> None:
        for part in [parts] if isinstance(parts, bytes) else parts:
            conn.sendall(part)

    return send
