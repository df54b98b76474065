"""The few Kubernetes API calls the controller makes, on plain JSON dicts.

The pure functions speak JSON-shaped dicts (what kubectl shows); the generated client's model classes and
its choice of patch content type would only get in the way, so urllib3 carries the calls, authenticated
from the kubernetes package's kubeconfig/in-cluster loading. Not requests: a DataVolume costs the controller
about 20 calls, and a call through requests took 400 µs of the calling thread's CPU against 185 µs through
urllib3 (localkube on 127.0.0.1; a GET or a merge patch of a small object), so 200 DataVolumes at once
spent 1.8 CPU-s in requests' own code, on the two cores that also run the importers.
"""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import urlencode

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import should_bypass_proxies

from cdi.api.spec import Obj

MERGE_PATCH = "application/merge-patch+json"
TIMEOUT = urllib3.Timeout(connect=30.0, read=30.0)
# Connections kept to the API server: the reconcile threads, the admission webhook's and the progress scraper's
# calls; more at once are opened and closed again.
POOL_SIZE = 8


def path(*, plural: str, group: str = "", version: str = "v1", namespace: str | None = None,
         name: str | None = None, subresource: str | None = None) -> str:
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    parts = [base] + ([f"namespaces/{namespace}"] if namespace else []) + [plural]
    parts += [name] if name else []
    parts += [subresource] if subresource else []
    return "/".join(parts)


class KubeError(OSError):
    """The API server could not be reached, or answered with an error; the text is its own message.

    An OSError, as requests' errors were: callers that report an unreachable cluster catch both at once."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Kube:
    """Get, list, create, merge-patch and delete, treating 404 on get and 409 on create as answers."""

    def __init__(self, configuration: client.Configuration) -> None:
        self.host = configuration.host.rstrip("/")
        headers = {"Accept": "application/json"}
        token = configuration.get_api_key_with_prefix("authorization")
        if token:
            headers["Authorization"] = token
        tls: dict[str, Any] = {"cert_reqs": "CERT_REQUIRED" if configuration.verify_ssl else "CERT_NONE"}
        if configuration.verify_ssl and configuration.ssl_ca_cert:
            tls["ca_certs"] = configuration.ssl_ca_cert
        if not configuration.verify_ssl:
            tls["assert_hostname"] = False
        if configuration.cert_file and configuration.key_file:
            tls.update(cert_file=configuration.cert_file, key_file=configuration.key_file)
        # The proxy as the kubernetes package resolved it (kubeconfig, else the environment), decided once.
        self.proxy: str | None = None
        if configuration.proxy and not should_bypass_proxies(self.host, configuration.no_proxy or ""):
            self.proxy = configuration.proxy
        self._pool: urllib3.PoolManager = (
            urllib3.ProxyManager(self.proxy, num_pools=2, maxsize=POOL_SIZE, headers=headers, **tls) if self.proxy
            else urllib3.PoolManager(num_pools=2, maxsize=POOL_SIZE, headers=headers, **tls))

    @classmethod
    def from_environment(cls) -> Kube:
        """In-cluster credentials in a pod, else the kubeconfig (KUBECONFIG or ~/.kube/config)."""
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)
        return cls(configuration)

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | os.PathLike[str]) -> Kube:
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        return cls(configuration)

    def call(self, method: str, url_path: str, *, body: Obj | None = None, content_type: str = "application/json",
             allow: tuple[int, ...] = ()) -> tuple[int, Obj | None]:
        """(status, decoded body) of one call; a status outside 2xx and ``allow`` raises KubeError."""
        headers = {"Content-Type": content_type} if body is not None else None
        try:
            response = self._pool.request(method, self.host + url_path, headers=headers, timeout=TIMEOUT,
                                          body=None if body is None else json.dumps(body).encode(),
                                          retries=False, redirect=False)
        except urllib3.exceptions.HTTPError as error:
            raise KubeError(f"cannot reach the API server at {self.host}: {error}") from error
        try:
            answer = json.loads(response.data) if response.data else None
        except ValueError:
            answer = None
        if response.status in allow:
            return response.status, None
        if not 200 <= response.status < 300:
            message = (answer or {}).get("message") if isinstance(answer, dict) else None
            raise KubeError(str(message or f"{response.status} {response.data.decode(errors='replace')}".strip()),
                            status=response.status)
        return response.status, answer

    def get(self, url_path: str) -> Obj | None:
        return self.call("GET", url_path, allow=(404,))[1]

    def list(self, url_path: str, *, label_selector: str = "") -> list[Obj]:
        query = f"?{urlencode({'labelSelector': label_selector})}" if label_selector else ""
        listed = self.call("GET", url_path + query, allow=(404,))[1]  # 404: the API (a CRD) is not installed
        return (listed or {}).get("items") or []

    def create(self, url_path: str, body: Obj) -> Obj | None:
        """The created object, or None when one of that name exists already."""
        return self.call("POST", url_path, body=body, allow=(409,))[1]

    def patch(self, url_path: str, body: Obj) -> Obj | None:
        return self.call("PATCH", url_path, body=body, content_type=MERGE_PATCH, allow=(404,))[1]

    def delete(self, url_path: str) -> None:
        self.call("DELETE", url_path, body={"propagationPolicy": "Background"}, allow=(404,))
