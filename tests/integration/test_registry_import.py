"""`cdi import docker://…` against a real registry, with containerDisk images built and pushed by the test."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import requests

from importer.checksum import file_sha256
from tests.support import imaging
from tests.support.registry import Registry
from tests.support.tokenserver import TokenServer


@pytest.fixture(scope="module")
def disks(tmp_path_factory):
    root = tmp_path_factory.mktemp("disks")
    raw = imaging.make_raw(root / "disk.raw", mib=3)
    other = imaging.make_raw(root / "other.raw", mib=2, seed=7)
    return {"raw": raw, "qcow2": imaging.convert(raw, root / "disk.qcow2", "qcow2"),
            "other-qcow2": imaging.convert(other, root / "other.qcow2", "qcow2"), "other": other}


@pytest.fixture(scope="module")
def registry(tmp_path_factory, disks):
    reg = Registry(tmp_path_factory.mktemp("registry"))
    qcow2 = disks["qcow2"].read_bytes()
    for how in ("gzip", "zstd", "none"):
        reg.push_image("disks/fedora", how, [({"disk/": None, "disk/fedora.qcow2": qcow2}, how)],
                       env=["INSTANCETYPE_KUBEVIRT_IO_DEFAULT_INSTANCETYPE=u1.small", "PATH=/bin"])
    amd = reg.push_image("disks/multi", "amd64-only", [({"disk/d.qcow2": qcow2}, "gzip")], arch="amd64")
    arm = reg.push_image("disks/multi", "arm64-only", [({"disk/d.qcow2": disks["other-qcow2"].read_bytes()}, "gzip")],
                         arch="arm64")
    reg.push_index("disks/multi", "latest", {"amd64": amd, "arm64": arm})
    reg.push_image("disks/replaced", "v1", [({"disk/old.qcow2": disks["other-qcow2"].read_bytes()}, "gzip"),
                                            ({"disk/.wh.old.qcow2": b"", "disk/new.qcow2": qcow2}, "gzip")])
    reg.push_image("disks/two", "v1", [({"disk/a.qcow2": qcow2, "disk/b.qcow2": qcow2}, "gzip")])
    reg.push_image("disks/none", "v1", [({"etc/motd": b"hi"}, "gzip")])
    reg.push_image("disks/bootc", "v1", [({"disk/a.qcow2": qcow2}, "gzip")], labels={"containers.bootc": "1"})
    reg.push_image("disks/corrupt", "v1", [({"disk/a.qcow2": qcow2}, "none")])
    yield reg
    reg.close()


def run(url: str, dest, *extra: str, env=None):
    return subprocess.run([sys.executable, "-m", "cdi.cli.main", "import", "--url", url, "--dest", str(dest),
                           "--json", "--no-progress", "--insecure", *extra],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


def same_disk(result, raw) -> bool:
    expected = imaging.expected_raw(raw, raw.parent)
    size = expected.stat().st_size
    return file_sha256(result, length=size) == file_sha256(expected, length=size)


def failure(result, reason: str) -> str:
    assert result.returncode == 1, result.stdout
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: {reason}: "), line
    return line


@pytest.mark.parametrize("layer", ["gzip", "zstd", "none"])
def test_containerdisk_layers(layer, registry, disks, tmp_path):
    result = run(registry.url("disks/fedora", layer), tmp_path)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["format"] == "qcow2"
    assert out["labels"] == {"instancetype.kubevirt.io/default-instancetype": "u1.small"}
    assert same_disk(tmp_path / "disk.img", disks["raw"])


@pytest.mark.parametrize(("arch", "disk"), [("amd64", "raw"), ("arm64", "other")])
def test_multi_arch_index_picks_the_platform(arch, disk, registry, disks, tmp_path):
    result = run(registry.url("disks/multi", "latest"), tmp_path, "--architecture", arch)
    assert result.returncode == 0, result.stderr
    assert same_disk(tmp_path / "disk.img", disks[disk])


def test_pod_contract_selects_the_architecture(registry, disks, tmp_path):
    env = {"IMPORTER_SOURCE": "registry", "IMPORTER_ENDPOINT": registry.url("disks/multi", "latest"),
           "IMPORTER_REGISTRY_IMAGE_ARCHITECTURE": "arm64", "INSECURE_TLS": "true",
           "IMPORTER_DATA_DIR": str(tmp_path), "IMPORTER_BLOCK_PATH": str(tmp_path / "none"),
           "IMPORTER_TERMINATION_LOG": str(tmp_path / "termination-log"), "IMPORTER_METRICS_PORT": "0"}
    clean = {k: v for k, v in os.environ.items() if not k.startswith("IMPORTER_")}
    result = subprocess.run([sys.executable, "-m", "importer.pod"], capture_output=True, text=True, timeout=120,
                            env={**clean, **env})
    assert result.returncode == 0, result.stderr
    assert same_disk(tmp_path / "disk.img", disks["other"])
    assert json.loads((tmp_path / "termination-log").read_text())["message"] == "Import Complete"


def test_by_digest(registry, disks, tmp_path):
    head = requests.get(f"{registry.base}/v2/disks/fedora/manifests/gzip",
                        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}, timeout=10)
    result = run(registry.url("disks/fedora", head.headers["Docker-Content-Digest"]), tmp_path)
    assert result.returncode == 0, result.stderr
    assert same_disk(tmp_path / "disk.img", disks["raw"])


def test_upper_layer_whiteout_replaces_the_disk(registry, disks, tmp_path):
    result = run(registry.url("disks/replaced", "v1"), tmp_path)
    assert result.returncode == 0, result.stderr
    assert same_disk(tmp_path / "disk.img", disks["raw"])


@pytest.mark.parametrize(("repo", "reason", "words"), [
    ("disks/two", "UnsupportedFormat", "more than one file under disk/"),
    ("disks/none", "UnsupportedFormat", "no file under disk/"),
    ("disks/bootc", "UnsupportedFormat", "bootc"),
])
def test_not_a_containerdisk(repo, reason, words, registry, tmp_path):
    line = failure(run(registry.url(repo, "v1"), tmp_path), reason)
    assert words in line
    assert list(tmp_path.iterdir()) == []


def test_missing_tag(registry, tmp_path):
    failure(run(registry.url("disks/fedora", "nope"), tmp_path), "NotFound")


def test_corrupt_blob_is_caught_by_its_digest(registry, tmp_path):
    manifest = requests.get(f"{registry.base}/v2/disks/corrupt/manifests/v1",
                            headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}, timeout=10).json()
    blob = registry.blob_path(manifest["layers"][0]["digest"])
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped bit inside the qcow2's data
    blob.write_bytes(bytes(data))
    failure(run(registry.url("disks/corrupt", "v1"), tmp_path), "ChecksumMismatch")
    assert list(tmp_path.iterdir()) == []


def test_basic_auth_registry(tmp_path, disks):
    (tmp_path / "authreg").mkdir()
    reg = Registry(tmp_path / "authreg", htpasswd=("tester", "secret123"))
    try:
        reg.push_image("disks/private", "v1", [({"disk/a.qcow2": disks["qcow2"].read_bytes()}, "gzip")])
        dest = tmp_path / "pvc"
        dest.mkdir()
        failure(run(reg.url("disks/private", "v1"), dest, env={"CDI_ACCESS_KEY_ID": "tester", "CDI_SECRET_KEY": "no"}),
                "Unauthorized")
        result = run(reg.url("disks/private", "v1"), dest,
                     env={"CDI_ACCESS_KEY_ID": "tester", "CDI_SECRET_KEY": "secret123"})
        assert result.returncode == 0, result.stderr
        assert same_disk(dest / "disk.img", disks["raw"])
    finally:
        reg.close()


def test_bearer_token_registry(tmp_path, disks):
    (tmp_path / "tokenreg").mkdir()
    tokens = TokenServer(tmp_path, user="puller", password="pw")
    reg = Registry(tmp_path / "tokenreg", token=(tokens.realm, str(tokens.cert_path), "puller:pw"))
    try:
        reg.push_image("disks/tokened", "v1", [({"disk/a.qcow2": disks["qcow2"].read_bytes()}, "gzip")])
        dest = tmp_path / "pvc"
        dest.mkdir()
        failure(run(reg.url("disks/tokened", "v1"), dest, env={"CDI_ACCESS_KEY_ID": "puller", "CDI_SECRET_KEY": "x"}),
                "Unauthorized")
        result = run(reg.url("disks/tokened", "v1"), dest, env={"CDI_ACCESS_KEY_ID": "puller", "CDI_SECRET_KEY": "pw"})
        assert result.returncode == 0, result.stderr
        assert same_disk(dest / "disk.img", disks["raw"])
        assert ["repository:disks/tokened:pull"] in [q.get("scope") for q in tokens.requests]
    finally:
        reg.close()
        tokens.close()


def test_docker_manifest_list_and_schema2(tmp_path, disks):
    (tmp_path / "dockerreg").mkdir()
    reg = Registry(tmp_path / "dockerreg")
    try:
        amd = reg.push_image("disks/dock", "amd", [({"disk/d.qcow2": disks["qcow2"].read_bytes()}, "gzip")],
                             docker=True)
        arm = reg.push_image("disks/dock", "arm", [({"disk/d.qcow2": disks["other-qcow2"].read_bytes()}, "gzip")],
                             arch="arm64", docker=True)
        reg.push_index("disks/dock", "latest", {"amd64": amd, "arm64": arm}, docker=True)
        for ref, arch, disk in (("amd", "amd64", "raw"), ("latest", "arm64", "other")):
            dest = tmp_path / f"pvc-{ref}"
            dest.mkdir()
            result = run(reg.url("disks/dock", ref), dest, "--architecture", arch)
            assert result.returncode == 0, result.stderr
            assert same_disk(dest / "disk.img", disks[disk])
    finally:
        reg.close()


def test_tls_registry_with_a_private_ca(tmp_path, disks, tls_ca, other_ca):
    (tmp_path / "tlsreg").mkdir()
    reg = Registry(tmp_path / "tlsreg", tls=(tls_ca.server_cert, tls_ca.server_key, tls_ca.ca_cert))
    try:
        reg.push_image("disks/tls", "v1", [({"disk/a.qcow2": disks["qcow2"].read_bytes()}, "gzip")])
        url = reg.url("disks/tls", "v1")
        dest = tmp_path / "pvc"
        dest.mkdir()
        plain = [sys.executable, "-m", "cdi.cli.main", "import", "--url", url, "--dest", str(dest), "--no-progress"]
        wrong = subprocess.run([*plain, "--cert-dir", str(other_ca.cert_dir)], capture_output=True, text=True, timeout=60)
        assert wrong.returncode == 1 and wrong.stderr.strip().splitlines()[-1].startswith("error: TLSError: ")
        right = subprocess.run([*plain, "--cert-dir", str(tls_ca.cert_dir)], capture_output=True, text=True, timeout=60)
        assert right.returncode == 0, right.stderr
        assert same_disk(dest / "disk.img", disks["raw"])
    finally:
        reg.close()
