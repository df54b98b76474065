"""A file server whose faults are set per test: dropped connections, no Range, errors, redirects, auth, TLS,
a file that changes under the client, stalls.

Real sockets on 127.0.0.1; the faults are the server misbehaving on purpose, which no well-behaved server
(nginx) can be asked to do. Every request is recorded (method, path, headers) and every body byte that
reached the socket is counted per path, so tests can assert what a client sent and how much it fetched.
Named as a client's HTTP proxy, it answers absolute-form requests from its own files (a caching proxy).
"""

from __future__ import annotations

import base64
import re
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from tests.support import files

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")
_CHUNK = 64 << 10  # small writes, so bytes_sent is exact even when the client hangs up mid-body


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    proxied_to: str = ""  # the host of an absolute-form request line: the client took us for its proxy


@dataclass
class Behaviour:
    """How the server misbehaves for one path (or, as ``FaultServer(default=...)``, for every path)."""

    drop_at: list[int] = field(default_factory=list)  # close the connection once when a response reaches each offset
    no_range: bool = False  # ignore Range, always 200, no Accept-Ranges
    errors: list[int] = field(default_factory=list)  # statuses answered first, one per request, then the file
    redirect: str | None = None  # Location sent instead of the file (relative: same server; itself: a loop)
    basic_auth: tuple[str, str] | None = None  # 401 unless these credentials come with the request
    stall_after: int | None = None  # send this many body bytes, then nothing for stall_seconds
    stall_seconds: float = 30.0
    silent_seconds: float = 0.0  # before answering at all (not even the status line), wait this long
    etag: str = '"v1"'
    # After ``replace_after`` requests the path serves this file instead, with ETag '"v2"': the source changed.
    replacement: Path | None = None
    replace_after: int = 1
    served: int = field(default=0, init=False)  # requests answered so far, for replace_after


class FaultServer:
    def __init__(self, root: Path, *, tls: ssl.SSLContext | None = None, default: Behaviour | None = None) -> None:
        self.root = root
        self.default = default
        self.behaviours: dict[str, Behaviour] = {}  # keyed by path without the leading "/"
        self.requests: list[Request] = []
        self.bytes_sent: dict[str, int] = {}  # keyed by "/path"
        self._lock = threading.Condition()
        self._active = 0
        self._closing = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                server._serve(self, body=True)

            def do_HEAD(self) -> None:
                server._serve(self, body=False)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        if tls is not None:
            self._httpd.socket = tls.wrap_socket(self._httpd.socket, server_side=True)
        self.scheme = "https" if tls else "http"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def url(self, path: str) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def publish(self, path: Path, name: str | None = None) -> str:
        """Serve ``path`` as ``name`` (default: its own name); returns the name for :meth:`url`."""
        return files.publish(self.root, path, name)

    def close(self) -> None:
        self._closing.set()  # ends stalls at once
        self._httpd.shutdown()
        self._httpd.server_close()

    def requests_for(self, path: str) -> list[Request]:
        return [r for r in self.requests if r.path == "/" + path.lstrip("/")]

    def sent(self, path: str) -> int:
        """Body bytes of ``path`` that reached the socket, over all requests. Call :meth:`wait_idle` first."""
        return self.bytes_sent.get("/" + path.lstrip("/"), 0)

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Wait until no response is being written: a client that hung up leaves a writer to fail first."""
        with self._lock:
            if not self._lock.wait_for(lambda: self._active == 0, timeout):
                raise TimeoutError(f"{self._active} responses still being written after {timeout} s")

    def _serve(self, handler: BaseHTTPRequestHandler, *, body: bool) -> None:
        with self._lock:
            self._active += 1
        try:
            self._respond(handler, body=body)
        finally:
            with self._lock:
                self._active -= 1
                self._lock.notify_all()

    def _respond(self, handler: BaseHTTPRequestHandler, *, body: bool) -> None:
        target = urlsplit(handler.path)  # "/disk.img", or "http://host/disk.img" when used as an HTTP proxy
        path = target.path
        with self._lock:
            self.requests.append(Request(handler.command, path, {k.lower(): v for k, v in handler.headers.items()},
                                         proxied_to=target.netloc))
            behaviour = self.behaviours.get(path.lstrip("/"), self.default) or Behaviour()
            error = behaviour.errors.pop(0) if behaviour.errors else None
            behaviour.served += 1
            changed = behaviour.replacement is not None and behaviour.served > behaviour.replace_after
        if behaviour.silent_seconds and self._closing.wait(behaviour.silent_seconds):
            return  # the server is closing: the client is long gone
        if behaviour.basic_auth is not None:
            expected = "Basic " + base64.b64encode(":".join(behaviour.basic_auth).encode()).decode()
            if handler.headers.get("Authorization") != expected:
                return _empty(handler, 401, {"WWW-Authenticate": 'Basic realm="test"'})
        if error is not None:
            return _empty(handler, error, {})
        if behaviour.redirect is not None:
            return _empty(handler, 302, {"Location": behaviour.redirect})
        file = behaviour.replacement if changed else self.root / path.lstrip("/")
        etag = '"v2"' if changed else behaviour.etag
        if file is None or not file.is_file():
            return _empty(handler, 404, {})
        size = file.stat().st_size
        start, end = 0, size
        match = _RANGE.match(handler.headers.get("Range", ""))
        if_range = handler.headers.get("If-Range")
        if match and not behaviour.no_range and (if_range is None or if_range == etag):
            start, end = int(match[1]), min(int(match[2]) + 1 if match[2] else size, size)
            if start >= size:
                return _empty(handler, 416, {"Content-Range": f"bytes */{size}"})
            handler.send_response(206)
            handler.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        else:
            handler.send_response(200)
        if not behaviour.no_range:
            handler.send_header("Accept-Ranges", "bytes")
        handler.send_header("ETag", etag)
        handler.send_header("Content-Length", str(end - start))
        handler.end_headers()
        handler.close_connection = True
        if not body:
            return
        with self._lock:
            for drop in sorted(behaviour.drop_at):
                if start < drop < end:
                    end = drop
                    behaviour.drop_at.remove(drop)
                    break
        if behaviour.stall_after is not None:
            end = min(end, start + behaviour.stall_after)
        self._send_body(handler, file, path, start=start, end=end)
        if behaviour.stall_after is not None:
            self._closing.wait(behaviour.stall_seconds)

    def _send_body(self, handler: BaseHTTPRequestHandler, file: Path, path: str, *, start: int, end: int) -> None:
        with file.open("rb") as f:
            f.seek(start)
            position = start
            try:
                while position < end and (chunk := f.read(min(_CHUNK, end - position))):
                    handler.wfile.write(chunk)
                    position += len(chunk)
                    with self._lock:
                        self.bytes_sent[path] = self.bytes_sent.get(path, 0) + len(chunk)
                handler.wfile.flush()
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                pass


def _empty(handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str]) -> None:
    handler.send_response(status)
    for key, value in headers.items():
        handler.send_header(key, value)
    handler.send_header("Content-Length", "0")
    handler.end_headers()
