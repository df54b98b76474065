"""Hostile and broken inputs, across sources: each must fail with its documented Reason, on one line,
leave no byte of any host file in the target, and leave nothing that looks like a finished import.

The "host file" is a file of this test outside the target holding a random marker; hostile images point
at it the way an attacker would point at /etc/shadow or a node's credentials.
"""

from __future__ import annotations

import gzip
import io
import lzma
import os
import secrets
import struct
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import requests
import zstandard

from tests.support import imaging
from tests.support.certs import make_ca
from tests.support.httpfault import Behaviour, FaultServer
from tests.support.registry import Registry


def tar_with(*members: tarfile.TarInfo) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for member in members:
            tar.addfile(member, io.BytesIO(b"x" * member.size) if member.isfile() else None)
    return buffer.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, *, link: str = "", size: int = 1) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, size if kind == tarfile.REGTYPE else 0
    return info


def qemu_img(*args: str) -> None:
    subprocess.run(["qemu-img", *args], check=True, capture_output=True)


def qcow2_header_patch(path: Path, offset: int, fmt: str, value: int) -> bytes:
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, offset, value)
    return bytes(data)


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Path:
    """A file of the host that no import may leak into a volume."""
    secret = tmp_path_factory.mktemp("host") / "secret.raw"
    secret.write_bytes((b"HOST-SECRET-" + secrets.token_hex(16).encode()) * 4096)
    return secret


@pytest.fixture(scope="module")
def served(tmp_path_factory, host) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    raw = imaging.make_raw(root / "good.raw", mib=2)
    good = imaging.convert(raw, root / "good.qcow2", "qcow2")
    files: dict[str, bytes] = {}
    qemu_img("create", "-q", "-f", "qcow2", "-b", str(host), "-F", "raw", str(root / "backing.qcow2"), "1M")
    qemu_img("create", "-q", "-f", "qcow2", "-o", f"data_file={host}", str(root / "datafile.qcow2"), "1M")
    for sub in ("monolithicFlat", "twoGbMaxExtentFlat"):
        files[f"{sub}.vmdk"] = (f'# Disk DescriptorFile\nversion=1\nCID=fffffffe\nparentCID=ffffffff\n'
                                f'createType="{sub}"\n\nRW 256 FLAT "{host}" 0\n').encode()
    sparse = imaging.convert(raw, root / "sparse.vmdk", "vmdk")
    descriptor = sparse.read_bytes()
    patched = descriptor.replace(b'"sparse.vmdk"', b'"' + str(host).encode() + b'"')
    files["extent-path.vmdk"] = patched if patched != descriptor else descriptor.replace(b"RW ", b"RW 0 /x ", 1)
    data = good.read_bytes()
    files["truncated.qcow2"] = data[: len(data) // 3]
    files["l1-huge.qcow2"] = qcow2_header_patch(good, 36, ">I", 0x2000000)  # 32 M entries for a 2 MiB disk
    files["feature.qcow2"] = qcow2_header_patch(good, 72, ">Q", 1 << 40)  # an incompatible feature nobody knows
    files["qed.img"] = b"QED\x00" + bytes(4092)
    files["luks.img"] = b"LUKS\xba\xbe" + bytes(4090)
    files["gzip-bomb.raw.gz"] = gzip.compress(bytes(512 << 20), compresslevel=9)
    files["zstd-bomb.raw.zst"] = zstandard.ZstdCompressor(level=19).compress(bytes(512 << 20))
    files["xz-bomb.raw.xz"] = lzma.compress(bytes(256 << 20))
    qemu_img("create", "-q", "-f", "qcow2", str(root / "huge-virtual.qcow2"), "1T")
    files["dotdot.tar"] = tar_with(member("../escape"))
    files["absolute.tar"] = tar_with(member("/tmp/escape"))
    files["symlink.tar"] = tar_with(member("link", tarfile.SYMTYPE, link=str(host)))
    files["symlink-up.tar"] = tar_with(member("a/link", tarfile.SYMTYPE, link="../../outside"))
    files["hardlink.tar"] = tar_with(member("hard", tarfile.LNKTYPE, link=str(host)))
    files["device.tar"] = tar_with(member("dev", tarfile.CHRTYPE))
    files["fifo.tar"] = tar_with(member("fifo", tarfile.FIFOTYPE))
    files["big.tar"] = tar_with(member("big", size=(8 << 20) + 1))
    for name, content in files.items():
        (root / name).write_bytes(content)
    return root


@pytest.fixture(scope="module")
def server(served):
    srv = FaultServer(served)
    srv.behaviours["loop"] = Behaviour(redirect="/loop")
    srv.behaviours["to-metadata"] = Behaviour(redirect="http://169.254.169.254/latest/meta-data/iam/")
    srv.behaviours["to-metadata-v6"] = Behaviour(redirect="http://[fe80::a9fe:a9fe]/")
    yield srv
    srv.close()


CASES = [  # (name, path on the server, extra arguments, Reason)
    ("qcow2 backing file on the host", "backing.qcow2", [], "UnsafeImage"),
    ("qcow2 external data file on the host", "datafile.qcow2", [], "UnsafeImage"),
    ("VMDK monolithicFlat extent naming a host file", "monolithicFlat.vmdk", [], "UnsafeImage"),
    ("VMDK twoGbMaxExtentFlat extent naming a host file", "twoGbMaxExtentFlat.vmdk", [], "UnsafeImage"),
    ("VMDK sparse descriptor with a rewritten extent path", "extent-path.vmdk", [], "UnsafeImage"),
    ("truncated qcow2", "truncated.qcow2", [], "ConversionFailed"),
    ("qcow2 whose L1 table claims gigabytes", "l1-huge.qcow2", [], "UnsafeImage"),
    ("qcow2 with an unknown incompatible feature", "feature.qcow2", [], "UnsafeImage"),
    ("QED image", "qed.img", [], "UnsupportedFormat"),
    ("LUKS image", "luks.img", [], "UnsupportedFormat"),
    ("virtual size beyond the target", "huge-virtual.qcow2", [], "TargetTooSmall"),
    ("gzip bomb larger than the target", "gzip-bomb.raw.gz", [], "TargetTooSmall"),
    ("zstd bomb larger than the target", "zstd-bomb.raw.zst", [], "TargetTooSmall"),
    ("xz bomb larger than the target", "xz-bomb.raw.xz", [], "TargetTooSmall"),
    ("tar traversal by ..", "dotdot.tar", ["--content-type", "archive"], "UnsafeArchive"),
    ("tar absolute path", "absolute.tar", ["--content-type", "archive"], "UnsafeArchive"),
    ("tar symlink to a host file", "symlink.tar", ["--content-type", "archive"], "UnsafeArchive"),
    ("tar symlink climbing out", "symlink-up.tar", ["--content-type", "archive"], "UnsafeArchive"),
    ("tar hardlink to a host file", "hardlink.tar", ["--content-type", "archive"], "UnsafeArchive"),
    ("tar device node", "device.tar", ["--content-type", "archive"], "UnsafeArchive"),
    ("tar fifo", "fifo.tar", ["--content-type", "archive"], "UnsafeArchive"),
    ("tar content larger than the target", "big.tar", ["--content-type", "archive"], "TargetTooSmall"),
    ("redirect loop", "loop", [], "RedirectLoop"),
    ("redirect to the cloud metadata service", "to-metadata", [], "URLDenied"),
    ("redirect to an IPv6 link-local address", "to-metadata-v6", [], "URLDenied"),
    ("checksum mismatch", "good.qcow2", ["--checksum", "sha256:" + "ab" * 32], "ChecksumMismatch"),
]


def cdi_import(url: str, dest: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cdi.cli.main", "import", "--url", url, "--dest", str(dest),
                           "--size", "8Mi", "--no-progress", *extra], capture_output=True, text=True, timeout=120)


def assert_refused(result: subprocess.CompletedProcess[str], reason: str, dest: Path, host: Path) -> None:
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {reason}: "), result.stderr
    marker = host.read_bytes()[:44]
    for path in dest.rglob("*"):
        assert path.name != "disk.img", "a failed import left a disk.img"
        if path.is_file() and not path.is_symlink():
            assert marker not in path.read_bytes(), f"host file content leaked into {path}"
    assert list(dest.iterdir()) == [], f"left behind: {list(dest.iterdir())}"


@pytest.mark.parametrize(("path", "extra", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_http_input(path, extra, reason, server, host, tmp_path):
    assert_refused(cdi_import(server.url(path), tmp_path, *extra), reason, tmp_path, host)


def test_metadata_url_itself(host, tmp_path):
    assert_refused(cdi_import("http://169.254.169.254/latest/meta-data/", tmp_path), "URLDenied", tmp_path, host)


def test_tls_with_the_wrong_ca(served, host, tmp_path):
    ca, other = make_ca(tmp_path / "ca"), make_ca(tmp_path / "other", name="not the server's CA")
    srv = FaultServer(served, tls=ca.server_context())
    dest = tmp_path / "pvc"
    dest.mkdir()
    try:
        assert_refused(cdi_import(srv.url("good.qcow2"), dest, "--cert-dir", str(other.cert_dir)), "TLSError",
                       dest, host)
    finally:
        srv.close()


def test_archive_on_a_block_device_is_refused(served, server, host, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("loop devices need root")
    backing = tmp_path / "blk.img"
    backing.write_bytes(bytes(8 << 20))
    device = subprocess.run(["losetup", "-f", "--show", str(backing)], capture_output=True, text=True)
    if device.returncode:
        pytest.skip("no free loop device")
    try:
        result = cdi_import(server.url("dotdot.tar"), Path(device.stdout.strip()), "--content-type", "archive")
    finally:
        subprocess.run(["losetup", "-d", device.stdout.strip()], check=False)
    assert result.returncode == 1 and "error: InvalidArgument: archive content needs a directory" in result.stderr


def test_registry_blob_with_the_wrong_digest(served, host, tmp_path):
    (tmp_path / "reg").mkdir()
    reg = Registry(tmp_path / "reg")
    try:
        reg.push_image("evil/disk", "v1", [({"disk/d.qcow2": (served / "good.qcow2").read_bytes()}, "none")])
        manifest = requests.get(f"{reg.base}/v2/evil/disk/manifests/v1", timeout=10,
                                headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}).json()
        blob = reg.blob_path(manifest["layers"][0]["digest"])
        data = bytearray(blob.read_bytes())
        data[-2000] ^= 0x01
        blob.write_bytes(bytes(data))
        dest = tmp_path / "pvc"
        dest.mkdir()
        assert_refused(cdi_import(reg.url("evil/disk", "v1"), dest, "--insecure"), "ChecksumMismatch", dest, host)
    finally:
        reg.close()
