"""CDI's progress metric, served over HTTPS with a throwaway self-signed certificate (cdi-facts §3.9).

One counter in Prometheus' text format, served by the standard library, with a certificate made by the openssl
program: prometheus_client, cryptography and a context loading the system's CA certificates took 160 ms of CPU
in the importer, holding the GIL its import threads need, against 5 ms here (and the openssl process, which
holds no lock of ours).
"""

from __future__ import annotations

import http.server
import logging
import socket
import ssl
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from importer.contract import PROGRESS_METRIC
from importer.progress import Snapshot

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
HANDSHAKE_TIMEOUT = 10.0  # seconds a connection may take to say hello: it holds a thread of its own meanwhile


class ProgressMetric:
    """A Progress listener; its value only ever rises, as a counter's does."""

    def __init__(self, owner_uid: str) -> None:
        self._label = owner_uid.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        self._value = 0.0

    def __call__(self, snapshot: Snapshot) -> None:
        self._value = max(self._value, snapshot.percent)

    def exposition(self) -> str:
        return (f"# HELP {PROGRESS_METRIC} The import progress in percentage\n"
                f"# TYPE {PROGRESS_METRIC} counter\n"
                f'{PROGRESS_METRIC}{{ownerUID="{self._label}"}} {self._value!r}\n')

    def serve(self, port: int, *, addr: str = "0.0.0.0") -> None:  # noqa: S104 - the controller scrapes the pod IP
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*_self_signed())
        server = _Server((addr, port), metric=self, context=context)
        threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()


def serve_progress(owner_uid: str, *, port: int, addr: str) -> ProgressMetric | None:
    """The metric, served on ``port`` for the controller to scrape; None when it cannot be (logged): the import or
    upload still runs, unobserved."""
    try:
        metric = ProgressMetric(owner_uid)
        metric.serve(port, addr=addr)
    except Exception:
        log.exception("cannot serve the progress metric on port %d", port)
        return None
    return metric


class _Server(http.server.ThreadingHTTPServer):
    """Each connection's TLS handshake happens in its own thread: one silent client must not stop the scrapes."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], *, metric: ProgressMetric, context: ssl.SSLContext) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.metric = metric
        self.context = context
        super().__init__(address, _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(HANDSHAKE_TIMEOUT)
        with self.context.wrap_socket(request, server_side=True) as tls:
            self.RequestHandlerClass(tls, client_address, self)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("metrics request from %s failed", client_address, exc_info=True)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        if self.path.split("?", 1)[0] != "/metrics":
            self.send_error(404)
            return
        body = self.server.metric.exposition().encode()
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # a line per scrape, every two seconds, would bury the import's own log


def _self_signed() -> tuple[Path, Path]:
    folder = Path(tempfile.mkdtemp(prefix="cdi-metrics-"))
    cert, key = folder / "tls.crt", folder / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "7", "-subj", "/CN=cdi-importer", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key
