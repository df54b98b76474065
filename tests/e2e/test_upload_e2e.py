"""Uploads end to end: `cdi image-upload` (virtctl's flow) and curl as CDI's docs show it, through the upload
proxy of `cdi local` into upload server pods the controller starts, with tokens from the UploadTokenRequest
API; the bytes a pod reads back from the volume are those of `qemu-img convert` of the same file."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from cdi.api import names
from tests.e2e.test_import_e2e import assert_volume_holds
from tests.fixtures.cdi_system import CDISystem, datavolume
from tests.fixtures.images import ImageSet
from tests.integration.test_upload_flow import curl
from uploadproxy import token

pytestmark = pytest.mark.root
SIZE = "64Mi"


def image_upload(cdi: CDISystem, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``cdi image-upload ARGS`` as a user runs it, with the namespace and kubeconfig of the test."""
    return subprocess.run([sys.executable, "-m", "cdi.cli.main", "image-upload", *args, "-n", cdi.namespace,
                           "--insecure", "--no-progress"], env=cdi.env, capture_output=True, text=True,
                          timeout=timeout)


def uploaded(result: subprocess.CompletedProcess[str], cdi: CDISystem, kind: str, name: str, path: Path) -> None:
    """virtctl's messages, in order, and success."""
    assert result.returncode == 0, f"exit {result.returncode}: {result.stdout}\n{result.stderr}"
    created = "DataVolume" if kind == "dv" else "PersistentVolumeClaim"
    expected = [f"{created} {cdi.namespace}/{name} created", f"Waiting for PVC {name} upload pod to be ready...",
                "Pod now ready", "Uploading data to https://", "Uploading data completed successfully",
                "Processing completed successfully", f"Uploading {path} completed successfully"]
    lines = iter(result.stdout.splitlines())
    for prefix in expected:  # one iterator: each line is looked for after the previous one
        assert any(line.startswith(prefix) for line in lines), f"no {prefix!r} (in order) in:\n{result.stdout}"


def proxy_url(cdi: CDISystem) -> str:
    return cdi.kubectl("get", "cdiconfig", names.CDICONFIG_NAME, "-o", "jsonpath={.status.uploadProxyURL}").stdout


def kubectl_token(cdi: CDISystem, pvc: str) -> str:
    """An upload token from the UploadTokenRequest API, asked for with kubectl."""
    request = {"apiVersion": names.UPLOAD_API_VERSION, "kind": names.UPLOAD_TOKEN_REQUEST,
               "metadata": {"name": f"token-{pvc}"}, "spec": {"pvcName": pvc}}
    return cdi.kubectl("create", "-f", "-", "-o", "jsonpath={.status.token}", stdin=json.dumps(request)).stdout


def assert_upload_succeeded(cdi: CDISystem, name: str) -> None:
    dv = cdi.wait_phase(name, names.SUCCEEDED)
    assert dv["status"]["progress"] == "N/A"  # as CDI: upload progress is not tracked
    conditions = {c["type"]: c for c in dv["status"]["conditions"]}
    assert (conditions["Ready"]["status"], conditions["Running"]["reason"]) == ("True", "Completed")
    reasons = cdi.event_reasons(name)
    assert {"UploadScheduled", "UploadReady", "UploadSucceeded"} <= set(reasons), reasons
    assert cdi.pod(f"cdi-upload-{name}") is None, "the upload pod is removed after success"
    assert cdi.api.get(cdi.core_path("services", f"cdi-upload-{name}")) is None, "and its Service"


@pytest.mark.parametrize(("image", "mode"), [("disk.qcow2", "filesystem"), ("disk.raw.gz", "block")])
def test_image_upload_into_a_new_datavolume(cdi: CDISystem, images: ImageSet, image: str, mode: str) -> None:
    name = f"virtctl-{mode}"
    result = image_upload(cdi, "dv", name, f"--image-path={images.path(image)}", f"--size={SIZE}",
                          f"--volume-mode={mode}")
    uploaded(result, cdi, "dv", name, images.path(image))
    assert_upload_succeeded(cdi, name)
    assert cdi.pvc(name)["spec"]["volumeMode"] == mode.capitalize()
    assert_volume_holds(cdi, name, images.expected_raw(image), block=mode == "block")


def test_image_upload_into_a_new_pvc(cdi: CDISystem, images: ImageSet) -> None:
    """No DataVolume: the PVC-level upload controller serves a bare PVC annotated as upload target."""
    result = image_upload(cdi, "pvc", "bare", f"--image-path={images.path('disk.qcow2')}", f"--size={SIZE}")
    uploaded(result, cdi, "pvc", "bare", images.path("disk.qcow2"))
    pvc = cdi.pvc("bare")
    assert pvc["metadata"]["annotations"][names.ANN_POD_PHASE] == "Succeeded"
    assert_volume_holds(cdi, "bare", images.expected_raw("disk.qcow2"))


def test_image_upload_of_an_archive(cdi: CDISystem, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("hello\n")
    (tree / "sub" / "b.bin").write_bytes(bytes(range(256)) * 4096)
    archive = Path(shutil.make_archive(str(tmp_path / "content"), "gztar", root_dir=tree))
    result = image_upload(cdi, "dv", "archive", f"--archive-path={archive}", f"--size={SIZE}")
    uploaded(result, cdi, "dv", "archive", archive)
    assert_upload_succeeded(cdi, "archive")
    assert cdi.pvc("archive")["metadata"]["annotations"][names.ANN_CONTENT_TYPE] == "archive"
    listing = cdi.in_volume("archive", "cat /pvc/a.txt; cd /pvc && sha256sum sub/b.bin")
    expected = subprocess.run(["sha256sum", "sub/b.bin"], cwd=tree, capture_output=True, text=True).stdout
    assert listing == "hello\n" + expected


@pytest.mark.parametrize(("how", "image"), [("sync", "disk.qcow2"), ("async", "disk.raw.gz"), ("form", "disk.qcow2")])
def test_curl_as_cdi_docs_show(cdi: CDISystem, images: ImageSet, how: str, image: str) -> None:
    name = f"curl-{how}"
    cdi.apply(datavolume(name, {"upload": {}}, size=SIZE))
    cdi.wait_phase(name, names.UPLOAD_READY)
    auth = f"Authorization: Bearer {kubectl_token(cdi, name)}"
    base = proxy_url(cdi)
    if how == "async":
        head = subprocess.run(["curl", "-k", "-s", "-I", "-o", "/dev/null", "-w", "%{http_code}", "-H", auth,
                               f"{base}/v1beta1/upload-async"], capture_output=True, text=True, check=True)
        assert head.stdout == "200"
    body = (["-F", f"file=@{images.path(image)}"] if how == "form" else
            ["--data-binary", f"@{images.path(image)}"])
    path = {"sync": "/v1beta1/upload", "async": "/v1beta1/upload-async", "form": "/v1beta1/upload-form"}[how]
    assert curl("-H", auth, *body, base + path) == (200, "")
    assert_upload_succeeded(cdi, name)
    assert_volume_holds(cdi, name, images.expected_raw(image))


def test_refusals_then_a_good_upload(cdi: CDISystem, images: ImageSet) -> None:
    """Bad tokens are refused by the proxy; a checksum mismatch leaves the DataVolume waiting for a good upload;
    once one succeeded, the proxy refuses more."""
    name = "refusals"
    cdi.apply(datavolume(name, {"upload": {}}, size=SIZE))
    cdi.wait_phase(name, names.UPLOAD_READY)
    base, qcow2 = proxy_url(cdi), f"@{images.path('disk.qcow2')}"
    forged = token.issue(rsa.generate_private_key(public_exponent=65537, key_size=2048), namespace=cdi.namespace,
                         name=name)
    assert curl("--data-binary", qcow2, base + "/v1beta1/upload")[0] == 400  # no Authorization header
    assert curl("-H", "Authorization: Basic " + base64.b64encode(b"a:b").decode(), "--data-binary", qcow2,
                base + "/v1beta1/upload")[0] == 400
    assert curl("-H", f"Authorization: Bearer {forged}", "--data-binary", qcow2, base + "/v1beta1/upload")[0] == 401
    status, text = curl("-H", f"Authorization: Bearer {kubectl_token(cdi, 'no-such-pvc')}", "--data-binary", qcow2,
                        base + "/v1beta1/upload")
    assert (status, text) == (503, "rejecting Upload Request for PVC no-such-pvc that doesn&#39;t exist")

    result = image_upload(cdi, "dv", name, f"--image-path={images.path('disk.qcow2')}", "--no-create",
                          "--checksum", "sha256:" + "0" * 64)
    assert result.returncode == 1
    assert "ChecksumMismatch" in result.stderr.strip().splitlines()[-1], result.stderr
    assert cdi.dv(name)["status"]["phase"] == names.UPLOAD_READY, "a refused upload leaves the DV waiting"

    auth = f"Authorization: Bearer {kubectl_token(cdi, name)}"
    assert curl("-H", auth, "--data-binary", qcow2, base + "/v1beta1/upload") == (200, "")
    assert_upload_succeeded(cdi, name)
    assert_volume_holds(cdi, name, images.expected_raw("disk.qcow2"))
    assert curl("-H", auth, "--data-binary", qcow2, base + "/v1beta1/upload") == (
        503, f"rejecting Upload Request for PVC {name} that already finished uploading")
    again = image_upload(cdi, "dv", name, f"--image-path={images.path('disk.qcow2')}", "--no-create")
    assert again.returncode == 1 and f"PVC {name} already successfully imported" in again.stderr
