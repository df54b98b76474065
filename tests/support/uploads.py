"""Driving an upload through a proxy from a test: the upload server's state (our ``upload-state`` extension),
and an upload held half-sent, so that a test acts while one is certainly running without relying on timing."""

from __future__ import annotations

import contextlib
import http.client
import ssl
import time
import urllib.parse
from collections.abc import Callable, Iterator

import requests

from uploadproxy.contract import STATE_PATH, UPLOAD_PATH


def upload_state(base_url: str, token: str, *, verify: bool | str) -> dict[str, object]:
    """What the upload server of the token's PVC says of its upload: phase, bytes received, last failure."""
    response = requests.get(base_url + STATE_PATH, headers={"Authorization": f"Bearer {token}"}, verify=verify,
                            timeout=10)
    assert response.status_code == 200, f"{response.status_code} {response.text}"
    return dict(response.json())


def wait_upload_state(base_url: str, token: str, phase: str, *, verify: bool | str, least: int = 0,
                      timeout: float = 120) -> dict[str, object]:
    """The upload state once the server is in ``phase`` holding at least ``least`` bytes; a deadline, not a
    timing assertion."""
    deadline = time.monotonic() + timeout
    while True:
        state = upload_state(base_url, token, verify=verify)
        if state["phase"] == phase and int(state.get("received") or 0) >= least:  # type: ignore[call-overload]
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"the upload never reached {phase} with {least} bytes: {state}")
        time.sleep(0.05)


def once_receiving(base_url: str, token: str, *, verify: bool | str) -> Callable[[], None]:
    """An ``CuttingRelay.on_cut`` that holds the cut until the upload server is receiving the upload. A proxy slow
    to start forwarding (a loaded machine: the body waits in socket buffers) would otherwise lose a body the
    server never saw, and the client would rightly start over instead of resuming. It never raises: an error
    in the relay's thread would leave the client waiting forever, so past the deadline the cut just happens
    and the test's own assertions tell."""
    def wait() -> None:
        with contextlib.suppress(AssertionError, ValueError, requests.RequestException):
            wait_upload_state(base_url, token, "Receiving", verify=verify, least=1)
    return wait


@contextlib.contextmanager
def held_upload(base_url: str, data: bytes, *, token: str, verify: bool | str) -> Iterator[Callable[[], int]]:
    """A POST of ``data`` to the sync upload path that sends the first half of the body and stops there; yields
    ``finish``, which sends the rest and returns the status. The proxy relays bytes as they come, so meanwhile
    the server is receiving this upload."""
    parts = urllib.parse.urlsplit(base_url)
    assert parts.hostname is not None
    connection = http.client.HTTPSConnection(parts.hostname, parts.port, context=_context(verify), timeout=120)
    half = len(data) // 2
    try:
        connection.putrequest("POST", UPLOAD_PATH)
        connection.putheader("Authorization", f"Bearer {token}")
        connection.putheader("Content-Length", str(len(data)))
        connection.endheaders(data[:half])

        def finish() -> int:
            connection.send(data[half:])
            return connection.getresponse().status

        yield finish
    finally:
        connection.close()


def _context(verify: bool | str) -> ssl.SSLContext:
    """``verify`` as requests takes it: a CA file, True for the system's CAs, False for none (curl -k)."""
    if verify is False:
        return ssl._create_unverified_context()  # noqa: S323, SLF001 - what -k/--insecure means
    return ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
