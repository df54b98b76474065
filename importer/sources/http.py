"""HTTP(S) source: one GET streamed, reopened with Range after a dropped connection.

Redirects are followed by hand, once: every hop is checked against the URL policy, credentials and extra
headers only ever go to the host the user named, and later range requests go straight to where the
redirects ended (re-resolving redirects per request is what made CDI's nbdkit path slow).
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urljoin, urlsplit

import requests
import urllib3

from importer.errors import ImportFailed, Reason
from importer.sources.base import Probe, Source, SourceOptions, Transient
from importer.sources.wire import BROKEN, body_chunks
from importer.tls import verify_setting
from importer.urlpolicy import UrlPolicy

MAX_REDIRECTS = 10
USER_AGENT = "kubecdi-importer"
_REDIRECTS = {301, 302, 303, 307, 308}
_RETRYABLE = {408, 425, 429, 500, 502, 503, 504}


class HttpSource(Source):
    kind = "http"

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.policy = UrlPolicy.from_lists(allow=options.url_allow, deny=options.url_deny)
        self.session = requests.Session()
        # Passed on every request: a Session-level setting loses to REQUESTS_CA_BUNDLE in requests.
        self.verify = verify_setting(cert_dir=options.cert_dir, insecure=options.insecure)
        if options.insecure:
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        self.final_url = options.url
        self.validator: tuple[str, str] | None = None  # ("ETag"|"Last-Modified", value) of what we started
        self.size: int | None = None
        self._pending: requests.Response | None = None

    def probe(self) -> Probe:
        """GET, not HEAD: presigned URLs are often valid for one method only (cdi#2737)."""
        response = self._get(0)
        self._pending = response
        self.size = _total_size(response)
        etag = response.headers.get("ETag", "")
        if etag and not etag.startswith("W/"):
            self.validator = ("ETag", etag)
        elif response.headers.get("Last-Modified"):
            self.validator = ("Last-Modified", response.headers["Last-Modified"])
        resumable = response.headers.get("Accept-Ranges", "").lower() == "bytes"
        return Probe(size=self.size, resumable=resumable)

    def stream(self, offset: int) -> Iterator[bytes]:
        response, self._pending = self._pending, None
        if response is None or offset:
            if response is not None:
                response.close()
            response = self._get(offset)
        skip = offset if response.status_code == 200 else 0
        if skip and self.validator and response.headers.get(self.validator[0]) not in (None, self.validator[1]):
            response.close()
            raise ImportFailed(Reason.TransferFailed, f"the source changed during the transfer ({self.validator[0]} differs); start again")
        try:
            for chunk in body_chunks(response):
                self.received += len(chunk)
                if skip:
                    # The server ignored Range: drop what we already hold and carry on from offset.
                    if len(chunk) <= skip:
                        skip -= len(chunk)
                        continue
                    chunk, skip = chunk[skip:], 0
                yield chunk
        except BROKEN as error:
            raise Transient(f"connection to {_host(self.final_url)} broke: {_short(error)}") from error
        finally:
            response.close()

    def close(self) -> None:
        if self._pending is not None:
            self._pending.close()
        self.session.close()

    def _headers_for(self, url: str) -> dict[str, str]:
        headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        if _origin(url) == _origin(self.options.url):
            headers.update(dict(self.options.headers))
        return headers

    def _auth_for(self, url: str) -> tuple[str, str] | None:
        if self.options.access_key and _origin(url) == _origin(self.options.url):
            return (self.options.access_key, self.options.secret_key)
        return None

    def _get(self, offset: int) -> requests.Response:
        url = self.final_url
        for _ in range(MAX_REDIRECTS + 1):
            self.policy.check(url)
            headers = self._headers_for(url)
            if offset:
                headers["Range"] = f"bytes={offset}-"
                if self.validator:
                    headers["If-Range"] = self.validator[1]
            response = self._request(url, headers)
            if response.status_code in _REDIRECTS and "Location" in response.headers:
                response.close()
                url = urljoin(url, response.headers["Location"])
                continue
            self.final_url = url
            return _checked(response, url=url, offset=offset, size=self.size)
        raise ImportFailed(Reason.RedirectLoop, f"more than {MAX_REDIRECTS} redirects starting at {self.options.url}")

    def _request(self, url: str, headers: dict[str, str]) -> requests.Response:
        timeout = (min(30.0, self.options.stall_timeout), self.options.stall_timeout)
        try:
            return self.session.get(url, headers=headers, auth=self._auth_for(url), stream=True,
                                    allow_redirects=False, timeout=timeout, verify=self.verify)
        except requests.exceptions.SSLError as error:
            raise ImportFailed(Reason.TLSError, f"TLS with {_host(url)} failed: {_short(error)}") from error
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as error:
            raise Transient(f"cannot reach {_host(url)}: {_short(error)}", unreachable=True) from error
        except requests.exceptions.InvalidURL as error:
            raise ImportFailed(Reason.InvalidArgument, f"invalid URL {url!r}: {_short(error)}") from error


def _checked(response: requests.Response, *, url: str, offset: int, size: int | None) -> requests.Response:
    code = response.status_code
    if code == 200 or (code == 206 and offset):
        return response
    response.close()
    where = f"{_host(url)}{urlsplit(url).path}"
    if code == 416 and size is not None and offset >= size:
        raise Transient(f"{where}: range {offset}- is past the end ({size} bytes)")
    if code in (401, 403):
        raise ImportFailed(Reason.Unauthorized, f"{where}: HTTP {code} {response.reason}")
    if code in (404, 410):
        raise ImportFailed(Reason.NotFound, f"{where}: HTTP {code} {response.reason}")
    if code in _RETRYABLE:
        raise Transient(f"{where}: HTTP {code} {response.reason}")
    raise ImportFailed(Reason.HTTPError, f"{where}: HTTP {code} {response.reason}")


def _total_size(response: requests.Response) -> int | None:
    content_range = response.headers.get("Content-Range", "")
    if "/" in content_range and not content_range.endswith("*"):
        return int(content_range.rsplit("/", 1)[1])
    length = response.headers.get("Content-Length")
    return int(length) if length and length.isdigit() else None


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return (parts.scheme, (parts.hostname or "").lower(), parts.port)


def _host(url: str) -> str:
    return urlsplit(url).netloc


def _short(error: BaseException) -> str:
    """The innermost, most specific line of a requests/urllib3 error chain."""
    while error.__context__ is not None and not str(error).strip():
        error = error.__context__
    text = str(error)
    for marker in ("certificate verify failed", "Connection refused", "Name or service not known", "timed out", "Read timed out"):
        if marker in text:
            return marker
    return " ".join(text.split())[:300]


def open_source(options: SourceOptions) -> Source:
    return HttpSource(options)
