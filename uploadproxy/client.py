"""Uploading a file to an upload proxy (or straight to an upload server) the way virtctl does (cdi-facts §4.6),
plus what virtctl lacks: a checksum the server verifies, and resuming a cut upload instead of starting over.

After a broken connection the client asks ``/v1beta1/upload-state`` how many bytes the server holds and
PUTs only the rest with ``Content-Range``; a server without the extension (404 there) gets the whole file
again, as virtctl would send it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import requests
from tqdm import tqdm

from uploadproxy import contract as c

_CUT = (requests.ConnectionError, requests.exceptions.ChunkedEncodingError, requests.Timeout)
_RETRYABLE = {500, 502, 503, 504}
_MAX_REFRESHES = 3  # as virtctl


class UploadFailed(Exception):
    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class UploadResult:
    url: str
    asynchronous: bool
    size: int
    bytes_sent: int  # over all attempts: size plus whatever had to be sent again
    attempts: int
    resumes: int  # attempts that continued where the server stopped instead of starting over


class _Http:
    """A requests session whose TLS setting wins over REQUESTS_CA_BUNDLE (a session-wide ``verify`` does not),
    carrying the bearer token and renewing it when the proxy stops accepting it."""

    def __init__(self, *, verify: bool | str, token: str, refresh: Callable[[], str] | None) -> None:
        self._session = requests.Session()
        self._verify = verify
        self._auth = {"Authorization": f"Bearer {token}"}
        self._refresh = refresh
        self.refreshes = 0

    def refresh(self) -> bool:
        """Get a new token (tokens live five minutes; a long upload outlives one); False when out of renewals."""
        if self._refresh is None or self.refreshes >= _MAX_REFRESHES:
            return False
        self.refreshes += 1
        self._auth = {"Authorization": f"Bearer {self._refresh()}"}
        return True

    def request(self, method: str, url: str, *, headers: dict[str, str] | None = None,
                **kwargs: object) -> requests.Response:
        return self._session.request(method, url, headers={**self._auth, **(headers or {})},  # type: ignore[arg-type]
                                     verify=self._verify, **kwargs)


class _Body:
    """The file from ``offset`` as a sized, readable body; counts what actually leaves and moves the bar."""

    def __init__(self, file: BinaryIO, *, offset: int, size: int, bar: tqdm, counter: list[int]) -> None:
        self._file = file
        self._left = size - offset
        self._bar = bar
        self._counter = counter
        file.seek(offset)
        bar.reset(total=size)
        bar.update(offset)

    def __len__(self) -> int:
        return self._left

    def read(self, n: int = -1) -> bytes:
        n = self._left if n is None or n < 0 else min(n, self._left)
        data = self._file.read(n)
        self._left -= len(data)
        self._counter[0] += len(data)
        self._bar.update(len(data))
        return data


def endpoint(base: str, path: str) -> str:
    """``base`` (a proxy URL, https:// assumed) joined with ``path`` unless it already names an upload path."""
    if "://" not in base:
        base = "https://" + base
    if c.upload_path("/".join(base.split("/")[-2:])) is not None:
        base = base.rsplit("/", 2)[0]
    return base.rstrip("/") + path


def upload(base_url: str, path: str | Path, *, token: str, verify: bool | str = True, checksum: str | None = None,
           retries: int = 5, progress: bool = True, refresh_token: Callable[[], str] | None = None) -> UploadResult:
    """Upload ``path``; returns once the server answered 200 (sync: processed; async: received).

    A 401 on the first attempt is final (the token was never good); later ones call ``refresh_token``.
    """
    path = Path(path)
    size = path.stat().st_size
    http = _Http(verify=verify, token=token, refresh=refresh_token)
    probe = http.request("HEAD", endpoint(base_url, c.ASYNC_PATH), timeout=60)
    asynchronous = probe.status_code == 200
    url = base_url if c.upload_path("/".join(base_url.split("/")[-2:])) else endpoint(
        base_url, c.ASYNC_PATH if asynchronous else c.UPLOAD_PATH)
    headers = {"Content-Type": "application/octet-stream"}
    if checksum:
        headers[c.CHECKSUM_HEADER] = checksum
    sent = [0]
    resumes = 0
    offset = 0
    last_error = ""
    with path.open("rb") as file, tqdm(total=size, unit="B", unit_scale=True, unit_divisor=1024,
                                       disable=not progress) as bar:
        for attempt in range(1, retries + 1):
            extra = {"Content-Range": f"bytes {offset}-{size - 1}/{size}"} if offset else {}
            body = _Body(file, offset=offset, size=size, bar=bar, counter=sent)
            try:
                response = http.request("PUT" if offset else "POST", url, data=body, headers={**headers, **extra},
                                        timeout=(60, None))
            except _CUT as error:
                last_error = f"connection broke: {error}"
            else:
                if response.status_code == 200:
                    return UploadResult(url=url, asynchronous=asynchronous, size=size, bytes_sent=sent[0],
                                        attempts=attempt, resumes=resumes)
                last_error = f"unexpected return value {response.status_code}, {response.text}"
                if response.status_code == 401 and (attempt == 1 or not http.refresh()):
                    raise UploadFailed(f"authentication failed: {response.text}", status=401)
                if response.status_code not in _RETRYABLE | {401, 416}:
                    raise UploadFailed(last_error, status=response.status_code)
            time.sleep(random.uniform(0, 0.05) * attempt)  # noqa: S311 - jitter, as virtctl does
            offset = _held(http, base_url, size)
            resumes += bool(offset)
    raise UploadFailed(f"error uploading image after {retries} retries: {last_error}")


def _held(http: _Http, base_url: str, size: int, *, settle: float = 10.0) -> int:
    """Bytes of this upload the server holds and keeps for a resume; 0 means start over.

    The server may not have noticed the cut yet (it still says Receiving): give it ``settle`` seconds
    rather than start over and throw away what it holds.
    """
    deadline = time.monotonic() + settle
    while True:
        try:
            state = http.request("GET", endpoint(base_url, c.STATE_PATH), timeout=60)
            if state.status_code == 401 and http.refresh():
                continue
            body = state.json() if state.status_code == 200 else {}
        except (requests.RequestException, ValueError):
            return 0
        if body.get("phase") == "Receiving" and time.monotonic() < deadline:
            time.sleep(0.1)
            continue
        if body.get("phase") == "Suspended" and body.get("resumable") and body.get("size") == size:
            return int(body.get("received") or 0)
        return 0

