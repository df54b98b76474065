"""JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch for the core types in use."""

from __future__ import annotations

import copy
from typing import Any

from .errors import APIError, bad_request

# Lists merged element by element in a strategic merge patch, by the field that names an element.
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name", "volumes": "name",
    "env": "name", "volumeMounts": "mountPath", "volumeDevices": "devicePath", "ownerReferences": "uid",
    "conditions": "type", "imagePullSecrets": "name", "envFrom": None, "tolerations": None,
    "ports": "port",  # container ports are keyed by containerPort instead (see _merge_key)
}
SET_LISTS = {"finalizers"}  # lists of scalars merged as sets


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> Any:
    node = doc
    for part in parts[:-1]:
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError, TypeError):
            raise APIError(422, "Invalid", f"the server rejected our request: path {path!r} does not exist") from None
    return node


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise bad_request("a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        kind, path = op.get("op"), op.get("path", "")
        if kind in ("move", "copy"):
            value = _get(doc, _pointer(op["from"]), op["from"])
            if kind == "move":
                doc = _apply(doc, "remove", _pointer(op["from"]), None, op["from"])
            doc = _apply(doc, "add", _pointer(path), copy.deepcopy(value), path)
        elif kind == "test":
            if _get(doc, _pointer(path), path) != op.get("value"):
                raise APIError(422, "Invalid", f"the server rejected our request due to an error in our request: "
                                               f"testing value {path} failed")
        elif kind in ("add", "remove", "replace"):
            doc = _apply(doc, kind, _pointer(path), copy.deepcopy(op.get("value")), path)
        else:
            raise bad_request(f"unknown JSON patch operation {kind!r}")
    return doc


def _get(doc: Any, parts: list[str], path: str) -> Any:
    if not parts:
        return doc
    parent = _parent(doc, parts, path)
    try:
        return parent[int(parts[-1])] if isinstance(parent, list) else parent[parts[-1]]
    except (KeyError, IndexError, ValueError, TypeError):
        raise APIError(422, "Invalid", f"the server rejected our request: path {path!r} does not exist") from None


def _apply(doc: Any, kind: str, parts: list[str], value: Any, path: str) -> Any:
    if not parts:
        return value if kind != "remove" else None
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if kind == "add":
            if index > len(parent):
                raise APIError(422, "Invalid", f"the server rejected our request: index out of range at {path}")
            parent.insert(index, value)
            return doc
        if index >= len(parent):
            raise APIError(422, "Invalid", f"the server rejected our request: index out of range at {path}")
        if kind == "remove":
            del parent[index]
        else:
            parent[index] = value
    elif isinstance(parent, dict):
        if kind != "add" and last not in parent:
            raise APIError(422, "Invalid", f"the server rejected our request: path {path!r} does not exist")
        if kind == "remove":
            del parent[last]
        else:
            parent[last] = value
    else:
        raise APIError(422, "Invalid", f"the server rejected our request: path {path!r} does not exist")
    return doc


def _merge_key(field: str, items: list[Any]) -> str | None:
    if field == "ports" and any(isinstance(i, dict) and "containerPort" in i for i in items):
        return "containerPort"
    return MERGE_KEYS.get(field)


def strategic_merge(target: Any, patch: Any) -> Any:
    """Kubernetes' strategic merge, for the directives kubectl sends ($setElementOrder, $retainKeys,
    $deleteFromPrimitiveList, $patch: replace/delete); lists without a known key are replaced."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key == "$patch":
            continue
        if key == "$retainKeys":
            result = {k: v for k, v in result.items() if k in value}
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [v for v in result.get(field) or [] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and isinstance(result.get(key), list):
            result[key] = _merge_list(key, result[key], value)
        elif isinstance(value, list):
            result[key] = [{k: v for k, v in i.items() if k != "$patch"} if isinstance(i, dict) else i
                           for i in value if not (isinstance(i, dict) and i.get("$patch") == "delete")]
        else:
            result[key] = strategic_merge(result.get(key), value)
    for key in [k for k in patch if k.startswith("$setElementOrder/")]:
        field = key.split("/", 1)[1]
        result[field] = _ordered(field, result.get(field) or [], patch[key])
    return result


def _merge_list(field: str, current: list[Any], patch: list[Any]) -> list[Any]:
    if field in SET_LISTS:
        return current + [v for v in patch if v not in current]
    key = _merge_key(field, current + patch)
    if key is None or not all(isinstance(i, dict) for i in current + patch):
        return copy.deepcopy(patch)
    merged = list(current)
    for item in patch:
        index = next((i for i, c in enumerate(merged) if c.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del merged[index]
        elif index is None:
            merged.append(strategic_merge({}, item))
        else:
            merged[index] = strategic_merge(merged[index], item)
    return merged


def _ordered(field: str, items: list[Any], order: list[Any]) -> list[Any]:
    key = _merge_key(field, items)
    ident = (lambda i: i.get(key) if isinstance(i, dict) else i) if key else (lambda i: i)
    wanted = [ident(o) if isinstance(o, dict) else o for o in order]
    ranked = sorted(items, key=lambda i: wanted.index(ident(i)) if ident(i) in wanted else len(wanted))
    return ranked


def apply_patch(content_type: str, target: Any, body: Any) -> Any:
    kind = content_type.split(";")[0].strip()
    if kind == "application/json-patch+json":
        return json_patch(target, body)
    if kind == "application/merge-patch+json":
        return merge_patch(target, body)
    if kind == "application/strategic-merge-patch+json":
        return strategic_merge(target, body)
    if kind == "application/apply-patch+yaml":
        # Server-side apply reduced to a merge of the applied configuration (field ownership is not tracked).
        return strategic_merge(target, body)
    raise APIError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - accepted "
                                                 f"media types include: application/json-patch+json, "
                                                 f"application/merge-patch+json, application/apply-patch+yaml")
