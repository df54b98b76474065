"""Progress that never goes backwards and says what it is doing.

CDI's progress jumps back after restarts and sits at 100 % through a silent conversion (cdi#2110,
cdi#3537). Ours is one monotonic percentage over the whole import, a phase name, bytes, rate and ETA;
listeners (a tqdm bar, the Prometheus metric) are called with each update.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

TRANSFERRING = "Transferring"
CONVERTING = "Converting"
RESIZING = "Resizing"
COMPLETE = "Complete"


@dataclass(frozen=True)
class Snapshot:
    phase: str
    percent: float  # 0..100, never decreasing
    done_bytes: int
    total_bytes: int | None
    rate: float  # bytes/s of the transfer
    eta: float | None  # seconds


Listener = Callable[[Snapshot], None]


class Throttled:
    """A listener told at most once every ``seconds``, and of every change of phase: for a log, which
    would drown in the updates the metric beside it wants."""

    def __init__(self, listener: Listener, *, seconds: float) -> None:
        self._listener = listener
        self._seconds = seconds
        self._at = float("-inf")
        self._phase: str | None = None

    def __call__(self, snapshot: Snapshot) -> None:
        now = time.monotonic()
        if snapshot.phase != self._phase or now - self._at >= self._seconds:
            self._at, self._phase = now, snapshot.phase
            self._listener(snapshot)


class Progress:
    def __init__(self, listeners: list[Listener] | None = None, *, min_interval: float = 0.2) -> None:
        self._listeners = list(listeners or [])
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._last_emit = 0.0
        self._min_interval = min_interval
        self.phase = TRANSFERRING
        self.percent = 0.0
        self.done_bytes = 0
        self.total_bytes: int | None = None
        self._transfer_pct = 0.0
        self._convert_pct: float | None = None

    def add_listener(self, listener: Listener) -> None:
        """Safe while an import runs (the pod's metric joins once its server is up); the newcomer hears the
        current state at once."""
        with self._lock:
            self._listeners = [*self._listeners, listener]  # a new list: an emit in progress keeps its own
        self._update(force=True)

    def transferred(self, done: int, total: int | None) -> None:
        with self._lock:
            self.done_bytes, self.total_bytes = done, total
            if total:
                self._transfer_pct = min(100.0, 100.0 * done / total)
        self._update()

    def converting(self, percent: float) -> None:
        with self._lock:
            self.phase = CONVERTING
            self._convert_pct = percent
        self._update()

    def set_phase(self, phase: str) -> None:
        with self._lock:
            self.phase = phase
        self._update(force=True)

    def complete(self) -> None:
        with self._lock:
            self.phase = COMPLETE
            self.percent = 100.0
        self._update(force=True)

    def _update(self, *, force: bool = False) -> None:
        with self._lock:
            if self.phase != COMPLETE:
                # Converting overlaps the download: qemu-img cannot be further along than the bytes we hold.
                candidate = self._transfer_pct
                if self._convert_pct is not None:
                    candidate = min(candidate, self._convert_pct) if self.total_bytes else self._convert_pct
                # 100 % is said once, when everything is done.
                self.percent = max(self.percent, min(candidate, 99.9))
            now = time.monotonic()
            if not force and now - self._last_emit < self._min_interval:
                return
            self._last_emit = now
            elapsed = max(now - self._started, 1e-6)
            rate = self.done_bytes / elapsed
            eta = None
            if self.total_bytes and rate > 0:
                eta = max(0.0, (self.total_bytes - self.done_bytes) / rate)
            snap = Snapshot(self.phase, self.percent, self.done_bytes, self.total_bytes, rate, eta)
        for listener in self._listeners:
            listener(snap)
