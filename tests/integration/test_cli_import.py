"""`cdi import` and `cdi-importer` end to end: real qemu-img, real HTTP(S) servers on 127.0.0.1, real loop devices.

Every successful import is compared with `qemu-img convert -O raw` of the same image; every failure must
give its documented Reason on one line and leave nothing that looks like a finished import.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from importer.checksum import file_sha256
from tests.support import imaging
from tests.support.certs import make_ca
from tests.support.httpfault import Behaviour, FaultServer

CLI = [sys.executable, "-m", "cdi.cli.main", "import"]
FORMATS = {  # file name → qemu-img output format and options
    "disk.qcow2": ("qcow2", ()),
    "disk-c.qcow2": ("qcow2", ("-c",)),
    "disk.vmdk": ("vmdk", ()),
    "disk-stream.vmdk": ("vmdk", ("-o", "subformat=streamOptimized")),
    "disk.vdi": ("vdi", ()),
    "disk.vhd": ("vpc", ()),
    "disk.vhdx": ("vhdx", ()),
}


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("images")
    raw = imaging.make_raw(root / "disk.raw")
    for name, (fmt, options) in FORMATS.items():
        imaging.convert(raw, root / name, fmt, *options)
    for base in ("disk.raw", "disk.qcow2"):
        for kind in imaging.COMPRESSORS:
            imaging.compress(root / base, kind)
    (root / "disk.qcow2.gz.xz").write_bytes(imaging.COMPRESSORS["xz"]((root / "disk.qcow2.gz").read_bytes()))
    iso_dir = root / "iso-content"
    iso_dir.mkdir()
    (iso_dir / "readme.txt").write_text("an ISO image\n")
    subprocess.run(["genisoimage", "-quiet", "-o", str(root / "disk.iso"), "-J", "-r", str(iso_dir)], check=True)
    # Hostile images: each would make qemu-img read a host file into the volume.
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", "/etc/hostname", "-F", "raw",
                    str(root / "backing.qcow2"), "8M"], check=True)
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-o", f"data_file={root / 'datafile.raw'}",
                    str(root / "datafile.qcow2"), "8M"], check=True)
    (root / "extent.vmdk").write_text('# Disk DescriptorFile\nversion=1\nCID=fffffffe\nparentCID=ffffffff\n'
                                      'createType="monolithicFlat"\n\nRW 16 FLAT "/etc/hostname" 0\n')
    big = root / "big.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(big), "64G"], check=True)
    with big.open("ab") as f:  # a body worth not downloading once the header says it cannot fit
        f.write(os.urandom(8 << 20))
    return root


@pytest.fixture
def server(images: Path):
    srv = FaultServer(images)
    yield srv
    srv.close()


@pytest.fixture
def loop_device(tmp_path: Path):
    if os.geteuid() != 0:
        pytest.skip("loop devices need root")
    made = []

    def make(size: int) -> Path:
        backing = tmp_path / f"loop{len(made)}.img"
        with backing.open("wb") as f:
            f.write(os.urandom(1 << 20) * (size >> 20))  # old data the import must overwrite, zeros included
        result = subprocess.run(["losetup", "-f", "--show", str(backing)], capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(f"no free loop device: {result.stderr.strip()}")
        made.append(result.stdout.strip())
        return Path(made[-1])

    yield make
    for device in made:
        subprocess.run(["losetup", "-d", device], check=False)


def cdi_import(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "--no-progress", "--json", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def succeeded(result: subprocess.CompletedProcess[str]) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def failed(result: subprocess.CompletedProcess[str], reason: str) -> str:
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {reason}: "), last
    return last


def assert_same_disk(result_path: Path, image: Path, images: Path, *, exact: bool = False) -> None:
    expected = imaging.expected_raw(image, images)
    size = expected.stat().st_size
    assert file_sha256(result_path, length=size) == file_sha256(expected, length=size)
    if exact:
        assert result_path.stat().st_size == size
    elif result_path.is_file():
        assert imaging.all_zero_after(result_path, size)


def decompressed_name(name: str) -> str:
    while name.rsplit(".", 1)[-1] in imaging.COMPRESSORS:
        name = name.rsplit(".", 1)[0]
    return name


MATRIX = [*FORMATS, "disk.raw", "disk.iso", "disk.qcow2.gz.xz",
          *(f"{base}.{kind}" for base in ("disk.raw", "disk.qcow2") for kind in imaging.COMPRESSORS)]


@pytest.mark.parametrize("name", MATRIX)
def test_every_format_and_compression_into_a_directory(name, server, images, tmp_path):
    out = succeeded(cdi_import("--url", server.url(name), "--dest", str(tmp_path), "--size", "64Mi",
                               "--filesystem-overhead", "0.06"))
    disk = tmp_path / "disk.img"
    assert_same_disk(disk, images / decompressed_name(name), images)
    assert disk.stat().st_size == 60 << 20  # CDI: floor_MiB(ceil(64 MiB / 1.06))
    assert oct(disk.stat().st_mode & 0o777) == "0o660"
    assert out["source_sha256"] == file_sha256(images / name, length=(images / name).stat().st_size)
    assert out["bytes_transferred"] == (images / name).stat().st_size
    assert [p.name for p in tmp_path.iterdir()] == ["disk.img"]


@pytest.mark.parametrize("name", ["disk.raw", "disk.qcow2", "disk.qcow2.zst", "disk-stream.vmdk", "disk.vhdx"])
def test_into_a_raw_file(name, server, images, tmp_path):
    dest = tmp_path / "out.raw"
    succeeded(cdi_import("--url", server.url(name), "--dest", str(dest)))
    assert_same_disk(dest, images / decompressed_name(name), images, exact=True)


@pytest.mark.parametrize("name", ["disk.raw", "disk.raw.gz", "disk.qcow2", "disk.qcow2.xz", "disk.vmdk"])
def test_into_a_block_device_holding_old_data(name, server, images, loop_device):
    device = loop_device(16 << 20)
    out = succeeded(cdi_import("--url", server.url(name), "--dest", str(device)))
    assert_same_disk(device, images / decompressed_name(name), images)
    assert out["target"] == str(device)


def test_sparse_raw_leaves_holes(server, images, tmp_path):
    succeeded(cdi_import("--url", server.url("disk.raw"), "--dest", str(tmp_path / "out.raw")))
    data_blocks = sum(1 for i in range(0, (images / "disk.raw").stat().st_size, 4096)
                      if (images / "disk.raw").read_bytes()[i : i + 4096].count(0) != 4096)
    assert (tmp_path / "out.raw").stat().st_blocks * 512 <= 1.05 * data_blocks * 4096 + 65536


@pytest.mark.parametrize("name", ["disk.raw", "disk.qcow2"])
def test_dropped_connections_resume_without_refetching(name, server, images, tmp_path):
    size = (images / name).stat().st_size
    server.behaviours[name] = Behaviour(drop_at=[size // 4, size // 2, size * 3 // 4])
    out = succeeded(cdi_import("--url", server.url(name), "--dest", str(tmp_path)))
    assert_same_disk(tmp_path / "disk.img", images / name, images)
    assert out["resumes"] == 3
    assert out["bytes_refetched"] <= 3 * (1 << 20)
    assert any("range" in r.headers for r in server.requests_for(name))


def test_server_without_range_restarts_from_zero(server, images, tmp_path):
    size = (images / "disk.qcow2").stat().st_size
    server.behaviours["disk.qcow2"] = Behaviour(no_range=True, drop_at=[size // 2])
    out = succeeded(cdi_import("--url", server.url("disk.qcow2"), "--dest", str(tmp_path)))
    assert_same_disk(tmp_path / "disk.img", images / "disk.qcow2", images)
    assert out["resumes"] == 1 and out["bytes_refetched"] == size // 2


@pytest.mark.parametrize("algorithm", ["md5", "sha1", "sha256", "sha512"])
def test_checksums(algorithm, server, images, tmp_path):
    import hashlib

    digest = hashlib.new(algorithm, (images / "disk.qcow2").read_bytes()).hexdigest()
    succeeded(cdi_import("--url", server.url("disk.qcow2"), "--dest", str(tmp_path), "--checksum", f"{algorithm}:{digest}"))
    (tmp_path / "disk.img").unlink()
    wrong = "0" * len(digest)
    failed(cdi_import("--url", server.url("disk.qcow2"), "--dest", str(tmp_path), "--checksum", f"{algorithm}:{wrong}"),
           "ChecksumMismatch")
    assert list(tmp_path.iterdir()) == []


def test_not_found_fails_at_once(server, tmp_path):
    failed(cdi_import("--url", server.url("missing.qcow2"), "--dest", str(tmp_path)), "NotFound")
    assert len(server.requests_for("missing.qcow2")) == 1
    assert list(tmp_path.iterdir()) == []


def test_basic_auth(server, images, tmp_path):
    server.behaviours["disk.qcow2"] = Behaviour(basic_auth=("user", "s3cret"))
    failed(cdi_import("--url", server.url("disk.qcow2"), "--dest", str(tmp_path)), "Unauthorized")
    assert len(server.requests_for("disk.qcow2")) == 1
    succeeded(cdi_import("--url", server.url("disk.qcow2"), "--dest", str(tmp_path),
                         env={"CDI_ACCESS_KEY_ID": "user", "CDI_SECRET_KEY": "s3cret"}))
    assert_same_disk(tmp_path / "disk.img", images / "disk.qcow2", images)


def test_transient_errors_are_retried(server, images, tmp_path):
    server.behaviours["disk.qcow2"] = Behaviour(errors=[503, 503])
    succeeded(cdi_import("--url", server.url("disk.qcow2"), "--dest", str(tmp_path)))
    assert_same_disk(tmp_path / "disk.img", images / "disk.qcow2", images)


def test_tls_with_a_private_ca(images, tmp_path):
    ca = make_ca(tmp_path / "ca")
    server = FaultServer(images, tls=ca.server_context())
    dest = tmp_path / "pvc"
    dest.mkdir()
    try:
        failed(cdi_import("--url", server.url("disk.qcow2"), "--dest", str(dest)), "TLSError")
        other = make_ca(tmp_path / "other", name="someone else")
        failed(cdi_import("--url", server.url("disk.qcow2"), "--dest", str(dest), "--cert-dir", str(other.cert_dir)),
               "TLSError")
        succeeded(cdi_import("--url", server.url("disk.qcow2"), "--dest", str(dest), "--cert-dir", str(ca.cert_dir)))
        assert_same_disk(dest / "disk.img", images / "disk.qcow2", images)
        (dest / "disk.img").unlink()
        succeeded(cdi_import("--url", server.url("disk.qcow2"), "--dest", str(dest), "--insecure"))
    finally:
        server.close()


def test_credentials_never_follow_a_redirect_to_another_host(images, tmp_path):
    mirror = FaultServer(images)
    origin = FaultServer(images)
    try:
        origin.behaviours["disk.qcow2"] = Behaviour(redirect=mirror.url("disk.qcow2"))
        succeeded(cdi_import("--url", origin.url("disk.qcow2"), "--dest", str(tmp_path), "--header", "X-Token: abc",
                             env={"CDI_ACCESS_KEY_ID": "user", "CDI_SECRET_KEY": "s3cret"}))
        assert_same_disk(tmp_path / "disk.img", images / "disk.qcow2", images)
        assert origin.requests_for("disk.qcow2")[0].headers.get("authorization", "").startswith("Basic ")
        assert origin.requests_for("disk.qcow2")[0].headers.get("x-token") == "abc"
        seen = mirror.requests_for("disk.qcow2")
        assert seen and all("authorization" not in r.headers and "x-token" not in r.headers for r in seen)
    finally:
        mirror.close()
        origin.close()


@pytest.mark.parametrize("where", ["direct", "redirect"])
def test_metadata_address_is_denied(where, server, tmp_path):
    url = "http://169.254.169.254/latest/meta-data/"
    if where == "redirect":
        server.behaviours["disk.qcow2"] = Behaviour(redirect=url)
        url = server.url("disk.qcow2")
    failed(cdi_import("--url", url, "--dest", str(tmp_path)), "URLDenied")


def test_redirect_loop(server, tmp_path):
    server.behaviours["loop"] = Behaviour(redirect="/loop")
    failed(cdi_import("--url", server.url("loop"), "--dest", str(tmp_path)), "RedirectLoop")


def test_too_big_is_refused_from_the_header(server, images, tmp_path):
    failed(cdi_import("--url", server.url("big.qcow2"), "--dest", str(tmp_path), "--size", "64Mi"), "TargetTooSmall")
    assert server.bytes_sent.get("/big.qcow2", 0) <= (images / "big.qcow2").stat().st_size
    assert list(tmp_path.iterdir()) == []


def test_raw_bigger_than_the_file_target(server, tmp_path):
    failed(cdi_import("--url", server.url("disk.raw"), "--dest", str(tmp_path / "small.raw"), "--size", "1Mi"),
           "TargetTooSmall")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["backing.qcow2", "datafile.qcow2", "extent.vmdk"])
def test_hostile_images_are_refused_before_qemu_img(name, server, tmp_path):
    line = failed(cdi_import("--url", server.url(name), "--dest", str(tmp_path)), "UnsafeImage")
    assert "\n" not in line
    assert list(tmp_path.iterdir()) == []


def test_stalled_transfer_times_out(server, tmp_path):
    server.behaviours["disk.qcow2"] = Behaviour(stall_after=100_000)
    failed(cdi_import("--url", server.url("disk.qcow2"), "--dest", str(tmp_path), "--stall-timeout", "2"), "Timeout")
    assert list(tmp_path.iterdir()) == []


def pod_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    return {"IMPORTER_DATA_DIR": str(data), "IMPORTER_BLOCK_PATH": str(tmp_path / "no-block-device"),
            "IMPORTER_TERMINATION_LOG": str(tmp_path / "termination-log"), "IMPORTER_METRICS_PORT": "0",
            "IMPORTER_CONTENTTYPE": "kubevirt", "IMPORTER_IMAGE_SIZE": "64Mi", "FILESYSTEM_OVERHEAD": "0.06",
            "INSECURE_TLS": "false", "PREALLOCATION": "false", **extra}


def run_pod(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("IMPORTER_")}
    return subprocess.run([sys.executable, "-m", "importer.pod"], capture_output=True, text=True, timeout=120,
                          env={**clean, **env})


def test_importer_pod_contract_success(server, images, tmp_path):
    server.behaviours["disk.qcow2"] = Behaviour(basic_auth=("ak", "sk"))
    env = pod_env(tmp_path, IMPORTER_SOURCE="http", IMPORTER_ENDPOINT=server.url("disk.qcow2"),
                  IMPORTER_ACCESS_KEY_ID="ak", IMPORTER_SECRET_KEY="sk", IMPORTER_EXTRA_HEADER_0="X-Trace: 1")
    result = run_pod(env)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "termination-log").read_text() == (
        '{"scratchSpaceRequired":false,"preallocationApplied":false,"message":"Import Complete"}')
    assert_same_disk(tmp_path / "data/disk.img", images / "disk.qcow2", images)
    assert server.requests_for("disk.qcow2")[0].headers["x-trace"] == "1"


@pytest.mark.parametrize(("path", "checksum", "expected"), [
    ("missing.qcow2", "", "Unable to connect to http data source: NotFound: "),
    ("disk.qcow2", "sha256:" + "0" * 64, "Unable to process data: ChecksumMismatch: "),
])
def test_importer_pod_contract_failure(path, checksum, expected, server, tmp_path):
    env = pod_env(tmp_path, IMPORTER_SOURCE="http", IMPORTER_ENDPOINT=server.url(path), IMPORTER_CHECKSUM=checksum)
    result = run_pod(env)
    assert result.returncode == 1
    assert (tmp_path / "termination-log").read_text().startswith(expected)
    assert not (tmp_path / "data/disk.img").exists()


def test_archive_content(tmp_path, images):
    src = tmp_path / "tree"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("a")
    (src / "sub/b.txt").write_text("b")
    shutil.make_archive(str(images / "tree"), "gztar", root_dir=src)
    srv = FaultServer(images)
    dest = tmp_path / "pvc"
    dest.mkdir()
    try:
        succeeded(cdi_import("--url", srv.url("tree.tar.gz"), "--dest", str(dest), "--content-type", "archive"))
    finally:
        srv.close()
    assert (dest / "a.txt").read_text() == "a" and (dest / "sub/b.txt").read_text() == "b"
    assert sorted(p.name for p in dest.iterdir()) == ["a.txt", "sub"]
