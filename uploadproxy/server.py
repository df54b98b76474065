"""`cdi-uploadserver`: receives one upload for one PVC and feeds it to the import pipeline (cdi-facts §4.2, §4.5).

CDI's endpoints, status codes and texts, so CDI's proxy and clients work unchanged, plus two extensions:
an ``X-Cdi-Checksum: sha256:HEX`` header checked against the body, and resumable uploads: ``GET
/v1beta1/upload-state`` says how many bytes the server holds, and ``PUT`` on an upload path with
``Content-Range: bytes START-END/TOTAL`` sends the rest into the same, still running, import.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import datetime
import logging
import os
import re
import ssl
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web

from importer import contract as ic
from importer.checksum import Expected
from importer.errors import ImportFailed, Reason
from importer.metrics import serve_progress
from importer.pipeline import ImportRequest, ImportResult
from importer.process import without_teardown
from importer.progress import Listener
from importer.quantity import parse_quantity
from importer.sources.base import SourceOptions
from uploadproxy import contract as c
from uploadproxy import tls
from uploadproxy.session import PROCESSING, RECEIVING, SUSPENDED, Session, cut

log = logging.getLogger("cdi-uploadserver")

_RAW = (c.SYNC, c.ASYNC, c.ARCHIVE)
_ASYNC = (c.ASYNC, c.FORM_ASYNC)
_FORM = (c.FORM, c.FORM_ASYNC)
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+)$")
# Failures that are not the upload's fault answer 500; everything else is bad input (400), as CDI.
_SERVER_SIDE = {Reason.TargetError, Reason.InternalError, Reason.TransferFailed, Reason.Timeout}
_READ_ERRORS = (ConnectionError, aiohttp.ClientError, asyncio.IncompleteReadError)


@dataclass(frozen=True)
class Config:
    destination: str  # a disk.img path (Filesystem) or a block device
    image_size: int | None
    filesystem_overhead: float
    preallocation: bool
    deadline: datetime.datetime | None
    client_name: str  # required CN of the client certificate; empty with plain HTTP
    resume_timeout: float  # seconds a cut resumable upload waits for its client
    content_type: str = ic.CONTENT_KUBEVIRT  # archive: every upload path unpacks a tar, not only upload-archive

    def request(self, *, archive: bool) -> ImportRequest:
        archive = archive or self.content_type == ic.CONTENT_ARCHIVE
        dest = Path(self.destination)
        if archive or dest.name == ic.DISK_IMAGE_NAME:
            dest = dest.parent  # the pipeline writes disk.img (or the archive's tree) into the volume's directory
        return ImportRequest(
            source=ic.SOURCE_UPLOAD, options=SourceOptions(url=""), dest=str(dest), size=self.image_size,
            content_type=ic.CONTENT_ARCHIVE if archive else ic.CONTENT_KUBEVIRT,
            filesystem_overhead=self.filesystem_overhead, preallocation=self.preallocation,
            report_sha256=False)


class UploadServer:
    """The HTTP side. ``done`` is set once an upload succeeded (``completed``) or the deadline passed."""

    def __init__(self, config: Config, *, progress_listeners: Sequence[Listener] = ()) -> None:
        self.config = config
        self.progress_listeners = progress_listeners  # every upload's progress goes to them too
        self.session: Session | None = None
        self.completed: ImportResult | None = None
        self.last_failure = ""
        self.deadline_passed = False
        self.done = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=0)
        app.router.add_get(c.HEALTHZ, self._healthz)
        app.router.add_route("*", "/{path:.*}", self._dispatch)
        if self.config.deadline is not None:
            app.on_startup.append(self._start_deadline)
        return app

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parsed = c.upload_path(request.path)
        if parsed is None:
            return _text(404, "404 page not found")
        endpoint = parsed[1]
        if request.method == "HEAD":
            return web.Response(status=200 if endpoint in _ASYNC else 404)
        if endpoint == c.STATE:
            return self._state() if request.method == "GET" else _text(404, "404 page not found")
        if request.method != "POST" and not (request.method == "PUT" and endpoint in _RAW):
            return _text(404, "404 page not found")
        denied = self._check_client(request)
        if denied is not None:
            return denied
        if request.headers.get(c.CLONE_CONTENT_TYPE_HEADER):
            return _text(400, "clone streams are not supported by this upload server")
        if self.completed is not None:
            return _text(409, "upload already completed")
        if request.method == "PUT":
            return await self._resume(request, endpoint)
        return await self._start(request, endpoint)

    def _check_client(self, request: web.Request) -> web.Response | None:
        if not self.config.client_name:
            return None
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        name = tls.peer_common_name(peer)
        if name != self.config.client_name:
            return _text(401, f"client certificate name {name!r} is not {self.config.client_name!r}")
        return None

    async def _start(self, request: web.Request, endpoint: str) -> web.StreamResponse:
        current = self.session
        if current is not None and current.state != SUSPENDED:
            return _text(503, "an upload is already in progress")
        try:
            expected = _expected(request)
        except ImportFailed as failure:
            return _text(400, c.SAVE_FAILED + failure.message)
        if current is not None:
            # A client that starts over instead of resuming (CDI's clients retry from the start) wins.
            log.info("a new upload replaces the one cut at byte %d", current.received)
            await self._stop(current, cut(current.received))
            if self.session is not None:  # another client started while the old upload was stopping
                return _text(503, "an upload is already in progress")
        form = endpoint in _FORM
        size = None if form else request.content_length
        session = Session(self.config.request(archive=endpoint == c.ARCHIVE), size=size, expected=expected,
                          resumable=not form, listeners=self.progress_listeners)
        self.session = session
        body = _form_file(request) if form else request.content.iter_chunked(1 << 20)
        return await self._receive(session, body, asynchronous=endpoint in _ASYNC)

    async def _resume(self, request: web.Request, endpoint: str) -> web.StreamResponse:
        session = self.session
        match = _CONTENT_RANGE.match(request.headers.get("Content-Range", ""))
        if match is None:
            return _text(400, "PUT needs Content-Range: bytes START-END/TOTAL")
        if session is None or not session.resumable:
            return _text(416, "no cut upload to resume: start a new one with POST")
        if session.state != SUSPENDED:
            return _text(503, "an upload is already in progress")
        start, end, total = (int(g) for g in match.groups())
        if total != session.size or start != session.received or end != total - 1:
            return _text(416, f"the server holds bytes 0-{session.received - 1} of {session.size}: "
                              f"send bytes {session.received}-{(session.size or 0) - 1}")
        session.state = RECEIVING
        log.info("resuming the upload at byte %d", start)
        return await self._receive(session, request.content.iter_chunked(1 << 20),
                                   asynchronous=endpoint == c.ASYNC)

    async def _receive(self, session: Session, body: AsyncIterator[bytes], *,
                       asynchronous: bool) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        broken = False
        try:
            async for chunk in body:
                if not session.offer(chunk) and not await loop.run_in_executor(None, session.feed, chunk):
                    return await self._respond(session)  # the pipeline stopped: its error is the answer
        except _READ_ERRORS as error:
            log.info("upload connection broke after %d bytes: %s", session.received, error)
            broken = True
        except ImportFailed as failure:  # a malformed multipart body
            await self._stop(session, failure)
            return await self._respond(session)
        if broken or (session.size is not None and session.received < session.size):
            return await self._suspend(session)
        try:
            await loop.run_in_executor(None, session.end)
        except ImportFailed:
            return await self._respond(session)
        if asynchronous:
            task = asyncio.create_task(self._settle(session))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return web.Response(status=200)
        return await self._respond(session)

    async def _suspend(self, session: Session) -> web.StreamResponse:
        if not session.resumable:
            await self._stop(session, cut(session.received))
            return await self._respond(session)
        session.state = SUSPENDED
        session.cuts += 1
        asyncio.get_running_loop().call_later(self.config.resume_timeout, self._expire, session, session.cuts)
        return _text(400, c.SAVE_FAILED + f"the body ended after {session.received} of {session.size} bytes; "
                          f"resume with PUT and Content-Range")

    def _expire(self, session: Session, cuts: int) -> None:
        if self.session is session and session.state == SUSPENDED and session.cuts == cuts:
            log.info("the cut upload was not resumed within %gs", self.config.resume_timeout)
            task = asyncio.create_task(self._stop(session, cut(session.received)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _stop(self, session: Session, failure: ImportFailed) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, session.abort, failure)
        await self._settle(session)

    async def _settle(self, session: Session) -> None:
        """Wait for the pipeline and record how it ended."""
        try:
            result = await asyncio.wrap_future(session.result)
        except ImportFailed as failure:
            self.last_failure = str(failure)
            log.error("upload failed: %s", failure)
        except Exception as error:  # a bug: reported as a 500 and in the log, and the server takes a new upload
            log.exception("upload failed")
            self.last_failure = f"{Reason.InternalError.name}: {type(error).__name__}: {error}"
        else:
            self.completed = result
            log.info("upload complete: %s, %d bytes into %s", result.format, result.virtual_size, result.target)
            self.done.set()
        finally:
            if self.session is session:
                self.session = None

    async def _respond(self, session: Session) -> web.Response:
        await self._settle(session)
        if not session.result.exception():
            return web.Response(status=200)
        error = session.result.exception()
        if not isinstance(error, ImportFailed):
            return _text(500, c.SAVE_FAILED + str(error))
        if error.reason is Reason.TargetTooSmall:
            return _text(400, c.SAVE_FAILED + c.TOO_LARGE + error.message)
        return _text(500 if error.reason in _SERVER_SIDE else 400, c.SAVE_FAILED + str(error))

    def _state(self) -> web.Response:
        session = self.session
        body: dict[str, object] = {"phase": "Complete" if self.completed else "Idle", "message": self.last_failure}
        if session is not None:
            snap = session.snapshot
            body.update(phase=session.state, received=session.received, size=session.size,
                        resumable=session.resumable,
                        progress={"phase": snap.phase, "percent": round(snap.percent, 1)} if snap else None)
        return web.json_response(body)

    async def _start_deadline(self, _app: web.Application) -> None:
        task = asyncio.create_task(self._deadline())
        self._tasks.add(task)

    async def _deadline(self) -> None:
        assert self.config.deadline is not None
        delay = (self.config.deadline - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
        await asyncio.sleep(max(0.0, delay))
        while self.session is not None and self.session.state in (RECEIVING, PROCESSING):
            await asyncio.sleep(0.5)  # an upload under way may finish: that beats the deadline
        if self.completed is None:
            log.info("deadline %s passed", self.config.deadline.isoformat())
            self.deadline_passed = True
            self.done.set()


async def _form_file(request: web.Request) -> AsyncIterator[bytes]:
    """The content of the multipart part named ``file``; other parts are skipped (cdi-facts §4.2)."""
    try:
        reader = await request.multipart()
    except (AssertionError, ValueError) as error:  # aiohttp's way of saying the body is not multipart
        raise ImportFailed(Reason.InvalidArgument, f"not a multipart/form-data body: {error}") from error
    while (part := await reader.next()) is not None:
        if isinstance(part, aiohttp.BodyPartReader) and part.name == "file":
            while chunk := await part.read_chunk(1 << 20):
                yield chunk
            return
        await part.release()
    raise ImportFailed(Reason.InvalidArgument, "the form has no part named 'file'")


def _expected(request: web.Request) -> Expected | None:
    value = request.headers.get(c.CHECKSUM_HEADER)
    return Expected(value) if value else None


def _text(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text)


# The pod's entry point.


def config_from(env: Mapping[str, str], argv: list[str] | None = None) -> tuple[Config, argparse.Namespace]:
    """CDI's environment (cdi-facts §4.5), each overridable by a flag of the same name in lower case."""
    parser = argparse.ArgumentParser(prog="cdi-uploadserver", description=__doc__.split("\n")[0])
    parser.add_argument("-v", dest="verbosity", default="1", help="log verbosity (accepted for CDI's pod args)")
    for name, default in ((c.TLS_KEY_FILE, c.DEFAULT_TLS_KEY), (c.TLS_CERT_FILE, c.DEFAULT_TLS_CERT),
                          (c.CLIENT_CERT_FILE, c.DEFAULT_CLIENT_CA), (c.CLIENT_NAME, c.UPLOAD_CLIENT_NAME),
                          (c.DESTINATION, c.DEFAULT_DESTINATION), (c.UPLOAD_IMAGE_SIZE, ""),
                          (c.FILESYSTEM_OVERHEAD, "0"), (c.PREALLOCATION, "false"), (c.DEADLINE, ""),
                          (c.TLS_CIPHERS, ""), (c.TLS_MIN_VERSION, ""),
                          (c.LISTEN_ADDRESS, c.DEFAULT_LISTEN_ADDRESS), (c.LISTEN_PORT, str(c.DEFAULT_PORT)),
                          (c.TERMINATION_LOG, ic.DEFAULT_TERMINATION_LOG), (c.RESUME_TIMEOUT, "300"),
                          (c.CONTENT_TYPE, ic.CONTENT_KUBEVIRT), (c.METRICS_PORT, ""), (ic.OWNER_UID, "")):
        parser.add_argument("--" + name.lower().replace("_", "-"), dest=name, default=env.get(name) or default)
    parser.add_argument("--insecure-http", action="store_true",
                        help="serve plain HTTP without client certificates (tests and local use only)")
    args = parser.parse_args(argv)
    options = vars(args)
    preallocation = options[c.PREALLOCATION].strip().lower()
    if preallocation not in ("true", "false", ""):
        raise ImportFailed(Reason.InvalidArgument, f"{c.PREALLOCATION} must be true or false, not {preallocation!r}")
    if options[c.CONTENT_TYPE] not in (ic.CONTENT_KUBEVIRT, ic.CONTENT_ARCHIVE):
        raise ImportFailed(Reason.InvalidArgument, f"{c.CONTENT_TYPE} must be {ic.CONTENT_KUBEVIRT} or "
                           f"{ic.CONTENT_ARCHIVE}, not {options[c.CONTENT_TYPE]!r}")
    deadline = None
    if options[c.DEADLINE]:
        try:
            deadline = datetime.datetime.fromisoformat(options[c.DEADLINE].replace("Z", "+00:00"))
        except ValueError as error:
            raise ImportFailed(Reason.InvalidArgument, f"{c.DEADLINE} is not an RFC 3339 time: {error}") from None
    config = Config(
        destination=options[c.DESTINATION],
        image_size=parse_quantity(options[c.UPLOAD_IMAGE_SIZE]) if options[c.UPLOAD_IMAGE_SIZE] else None,
        filesystem_overhead=float(options[c.FILESYSTEM_OVERHEAD]),
        preallocation=preallocation == "true",
        deadline=deadline,
        client_name="" if args.insecure_http else options[c.CLIENT_NAME],
        resume_timeout=float(options[c.RESUME_TIMEOUT]),
        content_type=options[c.CONTENT_TYPE],
    )
    return config, args


async def serve(config: Config, *, host: str, port: int, ssl_context: ssl.SSLContext | None,
                progress_listeners: Sequence[Listener] = ()) -> UploadServer:
    """Serve until an upload succeeded or the deadline passed."""
    server = UploadServer(config, progress_listeners=progress_listeners)
    runner = web.AppRunner(server.app(), access_log=None, shutdown_timeout=30)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    await site.start()
    for sock in getattr(site._server, "sockets", None) or ():  # noqa: SLF001 - the only way to learn port 0's pick
        log.info("serving on %s://%s:%d", "https" if ssl_context else "http", *sock.getsockname()[:2])
    try:
        await server.done.wait()
    finally:
        await runner.cleanup()
    return server


# glibc's mallopt parameters, and values measured on a 4 GiB raw upload: with them the server spent 4.0-4.4 CPU-s
# instead of 5.6 and took 4.0 s instead of 4.9. asyncio's TLS reads allocate a buffer of up to 256 KiB per record
# and aiohttp joins them into 1 MiB chunks; glibc's default gave those heap pages back to the kernel as soon as
# they were freed, so every chunk faulted in freshly zeroed pages again. Keeping up to 32 MiB of free heap (and
# allocating below 4 MiB from it) bounds what is kept.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_KEEP_FREE, _MMAP_FROM = 32 << 20, 4 << 20


def _keep_heap() -> None:
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc: its allocator has its own policy
        return
    mallopt(_M_MMAP_THRESHOLD, _MMAP_FROM)
    mallopt(_M_TRIM_THRESHOLD, _KEEP_FREE)


def main(argv: list[str] | None = None) -> int:
    _keep_heap()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    env = dict(os.environ)
    termination = Path(env.get(c.TERMINATION_LOG) or ic.DEFAULT_TERMINATION_LOG)
    try:
        config, args = config_from(env, argv)
        termination = Path(getattr(args, c.TERMINATION_LOG))
        options = vars(args)
        context = None if args.insecure_http else tls.server_context(
            cert=options[c.TLS_CERT_FILE], key=options[c.TLS_KEY_FILE], client_ca=options[c.CLIENT_CERT_FILE],
            min_version=options[c.TLS_MIN_VERSION], ciphers=options[c.TLS_CIPHERS])
        # The importer's progress metric, on a port of its own, when the pod asks for one (the controller's do).
        metric = serve_progress(options[ic.OWNER_UID], port=int(options[c.METRICS_PORT]),
                                addr=options[c.LISTEN_ADDRESS]) if options[c.METRICS_PORT] else None
        server = asyncio.run(serve(config, host=options[c.LISTEN_ADDRESS], port=int(options[c.LISTEN_PORT]),
                                   ssl_context=context, progress_listeners=[metric] if metric else []))
    except (ImportFailed, OSError, ssl.SSLError, ValueError) as error:
        log.error("%s", error)
        ic.write_termination(termination, str(error))
        return 1
    if server.completed is not None:
        ic.write_termination(termination, ic.success_message(preallocation_applied=server.completed.preallocation_applied,
                                               message=ic.UPLOAD_COMPLETE, scratch_key=False))
    else:
        ic.write_termination(termination, ic.deadline_message())
    return 0


run = without_teardown(main)


if __name__ == "__main__":
    run()
