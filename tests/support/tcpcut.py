"""A TCP relay that cuts connections after a number of bytes, one way: the fault is on the wire, as in life.

For servers that cannot be asked to drop a connection (S3, a registry: the server's bytes, ``upstream=False``)
and for clients whose uplink drops mid-upload (the client's bytes, ``upstream=True``).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable


class CuttingRelay:
    """Relays 127.0.0.1:``port`` to ``target_port``. The n-th connection is cut after ``cut_after[n]`` bytes in
    the direction chosen; connections past the list pass untouched. ``forwarded`` counts the bytes delivered on
    the connections with a cut; ``on_cut`` runs at each cut, before either side notices it."""

    def __init__(self, *, target_port: int, cut_after: list[int], upstream: bool = False,
                 on_cut: Callable[[], None] | None = None) -> None:
        self.target_port = target_port
        self.cut_after = list(cut_after)
        self.upstream = upstream
        self.forwarded = 0
        self._on_cut = on_cut
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._sockets += [client, server]
                limit = self.cut_after.pop(0) if self.cut_after else None
            up, down = (limit, None) if self.upstream else (None, limit)
            threading.Thread(target=self._pipe, args=(client, server, up), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, down), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, limit: int | None) -> None:
        sent = 0
        try:
            while data := src.recv(1 << 16):
                if limit is not None and sent + len(data) >= limit:
                    dst.sendall(data[: limit - sent])
                    self._count(limit - sent, limit)
                    if self._on_cut is not None:
                        self._on_cut()
                    break
                dst.sendall(data)
                sent += len(data)
                self._count(len(data), limit)
        except OSError:
            pass
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _count(self, n: int, limit: int | None) -> None:
        if limit is not None:
            with self._lock:
                self.forwarded += n
