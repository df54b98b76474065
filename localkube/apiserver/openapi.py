"""Just enough OpenAPI for kubectl: v3 documents whose PATCH operations declare the `fieldValidation` query
parameter, so `kubectl create/apply` (validate=strict by default) leaves validation to this server instead of
downloading schemas for client-side validation."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .registry import Registry

_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml")


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def v3_document(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = [t for t in registry.types() if t.group == group and t.version(version)]
    if not types:
        return None
    paths: dict[str, Any] = {}
    for t in types:
        base = f"/{_gv_path(group, version)}" + ("/namespaces/{namespace}" if t.namespaced else "")
        gvk = {"group": group, "version": version, "kind": t.kind}
        paths[f"{base}/{t.plural}/{{name}}"] = {"patch": {
            "operationId": f"patch{t.kind}", "x-kubernetes-group-version-kind": gvk,
            "x-kubernetes-action": "patch",
            "parameters": [{"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
                           for n in ("dryRun", "fieldManager", "fieldValidation", "force")],
            "requestBody": {"content": {c: {"schema": {"type": "object"}} for c in _PATCH_TYPES}},
            "responses": {"200": {"description": "OK"}}}}
    # A CRD's schema, so `kubectl explain` can describe its fields.
    schemas = {f"{group}.{version}.{t.kind}": {**t.version(version).schema,
                                               "x-kubernetes-group-version-kind": [
                                                   {"group": group, "version": version, "kind": t.kind}]}
               for t in types if t.version(version).schema}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.37.0"}, "paths": paths,
            "components": {"schemas": schemas}}


def v3_index(registry: Registry) -> dict[str, Any]:
    gvs = {("", "v1")} | {(t.group, v.name) for t in registry.types() for v in t.versions}
    paths = {}
    for group, version in sorted(gvs):
        doc = v3_document(registry, group, version)
        digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32].upper()
        paths[_gv_path(group, version)] = {"serverRelativeURL": f"/openapi/v3/{_gv_path(group, version)}?hash={digest}"}
    return {"paths": paths}




def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2); our payloads stay under 128 bytes."""
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def v2_protobuf() -> bytes:
    """An OpenAPI v2 document with no definitions, in the gnostic protobuf kubectl reads (Document.swagger = 1,
    .info = 2 with title = 1 and version = 2). kubectl validates a `kind: List` client-side from it; with no
    definitions every item passes there and this server's own validation decides."""
    info = _field(1, b"Kubernetes") + _field(2, b"v1.37.0")
    return _field(1, b"2.0") + _field(2, info)


def v2_json() -> dict[str, Any]:
    return {"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.37.0"}, "paths": {}, "definitions": {}}
