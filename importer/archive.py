"""Archive content (CDI's contentType: archive): a tar stream unpacked into the volume, safely.

Every member is checked before anything is written: no absolute paths, no '..', no link that leads out of
the volume, no device nodes or fifos, and the total size must fit. The tree is unpacked into a hidden
directory and moved into place only when the whole archive was good and its checksum matched, so a
failed extraction never leaves a tree that looks complete.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

from importer.decompress import ChunkReader
from importer.errors import ImportFailed, Reason


def _safe_name(name: str) -> str:
    if name.startswith("/") or os.path.isabs(name):
        raise ImportFailed(Reason.UnsafeArchive, f"member {name!r} has an absolute path")
    normal = posixpath.normpath(name)
    if normal == ".." or normal.startswith("../") or "/../" in f"/{name}/":
        raise ImportFailed(Reason.UnsafeArchive, f"member {name!r} climbs out of the volume with '..'")
    return normal


def _check(member: tarfile.TarInfo, *, seen: set[str]) -> None:
    name = _safe_name(member.name)
    if member.isdev() or member.isfifo():
        raise ImportFailed(Reason.UnsafeArchive, f"member {member.name!r} is a device node or fifo")
    if member.issym():
        target = member.linkname
        if target.startswith("/") or posixpath.normpath(posixpath.join(posixpath.dirname(name), target)).startswith(".."):
            raise ImportFailed(Reason.UnsafeArchive, f"symlink {member.name!r} points outside the volume ({target!r})")
    if member.islnk():
        target = posixpath.normpath(member.linkname)
        if target not in seen or member.linkname.startswith("/"):
            raise ImportFailed(Reason.UnsafeArchive, f"hard link {member.name!r} points at {member.linkname!r}, "
                                                     "which is not an earlier member of the archive")
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        raise ImportFailed(Reason.UnsafeArchive, f"member {member.name!r} is not a file, directory or link")


class Extraction:
    """Unpacks into a hidden directory inside ``dest``; :meth:`publish` moves the tree into place."""

    def __init__(self, dest: Path, *, capacity: int | None) -> None:
        self.dest = dest
        self.capacity = capacity
        self.staging = Path(tempfile.mkdtemp(prefix=".cdi-archive-", dir=dest))
        self.content_bytes = 0

    def extract(self, stream: Iterator[bytes]) -> None:
        seen: set[str] = set()
        try:
            with tarfile.open(fileobj=ChunkReader(stream), mode="r|") as tar:  # type: ignore[arg-type]
                for member in tar:
                    _check(member, seen=seen)
                    self.content_bytes += member.size if member.isfile() else 0
                    if self.capacity is not None and self.content_bytes > self.capacity:
                        raise ImportFailed(Reason.TargetTooSmall,
                                           f"the archive's content is larger than the volume ({self.capacity} bytes)")
                    # The 'data' filter repeats our checks and also drops setuid bits and odd permissions.
                    tar.extract(member, path=self.staging, filter="data")
                    seen.add(posixpath.normpath(member.name))
        except tarfile.FilterError as error:
            raise ImportFailed(Reason.UnsafeArchive, str(error)) from error
        except tarfile.TarError as error:
            raise ImportFailed(Reason.UnsupportedFormat, f"not a valid tar archive: {error}") from error

    def publish(self) -> None:
        for entry in sorted(self.staging.iterdir()):
            final = self.dest / entry.name
            if final.is_dir() and not final.is_symlink():
                shutil.rmtree(final)
            elif final.exists() or final.is_symlink():
                final.unlink()
            os.replace(entry, final)
        self.staging.rmdir()
        fd = os.open(self.dest, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def discard(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
