"""The benchmark's source images, made once per run from the issue's recipe (tooling.md's, not shipped files)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from bench.measure import sh

MiB = 1 << 20
GiB = 1 << 30
_CHUNK = 4 * MiB

DECOMPRESSORS = {"zst": "zstd -dc", "gz": "gzip -dc", "xz": "xz -dc"}
_COMPRESSORS = {"zst": "zstd -q -3 -T0 -c", "gz": "pigz -6 -c", "xz": "xz -3 -T2 -c"}


def make_raw(path: Path, *, virtual: int) -> Path:
    """A sparse raw disk of ``virtual`` bytes, half of them random data: 4 MiB chunks alternating with 4 MiB holes.

    Random data cannot be compressed or deduplicated away, so every import moves the full half.
    """
    with path.open("wb") as f:
        f.truncate(virtual)
        for offset in range(0, virtual, 2 * _CHUNK):
            f.seek(offset)
            f.write(os.urandom(min(_CHUNK, virtual - offset)))
    return path


def size_name(size: int) -> str:
    """``4g`` or ``256m``: image sizes in file and case names."""
    return f"{size >> 30}g" if size % GiB == 0 else f"{size >> 20}m"


def make_qcow2(folder: Path, *, virtual: int, scratch: Path) -> Path:
    """A qcow2 of :func:`make_raw`'s disk."""
    raw = make_raw(scratch / f"src-{size_name(virtual)}.raw", virtual=virtual)
    try:
        out = folder / f"disk{size_name(virtual)}.qcow2"
        subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(out)], check=True)
    finally:
        raw.unlink(missing_ok=True)
    return out


def _system_files() -> Iterator[bytes]:
    """Contents of the machine's libraries and data files: what a real disk holds, compressible as one is."""
    for top in ("/usr/lib", "/usr/share"):
        for folder, _, names in os.walk(top):
            for name in sorted(names):
                path = os.path.join(folder, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    try:
                        with open(path, "rb") as f:
                            yield f.read(_CHUNK)
                    except OSError:
                        continue


def make_compressed(folder: Path, *, size: int, scratch: Path) -> dict[str, Path]:
    """raw.zst, raw.gz and raw.xz of one ``size``-byte raw disk: 3 MiB of file contents, then 1 MiB of zeros."""
    raw = scratch / "mixed.raw"
    try:
        with raw.open("wb") as f:
            contents = _system_files()
            while f.tell() < size:
                data = b""
                while len(data) < 3 * MiB:
                    data += next(contents, b"\xa5" * MiB)  # should /usr ever run out: still data
                f.write(data[: 3 * MiB] + bytes(MiB))
            f.truncate(size)
        out = {}
        for kind, compress in _COMPRESSORS.items():
            out[kind] = folder / f"mixed.raw.{kind}"
            sh(f"{compress} {raw} > {out[kind]}")
    finally:
        raw.unlink(missing_ok=True)
    return out


def virtual_size(image: Path) -> int:
    info = subprocess.run(["qemu-img", "info", "--output=json", str(image)], capture_output=True, check=True)
    return int(json.loads(info.stdout)["virtual-size"])
