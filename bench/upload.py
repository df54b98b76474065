"""Issue 6's benchmark: uploads through the upload proxy next to uploads straight to the upload server, and a qcow2
upload next to CDI's way of taking one, in one run.

- A raw disk (4 GiB, half of it random data) and a qcow2 (1 GiB virtual, 512 MiB random data), each uploaded into
  a directory (DEST/disk.img, Filesystem semantics) by the upload server (`python -m uploadproxy.server`, a
  fresh one per run, as each upload pod takes one upload):
  through the proxy = to the upload proxy with a real token (the proxy runs in this process, with the PVC held
  in memory, as in the tests), which relays over mTLS to the upload server;
  direct = the same request to the upload server itself over the same mTLS, with the proxy's client certificate.
  Figure: throughput through the proxy / direct.
- CDI's way for the qcow2: the same bytes PUT to nginx, which writes the body to a scratch file, then
  `qemu-img convert -t writeback -p -O raw scratch disk.img` + sync. nginx is the receiver because it is C,
  writes the body as it arrives (1 MiB writes) and speaks TLS as CDI's upload path does: the scratch half is
  not slower than it need be (CDI's own uploads also pass its proxy; as the issue asks, that hop is left out).
  Figure: ours (through the proxy) / CDI's way, in time.
- Where the CPU goes, from one more upload each way (not timed): CPU seconds per GiB sent of curl, of the proxy's
  thread and of the upload server with its qemu-img. On one machine all three share its cores, so these say how
  close "through the proxy / direct" can come to 1 here: the proxy's TLS in and out is added to the others' work.
The client is curl on every side (CDI's docs upload with curl; `-T` streams the file; it can present the client
certificate the upload server wants, which `cdi image-upload` cannot), to the sync upload path, whose 200 comes
once the image is written. Each time is the median of --runs runs, ending with a sync; the variants of a case
take turns, and each goal's ratio is the median of the turns' ratios (bench.measure.Turns.ratio). The disk.img
of the last upload through the proxy is checked against the source with `qemu-img compare`. Goals are the
issue's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from bench import images
from bench.images import GiB, MiB
from bench.measure import add_work_options, children_cpu, exit_on_sigterm, medians, sh, thread_cpu, work_dir
from bench.report import Figure, median_figures, publish, ratio_figures
from tests.fixtures.upload import (NAMESPACE, PVC, AppThread, UploadServerProcess, launch_upload_server,
                                   make_upload_pki, upload_pvc)
from tests.support.nginx import NginxServer
from uploadproxy import backend as b
from uploadproxy import tls, token
from uploadproxy.contract import UPLOAD_PATH
from uploadproxy.proxy import UploadProxy

THROUGH_PROXY, DIRECT, CDI = "through the proxy", "direct to the upload server", "CDI's way (scratch, then convert)"


def curl_upload(image: Path, url: str, *options: str, method: str = "POST") -> str:
    return shlex.join(["curl", "-sSf", "-o", "/dev/null", *options, "-X", method, "-T", str(image), url])


class UploadPlane:
    """The upload proxy in front of one upload server at a time, both on 127.0.0.1, writing into ``volume``."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.volume = work / "pvc"
        self.volume.mkdir()
        self.pki = make_upload_pki(work / "pki")
        self._key = token.generate_key()
        self._backend = b.StaticBackend()
        self._backend.pvcs[(NAMESPACE, PVC)] = upload_pvc()
        proxy = UploadProxy(self._backend, public_key=token.public_pem(self._key), client_ssl=tls.client_context(
            ca=str(self.pki.ca), cert=str(self.pki.client_cert), key=str(self.pki.client_key)))
        self._proxy = AppThread(proxy.app(), context=tls.server_context(cert=str(self.pki.server_cert),
                                                                        key=str(self.pki.server_key)))
        self._server: UploadServerProcess | None = None
        self._token = ""

    @property
    def disk(self) -> Path:
        return self.volume / "disk.img"

    def fresh_server(self, image_size: int) -> None:
        """A new upload server (an upload pod takes one upload, then exits) and a new token for it."""
        self.stop_server()
        self._server = launch_upload_server(self.pki, self.disk, termination=self.work / "termination",
                                            image_size=str(image_size))
        self._backend.urls[(NAMESPACE, PVC)] = self._server.url
        self._token = token.issue(self._key, namespace=NAMESPACE, name=PVC)

    def stop_server(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            if server.process.poll() is None:
                server.process.kill()
            server.process.wait()

    def cpu_of_upload(self, image: Path, *, direct: bool) -> dict[str, float]:
        """CPU seconds of one upload into a fresh server: curl's, the proxy thread's and the server's (with
        qemu-img), each counted once the process or request is over."""
        self.fresh_server(images.virtual_size(image))
        assert self._server is not None
        curl_before, proxy_before = children_cpu(), thread_cpu(self._proxy.native_id)
        self.upload(image, direct=direct)
        curl, proxy = children_cpu() - curl_before, thread_cpu(self._proxy.native_id) - proxy_before
        _, _, usage = os.wait4(self._server.process.pid, 0)  # it exits after its upload
        self._server.process.returncode = 0
        sides = {"curl": curl, "upload server": usage.ru_utime + usage.ru_stime}
        return sides if direct else {**sides, "the proxy": proxy}

    def upload(self, image: Path, *, direct: bool) -> None:
        """One upload with curl; returns once the server says the image is written."""
        assert self._server is not None
        auth = ("-H", f"Authorization: Bearer {self._token}")
        if direct:
            sh(curl_upload(image, self._server.url + UPLOAD_PATH, *auth, "--cacert", str(self.pki.ca),
                           "--cert", str(self.pki.client_cert), "--key", str(self.pki.client_key)))
        else:
            sh(curl_upload(image, self._proxy.url + UPLOAD_PATH, *auth, "--cacert", str(self.pki.ca)))

    def close(self) -> None:
        self.stop_server()
        self._proxy.close()


def upload_case(image: Path, *, plane: UploadPlane, nginx: NginxServer | None, runs: int) -> list[Figure]:
    """Proxy against direct, and against CDI's way when ``nginx`` is given, each variant into ``plane.disk``."""
    fmt = "raw" if image.suffix == ".raw" else "qcow2"
    size = images.virtual_size(image)
    case = f"{image.name} → directory"
    print(f"{case} ...", file=sys.stderr)
    scratch = nginx.root / "tmpimage" if nginx is not None else None

    def clear() -> None:
        plane.disk.unlink(missing_ok=True)
        if scratch is not None:
            scratch.unlink(missing_ok=True)

    def setup() -> None:
        clear()
        plane.fresh_server(size)

    variants: dict[str, Callable[[], None]] = {}
    if nginx is not None and scratch is not None:
        receive = curl_upload(image, nginx.https_url(scratch.name), "--cacert", str(plane.pki.ca), method="PUT")
        convert = shlex.join(["qemu-img", "convert", "-t", "writeback", "-p", "-O", "raw", str(scratch),
                              str(plane.disk)])
        variants[CDI] = lambda: sh(f"{receive} && {convert}")
    variants[DIRECT] = lambda: plane.upload(image, direct=True)
    variants[THROUGH_PROXY] = lambda: plane.upload(image, direct=False)  # last: its disk.img is checked below
    try:
        seconds = medians(variants, setup=setup, runs=runs)
        cpu = {name: plane.cpu_of_upload(image, direct=name == DIRECT) for name in (DIRECT, THROUGH_PROXY)}
        compare = subprocess.run(["qemu-img", "compare", "-f", fmt, "-F", "raw", str(image), str(plane.disk)],
                                 capture_output=True, text=True)
        if compare.returncode:
            raise RuntimeError(f"the upload of {image.name} differs from the source: {compare.stdout}{compare.stderr}")
    finally:
        plane.stop_server()
        clear()
    sent = image.stat().st_size
    figures = median_figures(case, seconds)
    figures += [Figure(case, f"{name}: throughput", round(sent / MiB / seconds[name], 1), "MiB/s")
                for name in (DIRECT, THROUGH_PROXY)]
    figures += [Figure(case, f"{name}: CPU of {side} per GiB sent", round(value / (sent / GiB), 2), "s")
                for name, sides in cpu.items() for side, value in sides.items()]
    figures += ratio_figures(case, seconds, DIRECT, THROUGH_PROXY, goal="≥ 0.85",
                             label="throughput through the proxy / direct")
    if CDI in seconds:
        figures += ratio_figures(case, seconds, THROUGH_PROXY, CDI, goal="≤ 0.6",
                                 label="ours (through the proxy) / CDI's way")
    return figures


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench upload", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="a 256 MiB raw disk and a 256 MiB-virtual qcow2 instead of 4 GiB and 1 GiB")
    parser.add_argument("--runs", type=int, default=3, help="runs per variant; the median counts (default 3)")
    add_work_options(parser, holds="images, certificates, nginx, scratch, the volume")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    raw_size, qcow2_size = (256 * MiB, 256 * MiB) if args.quick else (4 * GiB, 1 * GiB)
    figures: list[Figure] = []
    with work_dir(args.workdir, prefix="kubecdi-bench-upload-", keep=args.keep) as work, \
            contextlib.ExitStack() as stack:
        plane = UploadPlane(work)
        stack.callback(plane.close)
        nginx = NginxServer(work / "nginx", cert=plane.pki.server_cert, key=plane.pki.server_key, uploads=True)
        stack.callback(nginx.close)
        print(f"building images in {work} ...", file=sys.stderr)
        raw = images.make_raw(work / f"disk{images.size_name(raw_size)}.raw", virtual=raw_size)
        qcow2 = images.make_qcow2(work, virtual=qcow2_size, scratch=work)
        figures += upload_case(raw, plane=plane, nginx=None, runs=args.runs)
        figures += upload_case(qcow2, plane=plane, nginx=nginx, runs=args.runs)
    publish(figures, json_out=args.json_out)
    return 0
