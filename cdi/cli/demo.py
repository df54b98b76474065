"""The README demo: a real qcow2 served on 127.0.0.1, imported twice and checked against `qemu-img convert`.

It builds a small ext4 filesystem with a few files in it, wraps it in a qcow2 image and serves it over HTTP
with Range support. First `cdi import` writes it into a directory (Filesystem semantics: disk.img) with a
progress bar. Then the main job: `cdi local` runs kubecdi on this machine, a DataVolume is created with
kubectl, `kubectl get dv -w` shows it go to Succeeded, and a pod reads the disk back from the PVC.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from cdi.cli.main import main as cdi_main
from importer.checksum import file_sha256
from cdi.cli.rangeserver import RangeServer

IMAGE_MIB = 256


def build_image(workdir: Path) -> Path:
    content = workdir / "content"
    content.mkdir()
    (content / "hello.txt").write_text("Hello from a kubecdi import!\n")
    (content / "random.bin").write_bytes(os.urandom(48 << 20))
    raw = workdir / "fs.raw"
    subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "demo", "-d", str(content), str(raw), f"{IMAGE_MIB}M"], check=True)
    qcow2 = workdir / "serve" / "demo.qcow2"
    qcow2.parent.mkdir()
    subprocess.run(["qemu-img", "convert", "-c", "-f", "raw", "-O", "qcow2", str(raw), str(qcow2)], check=True)
    return qcow2


def main() -> int:
    # Kept after the demo, so the imported image can be looked at; only the intermediate files go.
    workdir = Path(tempfile.mkdtemp(prefix="cdi-demo-"))
    try:
        return _demo(workdir)
    finally:
        for leftover in ("content", "fs.raw", "expected.raw"):
            path = workdir / leftover
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)


def _demo(workdir: Path) -> int:
    print("building a 256 MiB ext4 disk with 48 MiB of files, as a compressed qcow2 ...")
    qcow2 = build_image(workdir)
    print(f"  {qcow2.name}: {qcow2.stat().st_size >> 20} MiB on disk")
    dest = workdir / "pvc"
    dest.mkdir()
    with RangeServer(qcow2.parent) as server:
        url = server.url(qcow2.name)
        print(f"serving it at {url}\n$ cdi import --url {url} --dest {dest} --size 300Mi --filesystem-overhead 0.06")
        code = cdi_main(["import", "--url", url, "--dest", str(dest), "--size", "300Mi",
                         "--filesystem-overhead", "0.06"])
    if code != 0:
        return code
    disk = dest / "disk.img"
    expected = workdir / "expected.raw"
    subprocess.run(["qemu-img", "convert", "-f", "qcow2", "-O", "raw", str(qcow2), str(expected)], check=True)
    size = expected.stat().st_size
    ours, theirs = file_sha256(disk, length=size), file_sha256(expected, length=size)
    allocated = disk.stat().st_blocks * 512
    print(f"\nraw image: {disk} ({disk.stat().st_size} bytes, {allocated >> 20} MiB allocated, mode "
          f"{oct(disk.stat().st_mode & 0o777)})")
    print(f"sha256 of its first {size} bytes: {ours}")
    print(f"sha256 of qemu-img convert of the same qcow2: {theirs}")
    print("the same disk." if ours == theirs else "MISMATCH!")
    if ours != theirs:
        return 1
    return _datavolume_demo(workdir, qcow2, expected=theirs, length=size)


DATAVOLUME = {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", "metadata": {"name": "demo"},
              "spec": {"source": {"http": {"url": ""}}, "storage": {"resources": {"requests": {"storage": "300Mi"}}}}}


def _datavolume_demo(workdir: Path, qcow2: Path, *, expected: str, length: int) -> int:
    from cdi.cli.localsystem import LocalCDI  # noqa: PLC0415 - only this part needs the local cluster
    from localkube.storage import host_capabilities_missing  # noqa: PLC0415

    missing = host_capabilities_missing()
    if missing:
        print(f"\nskipping the DataVolume part: {missing}")
        return 0
    kubectl = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or "kubectl"
    print("\n$ cdi local   # localkube + CRDs + controller + upload proxy, on this machine")
    with RangeServer(qcow2.parent) as server, LocalCDI(workdir / "local") as local:
        env = {**os.environ, "KUBECONFIG": str(local.kubeconfig), "HOME": str(workdir)}
        print(f"  export KUBECONFIG={local.kubeconfig}")
        dv = {**DATAVOLUME, "spec": {**DATAVOLUME["spec"], "source": {"http": {"url": server.url(qcow2.name)}}}}
        print(f"$ kubectl apply -f - <<< '{json.dumps(dv)}'")
        subprocess.run([kubectl, "apply", "-f", "-"], input=json.dumps(dv), text=True, env=env, check=True)
        print("$ kubectl get dv demo -w")
        watch = subprocess.Popen([kubectl, "get", "dv", "demo", "-w"], stdout=subprocess.PIPE, text=True, env=env)
        assert watch.stdout is not None
        for line in watch.stdout:
            print("  " + line.rstrip())
            if " Succeeded " in line or " Failed " in line:
                break
        watch.terminate()
        watch.wait()
        reader = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "demo-reader"}, "spec": {
            "restartPolicy": "Never", "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "demo"}}],
            "containers": [{"name": "sha", "image": "busybox", "volumeMounts": [{"name": "d", "mountPath": "/pvc"}],
                            "command": ["sh", "-c", f"head -c {length} /pvc/disk.img | sha256sum"]}]}}
        print("$ kubectl run a pod that hashes /pvc/disk.img on the PVC ...")
        subprocess.run([kubectl, "apply", "-f", "-"], input=json.dumps(reader), text=True, env=env, check=True,
                       capture_output=True)
        subprocess.run([kubectl, "wait", "pod/demo-reader", "--for=jsonpath={.status.phase}=Succeeded",
                        "--timeout=120s"], env=env, check=True, capture_output=True)
        on_pvc = subprocess.run([kubectl, "logs", "demo-reader"], env=env, capture_output=True, text=True,
                                check=True).stdout.split()[0]
    print(f"sha256 of disk.img on the PVC: {on_pvc}")
    print("the same disk, imported by a DataVolume." if on_pvc == expected else "MISMATCH!")
    print("cdi local stopped: its pods, mounts and loop devices are gone.")
    return 0 if on_pvc == expected else 1


if __name__ == "__main__":
    sys.exit(main())
