"""KubeVirt's side of the contract, played by the test as virt-controller does it (cdi-facts §9): a VirtualMachine
with a dataVolumeTemplate, the DataVolume KubeVirt makes from it, and every point of the compatibility checklist
that concerns imports, read the way KubeVirt reads it."""

from __future__ import annotations

import copy
import json

import pytest

from cdi.api import names
from importer.checksum import file_sha256
from tests.fixtures.cdi_system import CDISystem, wait_for
from tests.fixtures.images import ImageSet
from tests.support.nginx import NginxServer

pytestmark = pytest.mark.root

VM_CRD = {  # what a KubeVirt install brings; only its presence and shape matter here
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "virtualmachines.kubevirt.io"},
    "spec": {"group": "kubevirt.io", "scope": "Namespaced",
             "names": {"plural": "virtualmachines", "singular": "virtualmachine", "kind": "VirtualMachine",
                       "shortNames": ["vm", "vms"]},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
}
READY_TO_START = {names.SUCCEEDED, "WaitForFirstConsumer", "PendingPopulation"}  # virt-controller's gate (§9.2)


def virtual_machine(url: str) -> dict:
    """CDI's vm-dv example, pointed at a disk served on this machine and a StorageClass that exists here."""
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "vm-cirros-datavolume", "labels": {"kubevirt.io/vm": "vm-cirros-datavolume"}},
            "spec": {"running": False,
                     "dataVolumeTemplates": [{"metadata": {"name": "cirros-dv", "labels": {
                         "instancetype.kubevirt.io/default-preference": "cirros"}},
                         "spec": {"pvc": {"accessModes": ["ReadWriteOnce"],
                                          "resources": {"requests": {"storage": "100M"}}},
                                  "source": {"http": {"url": url}}}}],
                     "template": {"spec": {"domain": {"devices": {"disks": [{"name": "root", "disk": {
                         "bus": "virtio"}}]}}, "volumes": [{"name": "root", "dataVolume": {"name": "cirros-dv"}}]}}}}


def datavolumes_of(vm: dict) -> list[dict]:
    """virt-controller's rendering of dataVolumeTemplates (§9.2): template metadata, created-by label, claim
    adoption allowed, and a controller reference to the VM."""
    made = []
    for template in vm["spec"]["dataVolumeTemplates"]:
        metadata = copy.deepcopy(template["metadata"])
        metadata.setdefault("labels", {})["kubevirt.io/created-by"] = vm["metadata"]["uid"]
        metadata.setdefault("annotations", {})[names.ANN_ALLOW_CLAIM_ADOPTION] = "true"
        metadata["ownerReferences"] = [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                                        "name": vm["metadata"]["name"], "uid": vm["metadata"]["uid"],
                                        "controller": True, "blockOwnerDeletion": True}]
        made.append({"apiVersion": names.API_VERSION, "kind": names.DATAVOLUME, "metadata": metadata,
                     "spec": copy.deepcopy(template["spec"])})
    return made


@pytest.fixture(scope="module")
def vm_api(cdi: CDISystem) -> str:
    if cdi.local is not None:
        cdi.kubectl("apply", "-f", "-", stdin=json.dumps(VM_CRD))
        wait_for(lambda: cdi.kubectl("get", "vm", check=False).returncode == 0, timeout=30, what="the VM API")
    return f"/apis/kubevirt.io/v1/namespaces/{cdi.namespace}/virtualmachines"


def test_a_vm_template_datavolume_imports_as_kubevirt_expects(cdi: CDISystem, vm_api: str, images: ImageSet,
                                                              nginx_server: NginxServer) -> None:
    url = nginx_server.url(nginx_server.publish(images.path("disk.qcow2")))
    vm = cdi.api.create(vm_api, virtual_machine(url))
    assert vm is not None
    for dv in datavolumes_of(vm):
        assert cdi.api.create(cdi.dv_path(), dv) is not None
    dv = cdi.wait_phase("cirros-dv", names.SUCCEEDED)

    # §9.2/§9.3: the VM may start; every DataVolume is Ready; the claim is found under the DataVolume's name.
    assert dv["status"]["phase"] in READY_TO_START
    conditions = {c["type"]: c for c in dv["status"]["conditions"]}
    assert set(conditions) == {"Bound", "Ready", "Running"} and conditions["Ready"]["status"] == "True"
    assert dv["status"]["claimName"] == "cirros-dv"
    pvc = cdi.pvc("cirros-dv")
    assert pvc is not None and pvc["status"]["phase"] == "Bound"
    controller = [o for o in pvc["metadata"]["ownerReferences"] if o.get("controller")]
    assert controller == [{"apiVersion": names.API_VERSION, "kind": names.DATAVOLUME, "name": "cirros-dv",
                           "uid": dv["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]

    # §9.4 and checklist 2: the annotations KubeVirt and virtctl read, and labels carried to the claim.
    annotations = pvc["metadata"]["annotations"]
    assert annotations[names.ANN_POD_PHASE] == names.SUCCEEDED and annotations[names.ANN_POD_RESTARTS] == "0"
    assert annotations[names.ANN_CONTENT_TYPE] == "kubevirt"
    assert annotations[names.ANN_PREALLOCATION_REQUESTED] == "false"
    assert annotations[names.ANN_RUNNING_CONDITION] == "false"
    assert annotations[names.ANN_RUNNING_CONDITION_REASON] == "Completed"
    assert pvc["metadata"]["labels"]["instancetype.kubevirt.io/default-preference"] == "cirros"

    # §9.4: the disk is /disk.img in the volume root, the image's bytes, mode 0660, within the usable size.
    expected = images.expected_raw("disk.qcow2")
    size = expected.stat().st_size
    assert cdi.volume_sha256("cirros-dv", length=size) == file_sha256(expected, length=size)
    mode, disk_size = cdi.in_volume("cirros-dv", "stat -c '%a %s' /pvc/disk.img").split()
    assert mode == "660" and size <= int(disk_size) <= 100_000_000


def test_kubevirt_may_adopt_a_datavolume_but_not_change_its_spec(cdi: CDISystem, vm_api: str) -> None:
    """Orphan DataVolumes are adopted by patching their metadata (§9.2); the spec stays as created."""
    cdi.wait_phase("cirros-dv", names.SUCCEEDED)
    cdi.kubectl("patch", "dv", "cirros-dv", "--type", "merge", "-p",
                '{"metadata": {"labels": {"kubevirt.io/adopted": "yes"}}}')
    refused = cdi.kubectl("patch", "dv", "cirros-dv", "--type", "merge", "-p",
                          '{"spec": {"source": {"http": {"url": "http://127.0.0.1:1/other.img"}}}}', check=False)
    assert refused.returncode != 0 and "Cannot update DataVolume Spec" in refused.stderr  # CDI's words


def test_cluster_objects_kubevirt_reads(cdi: CDISystem) -> None:
    """Checklist 5: exactly one CDI, CDIConfig `config` with overheads for every class, a profile per class."""
    cdis = cdi.api.list(f"/apis/{names.GROUP}/{names.VERSION}/{names.CDIS}")
    assert len(cdis) == 1
    classes = {c["metadata"]["name"] for c in cdi.api.list("/apis/storage.k8s.io/v1/storageclasses")}
    config = cdi.api.get(f"/apis/{names.GROUP}/{names.VERSION}/{names.CDICONFIGS}/{names.CDICONFIG_NAME}")
    assert config is not None
    overhead = config["status"]["filesystemOverhead"]
    assert overhead["global"] == "0.06" and set(overhead["storageClass"]) == classes
    assert config["status"].get("uploadProxyURL"), "virtctl finds the upload proxy here"
    profiles = cdi.api.list(f"/apis/{names.GROUP}/{names.VERSION}/{names.STORAGEPROFILES}")
    assert {p["metadata"]["name"] for p in profiles} == classes


def test_deleting_the_vm_takes_its_datavolume_and_claim(cdi: CDISystem, vm_api: str) -> None:
    cdi.kubectl("delete", "vm", "vm-cirros-datavolume")
    wait_for(lambda: cdi.api.get(cdi.dv_path("cirros-dv")) is None and cdi.pvc("cirros-dv") is None, timeout=60,
             what="the DataVolume and its claim to go with the VM")
