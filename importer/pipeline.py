"""One import: source → transfer (resume, retries) → checksum tap → decompression → header checks → target.

Raw and ISO images are written straight to the target, holes skipped. Everything else is converted by
qemu-img while it downloads: the stream is staged on the target's own filesystem (never a scratch volume)
and served to qemu-img over NBD as it arrives (see :mod:`importer.nbd`).
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from importer import nbd, qemu
from importer.checksum import Expected, Hashes
from importer.contract import CONTENT_ARCHIVE, SOURCE_NONE
from importer.decompress import decompressed
from importer.errors import ImportFailed, Reason
from importer.formats import STRAIGHT, HeaderCollector, ImageInfo, StreamChecker, inspect
from importer.prefetch import ahead
from importer.progress import RESIZING, Progress
from importer.sink import RawWriter
from importer.sources import open_source
from importer.sources.base import Source, SourceOptions
from importer.targets import Target, open_target
from importer.transfer import RetryPolicy, Transfer
from importer.window import Window
from importer.writeback import Writeback


@dataclass(frozen=True)
class ImportRequest:
    source: str  # CDI's IMPORTER_SOURCE value: http, s3, registry, none (blank)
    options: SourceOptions
    dest: str
    size: int | None = None  # IMPORTER_IMAGE_SIZE / --size
    checksum: str | None = None
    content_type: str = "kubevirt"
    filesystem_overhead: float = 0.0
    preallocation: bool = False
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    report_sha256: bool = True  # the pod reports no digest, so it hashes only to verify a checksum


@dataclass(frozen=True)
class ImportResult:
    format: str
    virtual_size: int
    bytes_transferred: int
    bytes_refetched: int
    resumes: int
    source_sha256: str | None
    target: str
    duration_s: float
    preallocation_applied: bool
    labels: dict[str, str]
    compression: list[str]


def run_import(request: ImportRequest, *, progress: Progress | None = None, source: Source | None = None) -> ImportResult:
    """Run one import. ``source`` overrides the one named by the request (the upload server passes its body)."""
    progress = progress or Progress()
    started = time.monotonic()
    expected = Expected(request.checksum) if request.checksum else None
    target = open_target(request.dest, size=request.size, overhead=request.filesystem_overhead)
    if request.source == SOURCE_NONE:
        if request.content_type == CONTENT_ARCHIVE:
            raise ImportFailed(Reason.InvalidArgument, "Cannot create empty disk with content type archive")
        return _blank(request, target, started=started, progress=progress)
    if request.content_type == CONTENT_ARCHIVE and target.kind != "filesystem":
        raise ImportFailed(Reason.InvalidArgument, "archive content needs a directory (a Filesystem volume)")
    source = source or open_source(request.source, request.options)
    hashes = Hashes(expected, report_sha256=request.report_sha256)
    try:
        transfer = Transfer(source, retry=request.retry)
        layers, plain = decompressed(ahead(_tapped(transfer, hashes, progress), name="receive"))
        if request.content_type == CONTENT_ARCHIVE:
            return _archive(plain, target, transfer=transfer, hashes=hashes, layers=layers, started=started,
                            progress=progress)
        collector = HeaderCollector()
        head_chunks: list[bytes] = []
        whole = True  # the stream ended before the header was complete: it is all in head_chunks
        for chunk in plain:
            head_chunks.append(chunk)
            if collector.feed(chunk):
                whole = False
                break
        info = inspect(bytes(collector.head), complete_stream=whole)
        if info.virtual_size is None and not layers:
            info = ImageInfo(info.format, transfer.size)
        target.check_fits(info.virtual_size)
        stream = itertools.chain(head_chunks, plain)
        try:
            if info.format in STRAIGHT:
                size = _write_raw(stream, target, preallocate=request.preallocation)
            else:
                known = transfer.size if not layers else None
                size = _convert(stream, target, transfer=transfer, info=info, known_size=known,
                                preallocate=request.preallocation, progress=progress)
            hashes.verify()
            progress.set_phase(RESIZING)
            target.finish(image_size=size, preallocate=request.preallocation)
        except BaseException:
            target.discard()
            raise
    finally:
        hashes.close()
        source.close()
    progress.complete()
    return ImportResult(
        format=info.format, virtual_size=size, bytes_transferred=transfer.received,
        bytes_refetched=transfer.refetched, resumes=transfer.resumes, source_sha256=hashes.sha256(),
        target=str(target.final_path), duration_s=round(time.monotonic() - started, 3),
        preallocation_applied=request.preallocation, labels=dict(transfer.probe.labels), compression=layers)


def _archive(plain: Iterator[bytes], target: Target, *, transfer: Transfer, hashes: Hashes, layers: list[str],
             started: float, progress: Progress) -> ImportResult:
    from importer.archive import Extraction  # noqa: PLC0415 - tarfile, for archives only: 3 ms of every start

    extraction = Extraction(target.final_path.parent, capacity=target.capacity)
    try:
        extraction.extract(plain)
        hashes.verify()
        extraction.publish()
    except BaseException:
        extraction.discard()
        raise
    progress.complete()
    return ImportResult(
        format="archive", virtual_size=extraction.content_bytes, bytes_transferred=transfer.received,
        bytes_refetched=transfer.refetched, resumes=transfer.resumes, source_sha256=hashes.sha256(),
        target=str(target.final_path.parent), duration_s=round(time.monotonic() - started, 3),
        preallocation_applied=False, labels=dict(transfer.probe.labels), compression=layers)


def _tapped(transfer: Transfer, hashes: Hashes, progress: Progress) -> Iterator[bytes]:
    for chunk in transfer:
        hashes.update(chunk)
        progress.transferred(transfer.offset, transfer.size)
        yield chunk
    progress.transferred(transfer.offset, transfer.size or transfer.offset)


def _write_raw(stream: Iterator[bytes], target: Target, *, preallocate: bool) -> int:
    writer = RawWriter(target.work_path, block_device=target.is_block, limit=target.capacity, preallocate=preallocate)
    try:
        with Writeback(target.work_path):
            return writer.write_all(stream)
    finally:
        writer.close()


def _convert(stream: Iterator[bytes], target: Target, *, transfer: Transfer, info: ImageInfo,
             known_size: int | None, preallocate: bool, progress: Progress) -> int:
    """Convert the image with qemu-img while it arrives, served over NBD from staging or a memory window."""
    workdir = Path(tempfile.mkdtemp(prefix=".cdi-staging-", dir=target.staging_dir()))
    buffer: nbd.Staging | Window
    if known_size is not None and transfer.probe.resumable:
        buffer = Window(size=known_size, read_range=transfer.read_range)
    else:
        # Compressed or non-resumable: stage on the target's filesystem (Block: the importer's temp directory).
        buffer = nbd.Staging(workdir / "image")
    checker = StreamChecker(info.format)
    cancel = threading.Event()

    def download() -> None:
        try:
            for chunk in stream:
                if cancel.is_set():
                    raise ImportFailed(Reason.ConversionFailed, "cancelled")
                checker.feed(chunk)
                buffer.append(chunk)
            checker.finish()
            buffer.finish()
        except BaseException as error:  # handed to the main thread through the buffer
            buffer.finish(error)

    downloader = threading.Thread(target=download, name="download", daemon=True)
    downloader.start()
    server = None
    try:
        size = known_size if known_size is not None else buffer.wait_done()
        _raise_download_error(buffer)
        # qcow2 never reads past what its tables reference; other formats find footers at the end of the file.
        slack = nbd.TRUNCATION_SLACK if info.format == "qcow2" else 0
        server = nbd.NbdServer(buffer, size=size, socket_path=workdir / "nbd.sock", slack=slack)
        direct = target.direct_io()
        process = qemu.convert(source=server.url, source_format=info.format, dest=target.work_path,
                               block=target.is_block, direct=direct, preallocate=preallocate,
                               on_progress=progress.converting)
        try:
            with contextlib.nullcontext() if direct else Writeback(target.work_path):
                qemu.wait(process)
        except ImportFailed as failure:
            _raise_download_error(buffer)
            if server.read_past_end:
                raise ImportFailed(Reason.ConversionFailed, f"the {info.format} image is truncated: its tables point "
                                   f"past its end ({size} bytes)") from failure
            raise
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        buffer.drain()
        buffer.wait_done()
        _raise_download_error(buffer)
        if buffer.written != size:
            raise ImportFailed(Reason.TransferFailed, f"received {buffer.written} bytes, expected {size}")
        return int(info.virtual_size or 0)
    finally:
        cancel.set()
        if server is not None:
            server.close()
        buffer.finish(buffer.error)
        downloader.join()
        buffer.close()
        workdir.rmdir()


def _raise_download_error(buffer: nbd.Staging | Window) -> None:
    error = nbd.download_failed(buffer.error)
    if error is not None:
        raise error


def _blank(request: ImportRequest, target: Target, *, started: float, progress: Progress) -> ImportResult:
    """CDI's blank image: a sparse file of the usable size; on a block device nothing, or zeros if preallocated."""
    if target.is_block:
        size = target.capacity or 0
        if request.preallocation:
            _write_raw(iter([bytes(1 << 20)] * (size >> 20)), target, preallocate=True)
    else:
        size = target.size or 0
        if not size:
            raise ImportFailed(Reason.InvalidArgument, "a blank image needs a size (--size)")
        writer = RawWriter(target.work_path, block_device=False, limit=None, preallocate=request.preallocation)
        try:
            if request.preallocation:
                writer.write_all(iter([bytes(1 << 20)] * (size >> 20)))
        finally:
            writer.close()
    target.finish(image_size=size, preallocate=request.preallocation)
    progress.complete()
    return ImportResult(format="raw", virtual_size=size, bytes_transferred=0, bytes_refetched=0, resumes=0,
                        source_sha256=None, target=str(target.final_path),
                        duration_s=round(time.monotonic() - started, 3),
                        preallocation_applied=request.preallocation, labels={}, compression=[])
