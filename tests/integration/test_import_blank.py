"""Blank images (`--source blank`, IMPORTER_SOURCE=none): CDI's empty disk, on a directory and on a block device."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import cdi_import, failed, pod_env, run_importer_pod, succeeded


def test_blank_directory_is_a_sparse_disk_of_the_usable_size(tmp_path: Path) -> None:
    out = succeeded(cdi_import("--source", "blank", "--dest", str(tmp_path), "--size", "64Mi",
                               "--filesystem-overhead", "0.06"))
    disk = tmp_path / "disk.img"
    assert disk.stat().st_size == 60 << 20 and out["virtual_size"] == 60 << 20
    assert disk.stat().st_blocks == 0
    assert oct(disk.stat().st_mode & 0o777) == "0o660"


def test_blank_preallocated_allocates_every_block(tmp_path: Path) -> None:
    succeeded(cdi_import("--source", "blank", "--dest", str(tmp_path), "--size", "16Mi", "--preallocation"))
    disk = tmp_path / "disk.img"
    assert disk.stat().st_blocks * 512 >= disk.stat().st_size == 16 << 20


def test_blank_archive_is_refused(tmp_path: Path) -> None:
    failed(cdi_import("--source", "blank", "--dest", str(tmp_path), "--size", "16Mi", "--content-type", "archive"),
           "InvalidArgument")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("preallocation", [False, True])
def test_blank_block_device(preallocation: bool, loop_device: Callable[..., Path], tmp_path: Path) -> None:
    device = loop_device(8 << 20, old_data=True)
    before = device.read_bytes()
    args = ["--preallocation"] if preallocation else []
    succeeded(cdi_import("--source", "blank", "--dest", str(device), *args))
    after = device.read_bytes()
    # CDI writes nothing to a blank block volume unless asked to preallocate, then zeros.
    assert after == (bytes(len(before)) if preallocation else before)


def test_blank_pod_termination_message(tmp_path: Path) -> None:
    env = pod_env(tmp_path, IMPORTER_SOURCE="none", IMPORTER_ENDPOINT="", IMPORTER_IMAGE_SIZE="32Mi",
                  PREALLOCATION="false")
    result = run_importer_pod(env)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "termination-log").read_text() == '{"preallocationApplied":false,"message":"Import Complete"}'
    assert json.loads((tmp_path / "termination-log").read_text())["message"] == "Import Complete"
    assert (tmp_path / "data" / "disk.img").stat().st_size == 30 << 20  # floor_MiB(32Mi / 1.055), the overhead pod_env sets
