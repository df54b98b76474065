"""`python -m localkube --workdir DIR [--kubeconfig PATH] [--port N] [--image NAME=PROGRAM ...]`

Runs a local cluster (API server, storage provisioner, kubelet) until SIGINT or SIGTERM, then stops every pod
and removes every mount and loop device it made. Prints the API URL, then the kubeconfig path.
`--image cdi-importer=/venv/bin/cdi-importer` runs images whose repository ends in /cdi-importer as that
program (see localkube.kubelet.images); other images run the pod's command as given."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
from pathlib import Path

from .cluster import Cluster, ClusterUnavailable


def _image(text: str) -> tuple[str, list[str]]:
    name, sep, program = text.partition("=")
    if not sep or not name or not program:
        raise argparse.ArgumentTypeError(f"expected NAME=PROGRAM, got {text!r}")
    return name, shlex.split(program)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m localkube", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, required=True, help="volumes, pod files and the kubeconfig go here")
    parser.add_argument("--kubeconfig", type=Path, help="where to write the kubeconfig (default: WORKDIR/kubeconfig)")
    parser.add_argument("--port", type=int, default=0, help="API port on 127.0.0.1 (default: any free one)")
    parser.add_argument("--image", type=_image, action="append", default=[], metavar="NAME=PROGRAM",
                        help="run images whose repository is or ends in /NAME as PROGRAM (repeatable)")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    cluster = Cluster(args.workdir, port=args.port, images=dict(args.image), kubeconfig=args.kubeconfig)
    try:
        cluster.start()
    except ClusterUnavailable as exc:
        print(f"localkube: {exc}", file=sys.stderr)
        return 1
    try:
        print(cluster.url, flush=True)
        print(cluster.kubeconfig, flush=True)
        stop.wait()
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
