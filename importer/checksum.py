"""Checksums of the received stream: ``md5|sha1|sha256|sha512:HEX`` (CDI's IMPORTER_CHECKSUM form)."""

from __future__ import annotations

import hashlib
import hmac

from importer.errors import ImportFailed, Reason

ALGORITHMS = ("md5", "sha1", "sha256", "sha512")


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
    """sha256 always (reported), plus the expected algorithm when another was asked for."""

    def __init__(self, expected: Expected | None) -> None:
        self.sha256 = hashlib.sha256()
        self.other = hashlib.new(expected.algorithm) if expected and expected.algorithm != "sha256" else None
        self.expected = expected

    def update(self, chunk: bytes) -> None:
        self.sha256.update(chunk)
        if self.other is not None:
            self.other.update(chunk)

    def verify(self) -> None:
        if self.expected is not None:
            actual = self.other.hexdigest() if self.other is not None else self.sha256.hexdigest()
            self.expected.verify(actual)
