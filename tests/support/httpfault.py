"""A file server whose faults are set per test: dropped connections, no Range, errors, redirects, auth, TLS.

Real sockets on 127.0.0.1; the faults are the server misbehaving on purpose, which no well-behaved server
(nginx) can be asked to do.
"""

from __future__ import annotations

import base64
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class Behaviour:
    drop_at: list[int] = field(default_factory=list)  # close the connection once when a response reaches each offset
    no_range: bool = False
    errors: list[int] = field(default_factory=list)  # statuses answered first, one per request
    redirect: str | None = None  # Location to send instead of the file
    basic_auth: tuple[str, str] | None = None
    stall_after: int | None = None  # send this many bytes, then nothing
    etag: str = '"v1"'


class FaultServer:
    def __init__(self, root: Path, *, tls: ssl.SSLContext | None = None) -> None:
        self.root = root
        self.behaviours: dict[str, Behaviour] = {}
        self.requests: list[Request] = []
        self.bytes_sent: dict[str, int] = {}
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                server._get(self)

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

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def requests_for(self, path: str) -> list[Request]:
        return [r for r in self.requests if r.path == "/" + path.lstrip("/")]

    def _get(self, handler: BaseHTTPRequestHandler) -> None:
        path = handler.path.split("?")[0]
        with self._lock:
            self.requests.append(Request("GET", path, {k.lower(): v for k, v in handler.headers.items()}))
            behaviour = self.behaviours.get(path.lstrip("/"), Behaviour())
            error = behaviour.errors.pop(0) if behaviour.errors else None
        if behaviour.basic_auth is not None:
            expected = "Basic " + base64.b64encode(":".join(behaviour.basic_auth).encode()).decode()
            if handler.headers.get("Authorization") != expected:
                return _empty(handler, 401, {"WWW-Authenticate": 'Basic realm="test"'})
        if error is not None:
            return _empty(handler, error, {})
        if behaviour.redirect is not None:
            return _empty(handler, 302, {"Location": behaviour.redirect})
        file = self.root / path.lstrip("/")
        if not file.is_file():
            return _empty(handler, 404, {})
        data = file.read_bytes()
        start = 0
        ranged = handler.headers.get("Range", "")
        handler.protocol_version = "HTTP/1.1"
        if ranged.startswith("bytes=") and not behaviour.no_range:
            start = int(ranged[6:].split("-")[0])
            handler.send_response(206)
            handler.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            handler.send_response(200)
        if not behaviour.no_range:
            handler.send_header("Accept-Ranges", "bytes")
        handler.send_header("ETag", behaviour.etag)
        handler.send_header("Content-Length", str(len(data) - start))
        handler.end_headers()
        end = len(data)
        with self._lock:
            for drop in sorted(behaviour.drop_at):
                if start < drop:
                    end = drop
                    behaviour.drop_at.remove(drop)
                    break
        if behaviour.stall_after is not None:
            end = min(end, start + behaviour.stall_after)
        try:
            handler.wfile.write(data[start:end])
            handler.wfile.flush()
            with self._lock:
                self.bytes_sent[path] = self.bytes_sent.get(path, 0) + end - start
            if behaviour.stall_after is not None:
                time.sleep(30)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass
        handler.close_connection = True


def _empty(handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str]) -> None:
    handler.send_response(status)
    for key, value in headers.items():
        handler.send_header(key, value)
    handler.send_header("Content-Length", "0")
    handler.end_headers()
