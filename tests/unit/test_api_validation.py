"""DataVolume admission: CDI's accept/reject table (tests.support.cdi_cases) against the validation function."""

from __future__ import annotations

import copy

import pytest
import yaml

from cdi.api import names
from cdi.api.validation import Invalid, validate_datavolume
from tests.support.cdi_cases import MANIFESTS, TABLE, refused_as_expected

def load(name: str) -> dict:
    return yaml.safe_load((MANIFESTS / name).read_text())


def rejection(dv: dict, **kwargs) -> str | None:
    try:
        validate_datavolume(dv, **kwargs)
    except Invalid as error:
        return error.message
    return None


def test_every_manifest_is_in_the_table():
    assert sorted(p.name for p in MANIFESTS.glob("*.yaml")) == sorted(TABLE)


@pytest.mark.parametrize(("name", "expected"), sorted(TABLE.items()))
def test_cdi_accept_reject_table(name, expected):
    assert refused_as_expected(expected, rejection(load(name)))


def http_dv(**source_fields) -> dict:
    dv = load("accept-http-pvc.yaml")
    dv["spec"]["source"]["http"].update(source_fields)
    return dv


def with_source(source: dict, *, content_type: str | None = None) -> dict:
    dv = load("accept-http-pvc.yaml")
    dv["spec"]["source"] = source
    if content_type:
        dv["spec"]["contentType"] = content_type
    return dv


@pytest.mark.parametrize(("dv", "expected"), [
    (http_dv(url="ftp://files.example.org/disk.img"), "spec.source Invalid source URL scheme: ftp://"),
    (http_dv(url=""), "spec.source.http.url: Required value"),
    (with_source({"s3": {"url": "https://s3.example.org/bucket/disk.img"}}), None),
    (with_source({"gcs": {"url": "gs://bucket/disk.img"}}), None),
    (http_dv(checksum="sha256:" + "ab" * 32), None),
    (http_dv(checksum="SHA1:" + "AB" * 20), None),
    (http_dv(checksum="sha256:abc"), "Invalid checksum format"),
    (http_dv(checksum="crc32:deadbeef"), "Invalid checksum format"),
    (with_source({"registry": {"url": "docker://r.example.org/disk:1"}}, content_type="archive"),
     "ContentType must be kubevirt when Source is Registry"),
    (with_source({"registry": {"url": "https://r.example.org/disk:1"}}), "Illegal registry source URL scheme"),
    (with_source({"registry": {"url": "oci-archive:/tmp/image.tar"}}), None),
    (with_source({"registry": {}}), "Source registry should have either URL or ImageStream"),
    (with_source({"registry": {"url": "docker://r/d", "imageStream": "fedora"}}),
     "Source registry should have either URL or ImageStream"),
    (with_source({"registry": {"url": "docker://r/d", "pullMethod": "kubelet"}}),
     'ImportMethod kubelet is neither pod, node or ""'),
    (with_source({"registry": {"imageStream": "fedora"}}),
     "Source registry ImageStream is supported only with node pull import method"),
    (with_source({"registry": {"imageStream": "fedora", "pullMethod": "node"}}), None),
    (with_source({"imageio": {"url": "https://engine/api", "diskId": "1", "certConfigMap": "ca"}}),
     "Imageio source Imageio is not valid"),
    (with_source({"imageio": {"url": "https://engine/api", "diskId": "1", "secretRef": "s"}}),
     "requires CertConfigMap or InsecureSkipVerify"),
    (with_source({"vddk": {"url": "https://vc/sdk", "uuid": "u", "secretRef": "s"}}), "source VDDK is not valid"),
    (with_source({"upload": {}}, content_type="archive"), None),
    (with_source({"snapshot": {"namespace": "ns", "name": "snap"}}), None),
])
def test_source_rules(dv, expected):
    message = rejection(dv)
    assert (message is None) if expected is None else (message is not None and expected in message)


def storage_dv(storage: dict, **spec) -> dict:
    return {"apiVersion": names.API_VERSION, "kind": names.DATAVOLUME, "metadata": {"name": "d"},
            "spec": {"storage": storage, **spec}}


@pytest.mark.parametrize(("dv", "expected"), [
    (storage_dv({"resources": {"requests": {"storage": "512Ki"}}}, source={"blank": {}}),
     "Storage size should be at least 1MiB"),
    (storage_dv({"resources": {"requests": {"storage": "-1Gi"}}}, source={"blank": {}}),
     "Storage size can't be equal or less than zero"),
    (storage_dv({}, source={"blank": {}}), "Storage size is missing"),
    (storage_dv({}, sourceRef={"kind": "DataSource", "name": "fedora"}), None),
    (storage_dv({}, sourceRef={"name": "fedora"}), "Missing sourceRef kind"),
    (storage_dv({}, sourceRef={"kind": "PersistentVolumeClaim", "name": "x"}),
     "Unsupported sourceRef kind PersistentVolumeClaim, currently only DataSource is supported"),
    (storage_dv({}, sourceRef={"kind": "DataSource"}), "Missing sourceRef name"),
    (storage_dv({"resources": {"requests": {"storage": "1Gi"}}, "storageClassName": "c" * 254},
                source={"blank": {}}), "storageClassName cannot be longer than 253 characters"),
    (storage_dv({"resources": {"requests": {"storage": "1Gi"}}, "accessModes": ["ReadWriteMany", "ReadOnlyMany"]},
                source={"blank": {}}), None),
    (storage_dv({"resources": {"requests": {"storage": "1Gi"}},
                 "dataSourceRef": {"apiGroup": "example.org", "kind": "Filler", "name": "f"}}), None),
    (storage_dv({"resources": {"requests": {"storage": "1Gi"}},
                 "dataSourceRef": {"apiGroup": "example.org", "kind": "Filler", "name": "f"},
                 "dataSource": {"apiGroup": "example.org", "kind": "Filler", "name": "g"}}),
     "DataSourceRef and DataSource must match"),
    (storage_dv({"resources": {"requests": {"storage": "1Gi"}},
                 "dataSourceRef": {"apiGroup": "example.org", "kind": "Filler", "name": "f"}}, source={"blank": {}}),
     "External population is incompatible with Source and SourceRef"),
    (storage_dv({"resources": {"requests": {"storage": "1Gi"}}}, source={"blank": {}},
                pvc={"accessModes": ["ReadWriteOnce"]}),
     "Duplicate storage definition, both target storage and target pvc defined"),
])
def test_storage_rules(dv, expected):
    message = rejection(dv)
    assert (message is None) if expected is None else (message is not None and expected in message)


def test_long_name_is_rejected():
    dv = load("accept-http-pvc.yaml")
    dv["metadata"]["name"] = "d" * 254
    assert rejection(dv) == "Name cannot be longer than 253 characters"


def test_spec_is_immutable_but_metadata_is_not():
    old = load("accept-http-pvc.yaml")
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"] = {"kubevirt.io/created-by": "vm-uid"}
    relabelled["metadata"]["ownerReferences"] = [{"kind": "VirtualMachine", "name": "vm", "uid": "u"}]
    assert rejection(relabelled, old=old) is None
    changed = copy.deepcopy(old)
    changed["spec"]["source"]["http"]["url"] = "https://images.example.org/other.qcow2"
    assert rejection(changed, old=old) == "Cannot update DataVolume Spec"


def test_multi_stage_import_may_add_checkpoints_only():
    old = load("accept-vddk.yaml")
    staged = copy.deepcopy(old)
    staged["spec"]["checkpoints"] = [{"previous": "", "current": "snapshot-1"}]
    staged["spec"]["finalCheckpoint"] = True
    assert rejection(staged, old=old) is None
    staged["spec"]["pvc"]["resources"]["requests"]["storage"] = "1Gi"
    assert rejection(staged, old=old) == "Cannot update DataVolume Spec"
    http_old = load("accept-http-pvc.yaml")
    http_new = copy.deepcopy(http_old)
    http_new["spec"]["checkpoints"] = [{"previous": "", "current": "snapshot-1"}]
    assert rejection(http_new, old=http_old) == "Cannot update DataVolume Spec"


def existing_pvc(*, annotations: dict | None = None, owner_kind: str | None = None) -> dict:
    metadata: dict = {"name": "dv-http", "namespace": "vms", "annotations": annotations or {}}
    if owner_kind:
        metadata["ownerReferences"] = [{"kind": owner_kind, "name": "x", "uid": "1", "controller": True}]
    return {"metadata": metadata}


@pytest.mark.parametrize(("dv_annotations", "pvc", "gates", "expected"), [
    ({}, existing_pvc(), (), "Destination PVC vms/dv-http already exists"),
    ({}, existing_pvc(annotations={names.ANN_POPULATED_FOR: "dv-http"}), (), None),
    ({}, existing_pvc(annotations={names.ANN_POPULATED_FOR: "another-dv"}), (), "already exists"),
    ({names.ANN_ALLOW_CLAIM_ADOPTION: "true"}, existing_pvc(), (), None),
    ({}, existing_pvc(), (names.GATE_CLAIM_ADOPTION,), None),
    ({names.ANN_ALLOW_CLAIM_ADOPTION: "false"}, existing_pvc(), (names.GATE_CLAIM_ADOPTION,), "already exists"),
    ({}, existing_pvc(owner_kind=names.DATAVOLUME), (), None),
    ({}, existing_pvc(owner_kind="VirtualMachine"), (), "already exists"),
])
def test_existing_claim(dv_annotations, pvc, gates, expected):
    dv = load("accept-http-pvc.yaml")
    dv["metadata"]["annotations"] = dv_annotations
    message = rejection(dv, existing_pvc=pvc, feature_gates=gates)
    assert (message is None) if expected is None else (message is not None and expected in message)


@pytest.mark.parametrize(("key", "value", "expected"), [
    (names.ANN_MAX_RESTARTS, "3", None),
    (names.ANN_MAX_RESTARTS, "-1", "must be a whole number"),
    (names.ANN_POD_RESOURCES, '{"limits": {"memory": "2Gi", "cpu": "2"}}', None),
    (names.ANN_POD_RESOURCES, "{limits", "not JSON"),
    (names.ANN_POD_RESOURCES, '{"limit": {}}', 'expected an object with "limits" and/or "requests"'),
    (names.ANN_POD_RESOURCES, '{"requests": {"memory": "lots"}}', "map resource names to quantities"),
])
def test_our_annotations_are_checked(key, value, expected):
    dv = load("accept-http-pvc.yaml")
    dv["metadata"]["annotations"] = {key: value}
    message = rejection(dv)
    assert (message is None) if expected is None else (message is not None and expected in message)
    if expected is not None:
        assert rejection(dv, old=load("accept-http-pvc.yaml")) == message  # also on update


def test_size_that_is_not_a_byte_count():
    dv = load("accept-http-pvc.yaml")
    dv["metadata"]["name"] = "milli"
    dv["spec"]["pvc"]["resources"]["requests"]["storage"] = "500m"
    assert "PVC size '500m' is not a byte count" in rejection(dv)


def test_empty_spec_is_present_but_has_no_target():
    dv = load("accept-http-pvc.yaml")
    dv["spec"] = {}
    assert rejection(dv) == "Missing Data volume PVC"


def test_vm_template_datavolume_adopts_an_existing_claim():
    existing = {"metadata": {"name": "vm-root", "namespace": "vms"}}
    assert rejection(load("example-vm-template-dv.yaml"), existing_pvc=existing) is None
