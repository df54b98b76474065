"""What the proxy and the upload server refuse, with CDI's status codes and texts (cdi-facts §4.2, §4.3), and
that a refused upload leaves nothing behind: the volume stays empty and the server takes the next upload."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from cdi.api import names
from importer.checksum import file_sha256
from tests.fixtures.images import ImageSet
from tests.fixtures.upload import AppThread, MakeStack, StartServer, UploadPKI, UploadStack
from tests.integration.test_upload_flow import assert_finished, curl
from tests.support.uploads import held_upload, wait_upload_state
from uploadproxy import client, tls, token
from uploadproxy.contract import ASYNC_PATH, UPLOAD_PATH
from uploadproxy.server import Config, UploadServer


def post(stack: UploadStack, image: Path, *, auth: str | None, path: str = UPLOAD_PATH) -> tuple[int, str]:
    headers = ("-H", f"Authorization: {auth}") if auth is not None else ()
    return curl(*headers, "--data-binary", f"@{image}", stack.proxy_url + path)


def assert_untouched(stack: UploadStack) -> None:
    assert stack.server.process.poll() is None, "the upload server exited"
    assert list(stack.volume.iterdir()) == []


@pytest.mark.parametrize(("auth", "status"), [
    (None, 400),
    ("Basic dXNlcjpwYXNz", 400),
    ("Bearer", 400),
    ("Bearer two words", 400),
    ("Bearer not.a.jwt", 401),
])
def test_missing_or_malformed_authorization(auth: str | None, status: int, upload_stack: UploadStack,
                                            images: ImageSet) -> None:
    assert post(upload_stack, images.path("disk.qcow2"), auth=auth)[0] == status
    assert_untouched(upload_stack)


def test_forged_expired_and_wrong_tokens(upload_stack: UploadStack, images: ImageSet) -> None:
    image = images.path("disk.qcow2")
    forged = token.issue(token.generate_key(), namespace="ns", name="disk")
    assert post(upload_stack, image, auth=f"Bearer {forged}")[0] == 401
    old = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=6)
    status, body = post(upload_stack, image, auth=f"Bearer {upload_stack.token(now=old)}")
    assert status == 401 and "expired" in body
    assert post(upload_stack, image, auth=f"Bearer {upload_stack.token(operation='Clone')}")[0] == 400
    snapshots = {"group": "snapshot.storage.k8s.io", "version": "v1", "resource": "volumesnapshots"}
    assert post(upload_stack, image, auth=f"Bearer {upload_stack.token(resource=snapshots)}")[0] == 400
    status, body = post(upload_stack, image, auth=f"Bearer {upload_stack.token('other')}")
    # HTML-escaped, as CDI's proxy answers.
    assert (status, body) == (503, "rejecting Upload Request for PVC other that doesn&#39;t exist")
    assert_untouched(upload_stack)


@pytest.mark.parametrize(("notes", "text"), [
    ({names.ANN_UPLOAD_TARGET: None}, "PVC disk is not an upload target"),
    ({names.ANN_POD_PHASE: "Succeeded"}, "rejecting Upload Request for PVC disk that already finished uploading"),
    ({names.ANN_POD_READY: "false"}, "timed out waiting for the upload pod of PVC disk to be ready"),
    ({names.ANN_CONTENT_TYPE: "iso"}, "rejecting upload request for PVC disk - upload content-type iso is invalid"),
])
def test_pvc_not_ready_for_upload(notes: dict[str, str | None], text: str, upload_stack: UploadStack,
                                  images: ImageSet) -> None:
    annotations = upload_stack.backend.pvcs[("ns", "disk")]["metadata"]["annotations"]
    for key, value in notes.items():
        if value is None:
            del annotations[key]
        else:
            annotations[key] = value
    assert post(upload_stack, images.path("disk.qcow2"), auth=f"Bearer {upload_stack.token()}") == (503, text)
    assert_untouched(upload_stack)


def test_a_second_upload_while_one_is_running_is_busy(upload_stack: UploadStack, images: ImageSet,
                                                      upload_pki: UploadPKI) -> None:
    image = images.path("disk.raw").read_bytes()
    ca = str(upload_pki.ca)
    with held_upload(upload_stack.proxy_url, image, token=upload_stack.token(), verify=ca) as finish:
        state = wait_upload_state(upload_stack.proxy_url, upload_stack.token(), "Receiving", verify=ca, least=1)
        assert state["size"] == len(image) and int(state["received"]) <= len(image) // 2  # type: ignore[call-overload]
        status, body = post(upload_stack, images.path("disk.qcow2"), auth=f"Bearer {upload_stack.token()}")
        assert (status, body) == (503, "an upload is already in progress")
        assert finish() == 200
    assert_finished(upload_stack)
    images.assert_imported(upload_stack.volume / "disk.img", "disk.raw")


def test_image_larger_than_the_volume(make_upload_stack: MakeStack, images: ImageSet) -> None:
    stack = make_upload_stack(image_size="2Mi")
    for name in ("disk.qcow2", "disk.raw.gz"):
        status, body = post(stack, images.path(name), auth=f"Bearer {stack.token()}")
        assert status == 400
        assert body.startswith("Saving stream failed: effective image size is larger than the reported "
                               "available storage: "), body
        assert_untouched(stack)


def test_checksum_mismatch_marks_nothing_complete(upload_stack: UploadStack, images: ImageSet,
                                                  upload_pki: UploadPKI) -> None:
    image = images.path("disk.qcow2")
    wrong = "sha256:" + "0" * 64
    with pytest.raises(client.UploadFailed) as failure:
        client.upload(upload_stack.proxy_url, image, token=upload_stack.token(), verify=str(upload_pki.ca),
                      checksum=wrong, progress=False)
    assert failure.value.status == 400
    assert str(failure.value).startswith("unexpected return value 400, Saving stream failed: ChecksumMismatch: "
                                         "sha256 checksum mismatch: expected 000")
    assert_untouched(upload_stack)
    right = "sha256:" + file_sha256(image, length=image.stat().st_size)
    client.upload(upload_stack.proxy_url, image, token=upload_stack.token(), verify=str(upload_pki.ca), checksum=right,
                  progress=False)
    assert_finished(upload_stack)
    images.assert_imported(upload_stack.volume / "disk.img", "disk.qcow2")


def test_async_processing_failure_is_reported_by_the_server(upload_stack: UploadStack, images: ImageSet,
                                                            upload_pki: UploadPKI) -> None:
    # The body arrives whole (200), then the image turns out to point at a host file.
    status, _ = post(upload_stack, images.path("backing.qcow2"), auth=f"Bearer {upload_stack.token()}",
                     path=ASYNC_PATH)
    assert status == 200
    state = wait_upload_state(upload_stack.proxy_url, upload_stack.token(), "Idle", verify=str(upload_pki.ca))
    assert str(state["message"]).startswith("UnsafeImage: ")
    assert_untouched(upload_stack)
    images.assert_no_host_bytes(upload_stack.volume)


def test_checksum_header_must_be_well_formed(upload_stack: UploadStack, images: ImageSet) -> None:
    status, body = curl("-H", f"Authorization: Bearer {upload_stack.token()}", "-H", "X-Cdi-Checksum: sha256:xyz",
                        "--data-binary", f"@{images.path('disk.qcow2')}", upload_stack.proxy_url + UPLOAD_PATH)
    assert status == 400 and body.startswith("Saving stream failed: invalid checksum 'sha256:xyz'")
    assert_untouched(upload_stack)


@pytest.fixture
def kept_server(upload_pki: UploadPKI, tmp_path: Path) -> Iterator[tuple[str, UploadServer]]:
    """An upload server application that stays up after its upload (the process would exit), to see what it
    answers in that window; same code, served from a thread."""
    volume = tmp_path / "volume"
    volume.mkdir()
    server = UploadServer(Config(destination=str(volume / "disk.img"), image_size=16 << 20, filesystem_overhead=0.0,
                                 preallocation=False, deadline=None, client_name="client.upload-server.cdi.kubevirt.io",
                                 resume_timeout=5.0))
    thread = AppThread(server.app(), context=tls.server_context(
        cert=str(upload_pki.server_cert), key=str(upload_pki.server_key), client_ca=str(upload_pki.ca)))
    try:
        yield thread.url, server
    finally:
        thread.close()


def test_upload_server_mtls_paths_and_409_after_success(kept_server: tuple[str, UploadServer],
                                                        upload_pki: UploadPKI, images: ImageSet) -> None:
    url, server = kept_server
    ca = str(upload_pki.ca)
    proxy_cert = (str(upload_pki.client_cert), str(upload_pki.client_key))
    image = images.path("disk.qcow2").read_bytes()
    health = requests.get(url + "/healthz", verify=ca, timeout=10)  # the kubelet's probe has no certificate
    assert (health.status_code, health.text) == (200, "OK")
    assert requests.post(url + UPLOAD_PATH, data=image, verify=ca, timeout=10).status_code == 401
    stranger = (str(upload_pki.stranger_cert), str(upload_pki.stranger_key))
    assert requests.post(url + UPLOAD_PATH, data=image, verify=ca, cert=stranger, timeout=10).status_code == 401
    assert requests.get(url + UPLOAD_PATH, verify=ca, cert=proxy_cert, timeout=10).status_code == 404
    assert requests.post(url + "/v1beta1/nothing", verify=ca, cert=proxy_cert, timeout=10).status_code == 404
    assert requests.head(url + ASYNC_PATH, verify=ca, cert=proxy_cert, timeout=10).status_code == 200
    done = requests.post(url + "/v1alpha1/upload", data=image, verify=ca, cert=proxy_cert, timeout=60)
    assert (done.status_code, done.text) == (200, "")
    again = requests.post(url + UPLOAD_PATH, data=image, verify=ca, cert=proxy_cert, timeout=60)
    assert again.status_code == 409
    assert server.completed is not None and server.completed.format == "qcow2"


def test_deadline_passes_without_an_upload(start_upload_server: StartServer, tmp_path: Path) -> None:
    deadline = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)
    server = start_upload_server(tmp_path, env={"DEADLINE": deadline.strftime("%Y-%m-%dT%H:%M:%S.%fZ")})
    assert server.wait() == 0
    assert json.loads(server.termination()) == {"deadlinePassed": True, "message": "Deadline Passed"}


def test_bad_pod_environment_fails_with_a_clear_message(tmp_path: Path) -> None:
    env = {**os.environ, "PREALLOCATION": "maybe", "UPLOAD_TERMINATION_LOG": str(tmp_path / "termination"),
           "DESTINATION": str(tmp_path / "disk.img")}
    done = subprocess.run([sys.executable, "-m", "uploadproxy.server", "--insecure-http"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert (tmp_path / "termination").read_text() == "InvalidArgument: PREALLOCATION must be true or false, not 'maybe'"


def test_form_without_a_file_part(upload_stack: UploadStack, images: ImageSet) -> None:
    status, body = curl("-H", f"Authorization: Bearer {upload_stack.token()}", "-F",
                        f"image=@{images.path('disk.qcow2')}", upload_stack.proxy_url + "/v1beta1/upload-form")
    assert (status, body) == (400, "Saving stream failed: InvalidArgument: the form has no part named 'file'")
    assert_untouched(upload_stack)
