"""Label and field selectors as the API server parses them, compiled into predicates over objects."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .errors import bad_request

Obj = dict[str, Any]

_SET = re.compile(r"^\s*(!?)([\w./-]+)\s*(?:(notin|in)\s*\(([^)]*)\)|(==|!=|=)\s*([\w./-]*))?\s*$")


def _split(selector: str) -> list[str]:
    """Splits on the commas outside parentheses ("a in (x,y),b" is two requirements)."""
    parts, depth, current = [], 0, ""
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p for p in parts if p.strip()]


def label_matcher(selector: str | None) -> Callable[[dict[str, str]], bool]:
    requirements: list[Callable[[dict[str, str]], bool]] = []
    for part in _split(selector or ""):
        m = _SET.match(part)
        if not m:
            raise bad_request(f"unable to parse requirement: invalid label selector: {part!r}")
        negate, key, set_op, values, op, value = m.groups()
        if set_op:
            allowed = {v.strip() for v in values.split(",") if v.strip()}
            if set_op == "in":
                requirements.append(lambda labels, k=key, a=allowed: labels.get(k) in a)
            else:
                requirements.append(lambda labels, k=key, a=allowed: labels.get(k) not in a)
        elif op:
            if negate:
                raise bad_request(f"invalid label selector: {part!r}")
            if op == "!=":
                requirements.append(lambda labels, k=key, v=value: labels.get(k) != v)
            else:
                requirements.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif negate:
            requirements.append(lambda labels, k=key: k not in labels)
        else:
            requirements.append(lambda labels, k=key: k in labels)
    return lambda labels: all(r(labels) for r in requirements)


def field_value(obj: Obj, path: str) -> str | None:
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    if node is None:
        return None
    return str(node).lower() if isinstance(node, bool) else str(node)


def field_matcher(selector: str | None) -> Callable[[Obj], bool]:
    requirements: list[Callable[[Obj], bool]] = []
    for part in _split(selector or ""):
        m = re.match(r"^\s*([\w.]+)\s*(==|!=|=)\s*(.*?)\s*$", part)
        if not m:
            raise bad_request(f"invalid field selector: {part!r}")
        path, op, value = m.groups()
        if op == "!=":
            requirements.append(lambda o, p=path, v=value: (field_value(o, p) or "") != v)
        else:
            requirements.append(lambda o, p=path, v=value: (field_value(o, p) or "") == v)
    return lambda obj: all(r(obj) for r in requirements)


def object_matcher(*, labels: str | None, fields: str | None) -> Callable[[Obj], bool]:
    by_label = label_matcher(labels)
    by_field = field_matcher(fields)
    return lambda obj: by_label(obj.get("metadata", {}).get("labels") or {}) and by_field(obj)


def selector_from_label_selector(spec: dict[str, Any] | None) -> Callable[[dict[str, str]], bool]:
    """A metav1.LabelSelector (matchLabels / matchExpressions), as webhooks' object and namespace selectors use."""
    if not spec:
        return lambda labels: True
    parts = [f"{k}={v}" for k, v in (spec.get("matchLabels") or {}).items()]
    for expr in spec.get("matchExpressions") or ():
        op, key, values = expr["operator"], expr["key"], expr.get("values") or []
        parts.append({"In": f"{key} in ({','.join(values)})", "NotIn": f"{key} notin ({','.join(values)})",
                      "Exists": key, "DoesNotExist": f"!{key}"}[op])
    return label_matcher(",".join(parts))
