"""Issue 5's benchmark, in one `cdi local`:

- many blank DataVolumes (default 200, 64 MiB) created at once, time until all are Succeeded, next to as many
  bare pods running the very importer pod the controller renders, each on a claim of its own, in the same
  localkube (goal: ratio ≤ 1.3); the controller's peak RSS;
- a 1 GiB-virtual qcow2 (512 MiB random data) imported as a DataVolume, next to `cdi import` of the same URL
  into a directory on the same kind of volume, ext4 on a loop device as localkube provisions it (goal: ratio
  ≤ 1.1): what the DataVolume adds is the controller, provisioning and the pod, not a slower disk.
"""

from __future__ import annotations

import argparse
import copy
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import images
from bench.images import GiB, MiB
from bench.loopdev import ext4_volume
from bench.measure import _hwm
from bench.report import Figure, markdown
from cdi.api import names
from cdi.cli.localsystem import IMPORTER_IMAGE, LocalCDI
from cdi.controller.config import cdi_config_status
from cdi.controller.importer_pod import importer_pod
from cdi.controller.kube import Kube, path
from tests.support.certs import make_ca
from tests.support.nginx import NginxServer

Obj = dict[str, Any]
NS = "default"


def _wait_all(check: Callable[[], int], total: int, *, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (done := check()) < total:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {done} of {total} {what} after {timeout:.0f} s")
        time.sleep(0.2)


def _succeeded(kube: Kube, plural: str, prefix: str, *, group: str = "") -> int:
    objects = kube.list(path(group=group, version=names.VERSION if group else "v1", plural=plural, namespace=NS))
    return sum(1 for o in objects if o["metadata"]["name"].startswith(prefix)
               and (o.get("status") or {}).get("phase") == names.SUCCEEDED)


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
    _wait_all(lambda: _succeeded(kube, "pods", "bare-"), count, what="bare pods", timeout=1800)
    return time.monotonic() - start


def datavolumes(kube: Kube, *, count: int, size: str) -> float:
    start = time.monotonic()
    for i in range(count):
        kube.create(path(group=names.GROUP, version=names.VERSION, plural=names.DATAVOLUMES, namespace=NS), {
            "apiVersion": names.API_VERSION, "kind": names.DATAVOLUME, "metadata": {"name": f"blank-{i}"},
            "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": size}}}}})
    _wait_all(lambda: _succeeded(kube, names.DATAVOLUMES, "blank-", group=names.GROUP), count,
              what="DataVolumes", timeout=1800)
    return time.monotonic() - start


def _clear(kube: Kube, prefix: str) -> None:
    """Removes what a phase made, so the next starts on an equal footing (the claims' volumes go with them)."""
    for plural, group in ((names.DATAVOLUMES, names.GROUP), ("pods", ""), ("persistentvolumeclaims", "")):
        base = dict(group=group, version=names.VERSION if group else "v1", plural=plural, namespace=NS)
        for obj in kube.list(path(**base)):
            if obj["metadata"]["name"].startswith(prefix):
                kube.delete(path(**base, name=obj["metadata"]["name"]))
    _wait_all(lambda: 0 if any(p["metadata"]["name"].startswith(prefix) for p in kube.list(
        path(plural="persistentvolumeclaims", namespace=NS))) else 1, 1, what="claims gone", timeout=600)


def qcow2_import(kube: Kube, url: str, *, work: Path, runs: int) -> tuple[float, float]:
    """Median seconds of the DataVolume import and of `cdi import`, taking turns."""
    dv_times, cli_times = [], []
    dv = {"apiVersion": names.API_VERSION, "kind": names.DATAVOLUME, "metadata": {"name": "qcow2-0"},
          "spec": {"source": {"http": {"url": url}}, "storage": {"resources": {"requests": {"storage": "1200Mi"}}}}}
    for run in range(runs):
        body = copy.deepcopy(dv)
        body["metadata"]["name"] = f"qcow2-{run}"
        start = time.monotonic()
        kube.create(path(group=names.GROUP, version=names.VERSION, plural=names.DATAVOLUMES, namespace=NS), body)
        _wait_all(lambda: _succeeded(kube, names.DATAVOLUMES, f"qcow2-{run}", group=names.GROUP), 1,
                  what="qcow2 DataVolume", timeout=900)
        dv_times.append(time.monotonic() - start)
        _clear(kube, f"qcow2-{run}")
        with ext4_volume(work / f"cli-{run}.img", size=1200 * MiB) as dest:
            start = time.monotonic()
            subprocess.run([sys.executable, "-m", "cdi.cli.main", "import", "--no-progress", "--url", url,
                            "--dest", str(dest), "--filesystem-overhead", "0.06"], check=True,
                           stdout=subprocess.DEVNULL)
            subprocess.run(["sync"], check=True)
            cli_times.append(time.monotonic() - start)
    return statistics.median(dv_times), statistics.median(cli_times)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench datavolumes", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=200, help="DataVolumes and bare pods (default 200)")
    parser.add_argument("--size", default="64Mi", help="size of each blank volume (default 64Mi)")
    parser.add_argument("--runs", type=int, default=3, help="runs of the qcow2 import each way (median)")
    parser.add_argument("--workdir", type=Path, default=Path("/var/tmp"))
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="kubecdi-bench-dv-", dir=args.workdir))
    figures: list[Figure] = []
    try:
        ca = make_ca(work / "tls")
        nginx = NginxServer(work / "nginx", cert=ca.server_cert, key=ca.server_key)
        try:
            qcow2 = images.make_qcow2(nginx.root, virtual=1 * GiB, scratch=work)
            with LocalCDI(work / "local") as local:
                kube = Kube.from_kubeconfig(local.kubeconfig)
                case = f"{args.count} blank {args.size} volumes at once"
                print(f"{case}: bare pods ...", file=sys.stderr)
                bare = bare_pods(kube, count=args.count, size=args.size)
                _clear(kube, "bare-")
                print(f"{case}: DataVolumes ...", file=sys.stderr)
                dvs = datavolumes(kube, count=args.count, size=args.size)
                assert local.controller is not None
                rss = _hwm(local.controller.pid) / (1 << 20)
                _clear(kube, "blank-")
                figures += [Figure(case, "bare importer pods", round(bare, 1), "s"),
                            Figure(case, "DataVolumes", round(dvs, 1), "s"),
                            Figure(case, "DataVolumes / bare pods", round(dvs / bare, 2), goal="≤ 1.3"),
                            Figure(case, "controller peak RSS", round(rss, 1), "MiB")]
                print("1 GiB qcow2: DataVolume and cdi import ...", file=sys.stderr)
                dv_s, cli_s = qcow2_import(kube, nginx.url(qcow2.name), work=work, runs=args.runs)
                case = f"{qcow2.name} over HTTP (median of {args.runs})"
                figures += [Figure(case, "as a DataVolume", round(dv_s, 2), "s"),
                            Figure(case, "cdi import", round(cli_s, 2), "s"),
                            Figure(case, "DataVolume / cdi import", round(dv_s / cli_s, 2), goal="≤ 1.1")]
        finally:
            nginx.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(markdown(figures))
    return 0
