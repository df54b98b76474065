"""Debian's nginx serving a directory on 127.0.0.1 over HTTP and HTTPS: the well-behaved server with Range.

nginx cannot listen on port 0 and report the port, so free ports are picked by the kernel first and
handed to nginx; when another process wins the race, nginx exits at once and we start again.
Everything nginx writes (pid, error log, temp paths) stays in the given directory; ``master_process off``
keeps one process running as the test user, so files in a 0700 test directory are readable to it.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from tests.support import files

_CONFIG = """\
worker_processes 1; daemon off; master_process off;
error_log {dir}/error.log warn; pid {dir}/nginx.pid;
events {{ worker_connections 256; }}
http {{
  access_log off; sendfile on; default_type application/octet-stream;
  client_body_temp_path {dir}/tmp/body; proxy_temp_path {dir}/tmp/proxy; fastcgi_temp_path {dir}/tmp/fcgi;
  uwsgi_temp_path {dir}/tmp/uwsgi; scgi_temp_path {dir}/tmp/scgi;
  server {{ listen 127.0.0.1:{http_port}; root {root}; {uploads} }}
  server {{ listen 127.0.0.1:{https_port} ssl; root {root}; {uploads}
           ssl_certificate {cert}; ssl_certificate_key {key}; }}
}}
"""
# PUT stores the body under root: written to client_body_temp_path as it arrives, then renamed into place
# (same filesystem), in 1 MiB writes rather than nginx's default 16 KiB.
_UPLOADS = "dav_methods PUT; client_max_body_size 0; client_body_buffer_size 1m;"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


class NginxServer:
    """``root`` is the directory served; put files there (or :meth:`publish` them) and fetch ``url(name)``.
    With ``uploads``, a PUT of any size stores its body as that file (a scratch-volume receiver)."""

    def __init__(self, workdir: Path, *, cert: Path, key: Path, uploads: bool = False) -> None:
        self.root = workdir / "www"
        self.root.mkdir(parents=True)
        for temp in ("body", "proxy", "fcgi", "uwsgi", "scgi"):
            (workdir / "tmp" / temp).mkdir(parents=True)
        self._workdir = workdir
        self._process: subprocess.Popen[bytes] | None = None
        for _ in range(5):
            self.http_port, self.https_port = _free_port(), _free_port()
            config = workdir / "nginx.conf"
            config.write_text(_CONFIG.format(dir=workdir, root=self.root, cert=cert, key=key,
                                             http_port=self.http_port, https_port=self.https_port,
                                             uploads=_UPLOADS if uploads else ""))
            with (workdir / "error.log").open("ab") as stderr:  # startup errors come before the log is open
                self._process = subprocess.Popen(["nginx", "-c", str(config), "-p", str(workdir)],
                                                 stdout=subprocess.DEVNULL, stderr=stderr)
            if self._wait_ready():
                return
        raise RuntimeError(f"nginx did not start: {self.error_log()}")

    def _wait_ready(self) -> bool:
        assert self._process is not None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False  # a port was taken meanwhile: try others
            if _listening(self.http_port) and _listening(self.https_port):
                return True
            time.sleep(0.02)
        self.close()
        raise RuntimeError(f"nginx did not listen within 10 s: {self.error_log()}")

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.http_port}/{name.lstrip('/')}"

    def https_url(self, name: str) -> str:
        return f"https://127.0.0.1:{self.https_port}/{name.lstrip('/')}"

    def publish(self, path: Path, name: str | None = None) -> str:
        """Serve ``path`` as ``name`` (default: its own name); returns the name for :meth:`url`."""
        return files.publish(self.root, path, name)

    def error_log(self) -> str:
        log = self._workdir / "error.log"
        return log.read_text()[-2000:] if log.exists() else "(no error log)"

    def close(self) -> None:
        if self._process is None or self._process.poll() is not None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
