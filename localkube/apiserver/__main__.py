"""`python -m localkube.apiserver [--port N] [--kubeconfig PATH]`: serve until interrupted.

Prints the server URL on the first line of stdout, so a parent process can wait for it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal

from ..kubeconfig import write_kubeconfig
from .server import APIServer


async def serve(port: int, kubeconfig: str | None) -> None:
    server = APIServer(port=port)
    await server.start()
    if kubeconfig:
        write_kubeconfig(kubeconfig, server_url=server.url)
    print(server.url, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m localkube.apiserver", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free one)")
    parser.add_argument("--kubeconfig", help="write a kubeconfig for the server here")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.port, args.kubeconfig))


if __name__ == "__main__":
    main()
