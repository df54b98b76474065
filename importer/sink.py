"""Raw bytes straight to the target, without qemu-img, leaving zero blocks unwritten.

A file keeps holes where the image has zeros (cdi#3212: a 70 GiB raw image with 10 GiB of data must not
use 55 GiB). A block device may hold old data, so zero runs are zeroed with BLKZEROOUT, which thin
devices and loop devices turn into discards instead of writes.
"""

from __future__ import annotations

import fcntl
import os
import struct
from collections.abc import Iterable
from pathlib import Path

from importer.errors import ImportFailed, Reason

BLOCK = 64 << 10
SECTOR = 512
# "Is this all zeros" is asked as "do these zeros start with it": bytes.startswith is one memcmp that stops
# at the first non-zero byte and takes a memoryview without copying it. (memoryview == memoryview compares
# element by element: a millisecond per MiB of zeros, half a second per GiB.)
_ZEROS = bytes(4 << 20)
BLKZEROOUT = 0x127F


class RawWriter:
    def __init__(self, path: Path, *, block_device: bool, limit: int | None, preallocate: bool = False) -> None:
        flags = os.O_WRONLY | (0 if block_device else os.O_CREAT | os.O_TRUNC)
        self.fd = os.open(path, flags, 0o600)
        self.block_device = block_device
        self.limit = limit
        self.preallocate = preallocate
        self.offset = 0
        self.data_bytes = 0
        self._zero_start: int | None = None

    def write_all(self, chunks: Iterable[bytes]) -> int:
        """Write the stream, padded with zeros to a whole sector as qemu sees raw images; returns that size."""
        for chunk in chunks:
            self.write(chunk)
        if self.offset % SECTOR:
            self.write(bytes(SECTOR - self.offset % SECTOR))
        self._flush_zeros()
        return self.offset

    def write(self, chunk: bytes) -> None:
        end = self.offset + len(chunk)
        if self.limit is not None and end > self.limit:
            raise ImportFailed(Reason.TargetTooSmall, f"the image is larger than the target ({self.limit} bytes)")
        view = memoryview(chunk)
        if self.preallocate or len(view) > len(_ZEROS) or not _ZEROS.startswith(view):
            self._write_mixed(view)
        else:
            self._zero(self.offset, len(chunk))
        self.offset = end

    def _write_mixed(self, view: memoryview) -> None:
        for at in range(0, len(view), BLOCK):
            piece = view[at : at + BLOCK]
            position = self.offset + at
            if not self.preallocate and _ZEROS.startswith(piece):
                self._zero(position, len(piece))
                continue
            self._flush_zeros(upto=position)
            written = 0
            while written < len(piece):
                written += os.pwrite(self.fd, piece[written:], position + written)
            self.data_bytes += len(piece)

    def _zero(self, position: int, length: int) -> None:
        if self._zero_start is None:
            self._zero_start = position

    def _flush_zeros(self, upto: int | None = None) -> None:
        start, self._zero_start = self._zero_start, None
        end = self.offset if upto is None else upto
        if start is None or end <= start or not self.block_device:
            return  # files: the hole is already there (new file) and truncation fixes the size
        aligned_end = end - (end - start) % 512
        if aligned_end > start and start % 512 == 0:
            try:
                fcntl.ioctl(self.fd, BLKZEROOUT, struct.pack("QQ", start, aligned_end - start))
                start = aligned_end
            except OSError:
                pass
        while start < end:
            n = min(BLOCK, end - start)
            start += os.pwrite(self.fd, memoryview(_ZEROS)[:n], start)

    def close(self) -> None:
        os.close(self.fd)
