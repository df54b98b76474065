"""A small async client for the Kubernetes HTTP API, shared by the provisioner and the kubelet.

They talk to the API server over HTTP like the real components do, so they work against any server that
speaks the API (and see exactly what kubectl and controllers see: admission, defaults, conflicts)."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp

log = logging.getLogger(__name__)

Object = dict[str, Any]
# (event type, object): ADDED/MODIFIED/DELETED; a relist after a lost watch replays current objects as ADDED.
Handler = Callable[[str, Object], Awaitable[None]]

_PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}


class APIError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason


def path(resource: str, *, namespace: str | None = None, name: str | None = None, group: str = "",
         version: str = "v1", subresource: str | None = None) -> str:
    """The REST path of a collection or object, e.g. path("pods", namespace="default", name="p")."""
    parts = ["api", version] if not group else ["apis", group, version]
    if namespace is not None:
        parts += ["namespaces", namespace]
    parts.append(resource)
    if name is not None:
        parts.append(name)
    if subresource is not None:
        parts.append(subresource)
    return "/" + "/".join(parts)


class Client:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(self, method: str, url_path: str, *, body: Any = None, params: dict[str, str] | None = None,
                      content_type: str = "application/json") -> Object:
        data = None if body is None else json.dumps(body).encode()
        async with self._http().request(method, self.base_url + url_path, data=data, params=params,
                                        headers={"Content-Type": content_type}) as response:
            payload = await response.read()
        if response.status >= 400:
            raise _error(response.status, payload)
        return json.loads(payload) if payload else {}

    async def get(self, url_path: str) -> Object:
        return await self.request("GET", url_path)

    async def get_or_none(self, url_path: str) -> Object | None:
        try:
            return await self.get(url_path)
        except APIError as exc:
            if exc.code == 404:
                return None
            raise

    async def list(self, url_path: str, **params: str) -> Object:
        return await self.request("GET", url_path, params=params or None)

    async def create(self, url_path: str, body: Object) -> Object:
        return await self.request("POST", url_path, body=body)

    async def patch(self, url_path: str, body: Any, *, patch_type: str = "merge") -> Object:
        return await self.request("PATCH", url_path, body=body, content_type=_PATCH_TYPES[patch_type])

    async def delete(self, url_path: str, *, grace_period: int | None = None) -> Object | None:
        """Deletes; None when the object is already gone (deletion races are normal for controllers)."""
        body = None if grace_period is None else {"kind": "DeleteOptions", "apiVersion": "v1",
                                                   "gracePeriodSeconds": grace_period}
        try:
            return await self.request("DELETE", url_path, body=body)
        except APIError as exc:
            if exc.code == 404:
                return None
            raise

    async def create_or_keep(self, url_path: str, body: Object) -> None:
        """Creates an object unless one of that name exists (setup objects of a cluster that may restart)."""
        try:
            await self.create(url_path, body)
        except APIError as exc:
            if exc.code != 409:
                raise

    async def watch(self, url_path: str, resource_version: str) -> AsyncIterator[tuple[str, Object]]:
        """One watch connection from resource_version; ends when the server ends it. A 410 Gone (compacted
        history) raises APIError, after which the caller relists."""
        params = {"watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true"}
        async with self._http().get(self.base_url + url_path, params=params) as response:
            if response.status >= 400:
                raise _error(response.status, await response.read())
            pending = b""
            # Split lines ourselves: aiohttp's line reader refuses lines over 64 KiB, and an object can be larger.
            async for chunk in response.content.iter_any():
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        status = event["object"]
                        raise APIError(status.get("code", 500), status.get("reason", ""), status.get("message", ""))
                    yield event["type"], event["object"]

    async def inform(self, url_path: str, handler: Handler, *, synced: asyncio.Event | None = None) -> None:
        """Lists then watches url_path forever, handing every change to handler (like an informer). When the
        watch history is gone it relists, and objects that vanished meanwhile are handed over as DELETED.
        Handler errors are logged, so one bad object cannot stop the loop."""
        known: dict[str, Object] = {}
        while True:
            try:
                listed = await self.list(url_path)
                version = listed["metadata"]["resourceVersion"]
                current = {item["metadata"]["uid"]: item for item in listed.get("items", [])}
                for uid in set(known) - set(current):
                    await _call(handler, "DELETED", known.pop(uid))
                for uid, item in current.items():
                    known[uid] = item
                    await _call(handler, "ADDED", item)
                if synced is not None:
                    synced.set()
                while True:
                    async for kind, obj in self.watch(url_path, version):
                        version = obj.get("metadata", {}).get("resourceVersion", version)
                        if kind == "BOOKMARK":
                            continue
                        if kind == "DELETED":
                            known.pop(obj["metadata"]["uid"], None)
                        else:
                            known[obj["metadata"]["uid"]] = obj
                        await _call(handler, kind, obj)
            except asyncio.CancelledError:
                raise
            except (APIError, aiohttp.ClientError, ConnectionError) as exc:
                log.debug("watch of %s restarts after: %s", url_path, exc)
                await asyncio.sleep(0.2)
            except Exception:  # an informer must outlive anything one response does to it
                log.exception("watch of %s failed; listing again", url_path)
                await asyncio.sleep(1)


def _error(code: int, payload: bytes) -> APIError:
    """A Kubernetes Status body when there is one, else the start of whatever the server said."""
    try:
        status = json.loads(payload)
    except ValueError:
        status = None
    if not isinstance(status, dict):
        return APIError(code, "", payload.decode(errors="replace")[:200])
    return APIError(code, status.get("reason", ""), status.get("message", ""))


async def _call(handler: Handler, kind: str, obj: Object) -> None:
    try:
        await handler(kind, obj)
    except asyncio.CancelledError:
        raise
    except Exception as error:  # one object's failure is logged and the informer goes on with the others
        name = obj.get("metadata", {}).get("name")
        if isinstance(error, APIError) and error.code == 404:  # deleted while handled: its DELETED event follows
            log.debug("%s %s went away while it was handled: %s", kind, name, error)
        else:
            log.exception("handling %s %s failed", kind, name)


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


async def post_event(client: Client, obj: Object, *, kind: str, reason: str, message: str, component: str,
                     warning: bool = False) -> None:
    """Records a core/v1 Event about obj (what `kubectl describe` shows)."""
    meta = obj["metadata"]
    await client.create(path("events", namespace=meta["namespace"]), {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": obj.get("apiVersion", "v1"), "kind": kind, "namespace": meta["namespace"],
                           "name": meta["name"], "uid": meta["uid"]},
        "reason": reason, "message": message, "type": "Warning" if warning else "Normal",
        "source": {"component": component}, "count": 1, "firstTimestamp": now(), "lastTimestamp": now(),
    })
