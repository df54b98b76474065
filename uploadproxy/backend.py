"""What the upload proxy needs from Kubernetes: the PVC a token names, and where its upload server listens.

A small seam so the proxy runs against a real cluster (:class:`KubernetesBackend`) or, in tests and
local tools, against PVC objects held in memory (:class:`StaticBackend`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from cdi.api import names
from uploadproxy import contract as c

PVC = dict[str, Any]


class NoUploadServer(Exception):
    """The PVC's upload server cannot be reached (yet): no pod, or no pod IP."""


@dataclass(frozen=True)
class Upstream:
    """Where an upload server listens, and the name its certificate must carry (None: the URL's host)."""

    url: str  # base URL, no trailing slash
    server_hostname: str | None = None


class Backend(Protocol):
    def pvc(self, namespace: str, name: str) -> PVC | None:
        """The PVC as a JSON-shaped dict (metadata.annotations, spec.dataSourceRef), or None if it is absent."""

    def upload_server(self, namespace: str, name: str) -> Upstream:
        """The upload server of PVC ``namespace/name``; raises NoUploadServer when there is none to reach."""


def annotations(pvc: PVC) -> dict[str, str]:
    return dict((pvc.get("metadata") or {}).get("annotations") or {})


class StaticBackend:
    """PVCs and upload server URLs held in memory; tests change them to walk the proxy through its checks."""

    def __init__(self) -> None:
        self.pvcs: dict[tuple[str, str], PVC] = {}
        self.urls: dict[tuple[str, str], str] = {}

    def pvc(self, namespace: str, name: str) -> PVC | None:
        return self.pvcs.get((namespace, name))

    def upload_server(self, namespace: str, name: str) -> Upstream:
        return Upstream(self.urls[(namespace, name)])


class KubernetesBackend:
    """Reads PVCs and pods with the official client.

    The upload server is reached at its pod's IP, and its certificate is checked against its headless
    Service's DNS name (the pod's ``service`` label): no cluster DNS needed, so the same code serves a real
    cluster and ``cdi local`` (whose pods have loopback IPs and no Service DNS).
    """

    def __init__(self) -> None:
        from kubernetes import client, config  # noqa: PLC0415 - only the in-cluster program pays for the import

        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        self._client = client.ApiClient()
        self._core = client.CoreV1Api(self._client)
        self._api_error = client.ApiException

    def _read(self, read: Any, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found = read(name, namespace)
        except self._api_error as error:
            if error.status == 404:
                return None
            raise
        return dict(self._client.sanitize_for_serialization(found))

    def pvc(self, namespace: str, name: str) -> PVC | None:
        return self._read(self._core.read_namespaced_persistent_volume_claim, namespace, name)

    def upload_server(self, namespace: str, name: str) -> Upstream:
        pvc = self.pvc(namespace, name) or {}
        pod_name = annotations(pvc).get(names.ANN_UPLOAD_POD_NAME) or c.upload_pod_name(name)
        pod = self._read(self._core.read_namespaced_pod, namespace, pod_name)
        ip = ((pod or {}).get("status") or {}).get("podIP")
        if not ip:
            raise NoUploadServer(f"upload pod {namespace}/{pod_name} has no IP")
        service = ((pod or {}).get("metadata") or {}).get("labels", {}).get(names.LABEL_SERVICE) or pod_name
        host = f"[{ip}]" if ":" in ip else ip
        return Upstream(f"https://{host}:{c.DEFAULT_PORT}", server_hostname=f"{service}.{namespace}.svc")
