"""Admission webhooks from Mutating/ValidatingWebhookConfiguration objects, called with real
AdmissionReview v1 requests over HTTP(S) (clientConfig.url; a service reference cannot be reached here)."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import uuid
from typing import Any

import aiohttp

from .errors import APIError
from .patch import json_patch
from .selectors import selector_from_label_selector
from .store import Store
from .types import NAMESPACE_KEY, ResourceType

MUTATING = ("admissionregistration.k8s.io", "mutatingwebhookconfigurations")
VALIDATING = ("admissionregistration.k8s.io", "validatingwebhookconfigurations")
USER = {"username": "localkube-admin", "groups": ["system:masters", "system:authenticated"]}


def _matches(rule: dict[str, Any], *, operation: str, rtype: ResourceType, version: str, subresource: str) -> bool:
    def has(values: list[str] | None, wanted: str) -> bool:
        return bool(values) and ("*" in values or wanted in values)

    resources = rule.get("resources") or []
    target = f"{rtype.plural}/{subresource}" if subresource else rtype.plural
    resource_ok = target in resources or ("*" in resources and not subresource) or "*/*" in resources or (
        subresource and (f"*/{subresource}" in resources or f"{rtype.plural}/*" in resources))
    scope = rule.get("scope", "*")
    scope_ok = scope == "*" or (scope == "Namespaced") == rtype.namespaced
    return (has(rule.get("operations"), operation) and has(rule.get("apiGroups"), rtype.group)
            and has(rule.get("apiVersions"), version) and bool(resource_ok) and scope_ok)


class Admission:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._session: aiohttp.ClientSession | None = None
        # One context per caBundle: a new one per call cost a TLS handshake per call, as aiohttp pools
        # connections by context (and without a bundle, loading the system's CA certificates, 20 ms of CPU).
        self._contexts: dict[str, ssl.SSLContext] = {}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _hooks(self, key: tuple[str, str], *, operation: str, rtype: ResourceType, version: str,
               subresource: str, namespace: str, obj: dict[str, Any] | None, old: dict[str, Any] | None
               ) -> list[dict[str, Any]]:
        labels = [((o or {}).get("metadata") or {}).get("labels") or {} for o in (obj, old) if o]
        ns_labels: dict[str, str] = {}
        if rtype.key == NAMESPACE_KEY:
            ns_labels = labels[0] if labels else {}
        elif namespace:
            ns_labels = ((self._store.get(NAMESPACE_KEY, "", namespace) or {}).get("metadata") or {}).get("labels") or {}
        chosen = []
        for config in self._store.list(key):
            for hook in config.get("webhooks") or ():
                if not any(_matches(r, operation=operation, rtype=rtype, version=version, subresource=subresource)
                           for r in hook.get("rules") or ()):
                    continue
                if (rtype.namespaced or rtype.key == NAMESPACE_KEY) and not selector_from_label_selector(
                        hook.get("namespaceSelector"))(ns_labels):
                    continue
                if not any(selector_from_label_selector(hook.get("objectSelector"))(l) for l in labels or [{}]):
                    continue
                chosen.append(hook)
        return chosen

    async def admit(self, *, operation: str, rtype: ResourceType, version: str, subresource: str, namespace: str,
                    name: str, obj: dict[str, Any] | None, old: dict[str, Any] | None, mutate: bool,
                    options: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """Runs the mutating (mutate=True) or validating webhooks; returns the possibly patched object."""
        hooks = self._hooks(MUTATING if mutate else VALIDATING, operation=operation, rtype=rtype, version=version,
                            subresource=subresource, namespace=namespace, obj=obj, old=old)
        for hook in hooks:
            request = {
                "uid": str(uuid.uuid4()),
                "kind": {"group": rtype.group, "version": version, "kind": rtype.kind},
                "resource": {"group": rtype.group, "version": version, "resource": rtype.plural},
                "requestKind": {"group": rtype.group, "version": version, "kind": rtype.kind},
                "requestResource": {"group": rtype.group, "version": version, "resource": rtype.plural},
                "name": name, "namespace": namespace, "operation": operation, "userInfo": USER,
                "object": obj, "oldObject": old, "dryRun": False, "options": options,
            }
            if subresource:
                request["subResource"] = request["requestSubResource"] = subresource
            response = await self._call(hook, request)
            if response is None:
                continue  # failurePolicy: Ignore
            if not response.get("allowed"):
                status = dict(response.get("status") or {})
                denied = f'admission webhook "{hook["name"]}" denied the request'
                detail = status.get("message") or status.get("reason")
                code = status.get("code") or 400
                raise APIError(code if code >= 400 else 400, status.get("reason") or "BadRequest",
                               f"{denied}: {detail}" if detail else f"{denied} without explanation")
            if mutate and response.get("patch"):
                if response.get("patchType", "JSONPatch") != "JSONPatch":
                    raise APIError(500, "InternalError", f'Internal error occurred: webhook "{hook["name"]}" '
                                                         f"answered an unsupported patchType")
                obj = json_patch(obj, json.loads(base64.b64decode(response["patch"])))
        return obj

    async def _call(self, hook: dict[str, Any], request: dict[str, Any]) -> dict[str, Any] | None:
        config = hook.get("clientConfig") or {}
        url = config.get("url")
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
        try:
            if not url:
                raise RuntimeError("only clientConfig.url webhooks can be reached from localkube")
            context: ssl.SSLContext | None = None
            if url.startswith("https:"):
                bundle = config.get("caBundle") or ""
                if bundle not in self._contexts:
                    self._contexts[bundle] = ssl.create_default_context(
                        cadata=base64.b64decode(bundle).decode() if bundle else None)
                context = self._contexts[bundle]
            if self._session is None:
                self._session = aiohttp.ClientSession()
            timeout = aiohttp.ClientTimeout(total=hook.get("timeoutSeconds", 10))
            async with self._session.post(url, json=review, ssl=context if context else False,
                                          timeout=timeout) as answer:
                if answer.status != 200:
                    raise RuntimeError(f"webhook answered HTTP {answer.status}")
                body = await answer.json(content_type=None)
            response = body.get("response") or {}
            if response.get("uid") != request["uid"]:
                raise RuntimeError("webhook response uid does not match the request")
            return response
        except (aiohttp.ClientError, asyncio.TimeoutError, RuntimeError, ValueError, ssl.SSLError) as exc:
            if hook.get("failurePolicy", "Fail") == "Ignore":
                return None
            raise APIError(500, "InternalError", f'Internal error occurred: failed calling webhook "{hook["name"]}": '
                                                 f'failed to call webhook: Post "{url}": {exc or type(exc).__name__}'
                           ) from None
