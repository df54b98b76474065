"""What the API server fills in on create for the built-in types our controllers and kubelet rely on."""

from __future__ import annotations

import base64
import random
from typing import Any

from .store import Store
from .types import ResourceType

DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"


def initial_status(rtype: ResourceType) -> dict[str, Any] | None:
    if rtype.group:
        return None
    return {"pods": {"phase": "Pending", "qosClass": "BestEffort"}, "persistentvolumeclaims": {"phase": "Pending"},
            "persistentvolumes": {"phase": "Pending"}, "namespaces": {"phase": "Active"},
            "services": {"loadBalancer": {}}}.get(rtype.plural)


def apply_defaults(rtype: ResourceType, obj: dict[str, Any], store: Store) -> None:
    if rtype.group:
        return
    spec = obj.setdefault("spec", {}) if rtype.plural in ("pods", "persistentvolumeclaims", "services",
                                                            "namespaces") else None
    if rtype.plural == "pods":
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("serviceAccountName", "default")
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
            container.setdefault("imagePullPolicy", "IfNotPresent")
    elif rtype.plural == "persistentvolumeclaims":
        spec.setdefault("volumeMode", "Filesystem")
        if "storageClassName" not in spec:  # the DefaultStorageClass admission plugin
            default = next((sc for sc in store.list(("storage.k8s.io", "storageclasses"))
                            if (sc["metadata"].get("annotations") or {}).get(DEFAULT_CLASS) == "true"), None)
            if default is not None:
                spec["storageClassName"] = default["metadata"]["name"]
    elif rtype.plural == "services":
        spec.setdefault("type", "ClusterIP")
        if spec.get("clusterIP") != "None":
            spec.setdefault("clusterIP", f"10.96.{random.randrange(256)}.{random.randrange(1, 255)}")
    elif rtype.plural == "namespaces":
        spec.setdefault("finalizers", ["kubernetes"])
    elif rtype.plural == "secrets":
        obj["type"] = obj.get("type") or "Opaque"
        string_data = obj.pop("stringData", None) or {}
        obj["data"] = {**(obj.get("data") or {}),
                       **{k: base64.b64encode(v.encode()).decode() for k, v in string_data.items()}}
