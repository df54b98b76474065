"""One upload: the request body handed to the import pipeline as a Source, across as many connections as it takes.

The pipeline consumes one stream. A resumed upload must continue that same stream, so the session (not the
HTTP request) owns it: each connection appends the bytes it brings, and when a connection breaks the
pipeline simply waits for the next one, holding everything received so far. The checksum is computed here,
on the bytes as they arrive, so it is known the moment the body ends: a mismatch stops the pipeline
before it publishes anything, and an async client is told at once instead of after the conversion.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import queue
import threading
from collections.abc import Iterator, Sequence

from importer.checksum import Expected
from importer.errors import ImportFailed, Reason
from importer.pipeline import ImportRequest, ImportResult, run_import
from importer.progress import Listener, Progress, Snapshot
from importer.sources.base import Probe, Source

log = logging.getLogger("cdi-uploadserver")

RECEIVING, SUSPENDED, PROCESSING = "Receiving", "Suspended", "Processing"
_QUEUE_CHUNKS = 64  # bounded: a slow target slows the client down instead of filling memory
_END = None


class BodySource(Source):
    """The bytes the clients send, in order; the pipeline's reads block until they arrive."""

    kind = "upload"

    def __init__(self, size: int | None) -> None:
        self._size = size
        self.queue: queue.Queue[bytes | ImportFailed | None] = queue.Queue(maxsize=_QUEUE_CHUNKS)

    def probe(self) -> Probe:
        return Probe(size=self._size, resumable=False)

    def stream(self, offset: int) -> Iterator[bytes]:
        while (item := self.queue.get()) is not _END:
            if isinstance(item, ImportFailed):
                raise item
            self.received += len(item)
            yield item


class Session:
    def __init__(self, request: ImportRequest, *, size: int | None, expected: Expected | None,
                 resumable: bool, listeners: Sequence[Listener] = ()) -> None:
        self.size = size
        self.resumable = resumable and size is not None
        self.received = 0  # body bytes handed to the pipeline: where a resumed connection must start
        self.state = RECEIVING
        self.cuts = 0  # connections lost so far: a resume timer only expires the cut it was set for
        self.snapshot: Snapshot | None = None
        self._expected = expected
        self._listeners = listeners
        self._hash = hashlib.new(expected.algorithm) if expected else None
        self._source = BodySource(size)
        self.result: concurrent.futures.Future[ImportResult] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, args=(request,), name="pipeline", daemon=True)
        self._thread.start()

    def _run(self, request: ImportRequest) -> None:
        progress = Progress([self._on_progress, *self._listeners], min_interval=1.0)
        try:
            self.result.set_result(run_import(request, progress=progress, source=self._source))
        except BaseException as error:  # noqa: BLE001 - handed to whoever waits for the result
            self.result.set_exception(error)

    def _on_progress(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        log.info("%s %.1f%% (%d bytes received)", snapshot.phase, snapshot.percent, self.received)

    def offer(self, chunk: bytes) -> bool:
        """Hand ``chunk`` over without blocking; False when the pipeline is busy and :meth:`feed` must wait."""
        try:
            self._source.queue.put_nowait(chunk)
        except queue.Full:
            return False
        self._count(chunk)
        return True

    def feed(self, chunk: bytes) -> bool:
        """Hand ``chunk`` over, waiting for room; False when the pipeline has stopped (its result says why)."""
        if not self._put(chunk):
            return False
        self._count(chunk)
        return True

    def _count(self, chunk: bytes) -> None:
        self.received += len(chunk)
        if self._hash is not None:
            self._hash.update(chunk)

    def end(self) -> None:
        """The whole body is here: check it, then let the pipeline finish. Raises ChecksumMismatch."""
        self.state = PROCESSING
        if self._expected is not None and self._hash is not None:
            try:
                self._expected.verify(self._hash.hexdigest())
            except ImportFailed as failure:
                self.abort(failure)
                raise
        self._put(_END)

    def abort(self, failure: ImportFailed) -> None:
        """Stop the pipeline; it discards what it wrote."""
        self._put(failure)

    def _put(self, item: bytes | ImportFailed | None) -> bool:
        while not self.result.done():
            try:
                self._source.queue.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False


def cut(at: int) -> ImportFailed:
    return ImportFailed(Reason.TransferFailed, f"the upload connection broke after {at} bytes and was not resumed")
