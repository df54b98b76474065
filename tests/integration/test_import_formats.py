"""`cdi import` of every format and compression from nginx, into the three kinds of target.

The truth is ``qemu-img convert -O raw`` of the same image: the target must hold its bytes for the virtual
size and zeros after, whatever the target held before.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from importer.checksum import file_sha256
from tests.fixtures.images import COMPRESSED_BASES, COMPRESSIONS, FORMAT_OF, ImageSet
from tests.support.cli import cdi_import, succeeded
from tests.support.nginx import NginxServer

MiB = 1 << 20
MATRIX = [*FORMAT_OF, *(f"{base}.{kind}" for base in COMPRESSED_BASES for kind in COMPRESSIONS)]


def allocated(path: Path) -> int:
    return path.stat().st_blocks * 512


def nonzero_bytes(path: Path, *, block: int = 4096) -> int:
    with path.open("rb") as f:
        return sum(block for chunk in iter(lambda: f.read(block), b"") if chunk.count(0) != len(chunk))


@pytest.mark.parametrize("name", MATRIX)
def test_into_a_directory(name: str, images: ImageSet, nginx_server: NginxServer, tmp_path: Path) -> None:
    served = images.path(name)
    out = succeeded(cdi_import("--url", nginx_server.url(nginx_server.publish(served)), "--dest", str(tmp_path),
                               "--size", "64Mi", "--filesystem-overhead", "0.06"))
    disk = tmp_path / "disk.img"
    images.assert_imported(disk, name)
    assert [p.name for p in tmp_path.iterdir()] == ["disk.img"]
    assert disk.stat().st_size == 60 * MiB  # CDI's usable size: floor_MiB(ceil(64 MiB / 1.06))
    assert disk.stat().st_mode & 0o777 == 0o660
    # Sparse: zero blocks of the image are holes in disk.img, not written zeros.
    assert allocated(disk) <= 1.05 * nonzero_bytes(images.expected_raw(name)) + MiB
    assert out["format"] == images.format_of(name)
    assert out["virtual_size"] == images.expected_raw(name).stat().st_size
    assert out["bytes_transferred"] == served.stat().st_size
    assert out["bytes_refetched"] == 0 and out["resumes"] == 0
    assert out["source_sha256"] == file_sha256(served, length=served.stat().st_size)
    assert Path(out["target"]).resolve() in (disk.resolve(), tmp_path.resolve())
    assert isinstance(out["duration_s"], float) and out["duration_s"] >= 0


@pytest.mark.parametrize("name", ["disk.raw", "disk.raw.xz", "disk.qcow2", "disk.qcow2.bz2", "disk-stream.vmdk",
                                  "disk.vhdx", "disk.iso"])
def test_into_a_raw_file_of_the_virtual_size(name: str, images: ImageSet, nginx_server: NginxServer,
                                             tmp_path: Path) -> None:
    dest = tmp_path / "out.raw"
    out = succeeded(cdi_import("--url", nginx_server.url(nginx_server.publish(images.path(name))), "--dest", str(dest)))
    images.assert_imported(dest, name, exact_size=True)
    assert out["target"] == str(dest)


def test_into_a_raw_file_of_a_given_size(images: ImageSet, nginx_server: NginxServer, tmp_path: Path) -> None:
    dest = tmp_path / "out.raw"
    succeeded(cdi_import("--url", nginx_server.url(nginx_server.publish(images.path("disk.qcow2"))),
                         "--dest", str(dest), "--size", "16Mi"))
    assert dest.stat().st_size == 16 * MiB
    images.assert_imported(dest, "disk.qcow2")


@pytest.mark.parametrize("name", ["disk.raw", "disk.raw.gz", "disk.raw.zst", "disk.qcow2", "disk-c.qcow2",
                                  "disk.qcow2.xz", "disk.vmdk", "disk.vdi", "disk.vhd", "disk.iso"])
def test_into_a_block_device_holding_old_data(name: str, images: ImageSet, nginx_server: NginxServer,
                                              loop_device: Callable[..., Path]) -> None:
    device = loop_device(16 * MiB, old_data=True)
    out = succeeded(cdi_import("--url", nginx_server.url(nginx_server.publish(images.path(name))),
                               "--dest", str(device)))
    images.assert_imported(device, name)  # zeros of the image are zeros on the device, not the old data
    with device.open("rb") as f:
        assert f.seek(0, os.SEEK_END) == 16 * MiB  # never resized
    assert out["target"] == str(device)
    assert out["format"] == images.format_of(name)


@pytest.mark.parametrize("name", ["disk.raw", "disk.qcow2"])
def test_preallocation_allocates_the_whole_disk_img(name: str, images: ImageSet, nginx_server: NginxServer,
                                                    tmp_path: Path) -> None:
    succeeded(cdi_import("--url", nginx_server.url(nginx_server.publish(images.path(name))), "--dest", str(tmp_path),
                         "--size", "16Mi", "--preallocation"))
    disk = tmp_path / "disk.img"
    images.assert_imported(disk, name)
    assert allocated(disk) >= disk.stat().st_size  # as CDI's resize with --preallocation=falloc leaves it
