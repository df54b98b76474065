"""PVC rendering from a DataVolume (cdi-facts §1.5, §2.1, §2.3, §5.2) and what to do with an existing PVC."""

from __future__ import annotations

import copy

import pytest

from cdi.api import names
from cdi.controller.config import cdi_config_status, storage_profile
from cdi.controller.pvc import (
    ClaimAction, ClaimNotValid, adopted_pvc_patch, claim_action, render_pvc, requires_work,
)

LOCAL = {"metadata": {"name": "local", "annotations": {names.ANN_DEFAULT_CLASS: "true"}},
         "provisioner": "localkube.dev/local", "volumeBindingMode": "WaitForFirstConsumer"}
NAS = {"metadata": {"name": "nas"}, "provisioner": "example.org/nas"}
CLASSES = [LOCAL, NAS]
PROFILES = [storage_profile(sc) for sc in CLASSES]


def datavolume(spec: dict, *, annotations: dict | None = None, labels: dict | None = None) -> dict:
    return {"apiVersion": names.API_VERSION, "kind": names.DATAVOLUME,
            "metadata": {"name": "root-disk", "namespace": "vms", "uid": "dv-uid-1",
                         "annotations": annotations or {}, "labels": labels or {}},
            "spec": spec}


def storage(size: str | None = "1Gi", **fields) -> dict:
    result = dict(fields)
    if size is not None:
        result["resources"] = {"requests": {"storage": size}}
    return result


def render(dv: dict, *, config: dict | None = None, classes=CLASSES, profiles=PROFILES, volumes=()) -> dict:
    return render_pvc(dv, storage_classes=classes, storage_profiles=profiles,
                      cdi_config_status=cdi_config_status(config, storage_classes=classes),
                      persistent_volumes=volumes)


HTTP = {"http": {"url": "https://images.example.org/disk.qcow2"}}


def test_pvc_spec_is_used_verbatim():
    pvc_spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                "storageClassName": "nas", "selector": {"matchLabels": {"tier": "gold"}}}
    pvc = render(datavolume({"source": HTTP, "pvc": pvc_spec}))
    assert pvc["spec"] == pvc_spec


def test_name_owner_labels_and_annotations():
    dv = datavolume({"source": HTTP, "storage": storage(), "priorityClassName": "high",
                     "serviceAccountName": "importer-sa"},
                    annotations={names.ANN_IMMEDIATE_BINDING: "", names.ANN_POPULATED_FOR: "root-disk",
                                 "example.org/note": "kept"},
                    labels={"instancetype.kubevirt.io/default-preference": "fedora"})
    pvc = render(dv)
    assert pvc["metadata"]["name"] == "root-disk" and pvc["metadata"]["namespace"] == "vms"
    assert pvc["metadata"]["ownerReferences"] == [{
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", "name": "root-disk", "uid": "dv-uid-1",
        "controller": True, "blockOwnerDeletion": True}]
    assert pvc["metadata"]["labels"] == {"app": "containerized-data-importer",
                                         "alerts.k8s.io/KubePersistentVolumeFillingUp": "disabled",
                                         "instancetype.kubevirt.io/default-preference": "fedora"}
    assert pvc["metadata"]["annotations"] == {
        names.ANN_IMMEDIATE_BINDING: "",
        "example.org/note": "kept",
        "cdi.kubevirt.io/storage.pod.restarts": "0",
        "cdi.kubevirt.io/storage.contentType": "kubevirt",
        "cdi.kubevirt.io/storage.preallocation.requested": "false",
        "cdi.kubevirt.io/createdForDataVolume": "dv-uid-1",
        "cdi.kubevirt.io/storage.usePopulator": "false",
        "cdi.kubevirt.io/storage.pod.priorityclassname": "high",
        "cdi.kubevirt.io/storage.pod.serviceAccountName": "importer-sa",
        "cdi.kubevirt.io/storage.import.source": "http",
        "cdi.kubevirt.io/storage.import.endpoint": "https://images.example.org/disk.qcow2",
    }


@pytest.mark.parametrize(("source", "expected"), [
    ({"http": {"url": "https://h/d.img", "secretRef": "creds", "certConfigMap": "ca", "insecureSkipVerify": True,
               "checksum": "sha256:" + "a" * 64, "extraHeaders": ["X-A: 1", "X-B: 2"],
               "secretExtraHeaders": ["hdrs"]}},
     {"storage.import.source": "http", "storage.import.endpoint": "https://h/d.img",
      "storage.import.secretName": "creds", "storage.import.certConfigMap": "ca",
      "storage.import.insecureSkipVerify": "true", "storage.import.checksum": "sha256:" + "a" * 64,
      "storage.import.extraHeaders.0": "X-A: 1", "storage.import.extraHeaders.1": "X-B: 2",
      "storage.import.secretExtraHeaders.0": "hdrs"}),
    ({"s3": {"url": "https://s3.example.org/b/d.img", "secretRef": "keys"}},
     {"storage.import.source": "s3", "storage.import.endpoint": "https://s3.example.org/b/d.img",
      "storage.import.secretName": "keys"}),
    ({"registry": {"url": "docker://r.example.org/d:1", "pullMethod": "pod", "platform": {"architecture": "arm64"},
                   "certConfigMap": "reg-ca"}},
     {"storage.import.source": "registry", "storage.import.endpoint": "docker://r.example.org/d:1",
      "storage.import.registryImportMethod": "pod", "storage.import.registryImageArchitecture": "arm64",
      "storage.import.certConfigMap": "reg-ca"}),
    ({"registry": {"imageStream": "fedora", "pullMethod": "node"}},
     {"storage.import.source": "registry", "storage.import.endpoint": "fedora",
      "storage.import.registryImageStream": "true", "storage.import.registryImportMethod": "node"}),
    ({"blank": {}}, {"storage.import.source": "none"}),
    ({"upload": {}}, {"storage.upload.target": ""}),
    ({"vddk": {"url": "https://vc/sdk", "uuid": "u-1", "backingFile": "[ds] vm.vmdk", "thumbprint": "AA:BB",
               "secretRef": "vc", "initImageURL": "r/vddk:8", "extraArgs": "args"}},
     {"storage.import.source": "vddk", "storage.import.endpoint": "https://vc/sdk", "storage.import.uuid": "u-1",
      "storage.import.backingFile": "[ds] vm.vmdk", "storage.import.vddk.thumbprint": "AA:BB",
      "storage.import.secretName": "vc", "storage.pod.vddk.initimageurl": "r/vddk:8",
      "storage.pod.vddk.extraargs": "args"}),
])
def test_source_annotations(source, expected):
    pvc_annotations = render(datavolume({"source": source, "storage": storage()}))["metadata"]["annotations"]
    ours = {k.removeprefix("cdi.kubevirt.io/"): v for k, v in pvc_annotations.items()
            if k.startswith(("cdi.kubevirt.io/storage.import.", "cdi.kubevirt.io/storage.upload.",
                             "cdi.kubevirt.io/storage.pod.vddk."))}
    assert ours == expected


@pytest.mark.parametrize(("dv_value", "config_value", "expected"), [
    (None, None, "false"), (None, True, "true"), (False, True, "false"), (True, None, "true"),
])
def test_preallocation_requested(dv_value, config_value, expected):
    spec = {"source": {"blank": {}}, "storage": storage()}
    if dv_value is not None:
        spec["preallocation"] = dv_value
    config = {"spec": {"preallocation": config_value}} if config_value is not None else None
    pvc = render(datavolume(spec), config=config)
    assert pvc["metadata"]["annotations"][names.ANN_PREALLOCATION_REQUESTED] == expected


def test_filesystem_request_is_inflated_by_the_overhead():
    pvc = render(datavolume({"source": HTTP, "storage": storage("1Gi")}))
    assert pvc["spec"]["resources"]["requests"]["storage"] == "1138166334"
    assert pvc["spec"]["storageClassName"] == "local"
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"] and pvc["spec"]["volumeMode"] == "Filesystem"


def test_overhead_per_class_and_rounding_to_mib():
    config = {"spec": {"filesystemOverhead": {"storageClass": {"local": "0.1"}}}}
    pvc = render(datavolume({"source": HTTP, "storage": storage("1000000")}), config=config)
    assert pvc["spec"]["resources"]["requests"]["storage"] == str(-(-(1 << 20) * 11 // 10))


def test_block_is_not_inflated_and_keeps_the_quantity():
    pvc = render(datavolume({"source": HTTP, "storage": storage("1Gi", volumeMode="Block")}))
    assert pvc["spec"]["resources"]["requests"]["storage"] == "1Gi" and pvc["spec"]["volumeMode"] == "Block"
    assert "alerts.k8s.io/KubePersistentVolumeFillingUp" not in pvc["metadata"]["labels"]


def test_minimum_supported_size_raises_the_request():
    profiles = copy.deepcopy(PROFILES)
    profiles[0]["metadata"]["annotations"] = {names.ANN_MINIMUM_PVC_SIZE: "4Gi"}
    pvc = render(datavolume({"source": HTTP, "storage": storage("1Gi")}), profiles=profiles)
    assert pvc["spec"]["resources"]["requests"]["storage"] == "4Gi"


def test_archive_forces_filesystem_and_rejects_block():
    pvc = render(datavolume({"source": HTTP, "contentType": "archive", "storage": storage()}))
    assert pvc["spec"]["volumeMode"] == "Filesystem"
    assert pvc["metadata"]["annotations"][names.ANN_CONTENT_TYPE] == "archive"
    with pytest.raises(ClaimNotValid, match="^ContentType Archive cannot have block volumeMode$"):
        render(datavolume({"source": HTTP, "contentType": "archive", "storage": storage(volumeMode="Block")}))


def test_profile_completes_access_modes_for_a_given_volume_mode():
    profiles = [storage_profile(LOCAL, existing={"spec": {"claimPropertySets": [
        {"accessModes": ["ReadWriteMany"], "volumeMode": "Block"},
        {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"}]}})]
    block = render(datavolume({"source": HTTP, "storage": storage(volumeMode="Block")}), profiles=profiles)
    assert block["spec"]["accessModes"] == ["ReadWriteMany"]
    fs = render(datavolume({"source": HTTP, "storage": storage(volumeMode="Filesystem")}), profiles=profiles)
    assert fs["spec"]["accessModes"] == ["ReadWriteOnce"]
    from_profile = render(datavolume({"source": HTTP, "storage": storage(volumeMode="FromStorageProfile")}),
                          profiles=profiles)
    assert from_profile["spec"]["volumeMode"] == "Block"
    by_mode = render(datavolume({"source": HTTP, "storage": storage(accessModes=["ReadWriteOnce"])}),
                     profiles=profiles)
    assert by_mode["spec"]["volumeMode"] == "Filesystem"


def test_unknown_provisioner_without_access_modes_is_not_valid():
    with pytest.raises(ClaimNotValid, match="cannot get access mode from StorageProfile nas$"):
        render(datavolume({"source": HTTP, "storage": storage(storageClassName="nas")}))
    pvc = render(datavolume({"source": HTTP, "storage": storage(storageClassName="nas",
                                                                accessModes=["ReadWriteMany"])}))
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"] and "volumeMode" not in pvc["spec"]


def test_virt_default_class_is_preferred_for_disks():
    virt = {"metadata": {"name": "virt", "annotations": {names.ANN_DEFAULT_VIRT_CLASS: "true"}},
            "provisioner": "localkube.dev/local"}
    classes = CLASSES + [virt]
    profiles = [storage_profile(sc) for sc in classes]
    assert render(datavolume({"source": HTTP, "storage": storage()}), classes=classes,
                  profiles=profiles)["spec"]["storageClassName"] == "virt"


def test_without_classes_an_available_volume_supplies_modes():
    pv = {"spec": {"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteMany"], "volumeMode": "Block"},
          "status": {"phase": "Available"}}
    pvc = render(datavolume({"source": HTTP, "storage": storage()}), classes=[], profiles=[], volumes=[pv])
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"] and pvc["spec"]["volumeMode"] == "Block"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "1Gi"
    with pytest.raises(ClaimNotValid, match="^PVC spec is missing accessMode and no storageClass to choose profile$"):
        render(datavolume({"source": HTTP, "storage": storage("4Gi")}), classes=[], profiles=[], volumes=[pv])


def pvc_named(*, annotations: dict | None = None, owner: dict | None = None, deleting: bool = False) -> dict:
    metadata: dict = {"name": "root-disk", "namespace": "vms", "annotations": annotations or {}}
    if owner:
        metadata["ownerReferences"] = [owner]
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": metadata}


OURS = {"kind": "DataVolume", "name": "root-disk", "uid": "dv-uid-1", "controller": True}
OTHER_DV = {"kind": "DataVolume", "name": "other", "uid": "dv-uid-2", "controller": True}


@pytest.mark.parametrize(("dv_annotations", "pvc", "gates", "action"), [
    ({}, None, (), ClaimAction.CREATE),
    ({}, pvc_named(owner=OURS), (), ClaimAction.OURS),
    ({}, pvc_named(owner=OURS, deleting=True), (), ClaimAction.DELETING),
    ({}, pvc_named(), (), ClaimAction.CONFLICT),
    ({}, pvc_named(annotations={names.ANN_POPULATED_FOR: "root-disk"}), (), ClaimAction.ADOPT),
    ({names.ANN_ALLOW_CLAIM_ADOPTION: "true"}, pvc_named(), (), ClaimAction.ADOPT),
    ({names.ANN_ALLOW_CLAIM_ADOPTION: "true"}, pvc_named(owner=OTHER_DV), (), ClaimAction.CONFLICT),
    ({}, pvc_named(), (names.GATE_CLAIM_ADOPTION,), ClaimAction.ADOPT),
    ({names.ANN_ALLOW_CLAIM_ADOPTION: "false"}, pvc_named(), (names.GATE_CLAIM_ADOPTION,), ClaimAction.CONFLICT),
])
def test_claim_action(dv_annotations, pvc, gates, action):
    dv = datavolume({"source": HTTP, "storage": storage()}, annotations=dv_annotations)
    assert claim_action(dv, pvc, feature_gates=gates) is action


def test_adopted_claim_gets_the_dv_as_controller_and_needs_no_work():
    dv = datavolume({"source": HTTP, "storage": storage()}, annotations={names.ANN_ALLOW_CLAIM_ADOPTION: "true"})
    vm_owner = {"kind": "VirtualMachine", "name": "vm", "uid": "vm-uid"}
    pvc = pvc_named(owner=vm_owner)
    patch = adopted_pvc_patch(dv, pvc)
    assert patch["metadata"]["ownerReferences"][0] == vm_owner
    assert patch["metadata"]["ownerReferences"][1]["uid"] == "dv-uid-1"
    assert patch["metadata"]["ownerReferences"][1]["controller"] is True
    assert not requires_work(dv, pvc)
    assert requires_work(dv, render(dv))
    assert not requires_work(dv, pvc_named(annotations={names.ANN_POPULATED_FOR: "root-disk",
                                                        names.ANN_CREATED_FOR_DATAVOLUME: "dv-uid-1"}))
