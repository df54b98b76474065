"""The importer pod (cdi-facts §3.1, §3.2) and when one may run (§5.3, §5.7).

The env is checked by feeding it back to the importer's own env reader: the pod must say what the importer
understands, not merely what this controller meant.
"""

from __future__ import annotations

import pytest

from cdi.api import names
from cdi.controller.config import cdi_config_status, storage_profile
from cdi.controller.importer_pod import importer_pod, wants_importer_pod
from cdi.controller.pvc import render_pvc
from importer import contract as c
from importer.request import from_env

LOCAL = {"metadata": {"name": "local", "annotations": {names.ANN_DEFAULT_CLASS: "true"}},
         "provisioner": "localkube.dev/local", "volumeBindingMode": "WaitForFirstConsumer"}
CONFIG = cdi_config_status(None, storage_classes=[LOCAL])
IMAGE = "registry.example.org/kubecdi/cdi:0.1"


def claim(source: dict, *, volume_mode: str = "Filesystem", annotations: dict | None = None,
          labels: dict | None = None, phase: str = "Bound") -> dict:
    dv = {"apiVersion": names.API_VERSION, "kind": names.DATAVOLUME,
          "metadata": {"name": "root-disk", "namespace": "vms", "uid": "dv-uid-1",
                       "annotations": annotations or {}, "labels": labels or {}},
          "spec": {"source": source, "storage": {"volumeMode": volume_mode,
                                                 "resources": {"requests": {"storage": "1Gi"}}}}}
    pvc = render_pvc(dv, storage_classes=[LOCAL], storage_profiles=[storage_profile(LOCAL)], cdi_config_status=CONFIG)
    pvc["metadata"]["uid"] = "pvc-uid-1"
    pvc["status"] = {"phase": phase}
    return pvc


def env_of(pod: dict) -> dict[str, str]:
    """Plain values, with secretKeyRef entries shown as '<secret>/<key>'; the pod IP (the metrics listener's
    address) is left out."""
    result = {}
    for item in pod["spec"]["containers"][0]["env"]:
        if item["name"] == "IMPORTER_METRICS_ADDRESS":
            assert item["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
            continue
        ref = (item.get("valueFrom") or {}).get("secretKeyRef")
        result[item["name"]] = f"{ref['name']}/{ref['key']}" if ref else item["value"]
    return result


HTTP = {"http": {"url": "https://images.example.org/disk.qcow2"}}


def test_pod_shape():
    pod = importer_pod(claim(HTTP, labels={"team": "storage"},
                             annotations={"sidecar.istio.io/inject": "true", "example.org/x": "not copied"}),
                       image=IMAGE, cdi_config_status=CONFIG)
    meta = pod["metadata"]
    assert meta["name"] == "importer-root-disk" and meta["namespace"] == "vms"
    assert meta["ownerReferences"] == [{"apiVersion": "v1", "kind": "PersistentVolumeClaim", "name": "root-disk",
                                        "uid": "pvc-uid-1", "controller": True, "blockOwnerDeletion": True}]
    assert meta["labels"] == {
        "team": "storage", "app": "containerized-data-importer", "cdi.kubevirt.io": "importer",
        "prometheus.cdi.kubevirt.io": "true", "app.kubernetes.io/managed-by": "cdi-controller",
        "app.kubernetes.io/component": "storage", "alerts.k8s.io/KubePersistentVolumeFillingUp": "disabled"}
    assert meta["annotations"] == {"cdi.kubevirt.io/storage.createdByController": "yes",
                                   "sidecar.istio.io/inject": "true", "linkerd.io/inject": "disabled"}
    spec = pod["spec"]
    assert spec["restartPolicy"] == "OnFailure" and spec["enableServiceLinks"] is False
    assert spec["securityContext"] == {"fsGroup": 107, "seccompProfile": {"type": "RuntimeDefault"}}
    (container,) = spec["containers"]
    assert container["name"] == "importer" and container["image"] == IMAGE
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert container["ports"] == [{"name": "metrics", "containerPort": 8443, "protocol": "TCP"}]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
        "runAsUser": 107, "seccompProfile": {"type": "RuntimeDefault"}}
    assert container["resources"] == names.DEFAULT_POD_RESOURCES
    assert container["volumeMounts"] == [{"name": "cdi-data-vol", "mountPath": "/data"}]
    assert spec["volumes"] == [{"name": "cdi-data-vol", "persistentVolumeClaim": {"claimName": "root-disk"}}]
    assert "volumeDevices" not in container


def test_never_a_scratch_volume():
    for source in (HTTP, {"registry": {"url": "docker://r/d:1"}}, {"s3": {"url": "https://s3/b/o"}}):
        pod = importer_pod(claim(source), image=IMAGE, cdi_config_status=CONFIG)
        assert [v["name"] for v in pod["spec"]["volumes"]] == ["cdi-data-vol"]
        assert all("scratch" not in m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"])


def test_block_volume_is_a_device_without_overhead():
    pod = importer_pod(claim(HTTP, volume_mode="Block"), image=IMAGE, cdi_config_status=CONFIG)
    container = pod["spec"]["containers"][0]
    assert container["volumeDevices"] == [{"name": "cdi-data-vol", "devicePath": "/dev/cdi-block-volume"}]
    assert container["volumeMounts"] == []
    env = env_of(pod)
    assert env[c.FILESYSTEM_OVERHEAD] == "0" and env[c.IMAGE_SIZE] == "1Gi"


def test_http_env_is_what_the_importer_reads():
    source = {"http": {"url": "https://images.example.org/disk.qcow2", "secretRef": "creds", "certConfigMap": "ca",
                       "checksum": "sha256:" + "c" * 64, "extraHeaders": ["X-Token: abc", "X-Trace: 1"]}}
    pod = importer_pod(claim(source), image=IMAGE, cdi_config_status=CONFIG)
    env = env_of(pod)
    assert env[c.SOURCE] == "http" and env[c.ENDPOINT] == "https://images.example.org/disk.qcow2"
    assert env[c.CONTENT_TYPE] == "kubevirt" and env[c.IMAGE_SIZE] == "1138166334"
    assert env[c.OWNER_UID] == "dv-uid-1" and env[c.FILESYSTEM_OVERHEAD] == "0.06"
    assert env[c.INSECURE_TLS] == "false" and env[c.PREALLOCATION] == "false"
    assert env[c.ACCESS_KEY_ID] == "creds/accessKeyId" and env[c.SECRET_KEY] == "creds/secretKey"
    assert env[c.CERT_DIR] == "/certs"
    assert pod["spec"]["volumes"][1] == {"name": "cdi-cert-vol", "configMap": {"name": "ca"}}
    assert {"name": "cdi-cert-vol", "mountPath": "/certs"} in pod["spec"]["containers"][0]["volumeMounts"]
    plain = {k: v for k, v in env.items() if k not in (c.ACCESS_KEY_ID, c.SECRET_KEY)}
    request = from_env({**plain, c.ACCESS_KEY_ID: "user", c.SECRET_KEY: "pass"})
    assert request.source == "http" and request.size == 1138166334 and request.checksum == "sha256:" + "c" * 64
    assert request.options.headers == (("X-Token", "abc"), ("X-Trace", "1"))
    assert request.options.cert_dir == "/certs" and request.filesystem_overhead == pytest.approx(0.06)
    assert request.options.access_key == "user" and not request.options.insecure


def test_blank_and_registry_env():
    blank = env_of(importer_pod(claim({"blank": {}}, annotations={}), image=IMAGE, cdi_config_status=CONFIG))
    assert blank[c.SOURCE] == "none" and blank[c.ENDPOINT] == ""
    assert from_env(blank).source == "none"
    config = cdi_config_status({"spec": {"importProxy": {"HTTPSProxy": "http://proxy:3128", "noProxy": ".svc"}}},
                               storage_classes=[LOCAL])
    registry = {"registry": {"url": "docker://registry.local:5000/disks/fedora:41",
                             "platform": {"architecture": "arm64"}}}
    env = env_of(importer_pod(claim(registry), image=IMAGE, cdi_config_status=config,
                              insecure_registries=["registry.local:5000"]))
    assert env[c.SOURCE] == "registry" and env[c.INSECURE_TLS] == "true"
    assert env[c.REGISTRY_IMAGE_ARCHITECTURE] == "arm64"
    assert env[c.HTTPS_PROXY] == "http://proxy:3128" and env[c.NO_PROXY] == ".svc" and env[c.HTTP_PROXY] == ""
    other = env_of(importer_pod(claim(registry), image=IMAGE, cdi_config_status=config,
                                insecure_registries=["registry.local"]))
    assert other[c.INSECURE_TLS] == "false"


def test_scheduling_fields_and_resource_override():
    pvc = claim(HTTP, annotations={names.ANN_POD_RESOURCES: '{"limits": {"memory": "2G"}}'})
    pvc["metadata"]["annotations"][names.ANN_PRIORITY_CLASS] = "high"
    pvc["metadata"]["annotations"][names.ANN_SERVICE_ACCOUNT] = "importer"
    config = cdi_config_status({"spec": {"imagePullSecrets": [{"name": "pull"}]}}, storage_classes=[LOCAL])
    pod = importer_pod(pvc, image=IMAGE, cdi_config_status=config)
    assert pod["spec"]["priorityClassName"] == "high" and pod["spec"]["serviceAccountName"] == "importer"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "pull"}]
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "750m", "memory": "2G"}
    assert pod["metadata"]["annotations"][names.ANN_PRIORITY_CLASS] == "high"


@pytest.mark.parametrize(("phase", "annotations", "honor", "wanted"), [
    ("Bound", {}, True, True),
    ("Pending", {}, True, False),  # WaitForFirstConsumer: the consumer picks the node
    ("Pending", {names.ANN_IMMEDIATE_BINDING: ""}, True, True),
    ("Pending", {}, False, True),
    ("Bound", {names.ANN_POD_PHASE: "Succeeded"}, True, False),
    ("Bound", {names.ANN_FATAL_ERROR: "true"}, True, False),
    ("Bound", {names.ANN_EXTERNAL_POPULATION: "true"}, True, False),
])
def test_wants_importer_pod(phase, annotations, honor, wanted):
    pvc = claim(HTTP, phase=phase)
    pvc["metadata"]["annotations"].update(annotations)
    assert wants_importer_pod(pvc, honor_wait_for_first_consumer=honor) is wanted


def test_upload_claims_get_no_importer():
    assert not wants_importer_pod(claim({"upload": {}}))
