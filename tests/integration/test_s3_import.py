"""`cdi import --source s3` against a real S3 server (SeaweedFS), with a cut connection on the wire."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from importer import contract
from importer.checksum import file_sha256
from tests.support import imaging
from tests.support.cli import pod_env, run_importer_pod
from tests.support.seaweed import ACCESS_KEY, SECRET_KEY, SeaweedS3
from tests.support.tcpcut import CuttingRelay

KEYS = {"CDI_ACCESS_KEY_ID": ACCESS_KEY, "CDI_SECRET_KEY": SECRET_KEY}


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = SeaweedS3(tmp_path_factory.mktemp("weed"))
    yield server
    server.close()


@pytest.fixture(scope="module")
def objects(s3, tmp_path_factory):
    root = tmp_path_factory.mktemp("s3images")
    raw = imaging.make_raw(root / "disk.raw")
    qcow2 = imaging.convert(raw, root / "disk.qcow2", "qcow2")
    gz = imaging.compress(raw, "gz")
    return {path.name: (s3.put("disks", f"images/{path.name}", path.read_bytes()), path)
            for path in (raw, qcow2, gz)}


def run(url: str, dest, *, env=None, extra=()):
    return subprocess.run([sys.executable, "-m", "cdi.cli.main", "import", "--source", "s3", "--url", url,
                           "--dest", str(dest), "--json", "--no-progress", *extra],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


def same_disk(result, image, workdir) -> bool:
    expected = imaging.expected_raw(image, workdir)
    size = expected.stat().st_size
    return file_sha256(result, length=size) == file_sha256(expected, length=size)


@pytest.mark.parametrize("name", ["disk.qcow2", "disk.raw.gz", "disk.raw"])
def test_import_from_s3(name, objects, tmp_path):
    url, path = objects[name]
    result = run(url, tmp_path, env=KEYS)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["source_sha256"] == file_sha256(path, length=path.stat().st_size)
    raw = path.with_name("disk.raw")
    assert same_disk(tmp_path / "disk.img", raw if name != "disk.qcow2" else path, path.parent)


def test_cut_connection_resumes(s3, objects, tmp_path):
    url, path = objects["disk.qcow2"]
    relay = CuttingRelay(target_port=s3.port, cut_after=[path.stat().st_size // 2])
    try:
        result = run(url.replace(f":{s3.port}/", f":{relay.port}/"), tmp_path, env=KEYS)
    finally:
        relay.close()
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["resumes"] >= 1 and out["bytes_refetched"] <= 1 << 20
    assert same_disk(tmp_path / "disk.img", path, path.parent)


@pytest.mark.parametrize(("case", "reason"), [
    ("wrong-secret", "Unauthorized"), ("missing-object", "NotFound"), ("missing-bucket", "NotFound")])
def test_s3_failures(case, reason, s3, objects, tmp_path):
    url = objects["disk.qcow2"][0]
    env = KEYS
    if case == "wrong-secret":
        env = {**KEYS, "CDI_SECRET_KEY": "not-the-secret"}
    elif case == "missing-object":
        url = f"{s3.endpoint}/disks/images/nothing.qcow2"
    else:
        url = f"{s3.endpoint}/no-such-bucket/disk.qcow2"
    result = run(url, tmp_path, env=env)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: {reason}: ")
    assert list(tmp_path.iterdir()) == []


def test_importer_pod_reads_s3_with_cdis_env_contract(objects, tmp_path):
    url, path = objects["disk.qcow2"]
    env = pod_env(tmp_path, IMPORTER_SOURCE="s3", IMPORTER_ENDPOINT=url, IMPORTER_ACCESS_KEY_ID=ACCESS_KEY,
                  IMPORTER_SECRET_KEY=SECRET_KEY, IMPORTER_IMAGE_SIZE="64Mi")
    result = run_importer_pod(env)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "termination-log").read_text() == (
        '{"scratchSpaceRequired":false,"preallocationApplied":false,"message":"Import Complete"}')
    assert same_disk(tmp_path / "data" / "disk.img", path, path.parent)
    env[contract.SECRET_KEY] = "wrong"
    result = run_importer_pod(env)
    assert result.returncode == 0, "a permanent failure is not restarted (CDI's exit-0 JSON form)"
    assert json.loads((tmp_path / "termination-log").read_text())["message"].startswith(
        "Unable to connect to s3 data source: Unauthorized: ")
