"""An APIServer on its own event loop in a background thread, for synchronous code and tests."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from typing import Any, TypeVar

from .server import APIServer
from .store import Store

T = TypeVar("T")


class ServerThread:
    def __init__(self, **server_options: Any) -> None:
        self._options = server_options
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.server: APIServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None, "the server thread is not started"
        return self.server.url

    @property
    def store(self) -> Store:
        assert self.server is not None, "the server thread is not started"
        return self.server.store

    def call(self, awaitable: Awaitable[T], timeout: float = 30) -> T:
        """Runs a coroutine on the server's loop, where the store may be touched safely."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(awaitable, self._loop).result(timeout)  # type: ignore[arg-type]

    def start(self) -> ServerThread:
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            try:
                self.server = APIServer(**self._options)
                loop.run_until_complete(self.server.start())
            except BaseException as exc:  # handed to the starting thread, which raises it
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self.server.stop())
                loop.close()

        self._thread = threading.Thread(target=run, name="localkube-apiserver", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
