"""How stored objects look through each served type: apiVersion, and events.k8s.io/v1 Events, which share
storage with core v1 Events (as in Kubernetes) under other field names."""

from __future__ import annotations

from typing import Any

from .types import ResourceType

_EVENT_FIELDS = {"involvedObject": "regarding", "message": "note", "source": "deprecatedSource",
                 "firstTimestamp": "deprecatedFirstTimestamp", "lastTimestamp": "deprecatedLastTimestamp",
                 "count": "deprecatedCount", "reportingComponent": "reportingController"}
_EVENT_FIELDS_BACK = {v: k for k, v in _EVENT_FIELDS.items()}


def _is_new_event(rtype: ResourceType) -> bool:
    return rtype.group == "events.k8s.io"


def present(rtype: ResourceType, version: str, obj: dict[str, Any]) -> dict[str, Any]:
    out = {"apiVersion": rtype.api_version(version), "kind": rtype.kind,
           **{k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}}
    if _is_new_event(rtype):
        out = {_EVENT_FIELDS.get(k, k): v for k, v in out.items()}
        if not out.get("eventTime"):  # required in events.k8s.io/v1; core events may only carry timestamps
            stamp = out.get("deprecatedFirstTimestamp") or out["metadata"].get("creationTimestamp", "")
            out["eventTime"] = stamp.replace("Z", ".000000Z")
    return out


def to_storage(rtype: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    if _is_new_event(rtype):
        return {**{_EVENT_FIELDS_BACK.get(k, k): v for k, v in obj.items()}, "apiVersion": "v1"}
    return obj
