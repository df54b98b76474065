"""CDIConfig status, StorageProfiles, default classes (cdi-facts §1.5, §5.9, §5.10, §9.1) and the upload server's
lifetimes from the CDI CR's certConfig (§4.5)."""

from __future__ import annotations

import datetime
import json

import pytest

from cdi.api import names
from cdi.controller.config import (
    UploadLifetimes, cdi_config_status, default_storage_class, filesystem_overhead, max_restarts, pod_resources,
    storage_profile, upload_lifetimes,
)


def storage_class(name: str, *, provisioner: str = "localkube.dev/local", created: str = "2026-01-01T00:00:00Z",
                  annotations: dict | None = None) -> dict:
    return {"metadata": {"name": name, "creationTimestamp": created, "annotations": annotations or {}},
            "provisioner": provisioner}


def marked(name: str, key: str, created: str = "2026-01-01T00:00:00Z") -> dict:
    return storage_class(name, created=created, annotations={key: "true"})


def test_defaults_cover_every_storage_class():
    status = cdi_config_status(None, storage_classes=[storage_class("local"), storage_class("fast")],
                               upload_proxy_url="https://cdi-uploadproxy.cdi.svc")
    assert status == {
        "uploadProxyURL": "https://cdi-uploadproxy.cdi.svc",
        "scratchSpaceStorageClass": "",
        "defaultPodResourceRequirements": {"limits": {"cpu": "750m", "memory": "600M"},
                                           "requests": {"cpu": "100m", "memory": "60M"}},
        "filesystemOverhead": {"global": "0.06", "storageClass": {"local": "0.06", "fast": "0.06"}},
        "preallocation": False,
    }


def test_spec_overrides_are_reflected():
    config = {"spec": {
        "uploadProxyURLOverride": "https://upload.example.org",
        "scratchSpaceStorageClass": "fast",
        "podResourceRequirements": {"limits": {"memory": "1G"}},
        "filesystemOverhead": {"global": "0.1", "storageClass": {"fast": "0.02"}},
        "preallocation": True,
        "importProxy": {"HTTPProxy": "http://proxy:3128"},
    }}
    status = cdi_config_status(config, storage_classes=[storage_class("local"), storage_class("fast")],
                               upload_proxy_url="https://ignored")
    assert status["uploadProxyURL"] == "https://upload.example.org"
    assert status["scratchSpaceStorageClass"] == "fast"
    assert status["defaultPodResourceRequirements"] == {"limits": {"cpu": "750m", "memory": "1G"},
                                                        "requests": {"cpu": "100m", "memory": "60M"}}
    assert status["filesystemOverhead"] == {"global": "0.1", "storageClass": {"local": "0.1", "fast": "0.02"}}
    assert status["preallocation"] is True and status["importProxy"] == {"HTTPProxy": "http://proxy:3128"}
    assert filesystem_overhead(status, "fast") == "0.02" and filesystem_overhead(status, None) == "0.1"


def test_scratch_class_that_does_not_exist_is_blank():
    status = cdi_config_status({"spec": {"scratchSpaceStorageClass": "gone"}}, storage_classes=[storage_class("a")])
    assert status["scratchSpaceStorageClass"] == ""


def test_pod_resources_per_datavolume_override():
    status = cdi_config_status(None, storage_classes=[])
    pvc = {"metadata": {"annotations": {names.ANN_POD_RESOURCES: json.dumps({"limits": {"cpu": "2"}})}}}
    assert pod_resources(status, pvc) == {"limits": {"cpu": "2", "memory": "600M"},
                                          "requests": {"cpu": "100m", "memory": "60M"}}
    assert pod_resources(status, {"metadata": {}}) == names.DEFAULT_POD_RESOURCES


def test_max_restarts_from_pvc_then_config_then_default():
    config = {"metadata": {"annotations": {names.ANN_MAX_RESTARTS: "2"}}}
    pvc = {"metadata": {"annotations": {names.ANN_MAX_RESTARTS: "0"}}}
    assert max_restarts(config, pvc) == 0
    assert max_restarts(config, {"metadata": {}}) == 2
    assert max_restarts(None, {"metadata": {}}) == 5
    assert max_restarts(None, {"metadata": {"annotations": {names.ANN_MAX_RESTARTS: "many"}}}) == 5


def test_storage_profile_for_known_and_unknown_provisioners():
    profile = storage_profile(storage_class("local"))
    assert profile["metadata"]["name"] == "local" and profile["kind"] == names.STORAGEPROFILE
    assert profile["status"]["claimPropertySets"][0] == {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"}
    assert profile["status"]["provisioner"] == "localkube.dev/local" and profile["status"]["storageClass"] == "local"
    unknown = storage_profile(storage_class("nas", provisioner="example.org/nas"))
    assert unknown["status"]["claimPropertySets"] == [] and unknown["status"]["cloneStrategy"] == "copy"
    ceph = storage_profile(storage_class("ceph", provisioner="rbd.csi.ceph.com"), has_snapshot_class=True)
    assert ceph["status"]["claimPropertySets"][0] == {"accessModes": ["ReadWriteMany"], "volumeMode": "Block"}
    assert ceph["status"]["cloneStrategy"] == "snapshot"


def test_storage_profile_spec_wins_and_is_kept():
    user = {"spec": {"claimPropertySets": [{"accessModes": ["ReadWriteMany"], "volumeMode": "Block"}],
                     "cloneStrategy": "snapshot"}}
    profile = storage_profile(storage_class("local"), existing=user)
    assert profile["spec"] == user["spec"]
    assert profile["status"]["claimPropertySets"] == user["spec"]["claimPropertySets"]
    assert profile["status"]["cloneStrategy"] == "copy"  # no VolumeSnapshotClass: snapshot degrades to copy


def test_default_virt_class_wins_for_disks_only():
    classes = [marked("plain-default", names.ANN_DEFAULT_CLASS), marked("virt", names.ANN_DEFAULT_VIRT_CLASS)]
    assert default_storage_class(classes, content_type="kubevirt")["metadata"]["name"] == "virt"
    assert default_storage_class(classes, content_type="archive")["metadata"]["name"] == "plain-default"
    assert default_storage_class([storage_class("x")], content_type="kubevirt") is None


def test_newest_default_wins_then_lower_name():
    classes = [marked("old", names.ANN_DEFAULT_CLASS, "2025-01-01T00:00:00Z"),
               marked("new-b", names.ANN_DEFAULT_CLASS, "2026-06-01T00:00:00Z"),
               marked("new-a", names.ANN_DEFAULT_CLASS, "2026-06-01T00:00:00Z")]
    assert default_storage_class(classes, content_type="kubevirt")["metadata"]["name"] == "new-a"


def test_pod_resources_edited_into_nonsense_on_the_pvc_fall_back_to_defaults():
    status = cdi_config_status(None, storage_classes=[])
    pvc = {"metadata": {"annotations": {names.ANN_POD_RESOURCES: "not json"}}}
    assert pod_resources(status, pvc) == names.DEFAULT_POD_RESOURCES


def cdi_resource(cert_config: object) -> dict:
    return {"apiVersion": names.API_VERSION, "kind": names.CDI, "metadata": {"name": "cdi"},
            "spec": {"certConfig": cert_config}}


H, S = datetime.timedelta(hours=1), datetime.timedelta(seconds=1)
DEFAULTS = UploadLifetimes(deadline=12 * H, server_certificate=24 * H)


@pytest.mark.parametrize(("cdi", "expected"), [
    (None, DEFAULTS),  # no CDI CR yet
    ({"metadata": {"name": "cdi"}}, DEFAULTS),
    (cdi_resource({}), DEFAULTS),
    (cdi_resource({"ca": {"duration": "1h", "renewBefore": "30m"}}), DEFAULTS),  # the CA's lifetime plays no part
    (cdi_resource({"server": {"duration": "20s", "renewBefore": "12s"}}),
     UploadLifetimes(deadline=8 * S, server_certificate=20 * S)),
    (cdi_resource({"server": {"duration": "48h", "renewBefore": "12h0m0s"}}),  # the client's 24h - 12h comes first
     UploadLifetimes(deadline=12 * H, server_certificate=48 * H)),
    (cdi_resource({"client": {"duration": "1h30m", "renewBefore": "30m"}}),  # the client's comes first
     UploadLifetimes(deadline=H, server_certificate=24 * H)),
    (cdi_resource({"server": {"duration": "6h", "renewBefore": "2h"},
                   "client": {"duration": "5h", "renewBefore": "0s"}}),
     UploadLifetimes(deadline=4 * H, server_certificate=6 * H)),
    (cdi_resource({"server": {"duration": "36h"}}),  # renewBefore left out: CDI's 12h
     UploadLifetimes(deadline=12 * H, server_certificate=36 * H)),
    (cdi_resource({"server": {"renewBefore": "20h"}}),  # duration left out: CDI's 24h
     UploadLifetimes(deadline=4 * H, server_certificate=24 * H)),
    # Values Go would not parse, or that leave no time before renewal: that certificate's defaults, whole.
    (cdi_resource({"server": {"duration": "1d", "renewBefore": "1h"}}), DEFAULTS),
    (cdi_resource({"server": {"duration": "2h", "renewBefore": "soon"}}), DEFAULTS),
    (cdi_resource({"server": {"duration": 3600, "renewBefore": "1m"}}), DEFAULTS),
    (cdi_resource({"server": {"duration": "1h", "renewBefore": "1h"}}), DEFAULTS),
    (cdi_resource({"server": {"duration": "1h", "renewBefore": "2h"}}), DEFAULTS),
    (cdi_resource({"server": {"duration": "1h", "renewBefore": "-1m"}}), DEFAULTS),
    (cdi_resource({"server": {"duration": "-2h", "renewBefore": "-3h"}}), DEFAULTS),
    (cdi_resource({"server": {"duration": "6h"}}), DEFAULTS),  # 6h - the default 12h leaves nothing
    (cdi_resource({"server": "24h"}), DEFAULTS),
    (cdi_resource("24h"), DEFAULTS),
    (cdi_resource({"server": {"duration": "20s", "renewBefore": "12s"}, "client": {"duration": "oops"}}),
     UploadLifetimes(deadline=8 * S, server_certificate=20 * S)),  # a bad client entry spoils only itself
])
def test_upload_lifetimes_from_cert_config(cdi: dict | None, expected: UploadLifetimes):
    assert upload_lifetimes(cdi) == expected
