"""API paths the controller calls (core and grouped, namespaced and cluster-scoped, subresources)."""

from __future__ import annotations

import pytest
from kubernetes import client

from cdi.api import names
from cdi.controller.kube import Kube, path


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"plural": "pods", "namespace": "vms", "name": "importer-x"}, "/api/v1/namespaces/vms/pods/importer-x"),
    ({"plural": "persistentvolumes"}, "/api/v1/persistentvolumes"),
    ({"group": "storage.k8s.io", "version": "v1", "plural": "storageclasses"}, "/apis/storage.k8s.io/v1/storageclasses"),
    ({"group": names.GROUP, "version": names.VERSION, "plural": names.DATAVOLUMES, "namespace": "vms", "name": "d",
      "subresource": "status"}, "/apis/cdi.kubevirt.io/v1beta1/namespaces/vms/datavolumes/d/status"),
    ({"group": names.GROUP, "version": names.VERSION, "plural": names.CDICONFIGS, "name": "config"},
     "/apis/cdi.kubevirt.io/v1beta1/cdiconfigs/config"),
])
def test_paths(kwargs, expected):
    assert path(**kwargs) == expected


def test_the_proxy_is_the_one_the_kubernetes_package_resolved(monkeypatch):
    """Resolved once, as the official client does (environment, then no_proxy), not looked up on every call."""
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "10.0.0.1")
    for host, proxy in (("https://10.0.0.2:6443", "http://proxy.example:3128"), ("https://10.0.0.1:6443", None)):
        configuration = client.Configuration()
        configuration.host = host
        assert Kube(configuration).proxy == proxy
