"""Reading a DataVolume spec the way the API server hands it to CDI.

Manifests often carry ``key:`` with nothing after it (``source:``, ``storage:``); a CRD with a structural
schema prunes those nulls, so CDI's Go code sees the field as absent. These helpers give every caller that
same view, so the webhook and the controller never disagree about what a spec says.
"""

from __future__ import annotations

import json
import re
from typing import Any

from cdi.api import names
from importer.quantity import parse_quantity

Obj = dict[str, Any]

# The Kubernetes quantity grammar, as the API server's decoder enforces it.
QUANTITY_PATTERN = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_QUANTITY = re.compile(QUANTITY_PATTERN)
MIB = 1 << 20


def pruned(value: Any) -> Any:
    """``value`` without null members at any depth (what a structural schema stores)."""
    if isinstance(value, dict):
        return {k: pruned(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [pruned(v) for v in value if v is not None]
    return value


def spec_of(dv: Obj) -> Obj:
    return pruned(dv.get("spec") or {})


def meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def annotations(obj: Obj) -> dict[str, str]:
    return dict(meta(obj).get("annotations") or {})


def labels(obj: Obj) -> dict[str, str]:
    return dict(meta(obj).get("labels") or {})


def source_kinds(spec: Obj) -> list[str]:
    """The source types named under ``spec.source`` (exactly one in a valid DataVolume)."""
    return [kind for kind in (spec.get("source") or {}) if kind in names.SOURCES]


def source_kind(spec: Obj) -> str | None:
    kinds = source_kinds(spec)
    return kinds[0] if len(kinds) == 1 else None


def content_type(spec: Obj) -> str:
    return spec.get("contentType") or names.CONTENT_KUBEVIRT


def target(spec: Obj) -> tuple[str, Obj]:
    """``("pvc", spec.pvc)`` or ``("storage", spec.storage)``: which target a DataVolume asks for."""
    if "pvc" in spec:
        return "pvc", spec["pvc"]
    return "storage", spec.get("storage") or {}


def requested_size(target_spec: Obj) -> str | None:
    return ((target_spec.get("resources") or {}).get("requests") or {}).get("storage")


def is_quantity(text: str) -> bool:
    return bool(_QUANTITY.match(str(text)))


def quantity_bytes(text: str) -> int:
    """Bytes of a quantity already known to match the grammar; negative quantities stay negative."""
    text = str(text).strip()
    if text.startswith("-"):
        return -parse_quantity(text[1:])
    return parse_quantity(text)


def is_clone(spec: Obj) -> bool:
    return "sourceRef" in spec or source_kind(spec) in ("pvc", "snapshot")


def external_population_ref(spec: Obj) -> Obj | None:
    """The populator reference of an externally populated DataVolume (no source, dataSource(Ref) set)."""
    _, target_spec = target(spec)
    return target_spec.get("dataSourceRef") or target_spec.get("dataSource")


def is_controlled_by(obj: Obj, *, kind: str, uid: str | None = None) -> bool:
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == kind and (uid is None or ref.get("uid") == uid):
            return True
    return False


def pod_resource_override(text: str) -> Obj:
    """The worker-pod resources a DataVolume asks for: ``{"limits": {...}, "requests": {...}}`` of quantities."""
    try:
        value = json.loads(text)
    except ValueError:
        raise ValueError(f"not JSON: {text!r}") from None
    if not isinstance(value, dict) or set(value) - {"limits", "requests"}:
        raise ValueError('expected an object with "limits" and/or "requests"')
    for part in value.values():
        if not isinstance(part, dict) or not all(isinstance(q, str) and is_quantity(q) for q in part.values()):
            raise ValueError("limits and requests map resource names to quantities such as \"2\" or \"1Gi\"")
    return value
