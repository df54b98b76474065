"""What an image is and whether it is safe to hand to qemu-img, decided from its first bytes.

Detection follows CDI's magic table (cdi-facts §3.4) plus VMDK text descriptors, ISO and the formats we
refuse by name. Safety checks are oslo.utils' streaming format inspector (OpenStack's answer to
CVE-2024-32498 and friends): backing files, qcow2 external data files, unknown incompatible features,
VMDK extents that name host files.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import struct
import sys
import types
from dataclasses import dataclass

from importer.errors import ImportFailed, Reason


def _format_inspector() -> types.ModuleType:
    """oslo.utils' format_inspector, loaded without its package's ``__init__``.

    That ``__init__`` imports oslo's qemu-img output parser and with it strutils, whose password-masking
    regexes compile on import: 40 ms of every importer's start (a third of it), for code we never call.
    """
    if "oslo_utils.imageutils" not in sys.modules:
        oslo = importlib.util.find_spec("oslo_utils")
        if oslo is None or not oslo.submodule_search_locations:
            raise ImportError("oslo.utils is not installed")
        package = types.ModuleType("oslo_utils.imageutils")
        package.__path__ = [os.path.join(oslo.submodule_search_locations[0], "imageutils")]
        sys.modules[package.__name__] = package
    return importlib.import_module("oslo_utils.imageutils.format_inspector")


fi = _format_inspector()

# qemu-img's names; "iso" is ours: qemu-img calls it raw, and we write it as raw.
NEEDS_CONVERSION = ("qcow2", "vmdk", "vdi", "vpc", "vhdx")
STRAIGHT = ("raw", "iso")
# How far into the stream the header-based decisions may look: VHDX keeps its metadata region at 1 MiB+,
# a VMDK descriptor may be up to 1 MiB long.
HEADER_MAX = 8 << 20
_OSLO_NAME = {"qcow2": "qcow2", "vmdk": "vmdk", "vdi": "vdi", "vpc": "vhd", "vhdx": "vhdx"}
_REFUSED = {b"QED\x00": "qed", b"LUKS\xba\xbe": "luks"}
# The inspector feeds itself region by region; one huge chunk would skip regions found inside it (VHDX).
_FEED = 64 << 10
# The inspector logs each refusal; we report it once, as the import's failure reason.
logging.getLogger(fi.__name__).setLevel(logging.CRITICAL)


@dataclass(frozen=True)
class ImageInfo:
    format: str  # qemu-img name
    virtual_size: int | None  # None for raw streams of unknown length


def sniff(head: bytes) -> str:
    """The format named by the magic at the start of ``head`` (raw when nothing matches)."""
    for magic, name in _REFUSED.items():
        if head.startswith(magic):
            raise ImportFailed(Reason.UnsupportedFormat, f"{name} images are not supported")
    if head.startswith(b"QFI\xfb"):
        return "qcow2"
    if head.startswith(b"KDMV") or head.startswith(b"# Disk DescriptorFile"):
        return "vmdk"
    if head[0x40:0x44] == b"\x7f\x10\xda\xbe":
        return "vdi"
    if head.startswith(b"conectix"):
        return "vpc"
    if head.startswith(b"vhdxfile"):
        return "vhdx"
    if head[0x8001:0x8006] == b"CD001":
        return "iso"
    return "raw"


SNIFF = 0x8006  # far enough for the ISO 9660 signature at 0x8001


class HeaderCollector:
    """Collects the stream's first bytes until :func:`inspect` can decide, and no further than needed."""

    def __init__(self) -> None:
        self.head = bytearray()
        self._inspector: fi.FileInspector | None = None
        self._decided = False

    def feed(self, chunk: bytes) -> bool:
        """Add a chunk; True once enough is held."""
        self.head += chunk
        if len(self.head) < SNIFF:
            return False
        if self._inspector is None:
            name = sniff(bytes(self.head[:SNIFF]))
            if name in STRAIGHT:
                return True
            self._inspector = fi.get_inspector(_OSLO_NAME[name])()  # type: ignore[misc]
            chunk = bytes(self.head)
        try:
            for at in range(0, len(chunk), _FEED):
                self._inspector.eat_chunk(chunk[at : at + _FEED])
        except (fi.ImageFormatError, struct.error, ValueError):
            return True  # inspect() will say what is wrong
        # End-of-file regions (a VMDK stream footer) cannot be had from a header; everything else can.
        regions = self._inspector._capture_regions.values()  # noqa: SLF001 - oslo has no public "header done"
        return len(self.head) >= HEADER_MAX or all(r.complete for r in regions if not isinstance(r, fi.EndCaptureRegion))


def inspect(head: bytes, *, complete_stream: bool) -> ImageInfo:
    """Format, virtual size and the safety verdict from the first bytes of the (decompressed) image.

    ``complete_stream`` says ``head`` is the whole image, so end-of-file structures can be checked too.
    """
    name = sniff(head)
    if name in STRAIGHT:
        return ImageInfo(format=name, virtual_size=len(head) if complete_stream else None)
    inspector = fi.get_inspector(_OSLO_NAME[name])()  # type: ignore[misc]
    try:
        for at in range(0, len(head), _FEED):
            inspector.eat_chunk(head[at : at + _FEED])
        inspector.finish()  # marks end regions complete: only their checks are unreliable before EOF
    except (fi.ImageFormatError, struct.error, ValueError) as error:
        raise ImportFailed(Reason.UnsafeImage, f"malformed {name} header: {error}") from error
    if not inspector.format_match:
        raise ImportFailed(Reason.UnsafeImage, f"malformed {name} header")
    _safety(inspector, name=name, ignore=() if complete_stream else ("footer",))
    if name == "qcow2":
        _qcow2_tables(head)
    size = inspector.virtual_size
    if not size:
        raise ImportFailed(Reason.UnsafeImage, f"{name} header gives no virtual size")
    return ImageInfo(format=name, virtual_size=int(size))


def _qcow2_tables(head: bytes) -> None:
    """Refuse an L1 table far larger than the virtual size needs: a small file that makes qemu-img allocate gigabytes."""
    cluster_bits, size, _crypt, l1_size = struct.unpack(">IQIi", head[20:40])
    if not 9 <= cluster_bits <= 21:
        raise ImportFailed(Reason.UnsafeImage, f"qcow2 cluster size 2^{cluster_bits} is out of range")
    per_l2 = (1 << cluster_bits) // 8
    needed = -(-size // ((1 << cluster_bits) * per_l2))
    if l1_size < 0 or l1_size > needed + 1:
        raise ImportFailed(Reason.UnsafeImage, f"qcow2 L1 table of {l1_size} entries for a {size}-byte disk "
                           f"(at most {needed} are needed)")


class StreamChecker:
    """Runs the inspector over the whole stream, for checks that need its end (VMDK stream footer)."""

    def __init__(self, name: str) -> None:
        self._name = name
        oslo = _OSLO_NAME.get(name)
        self._inspector = fi.get_inspector(oslo)() if oslo else None  # type: ignore[misc]

    def feed(self, chunk: bytes) -> None:
        if self._inspector is not None:
            try:
                self._inspector.eat_chunk(chunk)
            except (fi.ImageFormatError, struct.error, ValueError) as error:
                raise ImportFailed(Reason.UnsafeImage, f"malformed {self._name} image: {error}") from error

    def finish(self) -> None:
        if self._inspector is not None:
            self._inspector.finish()
            _safety(self._inspector, name=self._name, ignore=())


def _safety(inspector: fi.FileInspector, *, name: str, ignore: tuple[str, ...]) -> None:
    try:
        inspector.safety_check()
    except fi.SafetyCheckFailed as failed:
        problems = {k: v for k, v in failed.failures.items() if k not in ignore}
        if problems:
            why = "; ".join(f"{k}: {v}" for k, v in sorted(problems.items()))
            raise ImportFailed(Reason.UnsafeImage, f"{name} image refused: {why}") from failed
    except fi.ImageFormatError as error:
        raise ImportFailed(Reason.UnsafeImage, f"{name} image cannot be checked: {error}") from error
