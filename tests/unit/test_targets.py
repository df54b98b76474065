"""Whether a target is written with O_DIRECT: asked of the target's own filesystem, not assumed."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from importer.targets import open_target


def test_a_directory_on_a_filesystem_with_o_direct_is_written_directly(tmp_path: Path) -> None:
    target = open_target(str(tmp_path), size=None, overhead=0.0)
    assert target.direct_io()
    # The probe leaves the work file, empty and hidden: never something that looks like a finished disk.img.
    assert [p.name for p in tmp_path.iterdir()] == [target.work_path.name]
    assert target.work_path.stat().st_size == 0
    target.discard()
    assert list(tmp_path.iterdir()) == []


def test_a_filesystem_without_o_direct_is_written_through_the_page_cache(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake: no filesystem lacking O_DIRECT can be mounted here, so open(2) answers as one does (EINVAL)."""
    real_open = os.open

    def no_direct(path: str, flags: int, mode: int = 0o777) -> int:
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), path)
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", no_direct)
    assert not open_target(str(tmp_path), size=None, overhead=0.0).direct_io()
