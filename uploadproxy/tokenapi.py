"""The ``upload.cdi.kubevirt.io/v1beta1`` aggregated API (cdi-facts §4.4): creating an ``UploadTokenRequest``
answers with the same object and ``status.token``, an upload token for the PVC ``spec.pvcName`` signed with
the key whose public half the upload proxy verifies with. Nothing is stored.

The Kubernetes API server forwards requests here (an APIService). Behind a real aggregator the caller is
named by the ``X-Remote-User``/``X-Remote-Group`` headers, trusted only on a connection whose client
certificate the request-header CA signed; the caller's right to ``create uploadtokenrequests`` in the
namespace is then asked of the API server with a SubjectAccessReview, as CDI's apiserver does.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import secrets
import string
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

from cdi.api import names
from uploadproxy import token

log = logging.getLogger("cdi-uploadproxy")

BASE = f"/apis/{names.UPLOAD_GROUP}/{names.VERSION}"
_SUFFIX = string.ascii_lowercase + string.digits


@dataclass(frozen=True)
class Caller:
    user: str
    groups: tuple[str, ...]
    extra: dict[str, list[str]]


# (caller, namespace) -> allowed; None means the API server already decided (no aggregator identity to check).
Authorizer = Callable[[Caller, str], bool]


def resource_list() -> dict[str, object]:
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": names.UPLOAD_API_VERSION,
            "resources": [{"name": names.UPLOAD_TOKEN_REQUESTS, "singularName": "uploadtokenrequest",
                           "namespaced": True, "kind": names.UPLOAD_TOKEN_REQUEST, "verbs": ["create"],
                           "shortNames": ["utr", "utrs"]}]}


def api_group() -> dict[str, object]:
    version = {"groupVersion": names.UPLOAD_API_VERSION, "version": names.VERSION}
    return {"kind": "APIGroup", "apiVersion": "v1", "name": names.UPLOAD_GROUP, "versions": [version],
            "preferredVersion": version}


class TokenAPI:
    def __init__(self, key: rsa.RSAPrivateKey, *, authorize: Authorizer | None = None,
                 trusted_proxy: Callable[[web.Request], bool] | None = None) -> None:
        self.key = key
        self.authorize = authorize
        self.trusted_proxy = trusted_proxy or (lambda _request: False)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get(f"/apis/{names.UPLOAD_GROUP}", self._group)
        app.router.add_get(BASE, self._resources)
        app.router.add_get(BASE + "/", self._resources)
        app.router.add_post(BASE + "/namespaces/{namespace}/" + names.UPLOAD_TOKEN_REQUESTS, self._create)
        return app

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def _group(self, _request: web.Request) -> web.Response:
        return web.json_response(api_group())

    async def _resources(self, _request: web.Request) -> web.Response:
        return web.json_response(resource_list())

    async def _create(self, request: web.Request) -> web.Response:
        namespace = request.match_info["namespace"]
        try:
            body = json.loads(await request.read())
        except ValueError as error:
            return status(400, "BadRequest", f"the body is not JSON: {error}")
        if not isinstance(body, dict) or body.get("kind") != names.UPLOAD_TOKEN_REQUEST:
            return status(400, "BadRequest", f"expected a {names.UPLOAD_TOKEN_REQUEST}")
        metadata = dict(body.get("metadata") or {})
        if metadata.get("namespace", namespace) != namespace:
            return status(400, "BadRequest", "the namespace of the object does not match the namespace of the URL")
        pvc = str((body.get("spec") or {}).get("pvcName") or "")
        if not pvc:
            return status(422, "Invalid", f'{names.UPLOAD_TOKEN_REQUEST}.{names.UPLOAD_GROUP} is invalid: '
                                          f'spec.pvcName: Required value')
        denied = await self._check(request, namespace)
        if denied is not None:
            return denied
        if not metadata.get("name"):
            metadata["name"] = metadata.get("generateName", "") + "".join(secrets.choice(_SUFFIX) for _ in range(5))
        metadata.update(namespace=namespace, creationTimestamp=_now())
        issued = token.issue(self.key, namespace=namespace, name=pvc)
        log.info("issued an upload token for PVC %s/%s", namespace, pvc)
        return web.json_response({**body, "apiVersion": names.UPLOAD_API_VERSION, "metadata": metadata,
                                  "status": {"token": issued}}, status=201)

    async def _check(self, request: web.Request, namespace: str) -> web.Response | None:
        """None when the caller may create tokens in ``namespace``, else the Status to answer with."""
        if self.authorize is None:
            return None  # the API server in front (localkube, or an authorizing proxy) decided
        if not self.trusted_proxy(request):
            return status(401, "Unauthorized", "requests must come through the Kubernetes API server")
        headers = request.headers
        caller = Caller(user=headers.get("X-Remote-User", ""), groups=tuple(headers.getall("X-Remote-Group", [])),
                        extra={k[len("X-Remote-Extra-"):].lower(): headers.getall(k)
                               for k in headers if k.lower().startswith("x-remote-extra-")})
        allowed = await asyncio.get_running_loop().run_in_executor(None, self.authorize, caller, namespace)
        if not allowed:
            return status(403, "Forbidden", f'{names.UPLOAD_TOKEN_REQUESTS}.{names.UPLOAD_GROUP} is forbidden: '
                                            f'User "{caller.user}" cannot create resource "{names.UPLOAD_TOKEN_REQUESTS}" '
                                            f'in API group "{names.UPLOAD_GROUP}" in the namespace "{namespace}"')
        return None


def subject_access_review() -> Authorizer:
    """Asks the API server (in-cluster credentials, else the kubeconfig) whether the caller may create tokens."""
    from kubernetes import client, config  # noqa: PLC0415 - only a real deployment pays for the import

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    api = client.AuthorizationV1Api()

    def authorize(caller: Caller, namespace: str) -> bool:
        review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
            user=caller.user, groups=list(caller.groups), extra=caller.extra or None,
            resource_attributes=client.V1ResourceAttributes(
                namespace=namespace, verb="create", group=names.UPLOAD_GROUP, version=names.VERSION,
                resource=names.UPLOAD_TOKEN_REQUESTS)))
        return bool(api.create_subject_access_review(review).status.allowed)

    return authorize


def verified_client(request: web.Request) -> bool:
    """The connection presented a client certificate the server's verify locations (request-header CA) accept."""
    return bool(request.transport and request.transport.get_extra_info("peercert"))


def status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                              "message": message, "reason": reason, "code": code}, status=code)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
