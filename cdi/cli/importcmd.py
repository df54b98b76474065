"""`cdi import`: run the import pipeline on this machine, any source into a directory, file or block device."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from importer import contract as c
from importer.errors import ImportFailed, Reason
from importer.pipeline import ImportRequest, ImportResult, run_import
from importer.progress import Progress, Snapshot
from importer.quantity import parse_quantity
from importer.sources.base import SourceOptions
from importer.transfer import RetryPolicy

SOURCES = {"http": c.SOURCE_HTTP, "s3": c.SOURCE_S3, "registry": c.SOURCE_REGISTRY, "blank": c.SOURCE_NONE}
ACCESS_KEY_ENV = "CDI_ACCESS_KEY_ID"
SECRET_KEY_ENV = "CDI_SECRET_KEY"


def register(commands: Any, name: str) -> None:
    p = commands.add_parser(name, help="import a disk image into a directory (disk.img), a file or a block device",
                            description=__doc__)
    p.add_argument("--url", default="", help="http(s)://…, s3 endpoint URL, or docker://registry/repo:tag")
    p.add_argument("--dest", required=True, help="directory (Filesystem: DEST/disk.img), block device, or file")
    p.add_argument("--source", choices=sorted(SOURCES), help="default: registry for docker:// URLs, else http")
    p.add_argument("--size", help="target size (Kubernetes quantity, e.g. 10Gi); caps the usable space")
    p.add_argument("--checksum", help="ALG:HEX with ALG one of md5, sha1, sha256, sha512, of the bytes as served")
    p.add_argument("--cert-dir", help="directory of CA certificates to trust")
    p.add_argument("--insecure", action="store_true", help="skip TLS certificate verification")
    p.add_argument("--header", action="append", default=[], metavar="'Name: value'", help="extra request header")
    p.add_argument("--content-type", choices=[c.CONTENT_KUBEVIRT, c.CONTENT_ARCHIVE], default=c.CONTENT_KUBEVIRT)
    p.add_argument("--filesystem-overhead", type=float, default=0.0,
                   help="fraction of a directory target's space kept free for the filesystem (CDI: 0.06)")
    p.add_argument("--preallocation", action="store_true", help="allocate every block of the target")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--architecture", help="registry images: the platform to pick from an index (default: this machine's)")
    p.add_argument("--stall-timeout", type=float, default=600.0, help="seconds without data before giving up")
    p.add_argument("--allow-url", action="append", default=[], metavar="CIDR|HOST", help="always allow this host")
    p.add_argument("--deny-url", action="append", default=[], metavar="CIDR|HOST",
                   help="deny this host (link-local and metadata addresses are always denied)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    bar = None
    try:
        request = _request(args)
        progress = Progress()
        if not args.no_progress:
            bar = _Bar()
            progress.add_listener(bar)
        result = run_import(request, progress=progress)
    except ImportFailed as failure:
        if bar:
            bar.close()
        print(f"error: {failure.reason.name}: {failure.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: Interrupted: stopped by the user", file=sys.stderr)
        return 130
    if bar:
        bar.close()
    _report(result, as_json=args.json)
    return 0


def _request(args: argparse.Namespace) -> ImportRequest:
    source = args.source or ("registry" if args.url.startswith("docker://") else "http")
    if source != "blank" and not args.url:
        raise ImportFailed(Reason.InvalidArgument, "--url is required")
    headers = []
    for line in args.header:
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise ImportFailed(Reason.InvalidArgument, f"--header must be 'Name: value', not {line!r}")
        headers.append((name.strip(), value.strip()))
    options = SourceOptions(
        url=args.url, access_key=os.environ.get(ACCESS_KEY_ENV, ""), secret_key=os.environ.get(SECRET_KEY_ENV, ""),
        cert_dir=args.cert_dir, insecure=args.insecure, headers=tuple(headers), stall_timeout=args.stall_timeout,
        architecture=args.architecture,
        url_allow=tuple(args.allow_url), url_deny=tuple(args.deny_url))
    if not 0 <= args.filesystem_overhead < 1:
        raise ImportFailed(Reason.InvalidArgument, "--filesystem-overhead must be in [0, 1)")
    return ImportRequest(
        source=SOURCES[source], options=options, dest=args.dest,
        size=parse_quantity(args.size) if args.size else None, checksum=args.checksum,
        content_type=args.content_type, filesystem_overhead=args.filesystem_overhead,
        preallocation=args.preallocation, retry=RetryPolicy(stall_timeout=args.stall_timeout),
        # Hashing costs a core for a third of a second per GiB: only done for the JSON report, which has it.
        report_sha256=args.json)


def _report(result: ImportResult, *, as_json: bool) -> None:
    if as_json:
        fields = {k: v for k, v in vars(result).items()}
        print(json.dumps(fields, sort_keys=True))
        return
    print(f"imported {result.format} image ({result.virtual_size} bytes) into {result.target} "
          f"in {result.duration_s:.1f}s; {result.bytes_transferred} bytes transferred")


class _Bar:
    """A tqdm bar on stderr driven by progress snapshots; it shows percent, phase, rate and ETA."""

    def __init__(self) -> None:
        from tqdm import tqdm  # noqa: PLC0415 - a tenth of the start-up time, and --no-progress needs none

        self._bar = tqdm(total=100.0, unit="%", file=sys.stderr, dynamic_ncols=True,
                         bar_format="{percentage:5.1f}%|{bar}| {desc}")
        self._shown = 0.0

    def __call__(self, snap: Snapshot) -> None:
        rate = f"{snap.rate / (1 << 20):.1f} MiB/s"
        eta = f" ETA {snap.eta:.0f}s" if snap.eta is not None and snap.phase != "Complete" else ""
        self._bar.set_description_str(f"{snap.phase} {snap.done_bytes >> 20} MiB {rate}{eta}", refresh=False)
        self._bar.update(snap.percent - self._shown)
        self._shown = snap.percent

    def close(self) -> None:
        self._bar.close()
