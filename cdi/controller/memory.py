"""What the controller remembers between reconciles, so that a burst of DataVolumes costs reconciles and API
calls in proportion to what changes, not to how many watch events and reconciles there are."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from cdi.api.spec import Obj, meta

T = TypeVar("T")

ABSENT_KEPT = 10_000  # absences remembered (oldest forgotten first): a forgotten one only costs a GET


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


class Latest:
    """The newest version of each DataVolume, PVC and PVC-owned pod the watches delivered, for reconciles to read
    instead of asking the API server: three GETs per reconcile, some eight reconciles per DataVolume, were most of
    the controller's API calls (controller-runtime's informer cache spares CDI's reconciles the same way).

    The controller's own writes go in too (:meth:`wrote`), or a reconcile reading before their echo arrived
    would see the object as it was before and act again (a status transition posted twice); so a version never
    replaces a newer one, resourceVersions compared as the numbers etcd and localkube make them. A miss is no
    answer (not watched, not delivered yet): the caller asks the API server. Only watch events add an object, so
    a write that raced the object's deletion cannot bring it back. An object is as fresh as the watch that
    selects it: a PVC or pod stripped of the labels the controller watches for is no longer followed, here as by
    the handlers.

    Absence is remembered too (:meth:`absent`): a deletion the watch delivered, or a GET that found nothing,
    until the object is seen or written again. Every DataVolume's first reconcile asked for its PVC and then for
    its importer pod, and its last one for the pod just deleted, three GETs answered 404. An object made since by
    someone the watches do not follow (a user's unlabelled PVC) is learnt when creating it answers 409.
    """

    def __init__(self) -> None:
        self._objects: dict[tuple[str, str, str], Obj] = {}
        self._absent: OrderedDict[tuple[str, str, str], None] = OrderedDict()  # oldest first, at most ABSENT_KEPT
        self._lock = threading.Lock()  # watch events arrive on the event loop, writes on reconcile threads

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        with self._lock:
            return self._objects.get((kind, namespace, name))

    def absent(self, kind: str, namespace: str, name: str) -> bool:
        with self._lock:
            return (kind, namespace, name) in self._absent

    def saw(self, event_type: str | None, obj: Obj) -> None:
        key = _key(obj)
        with self._lock:
            if event_type == "DELETED":
                self._objects.pop(key, None)
                self._gone(key)
            else:
                self._absent.pop(key, None)
                if _newer(obj, self._objects.get(key)):
                    self._objects[key] = obj

    def wrote(self, obj: Obj | None) -> None:
        if not obj:
            return
        key = _key(obj)
        with self._lock:
            self._absent.pop(key, None)  # it was there to be written
            if key in self._objects and _newer(obj, self._objects[key]):
                self._objects[key] = obj

    def fetched(self, kind: str, namespace: str, name: str, obj: Obj | None) -> None:
        """What a GET answered: None is remembered as absent; an object only ends that (the watch brings it)."""
        key = (kind, namespace, name)
        with self._lock:
            if obj is None:
                if key not in self._objects:  # a watch event came in between: it is newer than the GET
                    self._gone(key)
            else:
                self._absent.pop(key, None)

    def _gone(self, key: tuple[str, str, str]) -> None:
        self._absent[key] = None
        self._absent.move_to_end(key)
        if len(self._absent) > ABSENT_KEPT:
            self._absent.popitem(last=False)


def _key(obj: Obj) -> tuple[str, str, str]:
    return str(obj.get("kind", "")), meta(obj).get("namespace", ""), meta(obj).get("name", "")


def _newer(obj: Obj, than: Obj | None) -> bool:
    if than is None:
        return True
    version, old = str(meta(obj).get("resourceVersion", "")), str(meta(than).get("resourceVersion", ""))
    if version.isdigit() and old.isdigit():
        return int(version) > int(old)
    return version != old  # not numbers (not etcd's): the later arrival wins
