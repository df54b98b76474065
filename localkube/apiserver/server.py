"""The HTTP front: routes Kubernetes API paths to discovery, OpenAPI, aggregated servers, the object
operations, watches and the pod log hook. Plain HTTP on 127.0.0.1; any bearer token is accepted."""

from __future__ import annotations

import asyncio
import base64
import collections
import inspect
import json
import logging
import ssl
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from . import convert, errors, openapi, protobuf, tables
from .admission import Admission
from .errors import APIError
from .operations import Operations, now
from .registry import DISCOVERY_V2, Registry
from .selectors import object_matcher
from .store import Store
from .types import APISERVICE_KEY, ResourceType

log = logging.getLogger(__name__)

LogResult = str | bytes | AsyncIterator[bytes]
# Called for GET .../pods/NAME/log with keyword arguments namespace, name, container (or None), follow,
# previous, tail_lines (or None); may return its result directly or as an awaitable.
LogProvider = Callable[..., LogResult | Awaitable[LogResult]]

_JSON = "application/json"
_HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection"}


def _wants_table(request: web.Request) -> bool:
    return "as=Table" in request.headers.get("Accept", "")


def _wants_discovery_v2(request: web.Request) -> bool:
    return any("g=apidiscovery.k8s.io" in part and "v=v2;" in part + ";" and "as=APIGroupDiscoveryList" in part
               for part in request.headers.get("Accept", "").split(","))


def _json(body: Any, *, status: int = 200, content_type: str = _JSON) -> web.Response:
    return web.Response(body=json.dumps(body).encode(), status=status, headers={"Content-Type": content_type})


class APIServer:
    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, history: int = 20000,
                 bookmark_interval: float = 10.0) -> None:
        self.host = host
        self.port = port
        self.store = Store(history=history)
        self.registry = Registry()
        self.admission = Admission(self.store)
        self.operations = Operations(self.store, self.registry, self.admission)
        self.log_provider: LogProvider | None = None
        self.bookmark_interval = bookmark_interval
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._encoded: collections.OrderedDict[tuple[str, ...], bytes] = collections.OrderedDict()
        self._seed()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _seed(self) -> None:
        namespaces = self.registry.lookup("", "v1", "namespaces")
        for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
            meta = {"name": name, "uid": str(uuid.uuid4()), "creationTimestamp": now(),
                    "labels": {"kubernetes.io/metadata.name": name}}
            self.store.write(namespaces.key, {"apiVersion": "v1", "kind": "Namespace", "metadata": meta,
                                              "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}},
                             old=None)

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # the ephemeral port actually bound

    async def stop(self) -> None:
        self.store.close_watchers()
        await self.admission.close()
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- routing ----------------------------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._route(request)
        except APIError as exc:
            return _json(exc.status(), status=exc.code)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:  # a bug here must still answer like an API server, and be visible in the log
            log.exception("internal error serving %s %s", request.method, request.path_qs)
            return _json(APIError(500, "InternalError", f"Internal error occurred: {exc}").status(), status=500)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if parts in (["version"], ["version", ""]):
            return _json({"major": "1", "minor": "37", "gitVersion": "v1.37.0-localkube", "gitCommit": "localkube",
                          "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24",
                          "compiler": "gc", "platform": "linux/amd64"})
        if parts and parts[0] in ("healthz", "readyz", "livez"):
            return web.Response(text="ok")
        if parts and parts[0] == "openapi":
            return self._openapi(parts[1:], request.headers.get("Accept", ""))
        if parts == ["api"]:
            if _wants_discovery_v2(request):
                return _json(self.registry.discovery_v2(core=True, aggregated_lists={}), content_type=DISCOVERY_V2)
            return _json({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.host}:{self.port}"}]})
        if parts == ["apis"]:
            if _wants_discovery_v2(request):
                lists = await self._aggregated_lists()
                return _json(self.registry.discovery_v2(core=False, aggregated_lists=lists),
                             content_type=DISCOVERY_V2)
            return _json(self.registry.api_group_list())
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 2:
            if len(parts) == 2:
                found = self.registry.api_group(parts[1])
                if found is None:
                    raise APIError(404, "NotFound", "the server could not find the requested resource")
                return _json(found)
            group, version, rest = parts[1], parts[2], parts[3:]
            if (group, version) in self.registry.aggregated:
                return await self._proxy(request, self.registry.aggregated[(group, version)])
        else:
            raise APIError(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            listing = self.registry.resource_list(group, version)
            if listing is None:
                raise APIError(404, "NotFound", "the server could not find the requested resource")
            return _json(listing)
        return await self._resource(request, group, version, rest)

    def _openapi(self, rest: list[str], accept: str) -> web.Response:
        if rest == ["v2"]:
            if "protobuf" in accept:
                return web.Response(body=openapi.v2_protobuf(), headers={"Content-Type": "application/octet-stream"})
            return _json(openapi.v2_json())
        if rest == ["v3"]:
            return _json(openapi.v3_index(self.registry))
        if rest[:1] == ["v3"] and len(rest) >= 3:
            group, version = ("", rest[2]) if rest[1] == "api" else (rest[2], rest[3] if len(rest) > 3 else "")
            doc = openapi.v3_document(self.registry, group, version)
            if doc is not None:
                return _json(doc)
        raise APIError(404, "NotFound", "the server could not find the requested resource")

    # -- resources --------------------------------------------------------------------------------------------

    async def _resource(self, request: web.Request, group: str, version: str, rest: list[str]
                        ) -> web.StreamResponse:
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
            namespace, rest = rest[1], rest[2:]
        plural, name, sub = rest[0], rest[1] if len(rest) > 1 else "", "/".join(rest[2:])
        rtype = self.registry.lookup(group, version, plural)
        if rtype is None or (namespace and not rtype.namespaced):
            raise APIError(404, "NotFound", "the server could not find the requested resource")
        q = request.query
        method = request.method
        dry_run = "All" in q.getall("dryRun", [])  # validated and admitted, never stored
        if rtype.review:
            if method != "POST" or name:
                raise APIError(405, "MethodNotAllowed", f"{plural} can only be created")
            # kubectl auth can-i sends protobuf; the answer does not depend on the question.
            body = {} if "protobuf" in request.headers.get("Content-Type", "") else await self._body(request)
            allowed = {"allowed": True, "reason": "localkube authorizes every request"}
            answer = {"authenticated": True, "user": {"username": "localkube-admin", "groups": [
                "system:masters", "system:authenticated"]}} if plural == "tokenreviews" else allowed
            return _json({**body, "apiVersion": rtype.api_version(version), "kind": rtype.kind,
                          "status": answer}, status=201)
        if not name:
            if method == "GET":
                if q.get("watch") in ("true", "1"):
                    return await self._watch(request, rtype, version, namespace or None)
                return self._list(request, rtype, version, namespace or None)
            if method == "POST":
                if rtype.namespaced and not namespace:
                    raise APIError(405, "MethodNotAllowed", "the server does not allow this method on the "
                                                            "requested resource")
                obj = await self.operations.create(rtype, version, namespace, await self._body(request),
                                                   strict=q.get("fieldValidation") == "Strict", dry_run=dry_run)
                return _json(convert.present(rtype, version, obj), status=201)
            if method == "DELETE":
                return await self._delete_collection(request, rtype, version, namespace or None)
            raise APIError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        if rtype.namespaced and not namespace:
            raise APIError(404, "NotFound", "the server could not find the requested resource")
        if sub == "log" and plural == "pods" and not group and method == "GET":
            return await self._log(request, namespace, name)
        if sub == "binding" and plural == "pods" and not group and method == "POST":
            # What a scheduler does: bind the pod to a node (spec.nodeName), once.
            target = ((await self._body(request)).get("target") or {}).get("name")
            pod = self.operations.get(rtype, namespace, name)
            if not target or pod.get("spec", {}).get("nodeName"):
                raise errors.conflict(group="", plural="pods", name=name, why="pod is already assigned to a node"
                                      if target else "a binding needs target.name")
            await self.operations.patch(rtype, version, namespace, name, "application/merge-patch+json",
                                        {"spec": {"nodeName": target}})
            return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
                         status=201)
        if sub and not (sub == "status" and rtype.version(version).status):
            raise APIError(404, "NotFound", "the server could not find the requested resource")
        strict = q.get("fieldValidation") == "Strict"
        if method == "GET":
            obj = self.operations.get(rtype, namespace, name)
            if _wants_table(request):
                return _json(tables.table(rtype, version, [convert.present(rtype, version, obj)],
                                          include_object=q.get("includeObject", "Metadata"),
                                          resource_version=self.store.resource_version))
            return _json(convert.present(rtype, version, obj))
        if method == "PUT":
            obj = await self.operations.replace(rtype, version, namespace, name, await self._body(request),
                                                subresource=sub, strict=strict, dry_run=dry_run)
            return _json(convert.present(rtype, version, obj))
        if method == "PATCH":
            obj, created = await self.operations.patch(rtype, version, namespace, name,
                                                       request.headers.get("Content-Type", ""),
                                                       await self._body(request), subresource=sub, strict=strict,
                                                       dry_run=dry_run)
            return _json(convert.present(rtype, version, obj), status=201 if created else 200)
        if method == "DELETE":
            options = await self._body(request, default={})
            if "propagationPolicy" in q:
                options = {**options, "propagationPolicy": q["propagationPolicy"]}
            obj = await self.operations.delete(rtype, version, namespace, name, options,
                                               dry_run=dry_run or "All" in (options.get("dryRun") or ()))
            return _json(convert.present(rtype, version, obj))
        raise APIError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    async def _body(self, request: web.Request, default: Any = None) -> Any:
        raw = await request.read()
        if "protobuf" in request.headers.get("Content-Type", ""):
            return protobuf.decode(raw)
        if not raw:
            if default is not None:
                return default
            raise errors.bad_request("the request has no body")
        try:
            return json.loads(raw)
        except ValueError as exc:
            # kubectl and the clients send JSON for every media type, apply-patch+yaml included.
            raise errors.bad_request(f"the request body is not JSON: {exc}") from None

    def _selected(self, request: web.Request, rtype: ResourceType, version: str
                  ) -> Callable[[dict[str, Any]], bool]:
        labels, fields = request.query.get("labelSelector"), request.query.get("fieldSelector")
        if not labels and not fields:
            return lambda obj: True
        match = object_matcher(labels=labels, fields=fields)
        return lambda obj: match(convert.present(rtype, version, obj))

    def _list(self, request: web.Request, rtype: ResourceType, version: str, namespace: str | None
              ) -> web.Response:
        q = request.query
        chosen = self._selected(request, rtype, version)
        items = [o for o in self.store.list(rtype.key, namespace) if chosen(o)]
        if q.get("continue"):
            try:
                after = tuple(json.loads(base64.urlsafe_b64decode(q["continue"].encode())))
            except ValueError:
                raise errors.bad_request("invalid continue token") from None
            items = [o for o in items if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > after]
        token = ""
        limit = int(q.get("limit") or 0)
        remaining = 0
        if 0 < limit < len(items):
            remaining = len(items) - limit
            items = items[:limit]
            last = items[-1]["metadata"]
            token = base64.urlsafe_b64encode(json.dumps([last.get("namespace", ""), last["name"]]).encode()).decode()
        presented = [convert.present(rtype, version, o) for o in items]
        rv = self.store.resource_version
        if _wants_table(request):
            return _json(tables.table(rtype, version, presented, include_object=q.get("includeObject", "Metadata"),
                                      resource_version=rv, continue_token=token))
        metadata: dict[str, Any] = {"resourceVersion": rv}
        if token:
            metadata.update({"continue": token, "remainingItemCount": remaining})
        return _json({"kind": rtype.list_kind or f"{rtype.kind}List", "apiVersion": rtype.api_version(version),
                      "metadata": metadata, "items": presented})

    async def _delete_collection(self, request: web.Request, rtype: ResourceType, version: str,
                                 namespace: str | None) -> web.Response:
        chosen = self._selected(request, rtype, version)
        options = await self._body(request, default={})
        deleted = []
        for obj in [o for o in self.store.list(rtype.key, namespace) if chosen(o)]:
            meta = obj["metadata"]
            deleted.append(convert.present(rtype, version, await self.operations.delete(
                rtype, version, meta.get("namespace", ""), meta["name"], options)))
        return _json({"kind": rtype.list_kind or f"{rtype.kind}List", "apiVersion": rtype.api_version(version),
                      "metadata": {"resourceVersion": self.store.resource_version}, "items": deleted})

    async def _watch(self, request: web.Request, rtype: ResourceType, version: str, namespace: str | None
                     ) -> web.StreamResponse:
        q = request.query
        rv = q.get("resourceVersion") or "0"
        # WatchList (client-go's reflector, kubectl wait): the current state as ADDED events, then a bookmark
        # marking their end, whatever resourceVersion came with it.
        initial_events = q.get("sendInitialEvents") in ("true", "1")
        try:
            since = None if rv == "0" or initial_events else int(rv)
        except ValueError:
            raise errors.bad_request(f"invalid resourceVersion {rv!r}") from None
        response = web.StreamResponse(headers={"Content-Type": _JSON, "Cache-Control": "no-cache"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        table = _wants_table(request)

        def encode(kind: str, obj: dict[str, Any]) -> bytes:
            if kind in ("ERROR", "BOOKMARK"):
                return json.dumps({"type": kind, "object": obj}).encode() + b"\n"
            if table:
                shown = tables.table(rtype, version, [convert.present(rtype, version, obj)],
                                     include_object=q.get("includeObject", "Metadata"),
                                     resource_version=obj["metadata"]["resourceVersion"])
                return json.dumps({"type": kind, "object": shown}).encode() + b"\n"
            # Every watcher of a type gets the same bytes for an event: encode them once.
            cache_key = (kind, obj["metadata"]["uid"], obj["metadata"]["resourceVersion"], rtype.group, version)
            line = self._encoded.get(cache_key)
            if line is None:
                line = json.dumps({"type": kind, "object": convert.present(rtype, version, obj)}).encode() + b"\n"
                self._encoded[cache_key] = line
                if len(self._encoded) > 4096:
                    self._encoded.popitem(last=False)
            return line

        try:
            watcher = self.store.watch(rtype.key, namespace, self._selected(request, rtype, version), since=since)
        except ValueError as exc:
            await response.write(encode("ERROR", errors.gone(str(exc)).status()))
            return response
        if initial_events:
            watcher.queue.put_nowait(("BOOKMARK", {"k8s.io/initial-events-end": "true"}))
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1")

        def bookmark(annotations: dict[str, str]) -> bytes:
            meta: dict[str, Any] = {"resourceVersion": self.store.resource_version}
            if annotations:
                meta["annotations"] = annotations
            return encode("BOOKMARK", {"kind": rtype.kind, "apiVersion": rtype.api_version(version), "metadata": meta})

        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(float(q.get("timeoutSeconds") or 1800), 3600)
        try:
            while (remaining := deadline - loop.time()) > 0:
                try:
                    item = await asyncio.wait_for(watcher.queue.get(),
                                                  min(remaining, self.bookmark_interval) if bookmarks else remaining)
                except TimeoutError:
                    if deadline <= loop.time():
                        break  # the closing bookmark below is sent instead
                    item = ("BOOKMARK", {})
                # Under a burst of writes, everything already queued goes out in one chunk.
                batch = [item]
                while batch[-1] is not None and not watcher.queue.empty() and len(batch) < 1000:
                    batch.append(watcher.queue.get_nowait())
                lines = []
                for entry in batch:
                    if entry is None:
                        break
                    if entry[0] == "BOOKMARK":
                        if bookmarks or entry[1]:
                            lines.append(bookmark(entry[1]))
                    else:
                        lines.append(encode(*entry))
                if lines:
                    await response.write(b"".join(lines))
                if batch[-1] is None:
                    return response
            if bookmarks:
                await response.write(bookmark({}))
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            pass  # the client went away
        finally:
            self.store.unwatch(watcher)
        return response

    # -- pod logs (served by whoever runs the pods) ------------------------------------------------------------

    async def _log(self, request: web.Request, namespace: str, name: str) -> web.StreamResponse:
        pods = self.registry.lookup("", "v1", "pods")
        self.operations.get(pods, namespace, name)
        if self.log_provider is None:
            raise APIError(404, "NotFound", f'no logs are available for pod "{name}": no kubelet serves logs')
        q = request.query
        tail = q.get("tailLines")
        result = self.log_provider(namespace=namespace, name=name, container=q.get("container"),
                                   follow=q.get("follow") in ("true", "1"), previous=q.get("previous") in ("true", "1"),
                                   tail_lines=int(tail) if tail else None)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, str):
            result = result.encode()
        if isinstance(result, bytes):
            return web.Response(body=result, headers={"Content-Type": "text/plain"})
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            async for chunk in result:
                await response.write(chunk)
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            pass
        return response

    # -- aggregation ------------------------------------------------------------------------------------------

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(auto_decompress=False)
        return self._session

    def _tls_for(self, group: str, version: str) -> ssl.SSLContext | bool:
        """An APIService's caBundle is trusted when given; without one the local server's certificate is not
        checked (it runs on 127.0.0.1, next to this server)."""
        for service in self.store.list(APISERVICE_KEY):
            spec = service.get("spec") or {}
            if (spec.get("group"), spec.get("version")) == (group, version) and spec.get("caBundle"):
                return ssl.create_default_context(cadata=base64.b64decode(spec["caBundle"]).decode())
        return False

    async def _aggregated_lists(self) -> dict[tuple[str, str], dict[str, Any]]:
        lists: dict[tuple[str, str], dict[str, Any]] = {}
        for (group, version), url in list(self.registry.aggregated.items()):
            try:
                async with self._client().get(f"{url}/apis/{group}/{version}", ssl=self._tls_for(group, version),
                                              timeout=aiohttp.ClientTimeout(total=2)) as answer:
                    if answer.status == 200:
                        lists[(group, version)] = await answer.json(content_type=None)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                log.warning("aggregated API %s/%s at %s did not answer discovery: %s", group, version, url, exc)
        return lists

    async def _proxy(self, request: web.Request, url: str) -> web.StreamResponse:
        group, version = request.path.split("/")[2:4]
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        headers["X-Forwarded-Host"] = request.host
        try:
            async with self._client().request(request.method, url + request.path_qs, headers=headers,
                                              data=await request.read(), ssl=self._tls_for(group, version),
                                              timeout=aiohttp.ClientTimeout(total=None, sock_connect=10)) as answer:
                response = web.StreamResponse(status=answer.status, headers={
                    k: v for k, v in answer.headers.items() if k.lower() not in _HOP_HEADERS})
                await response.prepare(request)
                async for chunk in answer.content.iter_any():
                    await response.write(chunk)
                return response
        except aiohttp.ClientConnectorError as exc:
            raise APIError(503, "ServiceUnavailable", f"the aggregated API {group}/{version} at {url} is not "
                                                      f"reachable: {exc}") from None
