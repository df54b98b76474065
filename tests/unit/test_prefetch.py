"""importer.prefetch: a stage on its own thread must not change what the consumer sees, errors included."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from importer.errors import ImportFailed, Reason
from importer.prefetch import ahead


def test_chunks_arrive_whole_and_in_order() -> None:
    chunks = [bytes([i]) * (i + 1) for i in range(100)]
    assert list(ahead(iter(chunks), depth=2)) == chunks


def test_the_producers_error_is_raised_after_the_chunks_before_it() -> None:
    def source() -> Iterator[bytes]:
        yield b"a"
        yield b"b"
        raise ImportFailed(Reason.TransferFailed, "connection reset")

    got = []
    with pytest.raises(ImportFailed, match="connection reset") as raised:
        for chunk in ahead(source()):
            got.append(chunk)
    assert got == [b"a", b"b"]
    assert raised.value.reason is Reason.TransferFailed


def test_a_consumer_that_stops_early_stops_the_producer() -> None:
    produced = 0
    finished = threading.Event()

    def endless() -> Iterator[bytes]:
        nonlocal produced
        try:
            while True:
                produced += 1
                yield b"x"
        finally:
            finished.set()

    stream = ahead(endless(), depth=2)
    assert next(stream) == b"x"
    stream.close()
    assert finished.wait(5), "the producer kept running after its consumer closed the stream"
    settled = produced
    time.sleep(0.3)
    assert produced == settled <= 4  # bounded: the queue's depth plus the chunks in hand
