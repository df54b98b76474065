"""Small test images made with the real qemu-img, and the truth to compare imports with."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import random
import subprocess
from pathlib import Path

import zstandard

COMPRESSORS = {
    "gz": gzip.compress,
    "xz": lzma.compress,
    "zst": lambda data: zstandard.ZstdCompressor().compress(data),
    "bz2": bz2.compress,
}


def make_raw(path: Path, *, mib: int = 6, seed: int = 1) -> Path:
    """Random data and holes, and a tail that is not a whole MiB."""
    rng = random.Random(seed)
    with path.open("wb") as f:
        for i in range(mib * 4):
            block = rng.randbytes(256 << 10) if i % 3 != 1 else bytes(256 << 10)
            f.write(block)
        f.write(rng.randbytes(12345))
    return path


def convert(src: Path, dest: Path, fmt: str, *options: str) -> Path:
    subprocess.run(["qemu-img", "convert", "-q", "-f", "raw", "-O", fmt, *options, str(src), str(dest)], check=True)
    return dest


def compress(src: Path, kind: str) -> Path:
    out = src.with_name(f"{src.name}.{kind}")
    out.write_bytes(COMPRESSORS[kind](src.read_bytes()))
    return out


def expected_raw(image: Path, workdir: Path) -> Path:
    """`qemu-img convert -O raw` of the image: what every import of it must produce."""
    out = workdir / f"{image.name}.expected.raw"
    if not out.exists():
        subprocess.run(["qemu-img", "convert", "-q", "-O", "raw", str(image), str(out)], check=True)
    return out


def all_zero_after(path: Path, offset: int) -> bool:
    """True if nothing but zeros follows ``offset``; holes are skipped with SEEK_DATA (disk.img can be huge)."""
    with path.open("rb") as f:
        fd = f.fileno()
        end = os.fstat(fd).st_size if path.is_file() else f.seek(0, os.SEEK_END)
        position = offset
        while position < end:
            try:
                position = os.lseek(fd, position, os.SEEK_DATA) if path.is_file() else position
            except OSError:  # ENXIO: no data after position
                return True
            f.seek(position)
            block = f.read(1 << 20)
            if not block:
                return True
            if block.count(0) != len(block):
                return False
            position += len(block)
    return True
