"""The CRDs under crds/: CDI's names (cdi-facts §1.1) and a schema that keeps every field CDI's API has.

Objects are run through the structural-schema check of our local API server (defaults, pruning, required,
enum), so a field missing from a schema shows up here as a pruned path instead of silently vanishing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cdi.api import names
from cdi.cli.localsystem import crd_documents
from localkube.apiserver.schema import check

ROOT = Path(__file__).resolve().parent.parent.parent
MANIFESTS = ROOT / "tests" / "data" / "manifests" / "datavolumes"
CRDS = {crd["metadata"]["name"]: crd for crd in crd_documents().values()}

# (plural, kind, scope, shortNames, categories) exactly as CDI serves them.
EXPECTED = [
    (names.DATAVOLUMES, names.DATAVOLUME, "Namespaced", ["dv", "dvs"], ["all"]),
    (names.DATASOURCES, names.DATASOURCE, "Namespaced", ["das"], ["all"]),
    (names.DATAIMPORTCRONS, names.DATAIMPORTCRON, "Namespaced", ["dic", "dics"], ["all"]),
    (names.STORAGEPROFILES, names.STORAGEPROFILE, "Cluster", None, None),
    (names.CDICONFIGS, names.CDICONFIG, "Cluster", None, None),
    (names.CDIS, names.CDI, "Cluster", ["cdi", "cdis"], None),
]


def schema(plural: str, version: str = names.VERSION) -> dict:
    crd = CRDS[f"{plural}.{names.GROUP}"]
    served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    return served["schema"]["openAPIV3Schema"]


@pytest.mark.parametrize(("plural", "kind", "scope", "short", "categories"), EXPECTED)
def test_names_match_cdi(plural, kind, scope, short, categories):
    crd = CRDS[f"{plural}.{names.GROUP}"]
    spec = crd["spec"]
    assert spec["group"] == names.GROUP and spec["scope"] == scope
    assert spec["names"]["kind"] == kind and spec["names"]["plural"] == plural
    assert spec["names"].get("shortNames") == short and spec["names"].get("categories") == categories
    storage = [v["name"] for v in spec["versions"] if v["storage"]]
    assert storage == [names.VERSION]
    assert all(v["served"] for v in spec["versions"])


def test_only_the_cdi_cr_keeps_serving_v1alpha1():
    versions = {v["name"]: v for v in CRDS[f"cdis.{names.GROUP}"]["spec"]["versions"]}
    assert set(versions) == {"v1beta1", "v1alpha1"} and not versions["v1alpha1"]["storage"]
    assert versions["v1alpha1"]["schema"] == versions["v1beta1"]["schema"]


def test_datavolume_printer_columns_and_status_subresource():
    version = CRDS[f"datavolumes.{names.GROUP}"]["spec"]["versions"][0]
    columns = [(c["name"], c["type"], c["jsonPath"]) for c in version["additionalPrinterColumns"]]
    assert columns == [("Phase", "string", ".status.phase"), ("Progress", "string", ".status.progress"),
                       ("Restarts", "integer", ".status.restartCount"),
                       ("Age", "date", ".metadata.creationTimestamp")]
    assert version["subresources"] == {"status": {}}


def accepted_manifests() -> list[Path]:
    return [p for p in sorted(MANIFESTS.glob("*.yaml"))
            if p.name.startswith(("accept-", "example-")) and p.name != "example-clone-null-storage.yaml"]


@pytest.mark.parametrize("path", accepted_manifests(), ids=lambda p: p.name)
def test_schema_keeps_every_field_of_admitted_datavolumes(path):
    dv = yaml.safe_load(path.read_text())
    outcome = check(dv, schema(names.DATAVOLUMES))
    assert outcome.causes == [] and outcome.pruned == []
    assert outcome.value == dv


def test_schema_keeps_a_full_datavolume():
    dv = {
        "apiVersion": names.API_VERSION, "kind": names.DATAVOLUME, "metadata": {"name": "full"},
        "spec": {
            "source": {"http": {"url": "https://h/d.img", "secretRef": "s", "certConfigMap": "c",
                                "extraHeaders": ["X-A: 1"], "secretExtraHeaders": ["h"],
                                "checksum": "sha256:" + "0" * 64, "insecureSkipVerify": False}},
            "storage": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Block", "storageClassName": "fast",
                        "resources": {"requests": {"storage": "1Gi"}, "limits": {"storage": 2 << 30}},
                        "selector": {"matchLabels": {"tier": "gold"}}, "volumeName": "pv-1"},
            "contentType": "kubevirt", "preallocation": True, "priorityClassName": "high",
            "serviceAccountName": "importer", "checkpoints": [{"previous": "", "current": "c1"}],
            "finalCheckpoint": False,
        },
        "status": {"phase": names.IMPORT_IN_PROGRESS, "progress": "45.30%", "restartCount": 2, "claimName": "full",
                   "conditions": [{"type": "Bound", "status": "True", "reason": "Bound", "message": "PVC full Bound",
                                   "lastTransitionTime": "2026-01-01T00:00:00Z",
                                   "lastHeartbeatTime": "2026-01-01T00:00:00Z"}]},
    }
    outcome = check(dv, schema(names.DATAVOLUMES))
    assert outcome.causes == [] and outcome.pruned == [] and outcome.value == dv


@pytest.mark.parametrize(("spec", "field", "message"), [
    ({"source": {"blank": {}}, "contentType": "qcow", "pvc": {}}, "spec.contentType",
     'Unsupported value: "qcow": supported values: "kubevirt", "archive"'),
    ({"source": {"pvc": {"namespace": "golden"}}, "pvc": {}}, "spec.source.pvc.name", "Required value"),
    ({"source": {"http": {}}, "pvc": {}}, "spec.source.http.url", "Required value"),
    ({"sourceRef": {"name": "fedora"}, "pvc": {}}, "spec.sourceRef.kind", "Required value"),
])
def test_schema_rejects_like_cdis_crd(spec, field, message):
    outcome = check({"apiVersion": names.API_VERSION, "kind": names.DATAVOLUME, "spec": spec},
                    schema(names.DATAVOLUMES))
    assert any(f == field and m == message for _, f, m in outcome.causes), outcome.causes


def test_datavolume_requires_spec():
    outcome = check({"apiVersion": names.API_VERSION, "kind": names.DATAVOLUME}, schema(names.DATAVOLUMES))
    assert [(f, m) for _, f, m in outcome.causes] == [("spec", "Required value")]


def test_cdiconfig_status_as_kubevirt_reads_it():
    config = {"apiVersion": names.API_VERSION, "kind": names.CDICONFIG, "metadata": {"name": "config"},
              "spec": {"uploadProxyURLOverride": "https://upload.example.org", "featureGates": ["X"],
                       "filesystemOverhead": {"global": "0.1", "storageClass": {"local": "0.055"}}},
              "status": {"uploadProxyURL": "https://upload.example.org", "scratchSpaceStorageClass": "",
                         "filesystemOverhead": {"global": "0.06", "storageClass": {"local": "0.06"}},
                         "defaultPodResourceRequirements": names.DEFAULT_POD_RESOURCES, "preallocation": False}}
    outcome = check(config, schema(names.CDICONFIGS))
    assert outcome.causes == [] and outcome.pruned == [] and outcome.value == config
    bad = check({**config, "spec": {"filesystemOverhead": {"global": "6%"}}}, schema(names.CDICONFIGS))
    assert [f for _, f, _ in bad.causes] == ["spec.filesystemOverhead.global"]


def test_storage_profile_and_datasource_keep_their_fields():
    profile = {"apiVersion": names.API_VERSION, "kind": names.STORAGEPROFILE, "metadata": {"name": "local"},
               "spec": {},
               "status": {"storageClass": "local", "provisioner": "kubernetes.io/no-provisioner",
                          "claimPropertySets": [{"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"}],
                          "cloneStrategy": "copy", "dataImportCronSourceFormat": "pvc"}}
    outcome = check(profile, schema(names.STORAGEPROFILES))
    assert outcome.causes == [] and outcome.pruned == [] and outcome.value == profile
    source = {"apiVersion": names.API_VERSION, "kind": names.DATASOURCE, "metadata": {"name": "fedora"},
              "spec": {"source": {"pvc": {"namespace": "golden", "name": "fedora-41"}}},
              "status": {"source": {"pvc": {"namespace": "golden", "name": "fedora-41"}},
                         "conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}]}}
    outcome = check(source, schema(names.DATASOURCES))
    assert outcome.causes == [] and outcome.pruned == [] and outcome.value == source


def test_cdi_cert_config_keeps_lifetimes_and_refuses_what_is_no_duration_string():
    cert_config = {"ca": {"duration": "48h", "renewBefore": "24h"}, "server": {"duration": "24h0m0s"},
                   "client": {"renewBefore": "30m"}}
    cdi = {"apiVersion": names.API_VERSION, "kind": names.CDI, "metadata": {"name": "cdi"},
           "spec": {"certConfig": cert_config}}
    outcome = check(cdi, schema(names.CDIS))
    assert outcome.causes == [] and outcome.pruned == [] and outcome.value == cdi
    bad = check({**cdi, "spec": {"certConfig": {"server": {"duration": 3600}}}}, schema(names.CDIS))
    assert [f for _, f, _ in bad.causes] == ["spec.certConfig.server.duration"]
