"""Reading bodies off the wire (importer.sources.wire) against a real keep-alive HTTP/1.1 server on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from importer.sources.wire import BROKEN, body_chunks

BODY = os.urandom(3 * (1 << 20) + 12345)  # not a whole number of chunks


class _Server(ThreadingHTTPServer):
    connections = 0

    def process_request(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        self.connections += 1
        super().process_request(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so a reused connection can be seen

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        if self.path == "/chunked":
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for start in range(0, len(BODY), 100_000):
                piece = BODY[start : start + 100_000]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
            return
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        if self.path == "/cut":
            self.wfile.write(BODY[: len(BODY) // 2])
            self.close_connection = True
            return
        self.wfile.write(BODY)


@pytest.fixture
def server() -> Iterator[_Server]:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _url(server: _Server, path: str) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


def test_a_body_read_to_its_end_leaves_the_connection_for_the_next_request(server: _Server) -> None:
    with requests.Session() as session:
        for _ in range(3):
            response = session.get(_url(server, "/whole"), stream=True)
            chunks = list(body_chunks(response))
            response.close()
            assert b"".join(chunks) == BODY
            assert [len(c) for c in chunks[:-1]] == [1 << 20] * 3
    assert server.connections == 1


def test_a_chunked_body_is_read_whole(server: _Server) -> None:
    response = requests.get(_url(server, "/chunked"), stream=True)
    assert b"".join(body_chunks(response)) == BODY


def test_a_body_cut_short_of_its_length_raises_what_callers_retry(server: _Server) -> None:
    response = requests.get(_url(server, "/cut"), stream=True)
    got = bytearray()
    with pytest.raises(BROKEN):
        for chunk in body_chunks(response):
            got += chunk
    assert bytes(got) == BODY[: len(BODY) // 2]
