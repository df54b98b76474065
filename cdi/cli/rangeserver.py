"""A small HTTP file server with Range support, for the demo and for trying imports locally.

Python's http.server ignores Range, and a resumable import needs it; nginx is heavier than a demo needs.
"""

from __future__ import annotations

import os
import re
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import BinaryIO

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


class _Handler(SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass

    def send_head(self) -> BinaryIO | None:  # type: ignore[override]
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return None
        f = path.open("rb")
        size = os.fstat(f.fileno()).st_size
        start, end = 0, size - 1
        match = _RANGE.match(self.headers.get("Range", ""))
        if match and (match[1] or match[2]):
            start = int(match[1]) if match[1] else max(0, size - int(match[2]))
            end = min(int(match[2]), size - 1) if match[1] and match[2] else size - 1
            if start > end:
                f.close()
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        else:
            self.send_response(200)
        f.seek(start)
        self._left = end - start + 1
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(self._left))
        self.send_header("ETag", f'"{int(path.stat().st_mtime_ns)}-{size}"')
        self.end_headers()
        return f  # type: ignore[return-value]

    def copyfile(self, source: BinaryIO, outputfile: BinaryIO) -> None:  # type: ignore[override]
        left = self._left
        while left > 0 and (block := source.read(min(left, 1 << 20))):
            outputfile.write(block)
            left -= len(block)


class RangeServer:
    """Serves ``root`` on 127.0.0.1 in a background thread; a context manager."""

    def __init__(self, root: Path, *, port: int = 0) -> None:
        handler = lambda *a, **kw: _Handler(*a, directory=str(root), **kw)  # noqa: E731
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/{name}"

    def __enter__(self) -> RangeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
