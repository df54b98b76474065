"""A coalescing work queue, as client-go's: a key waits in it at most once and is never worked on by two workers
at a time; a key added while it is being worked on is worked on once more afterwards.

Watch events come in bursts, and three watches (DataVolumes, their PVCs, their pods) lead to the same
DataVolume: the kubelet's status write, its mirror onto the PVC, a provisioner's binding. Queuing the
DataVolume's key instead of reconciling once per event turns a burst into one reconcile, and two reconciles of
one DataVolume can no longer race each other into duplicate events and writes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable
from concurrent.futures import Executor
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

log = logging.getLogger(__name__)

RETRY_FIRST = 0.5  # seconds before a failed key is worked on again, doubling with each failure in a row
RETRY_MAX = 60.0


class WorkQueue(Generic[K]):
    """Used from one event loop; the work itself runs in an executor."""

    def __init__(self) -> None:
        self._ready: asyncio.Queue[K] = asyncio.Queue()
        self._dirty: set[K] = set()  # added and not yet taken by a worker
        self._active: set[K] = set()  # being worked on
        self._failures: dict[K, int] = {}

    def add(self, key: K) -> None:
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._active:  # else it goes back to the queue when its worker is done
            self._ready.put_nowait(key)

    async def serve(self, work: Callable[[K], None], *, workers: int, executor: Executor) -> None:
        """Runs ``work(key)`` in ``executor`` for queued keys, ``workers`` keys at a time, until cancelled.

        A key whose work raises is logged and added again after a delay that doubles with each failure in a row:
        a transient API error must not leave a DataVolume waiting for an event that may never come.
        """
        loop = asyncio.get_running_loop()

        async def worker() -> None:
            while True:
                key = await self._ready.get()
                self._dirty.discard(key)
                self._active.add(key)
                try:
                    await loop.run_in_executor(executor, work, key)
                except Exception:
                    failures = self._failures[key] = self._failures.get(key, 0) + 1
                    delay = min(RETRY_FIRST * 2 ** (failures - 1), RETRY_MAX)
                    log.exception("working on %s failed (%d in a row); again in %.1f s", key, failures, delay)
                    loop.call_later(delay, self.add, key)
                else:
                    self._failures.pop(key, None)
                finally:
                    self._active.discard(key)
                    if key in self._dirty:
                        self._ready.put_nowait(key)

        await asyncio.gather(*(worker() for _ in range(workers)))
