"""Objects in memory with one global resourceVersion, a bounded event history and live watchers.

Everything runs on the server's event loop, so each write is atomic with respect to readers and watchers:
a watch registered from resourceVersion N sees every event after N exactly once."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Key = tuple[str, str]  # (group, plural) a type is stored under
Obj = dict[str, Any]
Predicate = Callable[[Obj], bool]


@dataclass(frozen=True)
class Event:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    key: Key
    old: Obj | None
    new: Obj


class Watcher:
    """One watch stream: a queue of (type, object) the handler drains. None in the queue means: stop."""

    def __init__(self, key: Key, namespace: str | None, predicate: Predicate) -> None:
        self.key = key
        self.namespace = namespace
        self.predicate = predicate
        self.queue: asyncio.Queue[tuple[str, Obj] | None] = asyncio.Queue()

    def offer(self, event: Event) -> None:
        if event.key != self.key:
            return
        if self.namespace is not None and event.new.get("metadata", {}).get("namespace") != self.namespace:
            return
        was = event.old is not None and self.predicate(event.old)
        now = self.predicate(event.new)
        # A label change moves an object in or out of a selector: watchers see it arrive or leave.
        if event.type == "DELETED":
            kind = "DELETED" if was or now else None
        elif was and now:
            kind = "MODIFIED"
        else:
            kind = "ADDED" if now else "DELETED" if was else None
        if kind:
            self.queue.put_nowait((kind, event.new))


class Store:
    def __init__(self, *, history: int = 20000) -> None:
        self._rv = 1
        self._objects: dict[Key, dict[tuple[str, str], Obj]] = collections.defaultdict(dict)
        self._uids: dict[str, tuple[Key, str, str]] = {}
        # The garbage collector's graph, both ways: looking for an owner's dependents among all objects cost a
        # scan (and a sort) of the store on every delete, and thousands of Events make that most of a delete.
        self._dependents: dict[str, set[tuple[Key, str, str]]] = collections.defaultdict(set)
        self._owners: dict[tuple[Key, str, str], tuple[str, ...]] = {}
        self._history: collections.deque[Event] = collections.deque(maxlen=history)
        self._watchers: set[Watcher] = set()
        self.listeners: list[Callable[[Event], None]] = []  # in-process hooks (GC, CRD registration)

    @property
    def resource_version(self) -> str:
        return str(self._rv)

    @property
    def oldest_resource_version(self) -> int:
        """Watches may resume from this resourceVersion or any later one; older ones are gone (410)."""
        return self._history[0].rv - 1 if len(self._history) == self._history.maxlen else 1

    def get(self, key: Key, namespace: str, name: str) -> Obj | None:
        return self._objects[key].get((namespace, name))

    def by_uid(self, uid: str) -> tuple[Key, Obj] | None:
        found = self._uids.get(uid)
        if found is None:
            return None
        key, namespace, name = found
        obj = self.get(key, namespace, name)
        return (key, obj) if obj is not None else None

    def list(self, key: Key, namespace: str | None = None) -> list[Obj]:
        items = self._objects[key]
        chosen = items.items() if namespace is None else ((k, v) for k, v in items.items() if k[0] == namespace)
        return [obj for _, obj in sorted(chosen, key=lambda kv: kv[0])]

    def dependents(self, uid: str) -> list[tuple[Key, Obj]]:
        """The objects with an ownerReference to uid, by type, namespace and name."""
        found = []
        for key, namespace, name in sorted(self._dependents.get(uid, ())):
            obj = self.get(key, namespace, name)
            if obj is not None:
                found.append((key, obj))
        return found

    def keys(self) -> list[Key]:
        return [k for k, v in self._objects.items() if v]

    def write(self, key: Key, obj: Obj, *, old: Obj | None) -> Obj:
        """Stores `obj` (created if `old` is None) with the next resourceVersion and tells every watcher."""
        self._rv += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self._rv)
        self._objects[key][(meta.get("namespace", ""), meta["name"])] = obj
        self._uids[meta["uid"]] = (key, meta.get("namespace", ""), meta["name"])
        self._index_owners((key, meta.get("namespace", ""), meta["name"]),
                           tuple(ref.get("uid", "") for ref in meta.get("ownerReferences") or ()))
        self._publish(Event(self._rv, "ADDED" if old is None else "MODIFIED", key, old, obj))
        return obj

    def remove(self, key: Key, obj: Obj) -> Obj:
        self._rv += 1
        meta = obj["metadata"]
        gone = {**obj, "metadata": {**meta, "resourceVersion": str(self._rv)}}
        del self._objects[key][(meta.get("namespace", ""), meta["name"])]
        self._uids.pop(meta["uid"], None)
        self._index_owners((key, meta.get("namespace", ""), meta["name"]), ())
        self._publish(Event(self._rv, "DELETED", key, obj, gone))
        return gone

    def _index_owners(self, where: tuple[Key, str, str], owners: tuple[str, ...]) -> None:
        for uid in self._owners.pop(where, ()):
            dependents = self._dependents[uid]
            dependents.discard(where)
            if not dependents:
                del self._dependents[uid]
        if owners:
            self._owners[where] = owners
            for uid in owners:
                self._dependents[uid].add(where)

    def _publish(self, event: Event) -> None:
        self._history.append(event)
        for watcher in list(self._watchers):
            watcher.offer(event)
        for listener in list(self.listeners):
            listener(event)

    def watch(self, key: Key, namespace: str | None, predicate: Predicate, *, since: int | None) -> Watcher:
        """A watcher primed with the events after `since`, or with every current object as ADDED if None.

        Raises ValueError when `since` is older than the kept history."""
        watcher = Watcher(key, namespace, predicate)
        if since is None:
            for obj in self.list(key, namespace):
                if predicate(obj):
                    watcher.queue.put_nowait(("ADDED", obj))
        else:
            if since < self.oldest_resource_version:
                raise ValueError(f"too old resource version: {since} ({self.oldest_resource_version})")
            for event in self._history:
                if event.rv > since:
                    watcher.offer(event)
        self._watchers.add(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)

    def close_watchers(self) -> None:
        for watcher in self._watchers:
            watcher.queue.put_nowait(None)
        self._watchers.clear()
