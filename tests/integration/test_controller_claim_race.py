"""The controller's reconcile against a real localkube, for a race a whole system cannot be timed into: a user's
PVC made between the admission webhook's look (no PVC of the DataVolume's name) and the DataVolume's first
reconcile, which trusts that look instead of asking again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cdi.api import names
from cdi.cli.localsystem import install_crds
from cdi.controller import handlers
from cdi.controller.kube import Kube, path
from localkube.cluster import Cluster
from tests.fixtures.cdi_system import datavolume
from tests.fixtures.localkube_cluster import ClusterAPI, pvc_manifest

pytestmark = pytest.mark.root
DV_PATH = path(group=names.GROUP, version=names.VERSION, plural=names.DATAVOLUMES, namespace="default")


@pytest.fixture
def controller_kube(localkube_cluster: Cluster) -> Iterator[Kube]:
    """The handlers' API client on the cluster, and their memory fresh (it is the process's)."""
    install_crds(localkube_cluster.url)
    saved = handlers._kube, handlers._latest, handlers._seen
    handlers._kube = Kube.from_kubeconfig(localkube_cluster.kubeconfig)
    handlers._latest, handlers._seen = handlers.Latest(), handlers.Seen()
    handlers._recent.forget()
    handlers.reconcile_cluster_config()  # CDIConfig and the StorageProfiles a PVC is rendered with
    try:
        yield handlers._kube
    finally:
        handlers._kube, handlers._latest, handlers._seen = saved
        handlers._recent.forget()


def test_a_users_pvc_made_after_the_webhooks_look_is_a_conflict_not_ours(controller_kube: Kube,
                                                                         cluster_api: ClusterAPI) -> None:
    controller_kube.create(DV_PATH, datavolume("raced", {"blank": {}}))
    handlers._latest.fetched("PersistentVolumeClaim", "default", "raced", None)  # what the webhook saw
    cluster_api.create("/api/v1/namespaces/default/persistentvolumeclaims", pvc_manifest("raced"))  # the user's

    handlers.reconcile_datavolume("default", "raced")

    pvc: Any = cluster_api.get("/api/v1/namespaces/default/persistentvolumeclaims/raced")
    assert not pvc["metadata"].get("ownerReferences"), "the user's PVC is left alone"
    assert names.ANN_IMPORT_POD_NAME not in (pvc["metadata"].get("annotations") or {})
    bound = next(c for c in controller_kube.get(f"{DV_PATH}/raced")["status"]["conditions"] if c["type"] == "Bound")
    reasons = [e["reason"] for e in cluster_api.events() if e["involvedObject"]["name"] == "raced"]
    assert names.EVENT_ERR_RESOURCE_EXISTS in reasons, (bound, reasons)
