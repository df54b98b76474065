"""Uploads through the real proxy into the real upload server (mTLS between them), checked byte for byte
against ``qemu-img convert`` of the same file: curl exactly as CDI's docs show it, and our upload client."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from cdi.api import names
from tests.fixtures.images import ImageSet
from tests.fixtures.upload import MakeStack, UploadPKI, UploadStack
from uploadproxy import client
from uploadproxy.contract import ASYNC_PATH, UPLOAD_PATH

UPLOAD_COMPLETE = {"preallocationApplied": False, "message": "Upload Complete"}


def curl(*args: str) -> tuple[int, str]:
    """Run curl; returns the HTTP status and the body."""
    out = subprocess.run(["curl", "-k", "-s", "-S", "-o", "-", "-w", "\n%{http_code}", *args],
                         capture_output=True, text=True, timeout=120, check=False)
    body, _, code = out.stdout.rpartition("\n")
    return int(code or 0), body


def assert_finished(stack: UploadStack) -> None:
    assert stack.server.wait() == 0, "".join(stack.server.log)
    assert json.loads(stack.server.termination()) == UPLOAD_COMPLETE
    assert stack.server.termination() == '{"preallocationApplied":false,"message":"Upload Complete"}'


def test_curl_sync_upload_of_qcow2(upload_stack: UploadStack, images: ImageSet) -> None:
    status, body = curl("-H", f"Authorization: Bearer {upload_stack.token()}",
                        "--data-binary", f"@{images.path('disk.qcow2')}", upload_stack.proxy_url + UPLOAD_PATH)
    assert (status, body) == (200, "")
    assert_finished(upload_stack)
    images.assert_imported(upload_stack.volume / "disk.img", "disk.qcow2")


def test_curl_async_upload_of_gzipped_raw(upload_stack: UploadStack, images: ImageSet) -> None:
    auth = f"Authorization: Bearer {upload_stack.token()}"
    head = subprocess.run(["curl", "-k", "-s", "-I", "-o", "/dev/null", "-w", "%{http_code}", "-H", auth,
                           upload_stack.proxy_url + ASYNC_PATH], capture_output=True, text=True, check=True)
    assert head.stdout == "200"
    status, _ = curl("-H", auth, "--data-binary", f"@{images.path('disk.raw.gz')}",
                     upload_stack.proxy_url + ASYNC_PATH)
    assert status == 200
    assert_finished(upload_stack)  # processing went on after the response, then the server exited
    images.assert_imported(upload_stack.volume / "disk.img", "disk.raw.gz")


@pytest.mark.parametrize("path", ["/v1beta1/upload-form", "/v1alpha1/upload-form-async"])
def test_curl_form_upload(path: str, upload_stack: UploadStack, images: ImageSet) -> None:
    status, _ = curl("-H", f"Authorization: Bearer {upload_stack.token()}", "-F", "note=ignored",
                     "-F", f"file=@{images.path('disk.qcow2')}", upload_stack.proxy_url + path)
    assert status == 200
    assert_finished(upload_stack)
    images.assert_imported(upload_stack.volume / "disk.img", "disk.qcow2")


@pytest.mark.parametrize("how", ["PVC annotation (proxy rewrites the path)", "server environment"])
def test_client_uploads_an_archive_into_the_volume(how: str, make_upload_stack: MakeStack, upload_pki: UploadPKI,
                                                   tmp_path: Path) -> None:
    if how.startswith("PVC"):
        stack = make_upload_stack(notes={names.ANN_CONTENT_TYPE: "archive"})
    else:
        stack = make_upload_stack(env={"UPLOAD_CONTENT_TYPE": "archive"})
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("a")
    (tree / "sub" / "b.bin").write_bytes(bytes(range(256)) * 1000)
    archive = Path(shutil.make_archive(str(tmp_path / "content"), "tar", root_dir=tree))
    result = client.upload(stack.proxy_url, archive, token=stack.token(), verify=str(upload_pki.ca), progress=False)
    assert result.asynchronous and result.bytes_sent == archive.stat().st_size
    assert_finished(stack)
    assert (stack.volume / "a.txt").read_text() == "a"
    assert (stack.volume / "sub" / "b.bin").read_bytes() == bytes(range(256)) * 1000
    assert not (stack.volume / "disk.img").exists()


def test_proxy_health_and_paths(upload_stack: UploadStack) -> None:
    assert curl(upload_stack.proxy_url + "/healthz") == (200, "OK")
    auth = f"Authorization: Bearer {upload_stack.token()}"
    # upload-archive exists only on the server: the proxy picks it from the PVC's content type.
    assert curl("-H", auth, "-d", "x", upload_stack.proxy_url + "/v1beta1/upload-archive")[0] == 404
    assert curl("-H", auth, upload_stack.proxy_url + "/v1beta1/other")[0] == 404
    options = subprocess.run(["curl", "-k", "-s", "-i", "-X", "OPTIONS", upload_stack.proxy_url + UPLOAD_PATH],
                             capture_output=True, text=True, check=True).stdout
    assert options.startswith("HTTP/1.1 200") and "Access-Control-Allow-Origin: *" in options


def test_client_upload_with_checksum(upload_stack: UploadStack, images: ImageSet, upload_pki: UploadPKI) -> None:
    image = images.path("disk.qcow2")
    digest = subprocess.run(["sha256sum", str(image)], capture_output=True, text=True, check=True).stdout.split()[0]
    result = client.upload(upload_stack.proxy_url, image, token=upload_stack.token(), verify=str(upload_pki.ca),
                           checksum=f"sha256:{digest}", progress=False)
    assert (result.attempts, result.resumes, result.bytes_sent) == (1, 0, image.stat().st_size)
    assert result.url.endswith(ASYNC_PATH)
    assert_finished(upload_stack)
    images.assert_imported(upload_stack.volume / "disk.img", "disk.qcow2")


def test_upload_into_a_block_volume(make_upload_stack: MakeStack, loop_device: Callable[..., Path],
                                    images: ImageSet) -> None:
    device = loop_device(16 << 20, old_data=True)
    stack = make_upload_stack(block_device=device)
    status, _ = curl("-H", f"Authorization: Bearer {stack.token()}", "--data-binary",
                     f"@{images.path('disk.qcow2.xz')}", stack.proxy_url + ASYNC_PATH)
    assert status == 200
    assert_finished(stack)
    images.assert_imported(device, "disk.qcow2.xz")


def test_populator_upload_goes_to_pvc_prime(upload_stack: UploadStack, images: ImageSet) -> None:
    """With populators the DV's PVC points at a VolumeUploadSource and the upload pod serves PVC' (cdi-facts §4.2)."""
    backend = upload_stack.backend
    prime = backend.pvcs.pop(("ns", "disk"))
    backend.pvcs[("ns", "prime-disk")] = prime
    backend.urls[("ns", "prime-disk")] = backend.urls.pop(("ns", "disk"))
    backend.pvcs[("ns", "disk")] = {
        "metadata": {"name": "disk", "annotations": {names.ANN_PVC_PRIME: "prime-disk"}},
        "spec": {"dataSourceRef": {"apiGroup": "cdi.kubevirt.io", "kind": "VolumeUploadSource", "name": "src"}}}
    status, _ = curl("-H", f"Authorization: Bearer {upload_stack.token('disk')}", "--data-binary",
                     f"@{images.path('disk.qcow2')}", upload_stack.proxy_url + UPLOAD_PATH)
    assert status == 200
    assert_finished(upload_stack)
    images.assert_imported(upload_stack.volume / "disk.img", "disk.qcow2")


def test_client_retries_until_the_upload_pod_is_ready(make_upload_stack: MakeStack, images: ImageSet,
                                                      upload_pki: UploadPKI) -> None:
    stack = make_upload_stack(notes={names.ANN_POD_READY: "false"})
    # The controller marks the pod ready a little later: the proxy's first answers are 503, which the client retries.
    ready = threading.Timer(1.5, stack.annotate, args=({names.ANN_POD_READY: "true"},))
    ready.start()
    try:
        result = client.upload(stack.proxy_url, images.path("disk.qcow2"), token=stack.token(),
                               verify=str(upload_pki.ca), progress=False)
    finally:
        ready.cancel()
    assert result.attempts >= 2
    assert_finished(stack)
    images.assert_imported(stack.volume / "disk.img", "disk.qcow2")
