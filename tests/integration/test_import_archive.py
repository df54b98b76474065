"""Archive content (`--content-type archive`): a tar, compressed or not, unpacked into the directory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.cli import cdi_import, failed, succeeded
from tests.support.httpfault import FaultServer


@pytest.mark.parametrize("archive_format", ["tar", "gztar", "xztar"])
def test_archive_unpacked_into_the_volume(archive_format: str, fault_server: FaultServer, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.txt").write_text("a")
    (tree / "sub" / "b.txt").write_text("b")
    (tree / "link").symlink_to("a.txt")
    archive = Path(shutil.make_archive(str(tmp_path / "content"), archive_format, root_dir=tree))
    dest = tmp_path / "pvc"
    dest.mkdir()
    (dest / "a.txt").write_text("an older file of the same name")
    out = succeeded(cdi_import("--url", fault_server.url(fault_server.publish(archive)), "--dest", str(dest),
                               "--content-type", "archive"))
    assert out["format"] == "archive"
    assert (dest / "a.txt").read_text() == "a" and (dest / "sub" / "b.txt").read_text() == "b"
    assert (dest / "link").is_symlink() and (dest / "link").read_text() == "a"
    assert sorted(p.name for p in dest.iterdir()) == ["a.txt", "link", "sub"]


def test_archive_with_a_bad_checksum_leaves_the_volume_as_it_was(fault_server: FaultServer, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "new.txt").write_text("new")
    archive = Path(shutil.make_archive(str(tmp_path / "content"), "gztar", root_dir=tree))
    dest = tmp_path / "pvc"
    dest.mkdir()
    failed(cdi_import("--url", fault_server.url(fault_server.publish(archive)), "--dest", str(dest),
                      "--content-type", "archive", "--checksum", "sha256:" + "0" * 64), "ChecksumMismatch")
    assert list(dest.iterdir()) == []
