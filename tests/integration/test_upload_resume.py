"""A cut upload continues where the server stopped (our extension), and plain CDI clients that start over
still work. The cut is real: a relay in front of the proxy drops the client's uplink mid-body."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
import requests

from tests.fixtures.images import ImageSet
from tests.fixtures.upload import MakeStack, UploadPKI, UploadStack
from tests.integration.test_upload_flow import assert_finished, curl
from tests.support.tcpcut import CuttingRelay
from tests.support.uploads import once_receiving, wait_upload_state
from uploadproxy import client, token
from uploadproxy.contract import UPLOAD_PATH

CHUNK = 1 << 20  # the largest piece the server reads off a connection at once


@pytest.fixture
def cut_at_90(upload_stack: UploadStack, images: ImageSet, upload_pki: UploadPKI) -> Iterator[CuttingRelay]:
    size = images.path("disk.raw").stat().st_size
    relay = CuttingRelay(target_port=int(upload_stack.proxy_url.rsplit(":", 1)[1]), cut_after=[size * 9 // 10],
                         upstream=True,
                         on_cut=once_receiving(upload_stack.proxy_url, upload_stack.token(), verify=str(upload_pki.ca)))
    try:
        yield relay
    finally:
        relay.close()


def test_cut_at_90_percent_resends_at_most_the_rest(upload_stack: UploadStack, cut_at_90: CuttingRelay,
                                                   images: ImageSet, upload_pki: UploadPKI) -> None:
    image = images.path("disk.raw")
    size = image.stat().st_size
    result = client.upload(f"https://127.0.0.1:{cut_at_90.port}", image, token=upload_stack.token(),
                           verify=str(upload_pki.ca), progress=False)
    assert (result.attempts, result.resumes) == (2, 1)
    assert cut_at_90.forwarded == size * 9 // 10  # the cut happened where we meant it to
    assert result.bytes_sent - size <= size // 10 + CHUNK
    assert_finished(upload_stack)
    images.assert_imported(upload_stack.volume / "disk.img", "disk.raw")


def test_a_token_that_stops_working_mid_upload_is_renewed(upload_stack: UploadStack, images: ImageSet,
                                                          upload_pki: UploadPKI) -> None:
    image = images.path("disk.raw")
    size = image.stat().st_size
    new_key = token.generate_key()
    renewed: list[str] = []

    def rotate() -> None:  # the issuer's key changes while the upload is under way
        once_receiving(upload_stack.proxy_url, upload_stack.token(), verify=str(upload_pki.ca))()
        upload_stack.proxy.public_key = token.public_pem(new_key)

    def refresh() -> str:
        renewed.append(token.issue(new_key, namespace="ns", name="disk"))
        return renewed[-1]

    relay = CuttingRelay(target_port=int(upload_stack.proxy_url.rsplit(":", 1)[1]), cut_after=[size // 2],
                         upstream=True, on_cut=rotate)
    try:
        result = client.upload(f"https://127.0.0.1:{relay.port}", image, token=upload_stack.token(),
                               verify=str(upload_pki.ca), progress=False, refresh_token=refresh)
    finally:
        relay.close()
    assert len(renewed) == 1 and result.resumes == 1
    assert result.bytes_sent - size <= size // 2 + CHUNK  # resumed, not sent again from the start
    assert_finished(upload_stack)
    images.assert_imported(upload_stack.volume / "disk.img", "disk.raw")


def test_a_token_refused_at_once_is_not_retried(upload_stack: UploadStack, images: ImageSet,
                                                upload_pki: UploadPKI) -> None:
    forged = token.issue(token.generate_key(), namespace="ns", name="disk")
    with pytest.raises(client.UploadFailed) as failure:
        client.upload(upload_stack.proxy_url, images.path("disk.raw"), token=forged, verify=str(upload_pki.ca),
                      progress=False, refresh_token=lambda: pytest.fail("refreshed a token that never worked"))
    assert failure.value.status == 401 and str(failure.value).startswith("authentication failed: invalid token")


def test_a_plain_client_that_starts_over_replaces_the_cut_upload(upload_stack: UploadStack, cut_at_90: CuttingRelay,
                                                                 images: ImageSet, upload_pki: UploadPKI) -> None:
    image = images.path("disk.raw")
    size = image.stat().st_size
    auth = f"Authorization: Bearer {upload_stack.token()}"
    cut = subprocess.run(["curl", "-k", "-s", "-H", auth, "--data-binary", f"@{image}",
                          f"https://127.0.0.1:{cut_at_90.port}{UPLOAD_PATH}"], capture_output=True, timeout=60,
                         check=False)
    assert cut.returncode != 0
    held = wait_upload_state(upload_stack.proxy_url, upload_stack.token(), "Suspended", verify=str(upload_pki.ca))
    assert held["size"] == size and 0 < int(held["received"]) <= size * 9 // 10  # type: ignore[call-overload]
    wrong = requests.put(upload_stack.proxy_url + UPLOAD_PATH, data=image.read_bytes(), verify=str(upload_pki.ca),
                         headers={"Authorization": f"Bearer {upload_stack.token()}",
                                  "Content-Range": f"bytes 0-{size - 1}/{size}"}, timeout=60)
    assert wrong.status_code == 416
    assert wrong.text == (f"the server holds bytes 0-{held['received'] - 1} of {size}: "  # type: ignore[operator]
                          f"send bytes {held['received']}-{size - 1}")
    assert curl("-H", auth, "--data-binary", f"@{image}", upload_stack.proxy_url + UPLOAD_PATH) == (200, "")
    assert_finished(upload_stack)
    images.assert_imported(upload_stack.volume / "disk.img", "disk.raw")


def test_a_cut_upload_not_resumed_in_time_is_dropped(make_upload_stack: MakeStack, images: ImageSet,
                                                     upload_pki: UploadPKI) -> None:
    stack = make_upload_stack(env={"UPLOAD_RESUME_TIMEOUT": "0.5"})
    image = images.path("disk.raw")
    relay = CuttingRelay(target_port=int(stack.proxy_url.rsplit(":", 1)[1]),
                         cut_after=[image.stat().st_size // 2], upstream=True,
                         on_cut=once_receiving(stack.proxy_url, stack.token(), verify=str(upload_pki.ca)))
    try:
        subprocess.run(["curl", "-k", "-s", "-H", f"Authorization: Bearer {stack.token()}", "--data-binary",
                        f"@{image}", f"https://127.0.0.1:{relay.port}{UPLOAD_PATH}"], capture_output=True, timeout=60,
                       check=False)
    finally:
        relay.close()
    dropped = wait_upload_state(stack.proxy_url, stack.token(), "Idle", verify=str(upload_pki.ca))
    assert str(dropped["message"]).startswith("TransferFailed: the upload connection broke after ")
    assert list(stack.volume.iterdir()) == []  # the partial image was discarded
    assert stack.server.process.poll() is None
