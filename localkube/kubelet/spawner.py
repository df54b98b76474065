"""Starts container processes: one sandbox interpreter (sandbox.py) is kept started ahead of time.

A fresh `python -I -S sandbox.py` takes 8 ms before it runs a line of the sandbox, and a container starts only
after it: from the pod's binding to its Running status took 12 ms here, most of it that start. So a sandbox
is started before it is needed and waits for its container's spec on stdin; each container takes the waiting
one and another is started behind it. Pods starting faster than one per start take one started for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .sandbox import SPEC_TAKEN, encode_spec

# Run as a file, with the standard library only: as `-m localkube.kubelet.sandbox` it imported this package
# (the kubelet, aiohttp) first, 0.2 s of CPU before every container start.
_SANDBOX = str(Path(__file__).with_name("sandbox.py"))


@dataclass
class Sandbox:
    process: asyncio.subprocess.Process
    error_read: int  # where the sandbox says why it could not exec; closes without a word once it did


async def _start() -> Sandbox:
    read_end, write_end = os.pipe()
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-S", _SANDBOX, str(write_end), str(os.getpid()), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, pass_fds=(write_end,),
            start_new_session=True)
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return Sandbox(process, read_end)


async def _read_to_end(fd: int) -> bytes:
    """All the sandbox says on its error pipe: it ends when the sandbox execs its container or exits.

    Read by the event loop as the pipe becomes readable, not by a thread blocked on it: a thread's answer waited
    for the interpreter lock while the loop was busy (up to its 5 ms switch interval), on every container start.
    """
    loop = asyncio.get_running_loop()
    said = bytearray()
    ended: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        try:
            while part := os.read(fd, 4096):
                said.extend(part)
        except BlockingIOError:
            return
        if not ended.done():
            ended.set_result(None)

    os.set_blocking(fd, False)
    loop.add_reader(fd, readable)
    try:
        await ended
    finally:
        loop.remove_reader(fd)
    return bytes(said)


async def _discard(sandbox: Sandbox) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(sandbox.process.pid, signal.SIGKILL)
    await sandbox.process.wait()
    os.close(sandbox.error_read)


class Spawner:
    """Keeps one sandbox waiting; :meth:`spawn` hands it a container's spec."""

    def __init__(self) -> None:
        self._waiting: asyncio.Task[Sandbox] | None = None
        self._closed = False

    async def spawn(self, spec: dict[str, Any], *, log_file: Path) -> tuple[asyncio.subprocess.Process, str]:
        """The container's process, and its error before exec ("" once it runs): output appended to log_file."""
        sandbox = await self._take()
        process = sandbox.process
        try:
            assert process.stdin is not None
            process.stdin.write(encode_spec({**spec, "log": str(log_file)}).encode() + b"\n")
            with contextlib.suppress(ConnectionError):  # it died while waiting: the error pipe says so below
                await process.stdin.drain()
            process.stdin.close()
            said = await _read_to_end(sandbox.error_read)
        finally:
            os.close(sandbox.error_read)
        # Whether the process has exited by now says nothing: a short container may be done already.
        if not said.startswith(SPEC_TAKEN):  # it died before it read its spec (killed while waiting)
            return process, f"the sandbox process exited with {await process.wait()} before running the container"
        error = said[len(SPEC_TAKEN):].decode(errors="replace")
        if error:
            await process.wait()
        return process, error

    async def _take(self) -> Sandbox:
        waiting, self._waiting = self._waiting, None
        sandbox = None
        if waiting is not None:
            with contextlib.suppress(Exception):
                sandbox = await waiting
        if sandbox is None or sandbox.process.returncode is not None:
            if sandbox is not None:
                await _discard(sandbox)
            sandbox = await _start()
        if self._waiting is None and not self._closed:
            self._waiting = asyncio.create_task(_start())
        return sandbox

    async def close(self) -> None:
        """Ends the sandbox left waiting: no container will take it."""
        self._closed = True
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            with contextlib.suppress(Exception):
                await _discard(await waiting)
