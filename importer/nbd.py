"""A read-only NBD export of an image that is still arriving.

qemu-img needs random access to a qcow2/vmdk/... image; the network gives a stream. Instead of a scratch
volume we append the stream to a staging file on the target's own filesystem and serve that file to
qemu-img over NBD (a Unix socket), holding back every read until the bytes it asks for have arrived. So
download and conversion overlap, and qemu-img never sees a byte that was not received.

Only what qemu's NBD client needs is spoken: fixed newstyle handshake, NBD_OPT_GO/INFO/EXPORT_NAME,
NBD_CMD_READ and NBD_CMD_DISC, simple replies.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from importer.errors import ImportFailed, Reason

NBDMAGIC = 0x4E42444D41474943
IHAVEOPT = 0x49484156454F5054
REPLY_MAGIC = 0x3E889045565A9
REQUEST_MAGIC = 0x25609513
SIMPLE_REPLY_MAGIC = 0x67446698
FLAG_FIXED_NEWSTYLE = 1
FLAG_NO_ZEROES = 2
OPT_EXPORT_NAME, OPT_ABORT, OPT_INFO, OPT_GO = 1, 2, 6, 7
REP_ACK, REP_INFO, REP_ERR_UNSUP = 1, 3, (1 << 31) + 1
INFO_EXPORT = 0
TFLAG_HAS_FLAGS, TFLAG_READ_ONLY = 1, 2
CMD_READ, CMD_DISC = 0, 2
MAX_READ = 32 << 20
SECTOR = 512
TRUNCATION_SLACK = 1 << 30


Sender = Callable[[socket.socket], None]


class Export(Protocol):
    """Bytes an NBD client may read; ``fetch`` returns how to send a range, or None if it cannot be had."""

    def fetch(self, offset: int, length: int) -> Sender | None: ...


class Arrival:
    """The state of a stream arriving from the download thread, shared with the threads that read it."""

    def __init__(self) -> None:
        self.written = 0
        self.done = False
        self.error: BaseException | None = None
        self._cond = threading.Condition()

    def finish(self, error: BaseException | None = None) -> None:
        with self._cond:
            self.done = True
            self.error = error
            self._cond.notify_all()

    def wait_done(self) -> int:
        with self._cond:
            while not self.done:
                self._cond.wait()
            return self.written


class Staging(Arrival):
    """An append-only file whose readers wait for the bytes they want."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)

    def append(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        with self._cond:
            self.written += len(chunk)
            self._cond.notify_all()

    def wait_for(self, end: int) -> bool:
        """Block until ``end`` bytes are there; False if they never will be."""
        with self._cond:
            while self.written < end and not self.done:
                self._cond.wait()
            return self.written >= end

    def fetch(self, offset: int, length: int) -> Sender | None:
        """Wait for the range; the sender copies it from the page cache straight into the socket."""
        if not self.wait_for(offset + length):
            return None

        def send(conn: socket.socket) -> None:
            sent = 0
            while sent < length:
                sent += os.sendfile(conn.fileno(), self.fd, offset + sent, length - sent)

        return send

    def drain(self) -> None:
        """Nothing to release: a staging file never holds the download back."""

    def close(self) -> None:
        os.close(self.fd)
        self.path.unlink(missing_ok=True)


class NbdServer:
    """Serves one export of a known size on a Unix socket, one thread per connection."""

    def __init__(self, export: Export, *, size: int, socket_path: Path, slack: int = 0) -> None:
        """``size`` is the image's; the export is sector-aligned like a local file, with zeros in the padding
        (qemu's NBD client hangs on an unaligned export). ``slack`` advertises more than that, so a read past
        the end, which a local file would quietly answer with zeros, reaches us and fails: a truncated image."""
        self.export = export
        self.size = size
        self.padded = -(-size // SECTOR) * SECTOR
        self.advertised = self.padded + slack
        self.read_past_end = False
        self.socket_path = socket_path
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(socket_path))
        self._listener.listen(4)
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="nbd-accept", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"nbd+unix:///?socket={self.socket_path}"

    def close(self) -> None:
        self._closed = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        self.socket_path.unlink(missing_ok=True)

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="nbd-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        # Room for a whole 2 MiB reply: qemu-img takes it in one read instead of a wake-up per 200 KiB.
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        with conn:
            try:
                if self._handshake(conn):
                    self._transmission(conn)
            except (OSError, ConnectionError, struct.error):
                return

    def _handshake(self, conn: socket.socket) -> bool:
        conn.sendall(struct.pack(">QQH", NBDMAGIC, IHAVEOPT, FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES))
        (client_flags,) = struct.unpack(">I", _recv(conn, 4))
        export_info = struct.pack(">QH", self.advertised, TFLAG_HAS_FLAGS | TFLAG_READ_ONLY)
        while True:
            magic, option, length = struct.unpack(">QII", _recv(conn, 16))
            if magic != IHAVEOPT:
                return False
            _recv(conn, length)
            if option == OPT_EXPORT_NAME:
                conn.sendall(export_info + (b"" if client_flags & FLAG_NO_ZEROES else bytes(124)))
                return True
            if option in (OPT_GO, OPT_INFO):
                body = struct.pack(">H", INFO_EXPORT) + export_info
                conn.sendall(struct.pack(">QIII", REPLY_MAGIC, option, REP_INFO, len(body)) + body)
                conn.sendall(struct.pack(">QIII", REPLY_MAGIC, option, REP_ACK, 0))
                if option == OPT_GO:
                    return True
                continue
            if option == OPT_ABORT:
                conn.sendall(struct.pack(">QIII", REPLY_MAGIC, option, REP_ACK, 0))
                return False
            conn.sendall(struct.pack(">QIII", REPLY_MAGIC, option, REP_ERR_UNSUP, 0))

    def _fetch(self, offset: int, length: int) -> Sender | None:
        end = offset + length
        if length > MAX_READ or end > self.padded:
            self.read_past_end = self.read_past_end or end > self.padded
            return None
        if end <= self.size:
            return self.export.fetch(offset, length)
        inside = max(0, self.size - offset)
        head = self.export.fetch(offset, inside) if inside else (lambda conn: None)
        return _padded_sender(head, length - inside)

    def _transmission(self, conn: socket.socket) -> None:
        while True:
            magic, _flags, kind, handle, offset, length = struct.unpack(">IHHQQI", _recv(conn, 28))
            if magic != REQUEST_MAGIC or kind == CMD_DISC:
                return
            if kind != CMD_READ:
                conn.sendall(struct.pack(">IIQ", SIMPLE_REPLY_MAGIC, errno.EINVAL, handle))
                continue
            sender = self._fetch(offset, length)
            if sender is None:
                conn.sendall(struct.pack(">IIQ", SIMPLE_REPLY_MAGIC, errno.EIO, handle))
                continue
            conn.sendall(struct.pack(">IIQ", SIMPLE_REPLY_MAGIC, 0, handle))
            sender(conn)


def _padded_sender(sender: Sender | None, zeros: int) -> Sender | None:
    if sender is None or not zeros:
        return sender

    def send(conn: socket.socket) -> None:
        sender(conn)
        conn.sendall(bytes(zeros))

    return send


def _recv(conn: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        part = conn.recv(n - len(data))
        if not part:
            raise ConnectionError("NBD client went away")
        data += part
    return bytes(data)


def download_failed(error: BaseException | None) -> ImportFailed | None:
    """The download's failure, if it failed, for reporting instead of qemu-img's 'I/O error'."""
    if isinstance(error, ImportFailed):
        return error
    if error is not None:
        return ImportFailed(Reason.TransferFailed, str(error))
    return None
