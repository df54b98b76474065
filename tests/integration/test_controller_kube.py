"""The controller's API client against a real API server (localkube): what each call answers, and what a caller
sees when the server says no or cannot be reached."""

from __future__ import annotations

import socket

import pytest
from kubernetes import client

from cdi.controller.kube import Kube, KubeError, path
from localkube.cluster import Cluster

CONFIGMAPS = path(plural="configmaps", namespace="default")


def configmap(name: str, value: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"key": value}}


def test_get_create_patch_list_delete(localkube_cluster: Cluster) -> None:
    kube = Kube.from_kubeconfig(localkube_cluster.kubeconfig)
    assert kube.get(f"{CONFIGMAPS}/settings") is None
    created = kube.create(CONFIGMAPS, configmap("settings", "1"))
    assert created is not None and created["data"] == {"key": "1"}
    assert kube.create(CONFIGMAPS, configmap("settings", "2")) is None  # 409: one of that name exists
    patched = kube.patch(f"{CONFIGMAPS}/settings", {"data": {"other": "x"}})  # a merge patch: key stays
    assert patched is not None and patched["data"] == {"key": "1", "other": "x"}
    assert kube.patch(f"{CONFIGMAPS}/missing", {"data": {}}) is None
    kube.create(CONFIGMAPS, {**configmap("labelled", "3"), "metadata": {"name": "labelled", "labels": {"a": "b"}}})
    assert [meta["metadata"]["name"] for meta in kube.list(CONFIGMAPS, label_selector="a=b")] == ["labelled"]
    kube.delete(f"{CONFIGMAPS}/settings")
    kube.delete(f"{CONFIGMAPS}/settings")  # already gone: no error
    assert kube.get(f"{CONFIGMAPS}/settings") is None
    assert kube.list(path(group="example.com", version="v1", plural="widgets")) == []  # an API not installed


def test_a_refusal_carries_the_api_servers_own_message(localkube_cluster: Cluster) -> None:
    kube = Kube.from_kubeconfig(localkube_cluster.kubeconfig)
    with pytest.raises(KubeError) as refused:
        kube.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Not_A_Name"}})
    assert refused.value.status == 422
    assert "Not_A_Name" in str(refused.value) and "{" not in str(refused.value)  # the message, not the JSON


def test_an_unreachable_api_server_is_an_oserror_naming_it() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    with pytest.raises(OSError, match=f"cannot reach the API server at http://127.0.0.1:{port}"):
        Kube(configuration).get(CONFIGMAPS)
