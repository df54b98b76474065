"""Issue 5's benchmark, in one `cdi local`:

- many blank DataVolumes (default 200, 64 MiB) created at once, time until all are Succeeded, next to as many
  bare pods running the very importer pod the controller renders, each on a claim of its own, in the same
  localkube (goal: ratio ≤ 1.3); the controller's peak RSS;
- a 1 GiB-virtual qcow2 (512 MiB random data) imported as a DataVolume, next to `cdi import` of the same URL
  into a directory on the same kind of volume, ext4 on a loop device as localkube provisions it (goal: ratio
  ≤ 1.1): what the DataVolume adds is the controller, provisioning and the pod, not a slower disk.

Both sides of each ratio take turns run by run (each ratio is the median of the turns' ratios), each starts after a
sync, and none starts before the volumes of the one before are released: a phase must not pay for tearing down the
last one's. The volumes, localkube's and the CLI's alike, are backed by files on ``--volumes-on``, a tmpfs by
default: the importer ends with an fsync, in the pod as in the CLI, and on this machine's disk that fsync swung both
sides between 1.1 and 3.1 s, the import after a switch of side (DataVolume after CLI or CLI after DataVolume) taking
about twice as long as one after the same side, so the ratio told the order of the runs. On a tmpfs neither side's
data reaches a disk, both do the same work, and what remains of the spread is other work on the CPUs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from bench import images
from bench.images import GiB
from bench.loopdev import ext4_volume
from bench.measure import Turns, add_work_options, exit_on_sigterm, in_turns, peak_rss_of, work_dir
from bench.report import Figure, median_figures, publish, ratio_figures
from cdi.api import names
from cdi.api.spec import quantity_bytes, requested_size
from cdi.cli.localsystem import IMPORTER_IMAGE, LocalCDI
from cdi.controller.config import cdi_config_status, filesystem_overhead
from cdi.controller.importer_pod import importer_pod
from cdi.controller.kube import Kube, path
from tests.support.certs import make_ca
from tests.support.nginx import NginxServer

Obj = dict[str, Any]
NS = "default"
BARE, DATAVOLUMES, DATAVOLUME, CLI = "bare importer pods", "DataVolumes", "DataVolume", "cdi import"  # the sides
_DV_PATH = path(group=names.GROUP, version=names.VERSION, plural=names.DATAVOLUMES, namespace=NS)


def _wait_all(check: Callable[[], int], total: int, *, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (done := check()) < total:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {done} of {total} {what} after {timeout:.0f} s")
        time.sleep(0.2)


def _wait_succeeded(kube: Kube, url_path: str, prefix: str, total: int, *, what: str, timeout: float) -> None:
    """Until ``total`` objects named ``prefix``* are Succeeded: one list, then a watch from it.

    Not a list every 0.2 s: the API server runs in this process, and serving and parsing 200 pods five times a
    second cost about as much CPU as the kubelet did, more for pods (large objects) than for DataVolumes.
    """
    deadline = time.monotonic() + timeout
    succeeded: set[str] = set()

    def seen(obj: Obj) -> None:
        name = obj["metadata"]["name"]
        if name.startswith(prefix) and (obj.get("status") or {}).get("phase") == names.SUCCEEDED:
            succeeded.add(name)

    while len(succeeded) < total:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(succeeded)} of {total} {what} after {timeout:.0f} s")
        listed = requests.get(kube.host + url_path, timeout=30).json()  # cdi local: no credentials
        for obj in listed["items"]:
            seen(obj)
        params = {"watch": "true", "resourceVersion": listed["metadata"]["resourceVersion"],
                  "allowWatchBookmarks": "true", "timeoutSeconds": str(max(1, round(deadline - time.monotonic())))}
        with requests.get(kube.host + url_path, params=params, stream=True, timeout=(10, 60)) as response:
            for line in response.iter_lines():
                event = json.loads(line) if line else {}
                if event.get("type") in ("ADDED", "MODIFIED"):
                    seen(event["object"])
                if len(succeeded) >= total:
                    break


def _claim(name: str, size: str) -> Obj:
    """What the controller renders for a blank DataVolume (source annotations included), without an owner."""
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "annotations": {names.ANN_SOURCE: "none", names.ANN_CONTENT_TYPE: "kubevirt",
                                                       names.ANN_POD_RESTARTS: "0"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem",
                     "resources": {"requests": {"storage": size}}}}


def bare_pods(kube: Kube, *, count: int, size: str) -> float:
    """Claims and importer pods made directly, as fast as the API takes them; seconds until all succeed."""
    config = kube.get(path(group=names.GROUP, version=names.VERSION, plural=names.CDICONFIGS,
                           name=names.CDICONFIG_NAME)) or {}
    status = config.get("status") or cdi_config_status(config, storage_classes=[])
    start = time.monotonic()
    for i in range(count):
        pvc = kube.create(path(plural="persistentvolumeclaims", namespace=NS), _claim(f"bare-{i}", size))
        assert pvc is not None
        pod = importer_pod(pvc, image=IMPORTER_IMAGE, cdi_config_status=status, pull_policy="IfNotPresent",
                           insecure_registries=[])
        pod["metadata"] = {"name": f"bare-{i}", "namespace": NS}  # no labels, no owner: the controller ignores it
        kube.create(path(plural="pods", namespace=NS), pod)
    _wait_succeeded(kube, path(plural="pods", namespace=NS), "bare-", count, what="bare pods", timeout=1800)
    return time.monotonic() - start


def datavolumes(kube: Kube, *, count: int, size: str) -> float:
    start = time.monotonic()
    for i in range(count):
        kube.create(_DV_PATH, {
            "apiVersion": names.API_VERSION, "kind": names.DATAVOLUME, "metadata": {"name": f"blank-{i}"},
            "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": size}}}}})
    _wait_succeeded(kube, _DV_PATH, "blank-", count, what="DataVolumes", timeout=1800)
    return time.monotonic() - start


def _clear(kube: Kube, prefix: str, *, volumes: Path) -> None:
    """Removes what a phase made and waits until its volumes are unmounted, detached and deleted, which the
    provisioner does after the claims are gone: otherwise the next phase pays for this one's teardown."""
    for plural, group in ((names.DATAVOLUMES, names.GROUP), ("pods", ""), ("persistentvolumeclaims", "")):
        base = dict(group=group, version=names.VERSION if group else "v1", plural=plural, namespace=NS)
        for obj in kube.list(path(**base)):
            if obj["metadata"]["name"].startswith(prefix):
                kube.delete(path(**base, name=obj["metadata"]["name"]))
    _wait_all(lambda: 0 if any(p["metadata"]["name"].startswith(prefix) for p in kube.list(
        path(plural="persistentvolumeclaims", namespace=NS))) else 1, 1, what="claims gone", timeout=600)
    _wait_all(lambda: 0 if any(volumes.glob("*.img")) else 1, 1, what="volumes released", timeout=600)


def blank_volumes(kube: Kube, *, count: int, size: str, runs: int, volumes: Path) -> Turns:
    """Seconds of ``count`` bare importer pods (side BARE) and of as many DataVolumes (side DATAVOLUMES)."""
    def bare(_: int) -> float:
        seconds = bare_pods(kube, count=count, size=size)
        _clear(kube, "bare-", volumes=volumes)
        return seconds

    def as_datavolumes(_: int) -> float:
        seconds = datavolumes(kube, count=count, size=size)
        _clear(kube, "blank-", volumes=volumes)
        return seconds

    return in_turns(runs, {BARE: bare, DATAVOLUMES: as_datavolumes})


def qcow2_import(kube: Kube, url: str, *, disks: Path, runs: int, volumes: Path) -> Turns:
    """Seconds of the DataVolume import (side DATAVOLUME) and of `cdi import` (side CLI), taking turns.

    The same work on both sides: `cdi import` writes into a fresh ext4 on a loop device of exactly the size
    localkube gives the DataVolume's claim, with the importer pod's size and filesystem overhead, and each ends
    when the importer exits, after fsyncing the image and its directory (the same code in the pod and in the
    CLI). No `sync` after either: it would flush whatever else the machine has dirty.
    """
    config_status = (kube.get(path(group=names.GROUP, version=names.VERSION, plural=names.CDICONFIGS,
                                   name=names.CDICONFIG_NAME)) or {}).get("status") or {}

    def as_datavolume(name: str) -> float:
        start = time.monotonic()
        kube.create(_DV_PATH, {"apiVersion": names.API_VERSION, "kind": names.DATAVOLUME, "metadata": {"name": name},
                               "spec": {"source": {"http": {"url": url}},
                                        "storage": {"resources": {"requests": {"storage": "1200Mi"}}}}})
        _wait_succeeded(kube, _DV_PATH, name, 1, what="qcow2 DataVolume", timeout=900)
        return time.monotonic() - start

    # Untimed, first: the first import pays for reading qemu-img and the importer's code from disk (it took twice
    # as long, whichever side went first), and its claim is the one the CLI's volume copies.
    as_datavolume("qcow2-warmup")
    claim = kube.get(path(plural="persistentvolumeclaims", namespace=NS, name="qcow2-warmup")) or {}
    _clear(kube, "qcow2-warmup", volumes=volumes)

    def timed_datavolume(run: int) -> float:
        seconds = as_datavolume(f"qcow2-{run}")
        _clear(kube, f"qcow2-{run}", volumes=volumes)
        return seconds

    def with_cli(run: int) -> float:
        spec = claim.get("spec") or {}
        size = str(quantity_bytes(str(requested_size(spec))))
        overhead = filesystem_overhead(config_status, spec.get("storageClassName"))
        with ext4_volume(disks / f"cli-{run}.img", size=int(size)) as dest:
            start = time.monotonic()
            subprocess.run([sys.executable, "-m", "cdi.cli.main", "import", "--no-progress", "--url", url,
                            "--dest", str(dest), "--size", size, "--filesystem-overhead", overhead],
                           check=True, stdout=subprocess.DEVNULL)
            return time.monotonic() - start

    return in_turns(runs, {DATAVOLUME: timed_datavolume, CLI: with_cli})


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench datavolumes", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=200, help="DataVolumes and bare pods (default 200)")
    parser.add_argument("--size", default="64Mi", help="size of each blank volume (default 64Mi)")
    parser.add_argument("--runs", type=int, default=5,
                        help="runs of the blank volumes each way (median; one bench's 200 DataVolumes took from 22.8 "
                             "to 30.1 s, and a median of 3 moved the ratio between 1.08 and 1.30)")
    parser.add_argument("--import-runs", type=int, default=15,
                        help="runs of the qcow2 import each way (median; a run takes a second, and the machine's "
                             "load moved single runs by half a second: with 9, the ratio of the medians moved by 5 %% from one bench to the next)")
    add_work_options(parser, holds="certificates, nginx, the qcow2")
    parser.add_argument("--volumes-on", type=Path, default=Path("/dev/shm"),
                        help="where the volumes' backing files go, localkube's and the CLI's (default /dev/shm)")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    figures: list[Figure] = []
    with work_dir(args.workdir, prefix="kubecdi-bench-dv-", keep=args.keep) as work, \
            work_dir(args.volumes_on, prefix="kubecdi-bench-dv-", keep=args.keep) as disks:
        ca = make_ca(work / "tls")
        nginx = NginxServer(work / "nginx", cert=ca.server_cert, key=ca.server_key)
        try:
            qcow2 = images.make_qcow2(nginx.root, virtual=1 * GiB, scratch=work)
            with LocalCDI(disks / "local") as local:
                kube = Kube.from_kubeconfig(local.kubeconfig)
                assert local.controller is not None and local.cluster.provisioner is not None
                volumes = local.cluster.provisioner.workdir
                case = f"{args.count} blank {args.size} volumes at once (median of {args.runs})"
                print(f"{case}: bare pods and DataVolumes ...", file=sys.stderr)
                blank = blank_volumes(kube, count=args.count, size=args.size, runs=args.runs, volumes=volumes)
                rss = peak_rss_of(local.controller.pid) / (1 << 20)
                figures += [*median_figures(case, blank, digits=1),
                            *ratio_figures(case, blank, DATAVOLUMES, BARE, goal="≤ 1.3"),
                            Figure(case, "controller peak RSS", round(rss, 1), "MiB")]
                print("1 GiB qcow2: DataVolume and cdi import ...", file=sys.stderr)
                imports = qcow2_import(kube, nginx.url(qcow2.name), disks=disks, runs=args.import_runs,
                                       volumes=volumes)
                case = f"{qcow2.name} over HTTP (median of {args.import_runs})"
                figures += [*median_figures(case, imports),
                            *ratio_figures(case, imports, DATAVOLUME, CLI, goal="≤ 1.1")]
        finally:
            nginx.close()
    publish(figures, json_out=args.json_out)
    return 0
