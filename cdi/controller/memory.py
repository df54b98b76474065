"""What the controller remembers between reconciles, so that a burst of DataVolumes costs reconciles and API
calls in proportion to what changes, not to how many watch events and reconciles there are."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from cdi.api.spec import Obj, meta

T = TypeVar("T")


class Recent:
    """Cluster-wide objects every reconcile reads (CDIConfig, StorageClasses, StorageProfiles), fetched at most
    once per ``ttl`` seconds instead of on every reconcile. :meth:`forget` drops them at once: the controller
    calls it when a watch says they changed, so a change shows as soon as the watch tells it."""

    def __init__(self, ttl: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._values: dict[str, tuple[float, Any]] = {}
        self._generation = 0
        self._lock = threading.Lock()  # reconciles run on several threads

    def get(self, what: str, fetch: Callable[[], T]) -> T:
        now = self._clock()
        with self._lock:
            hit = self._values.get(what)
            generation = self._generation
        if hit is not None and now - hit[0] < self._ttl:
            return hit[1]  # type: ignore[no-any-return]
        value = fetch()
        with self._lock:
            if generation == self._generation:  # not forgotten while it was fetched: a value from before the change
                self._values[what] = (now, value)
        return value

    def forget(self) -> None:
        with self._lock:
            self._generation += 1
            self._values.clear()


class Seen:
    """The resourceVersion of each object as the last finished reconcile read or wrote it.

    A watch event carrying exactly that version tells nothing that reconcile did not act on (most often it is
    the echo of the controller's own write), so it costs no reconcile: a reconcile of the same objects decides
    the same. Any other version of any of them, written by anyone, is news.
    """

    def __init__(self) -> None:
        self._versions: dict[str, str] = {}

    def record(self, *objects: Obj | None) -> None:
        for obj in objects:
            if obj and meta(obj).get("uid") and meta(obj).get("resourceVersion"):
                self._versions[meta(obj)["uid"]] = meta(obj)["resourceVersion"]

    def is_news(self, event_type: str | None, obj: Obj) -> bool:
        uid = meta(obj).get("uid", "")
        if event_type == "DELETED":
            self._versions.pop(uid, None)
            return True
        return not uid or self._versions.get(uid) != meta(obj).get("resourceVersion")
