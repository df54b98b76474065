"""DataVolumes importing from every source, end to end: kubectl creates them, the controller runs importer
pods, and the bytes a pod reads back from the volume are those of `qemu-img convert` of the same source."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from cdi.api import names
from importer.checksum import file_sha256
from tests.fixtures.cdi_system import CDISystem, datavolume
from tests.fixtures.images import ImageSet
from tests.support import imaging
from tests.support.nginx import NginxServer
from tests.support.registry import Registry
from tests.support.seaweed import ACCESS_KEY, SECRET_KEY, SeaweedS3

pytestmark = pytest.mark.root


def assert_volume_holds(cdi: CDISystem, claim: str, expected: Path, *, block: bool = False) -> None:
    size = expected.stat().st_size
    assert cdi.volume_sha256(claim, length=size, block=block) == file_sha256(expected, length=size)


def assert_succeeded(cdi: CDISystem, name: str) -> dict:
    """The status a user and KubeVirt read once an import is done (cdi-facts §1.7, §9.5)."""
    dv = cdi.wait_phase(name, names.SUCCEEDED)
    status = dv["status"]
    assert status["progress"] == "100.0%" and status["claimName"] == name and status["restartCount"] == 0
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Bound"]["status"] == "True" and conditions["Bound"]["reason"] == "Bound"
    assert conditions["Ready"]["status"] == "True"
    assert (conditions["Running"]["status"], conditions["Running"]["reason"]) == ("False", "Completed")
    pvc = cdi.pvc(name)
    assert pvc is not None
    owner = pvc["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"], owner["blockOwnerDeletion"]) == (
        names.DATAVOLUME, name, True, True)
    assert pvc["metadata"]["annotations"][names.ANN_POD_PHASE] == "Succeeded"
    cdi.wait_events(name, "ImportSucceeded")
    return dv


@pytest.mark.parametrize(("image", "mode"), [("disk.qcow2", "Filesystem"), ("disk.qcow2", "Block"),
                                             ("disk.raw.xz", "Filesystem")])
def test_http_import(cdi: CDISystem, images: ImageSet, nginx_server: NginxServer, image: str, mode: str) -> None:
    name = f"http-{mode.lower()}-{image.replace('.', '-')}"
    url = nginx_server.url(nginx_server.publish(images.path(image)))
    cdi.apply(datavolume(name, {"http": {"url": url}}, mode=mode))
    assert_succeeded(cdi, name)
    assert_volume_holds(cdi, name, images.expected_raw(image), block=mode == "Block")
    cdi.wait_pod_deleted(f"importer-{name}")  # the importer pod is removed after success


def test_kubectl_shows_the_printer_columns(cdi: CDISystem, images: ImageSet, nginx_server: NginxServer) -> None:
    url = nginx_server.url(nginx_server.publish(images.path("disk.raw.gz")))
    cdi.apply(datavolume("columns", {"http": {"url": url}}))
    assert_succeeded(cdi, "columns")
    header, row = cdi.kubectl("get", "dv", "columns").stdout.splitlines()
    assert header.split() == ["NAME", "PHASE", "PROGRESS", "RESTARTS", "AGE"]
    assert row.split()[:4] == ["columns", "Succeeded", "100.0%", "0"]


def test_blank(cdi: CDISystem) -> None:
    cdi.apply(datavolume("blank", {"blank": {}}, size="32Mi"))
    assert_succeeded(cdi, "blank")
    assert cdi.volume_sha256("blank", length=1 << 20) == hashlib.sha256(bytes(1 << 20)).hexdigest()


def test_s3_with_secret(cdi: CDISystem, s3_server: SeaweedS3, tmp_path: Path) -> None:
    raw = imaging.make_raw(tmp_path / "s3.raw", mib=3, seed=11)
    qcow2 = imaging.convert(raw, tmp_path / "s3.qcow2", "qcow2")
    url = s3_server.put("e2e", "images/s3.qcow2", qcow2.read_bytes())
    cdi.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-keys"},
               "stringData": {"accessKeyId": ACCESS_KEY, "secretKey": SECRET_KEY}})
    cdi.apply(datavolume("s3", {"s3": {"url": url, "secretRef": "s3-keys"}}))
    assert_succeeded(cdi, "s3")
    assert_volume_holds(cdi, "s3", imaging.expected_raw(qcow2, tmp_path))


def test_registry_with_insecure_registry_in_cdiconfig(cdi: CDISystem, registry_server: Registry,
                                                      tmp_path: Path) -> None:
    raw = imaging.make_raw(tmp_path / "reg.raw", mib=3, seed=12)
    qcow2 = imaging.convert(raw, tmp_path / "reg.qcow2", "qcow2")
    registry_server.push_image("e2e/disk", "v1", [({"disk/": None, "disk/disk.qcow2": qcow2.read_bytes()}, "gzip")],
                               env=["INSTANCETYPE_KUBEVIRT_IO_DEFAULT_INSTANCETYPE=u1.small"])
    url = registry_server.url("e2e/disk", "v1")
    host = url.removeprefix("docker://").split("/", 1)[0]
    cdi.kubectl("patch", "cdiconfig", names.CDICONFIG_NAME, "--type", "merge",
                "-p", f'{{"spec": {{"insecureRegistries": ["{host}"]}}}}')
    cdi.apply(datavolume("registry", {"registry": {"url": url}}))
    assert_succeeded(cdi, "registry")
    assert_volume_holds(cdi, "registry", imaging.expected_raw(qcow2, tmp_path))
