"""What the upload proxy needs from Kubernetes: the PVC a token names, and where its upload server listens.

A small seam so the proxy runs against a real cluster (:class:`KubernetesBackend`) or, in tests and
local tools, against PVC objects held in memory (:class:`StaticBackend`).
"""

from __future__ import annotations

from typing import Any, Protocol

from uploadproxy import contract as c

# PVC annotations the proxy reads (cdi-facts §2.1, §4.2). Kept here until cdi.api names them.
PREFIX = "cdi.kubevirt.io/"
UPLOAD_TARGET = PREFIX + "storage.upload.target"
POD_PHASE = PREFIX + "storage.pod.phase"
POD_READY = PREFIX + "storage.pod.ready"
CONTENT_TYPE = PREFIX + "storage.contentType"
PVC_PRIME = PREFIX + "storage.populator.pvcPrime"
UPLOAD_POD_NAME = PREFIX + "storage.uploadPodName"
UPLOAD_SOURCE_KIND = "VolumeUploadSource"

PVC = dict[str, Any]


class Backend(Protocol):
    def pvc(self, namespace: str, name: str) -> PVC | None:
        """The PVC as a JSON-shaped dict (metadata.annotations, spec.dataSourceRef), or None if it is absent."""

    def upload_server_url(self, namespace: str, name: str) -> str:
        """Base URL of the upload server of PVC ``namespace/name`` (no trailing slash)."""


def annotations(pvc: PVC) -> dict[str, str]:
    return dict((pvc.get("metadata") or {}).get("annotations") or {})


class StaticBackend:
    """PVCs and upload server URLs held in memory; tests change them to walk the proxy through its checks."""

    def __init__(self) -> None:
        self.pvcs: dict[tuple[str, str], PVC] = {}
        self.urls: dict[tuple[str, str], str] = {}

    def pvc(self, namespace: str, name: str) -> PVC | None:
        return self.pvcs.get((namespace, name))

    def upload_server_url(self, namespace: str, name: str) -> str:
        return self.urls[(namespace, name)]


class KubernetesBackend:
    """Reads PVCs with the official client; the upload server is reached through its headless Service."""

    def __init__(self) -> None:
        from kubernetes import client, config  # noqa: PLC0415 - only the in-cluster program pays for the import

        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        self._client = client.ApiClient()
        self._core = client.CoreV1Api(self._client)
        self._not_found = client.ApiException

    def pvc(self, namespace: str, name: str) -> PVC | None:
        try:
            found = self._core.read_namespaced_persistent_volume_claim(name, namespace)
        except self._not_found as error:
            if error.status == 404:
                return None
            raise
        return dict(self._client.sanitize_for_serialization(found))

    def upload_server_url(self, namespace: str, name: str) -> str:
        pvc = self.pvc(namespace, name) or {}
        service = annotations(pvc).get(UPLOAD_POD_NAME) or c.upload_pod_name(name)
        return f"https://{service}.{namespace}.svc:{c.DEFAULT_PORT}"
