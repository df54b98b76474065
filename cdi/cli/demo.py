"""The README demo: a real qcow2 served on 127.0.0.1, imported by `cdi import` with a progress bar.

It builds a small ext4 filesystem with a few files in it, wraps it in a qcow2 image, serves it over HTTP
with Range support, imports it into a directory (Filesystem semantics: disk.img) and proves the result is
the same disk by comparing it with `qemu-img convert` of the same qcow2.
"""

from __future__ import annotations

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
    return 0 if ours == theirs else 1


if __name__ == "__main__":
    sys.exit(main())
