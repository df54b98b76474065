"""`cdi local`: the whole system on one machine — localkube, our CRDs, the controller with its admission
webhook, the upload proxy — for trying kubecdi without a cluster (the system itself: cdi.cli.localsystem).

    cdi local [--workdir DIR] [--kubeconfig PATH] [--port N]    serves until Ctrl-C or `cdi local --down`
    cdi local --down [--workdir DIR]                            stops the one serving from DIR
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

DEFAULT_WORKDIR = Path.home() / ".kubecdi" / "local"
PIDFILE = "cdi-local.pid"


def register(commands: Any, name: str) -> None:
    p = commands.add_parser(name, help="run kubecdi on this machine (an embedded cluster) until interrupted",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                   help=f"volumes, pod files, logs and the pid file (default: {DEFAULT_WORKDIR})")
    p.add_argument("--kubeconfig", type=Path, help="where to write the kubeconfig (default: WORKDIR/kubeconfig)")
    p.add_argument("--port", type=int, default=0, help="API port on 127.0.0.1 (default: any free one)")
    p.add_argument("--down", action="store_true", help="stop the cdi local serving from WORKDIR")
    p.add_argument("--json", action="store_true", help="print the API URL and kubeconfig path as one JSON line")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    workdir: Path = args.workdir.resolve()
    pidfile = workdir / PIDFILE
    if args.down:
        return _down(pidfile)
    if _running(pidfile):
        print(f"error: cdi local already serves from {workdir} (pid {pidfile.read_text().strip()}); "
              "stop it with `cdi local --down`", file=sys.stderr)
        return 1
    # Only now: every other `cdi` command would otherwise pay for loading localkube and the controller's code.
    from cdi.cli.localsystem import LocalCDI, NotReady  # noqa: PLC0415
    from localkube.cluster import ClusterUnavailable  # noqa: PLC0415

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    local = LocalCDI(workdir, port=args.port, kubeconfig=args.kubeconfig or workdir / "kubeconfig")
    try:
        local.start()
    except (ClusterUnavailable, NotReady) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    try:
        pidfile.write_text(f"{os.getpid()}\n")
        print(json.dumps({"url": local.url, "kubeconfig": str(local.kubeconfig), "uploadProxyURL": local.upload.url})
              if args.json else
              f"kubecdi is running: API {local.url}\n  export KUBECONFIG={local.kubeconfig}\n"
              f"  controller log: {local.controller_log}\n"
              f"  upload proxy: {local.upload.url} (CA {local.upload.proxy_ca}; log {local.upload.log})\n"
              "Ctrl-C or `cdi local --down` stops it.", flush=True)
        stop.wait()
    finally:
        pidfile.unlink(missing_ok=True)
        local.stop()
    return 0


def _running(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None
    return pid


def _down(pidfile: Path, timeout: float = 150) -> int:
    pid = _running(pidfile)
    if pid is None:
        print(f"cdi local is not running from {pidfile.parent}")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _running(pidfile) == pid and time.monotonic() < deadline:
        time.sleep(0.2)
    if _running(pidfile) == pid:
        print(f"error: cdi local (pid {pid}) did not stop within {timeout:.0f} s", file=sys.stderr)
        return 1
    print("cdi local stopped; its pods, mounts and loop devices are gone")
    return 0
