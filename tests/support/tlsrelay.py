"""A TLS front for a plain-HTTP test server: what an S3 endpoint behind a TLS proxy looks like to a client.

SeaweedFS can serve HTTPS only with flags the shared S3 helper does not pass; a relay that terminates TLS
with a test CA's certificate and passes the bytes on unchanged gives the same thing without a second server
(a SigV4 signature covers the Host header, which goes through as the client sent it).
"""

from __future__ import annotations

import select
import socket
import ssl
import threading

_IDLE_SECONDS = 60.0


class TlsRelay:
    def __init__(self, *, target_port: int, context: ssl.SSLContext) -> None:
        self.target_port = target_port
        self._context = context
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, raw: socket.socket) -> None:
        try:
            client = self._context.wrap_socket(raw, server_side=True)
        except OSError:
            raw.close()  # the client refused our certificate: that is the test
            return
        # One thread per connection, never two on one TLS socket: OpenSSL objects are not shareable across threads.
        with client, socket.create_connection(("127.0.0.1", self.target_port)) as upstream:
            try:
                while True:
                    ready = [client] if client.pending() else \
                        select.select([client, upstream], [], [], _IDLE_SECONDS)[0]
                    if not ready:
                        return
                    for source in ready:
                        data = source.recv(1 << 16)
                        if not data:
                            return
                        (upstream if source is client else client).sendall(data)
            except OSError:
                return
