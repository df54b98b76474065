"""Issue 3's figure: S3 and registry imports next to curl of the same object / blob (one run each way, ratios).

A 512 MiB raw disk (random data) is put in SeaweedFS and pushed to docker-registry as a containerDisk with an
uncompressed layer; `cdi import` of each into a raw file is timed against `curl -o` of the presigned S3 URL
and of the layer blob, each followed by sync.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from tests.support.registry import Registry
from tests.support.seaweed import ACCESS_KEY, SECRET_KEY, SeaweedS3

MiB = 1 << 20


def timed(cmd: list[str], *, env: dict[str, str] | None = None) -> float:
    os.sync()
    start = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    os.sync()
    return time.monotonic() - start


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench sources", description=__doc__)
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--workdir", type=Path, default=Path("/var/tmp"))
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="kubecdi-bench-src-", dir=args.workdir))
    rows = []
    s3 = reg = None
    try:
        disk = os.urandom(args.mib * MiB)
        out = work / "out.raw"
        cdi = [sys.executable, "-m", "cdi.cli.main", "import", "--no-progress", "--dest", str(out)]
        (work / "weed").mkdir()
        s3 = SeaweedS3(work / "weed")
        url = s3.put("bench", "disk.raw", disk)
        presigned = s3.client.generate_presigned_url("get_object", Params={"Bucket": "bench", "Key": "disk.raw"})
        theirs = timed(["curl", "-s", "-o", str(out), presigned])
        out.unlink()
        ours = timed([*cdi, "--source", "s3", "--url", url],
                     env={"CDI_ACCESS_KEY_ID": ACCESS_KEY, "CDI_SECRET_KEY": SECRET_KEY})
        rows.append({"case": f"S3 {args.mib} MiB raw", "ours_s": round(ours, 2), "curl_s": round(theirs, 2),
                     "curl/ours (throughput ratio)": round(theirs / ours, 2)})
        s3.close()
        s3 = None
        out.unlink()
        (work / "registry").mkdir()
        reg = Registry(work / "registry")
        reg.push_image("bench/disk", "v1", [({"disk/": None, "disk/disk.raw": disk}, "none")])
        manifest = requests.get(f"{reg.base}/v2/bench/disk/manifests/v1", timeout=30,
                                headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}).json()
        blob = f"{reg.base}/v2/bench/disk/blobs/{manifest['layers'][0]['digest']}"
        theirs = timed(["curl", "-s", "-o", str(out), blob])
        out.unlink()
        ours = timed([*cdi, "--insecure", "--url", reg.url("bench/disk", "v1")])
        rows.append({"case": f"registry {args.mib} MiB raw, plain layer", "ours_s": round(ours, 2),
                     "curl_s": round(theirs, 2), "curl/ours (throughput ratio)": round(theirs / ours, 2)})
    finally:
        if s3:
            s3.close()
        if reg:
            reg.close()
        shutil.rmtree(work, ignore_errors=True)
    for row in rows:
        print("| " + " | ".join(f"{k}: {v}" for k, v in row.items()) + " |")
    print(json.dumps(rows))
    return 0
