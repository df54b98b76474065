"""Compression detected by magic and peeled off in a chain (a .xz of a .gz is two layers).

CDI knows gzip, xz and zstd; we add bzip2. Every layer is read through a bounded ``read(n)``, so a
decompression bomb costs time, never memory; the target's capacity stops it (TargetTooSmall). Each layer
runs in a thread of its own, overlapping with the download and the writes (see :mod:`importer.prefetch`).
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from importer.errors import ImportFailed, Reason
from importer.prefetch import ahead

MAGICS = {
    "gz": b"\x1f\x8b",
    "xz": b"\xfd7zXZ\x00",
    "zst": b"\x28\xb5\x2f\xfd",
    "bz2": b"BZh",
}
PEEK = 16
MAX_LAYERS = 4
OUT_CHUNK = 1 << 20


def detect(head: bytes) -> str | None:
    """The compression whose magic starts ``head``, if any."""
    for kind, magic in MAGICS.items():
        if head.startswith(magic):
            # bzip2's "BZh" is followed by the block size digit; plain text may start with "BZh".
            if kind == "bz2" and not head[3:4].isdigit():
                continue
            return kind
    return None


class ChunkReader(io.RawIOBase):
    """A file object over an iterator of chunks, for the decompressors' file interfaces."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._it = iter(chunks)
        self._rest = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._rest:
            try:
                self._rest = memoryview(next(self._it))
            except StopIteration:
                return 0
        n = min(len(buffer), len(self._rest))
        buffer[:n] = self._rest[:n]
        self._rest = self._rest[n:]
        return n


def _layer(kind: str, raw: BinaryIO) -> tuple[BinaryIO, tuple[type[BaseException], ...]]:
    """The decompressing reader over ``raw``, and what it raises on corrupt data.

    Each codec is imported when its magic is seen: most images are not compressed, and importing all four
    (zstandard's extension among them) cost every import 10 ms before its first byte."""
    if kind == "gz":
        import gzip
        import zlib

        return gzip.GzipFile(fileobj=raw, mode="rb"), (zlib.error,)  # type: ignore[return-value]
    if kind == "xz":
        import lzma

        return lzma.LZMAFile(raw), (lzma.LZMAError,)  # type: ignore[return-value]
    if kind == "bz2":
        import bz2

        return bz2.BZ2File(raw), ()  # type: ignore[return-value]
    import zstandard

    # pzstd and `zstd -T` write several frames; CDI-style single-frame readers stop after the first.
    return (zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True),  # type: ignore[return-value]
            (zstandard.ZstdError,))


def _inflate(kind: str, chunks: Iterable[bytes]) -> Iterator[bytes]:
    reader, corrupt = _layer(kind, io.BufferedReader(ChunkReader(chunks), buffer_size=OUT_CHUNK))  # type: ignore[arg-type]
    try:
        while block := reader.read(OUT_CHUNK):
            yield block
    except (EOFError, OSError, *corrupt) as error:
        if isinstance(error, ImportFailed):
            raise
        raise ImportFailed(Reason.UnsupportedFormat, f"corrupt or truncated {kind} data: {error}") from error


class Peeked:
    """An iterator of chunks whose first bytes are available up front, for magic detection."""

    def __init__(self, chunks: Iterable[bytes], *, want: int = PEEK) -> None:
        self._it = iter(chunks)
        self._buffer: list[bytes] = []
        head = b""
        while len(head) < want:
            chunk = next(self._it, None)
            if chunk is None:
                break
            self._buffer.append(chunk)
            head += chunk
        self.head = head

    def __iter__(self) -> Iterator[bytes]:
        while self._buffer:
            yield self._buffer.pop(0)
        yield from self._it


def decompressed(chunks: Iterable[bytes]) -> tuple[list[str], Iterator[bytes]]:
    """Peel every compression layer; returns the layers found (outermost first) and the plain stream."""
    layers: list[str] = []
    stream: Iterable[bytes] = chunks
    while True:
        peeked = Peeked(stream)
        kind = detect(peeked.head)
        if kind is None:
            return layers, iter(peeked)
        if len(layers) >= MAX_LAYERS:
            raise ImportFailed(Reason.UnsupportedFormat, f"more than {MAX_LAYERS} nested compression layers")
        layers.append(kind)
        stream = ahead(_inflate(kind, peeked), name=f"inflate-{kind}")
