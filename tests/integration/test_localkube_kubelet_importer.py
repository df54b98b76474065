"""Our importer as a localkube pod, shaped as CDI renders it (cdi-facts §3.1): the image name maps to the
`cdi-importer` console script, the volume arrives at /data or /dev/cdi-block-volume, and the result reaches
the container status through /dev/termination-log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.images import ImageSet
from tests.fixtures.localkube_cluster import ClusterAPI, claim_volume, pvc_manifest
from tests.support.nginx import NginxServer

pytestmark = pytest.mark.root


def importer_pod(*, url: str, size: str, block: bool) -> dict[str, Any]:
    env = {"IMPORTER_SOURCE": "http", "IMPORTER_ENDPOINT": url, "IMPORTER_CONTENTTYPE": "kubevirt",
           "IMPORTER_IMAGE_SIZE": size, "FILESYSTEM_OVERHEAD": "0.055", "IMPORTER_METRICS_PORT": "0"}
    container: dict[str, Any] = {
        "name": "importer", "image": "quay.io/kubevirt/cdi-importer:v1.60.0", "args": ["-v=1"],
        "env": [{"name": k, "value": v} for k, v in env.items()],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {"runAsUser": 107, "runAsNonRoot": True, "allowPrivilegeEscalation": False},
    }
    if block:
        container["volumeDevices"] = [{"name": "cdi-data-vol", "devicePath": "/dev/cdi-block-volume"}]
    else:
        container["volumeMounts"] = [{"name": "cdi-data-vol", "mountPath": "/data"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "importer-target"}, "spec": {
        "restartPolicy": "OnFailure", "securityContext": {"fsGroup": 107}, "enableServiceLinks": False,
        "containers": [container], "volumes": [claim_volume("cdi-data-vol", "target")]}}


@pytest.mark.parametrize("block", [False, True], ids=["filesystem", "block"])
def test_importer_pod_imports_into_the_claim(block: bool, images: ImageSet, nginx_server: NginxServer,
                                             cluster_api: ClusterAPI, cluster_kubectl: Any) -> None:
    url = nginx_server.url(nginx_server.publish(images.path("disk.qcow2")))
    cluster_kubectl("create", "-f", "-", objects=[
        pvc_manifest("target", size="64Mi", mode="Block" if block else "Filesystem"),
        importer_pod(url=url, size="64Mi", block=block)])
    pod = cluster_api.wait_phase("importer-target", "Succeeded", "Failed", timeout=120)
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (pod["status"]["phase"], state["exitCode"]) == ("Succeeded", 0), state
    assert json.loads(state["message"])["message"] == "Import Complete"
    pvc = cluster_api.get("/api/v1/namespaces/default/persistentvolumeclaims/target")
    assert pvc is not None
    pv = cluster_api.get(f"/api/v1/persistentvolumes/{pvc['spec']['volumeName']}")
    assert pv is not None
    if block:
        images.assert_imported(Path(pv["metadata"]["annotations"]["localkube.dev/backing-file"]), "disk.qcow2")
    else:
        disk = Path(pv["spec"]["hostPath"]["path"]) / "disk.img"
        images.assert_imported(disk, "disk.qcow2")
        assert disk.stat().st_gid == 107  # fsGroup owns the volume root, so the file is the group's too
    target = "/dev/cdi-block-volume" if block else "/data/disk.img"
    assert f"into {target}" in cluster_kubectl("logs", "importer-target").stdout
