"""Checksums of the received stream: ``md5|sha1|sha256|sha512:HEX`` (CDI's IMPORTER_CHECKSUM form)."""

from __future__ import annotations

import hashlib
import hmac
import queue
import threading
from pathlib import Path

from importer.errors import ImportFailed, Reason

ALGORITHMS = ("md5", "sha1", "sha256", "sha512")


def file_sha256(path: Path, *, length: int) -> str:
    """sha256 of a file's first ``length`` bytes (a disk.img is larger than the image it holds)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while length > 0 and (block := f.read(min(length, 1 << 20))):
            digest.update(block)
            length -= len(block)
    return digest.hexdigest()


class Expected:
    def __init__(self, spec: str) -> None:
        algorithm, _, digest = spec.partition(":")
        algorithm, digest = algorithm.strip().lower(), digest.strip().lower()
        size = hashlib.new(algorithm).digest_size * 2 if algorithm in ALGORITHMS else 0
        if not size or len(digest) != size or any(c not in "0123456789abcdef" for c in digest):
            raise ImportFailed(Reason.InvalidArgument,
                               f"invalid checksum {spec!r}: expected one of {'|'.join(ALGORITHMS)} ':' and hex digits")
        self.algorithm = algorithm
        self.digest = digest

    def verify(self, actual: str) -> None:
        if not hmac.compare_digest(actual, self.digest):
            raise ImportFailed(Reason.ChecksumMismatch,
                               f"{self.algorithm} checksum mismatch: expected {self.digest}, got {actual}")


class Hashes:
    """The digests of the received stream: the expected algorithm's, and sha256 when it is to be reported.

    Hashing runs in its own thread (hashlib releases the GIL): at 1.7 GB/s sha256 would otherwise take a
    third of the download thread's time on a fast link. With nothing to verify or report, nothing is hashed.
    """

    def __init__(self, expected: Expected | None, *, report_sha256: bool) -> None:
        algorithms = {expected.algorithm} if expected else set()
        if report_sha256:
            algorithms.add("sha256")
        self._hashes = {name: hashlib.new(name) for name in sorted(algorithms)}
        self.expected = expected
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=8)
        self._thread = threading.Thread(target=self._run, name="hash", daemon=True)
        if self._hashes:
            self._thread.start()

    def _run(self) -> None:
        while (chunk := self._queue.get()) is not None:
            for digest in self._hashes.values():
                digest.update(chunk)

    def update(self, chunk: bytes) -> None:
        if self._thread.is_alive():
            self._queue.put(chunk)

    def close(self) -> None:
        """Wait for the hashes to catch up; safe to call more than once."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def sha256(self) -> str | None:
        self.close()
        return self._hashes["sha256"].hexdigest() if "sha256" in self._hashes else None

    def verify(self) -> None:
        self.close()
        if self.expected is not None:
            self.expected.verify(self._hashes[self.expected.algorithm].hexdigest())
