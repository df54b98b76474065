"""`cdi image-upload`: upload a local disk image (or a tar archive) into a new or existing DataVolume or PVC,
as `virtctl image-upload` does (cdi-facts §4.6), plus a checksum the upload server verifies and resuming a
cut upload where it stopped.

    cdi image-upload dv|pvc NAME --image-path=FILE | --archive-path=FILE [--size SIZE] [options]

Exit codes: 0 uploaded and processed; 1 failed (one line on stderr: ``error: ...``); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from cdi.api import names


def register(commands: Any, name: str) -> None:
    p = commands.add_parser(name, help="upload a local disk image into a DataVolume or PVC (as virtctl)",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=["dv", "pvc"], help="upload into a DataVolume or a bare PVC")
    p.add_argument("name", help="DataVolume/PVC name")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--image-path", type=Path, help="local disk image (qcow2, raw, vmdk, ..., optionally compressed)")
    source.add_argument("--archive-path", type=Path, help="local tar archive, unpacked into a Filesystem volume")
    p.add_argument("--size", "--pvc-size", dest="size", help="size of the DataVolume/PVC to create, e.g. 10Gi")
    p.add_argument("--storage-class", help="StorageClass of the DataVolume/PVC to create (must exist)")
    p.add_argument("--access-mode", choices=names.ACCESS_MODES, help="access mode of the volume to create")
    p.add_argument("--volume-mode", choices=["block", "filesystem"], help="default: the StorageProfile's")
    p.add_argument("--block-volume", action="store_true", help=argparse.SUPPRESS)  # deprecated: --volume-mode=block
    p.add_argument("--no-create", action="store_true", help="upload into an existing DataVolume/PVC")
    p.add_argument("--uploadproxy-url", help="default: CDIConfig spec.uploadProxyURLOverride, else status.uploadProxyURL")
    p.add_argument("--insecure", action="store_true", help="do not verify the upload proxy's certificate")
    p.add_argument("--uploadproxy-ca", help="ours: CA bundle to verify the upload proxy's certificate with")
    p.add_argument("--wait-secs", type=float, default=300, help="how long to wait for the upload pod (default 300)")
    p.add_argument("--retry", type=int, default=5, help="upload attempts on transient errors (default 5)")
    p.add_argument("--force-bind", action="store_true",
                   help="bind the volume at once, even with a WaitForFirstConsumer StorageClass")
    p.add_argument("--checksum", metavar="ALG:HEX", help="ours: the upload server checks the bytes sent against it")
    p.add_argument("-n", "--namespace", help="default: the kubeconfig context's namespace")
    p.add_argument("--kubeconfig", help="default: KUBECONFIG or ~/.kube/config (in a pod: its service account)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from cdi.cli.imageupload_flow import Failed, Upload  # noqa: PLC0415 - other commands need not load Kubernetes

    try:
        Upload(args).run()
    except Failed as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
