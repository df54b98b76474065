"""Manifests the localkube tests share: a Widget CRD with a schema, printer columns and a status subresource."""

from __future__ import annotations

import json
from typing import Any

GROUP = "demo.localkube.test"

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wg"],
                  "categories": ["gadgets"]},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "subresources": {"status": {}},
            "additionalPrinterColumns": [
                {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
                {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ],
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": {
                        "type": "object", "required": ["size"],
                        "properties": {
                            "size": {"type": "integer", "minimum": 1},
                            "color": {"type": "string", "enum": ["red", "green", "blue"], "default": "red"},
                            "code": {"type": "string", "pattern": "^[a-z]{3}$"},
                            "note": {"type": "string", "nullable": True},
                            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    },
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                },
            }},
        }],
    },
}


def widget(name: str, *, size: int = 1, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": name},
            "spec": {"size": size, **spec}}


def manifest(*objects: dict[str, Any]) -> str:
    """kubectl reads JSON as YAML; a List holds several objects in one `-f -`."""
    if len(objects) == 1:
        return json.dumps(objects[0])
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
