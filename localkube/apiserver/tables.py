"""`meta.k8s.io/v1` Table answers, which `kubectl get` prints: Name plus the type's printer columns."""

from __future__ import annotations

import datetime
import re
from typing import Any

from .types import POD_READY, POD_RESTARTS, POD_STATUS, Column, ResourceType

_STEP = re.compile(r"\[\?\(@\.([\w.]+)\s*==\s*['\"]([^'\"]*)['\"]\)\]|\[(\*|-?\d+)\]|\.([\w-]+)")


def jsonpath(obj: Any, path: str) -> list[Any]:
    """The values a printer-column JSONPath (.a.b, [n], [*], [?(@.k=="v")]) selects."""
    nodes = [obj]
    text = path.strip().removeprefix("{").removesuffix("}").removeprefix("$")
    for m in _STEP.finditer(text):
        fkey, fvalue, index, name = m.groups()
        found: list[Any] = []
        for node in nodes:
            if name is not None and isinstance(node, dict) and name in node:
                found.append(node[name])
            elif index is not None and isinstance(node, list):
                if index == "*":
                    found.extend(node)
                elif -len(node) <= int(index) < len(node):
                    found.append(node[int(index)])
            elif fkey is not None and isinstance(node, list):
                found.extend(i for i in node if isinstance(i, dict) and str(_dig(i, fkey)) == fvalue)
        nodes = found
    return nodes


def _dig(obj: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def age(timestamp: str, now: datetime.datetime | None = None) -> str:
    """Kubernetes' short human duration ("5s", "3m", "2d")."""
    try:
        then = datetime.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    except (TypeError, ValueError):
        return "<unknown>"
    seconds = int(((now or datetime.datetime.now(datetime.UTC)) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * 2 or (unit == "m" and seconds >= 120):
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _pod_ready(pod: dict[str, Any]) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _pod_status(pod: dict[str, Any]) -> str:
    """The reason kubectl prints: Terminating, a container's waiting/terminated reason, else the phase."""
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        waiting, terminated = state.get("waiting") or {}, state.get("terminated") or {}
        if waiting.get("reason"):
            reason = waiting["reason"]
        elif terminated.get("reason"):
            reason = terminated["reason"]
        elif terminated:
            reason = f"ExitCode:{terminated.get('exitCode', 0)}"
    return reason


def _pod_restarts(pod: dict[str, Any]) -> int:
    return sum(s.get("restartCount", 0) for s in (pod.get("status") or {}).get("containerStatuses") or [])


_COMPUTED = {POD_READY: _pod_ready, POD_STATUS: _pod_status, POD_RESTARTS: _pod_restarts}


def _cell(obj: dict[str, Any], column: Column) -> Any:
    if column.json_path in _COMPUTED:
        return _COMPUTED[column.json_path](obj)
    values = jsonpath(obj, column.json_path)
    if not values:
        return None
    if column.type == "date":
        return age(values[0])
    value = values[0]
    if column.type == "string" and not isinstance(value, str):
        return ",".join(str(v) for v in values) if len(values) > 1 else str(value)
    return value


def table(rtype: ResourceType, version: str, objects: list[dict[str, Any]], *, include_object: str,
          resource_version: str, continue_token: str = "") -> dict[str, Any]:
    columns = rtype.version(version).columns
    definitions = [{"name": "Name", "type": "string", "format": "name", "description": "Name of the object",
                    "priority": 0}]
    definitions += [{"name": c.name, "type": "string" if c.type == "date" else c.type, "format": c.format,
                     "description": c.description, "priority": c.priority} for c in columns]
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": [obj["metadata"]["name"]] + [_cell(obj, c) for c in columns]}
        if include_object == "Object":
            row["object"] = obj
        elif include_object != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": obj["metadata"]}
        rows.append(row)
    metadata: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        metadata["continue"] = continue_token
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata,
            "columnDefinitions": definitions, "rows": rows}
