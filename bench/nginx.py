"""nginx from Debian serving a directory on 127.0.0.1 (with Range), everything it writes kept in its own dir."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import requests


class Nginx:
    def __init__(self, root: Path, workdir: Path) -> None:
        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        workdir.mkdir(parents=True, exist_ok=True)
        for sub in ("logs", "tmp"):
            (workdir / sub).mkdir(exist_ok=True)
        temps = " ".join(f"{kind}_temp_path {workdir}/tmp/{kind};" for kind in ("client_body", "proxy", "fastcgi",
                                                                               "uwsgi", "scgi"))
        (workdir / "nginx.conf").write_text(
            f"worker_processes 1; daemon off; error_log {workdir}/logs/error.log warn; pid {workdir}/nginx.pid;\n"
            "events { worker_connections 64; }\n"
            f"http {{ access_log off; sendfile on; default_type application/octet-stream; {temps}\n"
            f"  server {{ listen 127.0.0.1:{self.port}; root {root}; }} }}\n")
        self.process = subprocess.Popen([binary, "-c", str(workdir / "nginx.conf"), "-p", str(workdir)],
                                        stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                requests.get(self.url(""), timeout=1)
                return
            except requests.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.close()
                    raise RuntimeError("nginx did not start")
                time.sleep(0.05)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
