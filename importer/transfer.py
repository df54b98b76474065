"""Turns a source into one uninterrupted stream: resume after drops, bounded retries, stall detection."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from importer.errors import ImportFailed, Reason
from importer.sources.base import Probe, Source, Transient


@dataclass(frozen=True)
class RetryPolicy:
    """Back-off doubles from ``first_delay`` up to ``max_delay``; attempts without progress are bounded."""

    attempts: int = 6
    first_delay: float = 0.5
    max_delay: float = 30.0
    stall_timeout: float = 600.0


class Transfer:
    """Iterates the source's bytes exactly once each, whatever happens to the connections underneath."""

    def __init__(self, source: Source, *, retry: RetryPolicy = RetryPolicy(),
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.source = source
        self.retry = retry
        self._sleep = sleep
        self.offset = 0
        self.resumes = 0
        self.probe: Probe = self._with_retries(source.probe)

    @property
    def size(self) -> int | None:
        return self.probe.size

    @property
    def received(self) -> int:
        return self.source.received

    @property
    def refetched(self) -> int:
        return max(0, self.source.received - self.offset)

    def __iter__(self) -> Iterator[bytes]:
        failures = 0
        last_progress = time.monotonic()
        while True:
            start = self.offset if self.probe.resumable else 0
            if start == 0 and self.offset:
                # No Range: the source replays from zero; skip what the pipeline already consumed.
                skip = self.offset
            else:
                skip = 0
            try:
                for chunk in self.source.stream(start):
                    if skip:
                        if len(chunk) <= skip:
                            skip -= len(chunk)
                            continue
                        chunk, skip = chunk[skip:], 0
                    self.offset += len(chunk)
                    failures = 0
                    last_progress = time.monotonic()
                    yield chunk
            except Transient as error:
                failures += 1
                self._give_up_or_wait(error, failures=failures, last_progress=last_progress)
                self.resumes += 1
                continue
            if self.size is not None and self.offset < self.size:
                failures += 1
                self._give_up_or_wait(Transient(f"connection closed at byte {self.offset} of {self.size}"),
                                      failures=failures, last_progress=last_progress)
                self.resumes += 1
                continue
            return

    def read_range(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` on a connection of their own (for random access beside the stream)."""
        failures = 0
        started = time.monotonic()
        while True:
            out = bytearray()
            stream = self.source.stream(offset)
            try:
                for chunk in stream:
                    out += chunk
                    if len(out) >= length:
                        break
                return bytes(out[:length])
            except Transient as error:
                failures += 1
                self._give_up_or_wait(error, failures=failures, last_progress=started)
            finally:
                stream.close()  # type: ignore[attr-defined]

    def _with_retries(self, call: Callable[[], Probe]) -> Probe:
        failures = 0
        started = time.monotonic()
        while True:
            try:
                return call()
            except Transient as error:
                failures += 1
                self._give_up_or_wait(error, failures=failures, last_progress=started)

    def _give_up_or_wait(self, error: Transient, *, failures: int, last_progress: float) -> None:
        stalled = time.monotonic() - last_progress >= self.retry.stall_timeout
        if stalled:
            raise ImportFailed(Reason.Timeout, f"no data for {self.retry.stall_timeout:g}s: {error}") from error
        if failures >= self.retry.attempts:
            reason = Reason.SourceUnreachable if error.unreachable and self.offset == 0 else Reason.TransferFailed
            raise ImportFailed(reason, f"gave up after {failures} attempts: {error}") from error
        self._sleep(min(self.retry.max_delay, self.retry.first_delay * 2 ** (failures - 1)))
