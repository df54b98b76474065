"""The few Kubernetes API calls the controller makes, on plain JSON dicts.

The pure functions speak JSON-shaped dicts (what kubectl shows); the generated client's model classes and
its choice of patch content type would only get in the way, so requests carries the calls, authenticated
from the kubernetes package's kubeconfig/in-cluster loading.
"""

from __future__ import annotations

import os
from typing import Any

import requests
from kubernetes import client, config
from kubernetes.client.rest import should_bypass_proxies

from cdi.api.spec import Obj

MERGE_PATCH = "application/merge-patch+json"
TIMEOUT = 30.0


def path(*, plural: str, group: str = "", version: str = "v1", namespace: str | None = None,
         name: str | None = None, subresource: str | None = None) -> str:
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    parts = [base] + ([f"namespaces/{namespace}"] if namespace else []) + [plural]
    parts += [name] if name else []
    parts += [subresource] if subresource else []
    return "/".join(parts)


class Kube:
    """Get, list, create, merge-patch and delete, treating 404 on get and 409 on create as answers."""

    def __init__(self, configuration: client.Configuration) -> None:
        self.host = configuration.host.rstrip("/")
        self.session = requests.Session()
        # The proxy as the kubernetes package resolved it (kubeconfig, else the environment) and applies it. Not
        # requests' own environment lookups (proxy variables, no_proxy matching, ~/.netrc): they ran on every
        # call and took longer than a local API server takes to answer.
        self.session.trust_env = False
        if configuration.proxy and not should_bypass_proxies(self.host, configuration.no_proxy or ""):
            self.session.proxies = {"http": configuration.proxy, "https": configuration.proxy}
        self.session.verify = (configuration.ssl_ca_cert or True) if configuration.verify_ssl else False
        if configuration.cert_file and configuration.key_file:
            self.session.cert = (configuration.cert_file, configuration.key_file)
        token = configuration.get_api_key_with_prefix("authorization")
        if token:
            self.session.headers["Authorization"] = token

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

    def _call(self, method: str, url_path: str, **kwargs: Any) -> requests.Response:
        return self.session.request(method, self.host + url_path, timeout=TIMEOUT, **kwargs)

    def get(self, url_path: str) -> Obj | None:
        response = self._call("GET", url_path)
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return response.json()

    def list(self, url_path: str, *, label_selector: str = "") -> list[Obj]:
        params = {"labelSelector": label_selector} if label_selector else {}
        response = self._call("GET", url_path, params=params)
        if response.status_code == 404:  # the API (a CRD) is not installed
            return []
        response.raise_for_status()
        return response.json().get("items") or []

    def create(self, url_path: str, body: Obj) -> Obj | None:
        """The created object, or None when one of that name exists already."""
        response = self._call("POST", url_path, json=body)
        if response.status_code == 409:
            return None
        response.raise_for_status()
        return response.json()

    def patch(self, url_path: str, body: Obj) -> Obj | None:
        # requests keeps an explicit Content-Type over its application/json default.
        response = self._call("PATCH", url_path, json=body, headers={"Content-Type": MERGE_PATCH})
        if response.status_code == 404:
            return None
        response.raise_for_status()
        return response.json()

    def delete(self, url_path: str) -> None:
        response = self._call("DELETE", url_path, json={"propagationPolicy": "Background"})
        if response.status_code != 404:
            response.raise_for_status()

