"""`cdi-importer` speaking CDI's importer pod contract: configuration from the environment only, the result in
the exit code and the termination message, the image in /data/disk.img or on the block device.

Pod paths are redirected into the test's directory (IMPORTER_DATA_DIR, IMPORTER_BLOCK_PATH,
IMPORTER_TERMINATION_LOG) and the metrics server is off (IMPORTER_METRICS_PORT=0).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.images import ImageSet
from tests.support import certs
from tests.support.cli import pod_env, run_importer_pod
from tests.support.httpfault import Behaviour, FaultServer
from tests.support.nginx import NginxServer

MiB = 1 << 20
COMPLETE = '{"scratchSpaceRequired":false,"preallocationApplied":false,"message":"Import Complete"}'


def termination(workdir: Path) -> str:
    return (workdir / "termination-log").read_text()


def permanent_failure(result: subprocess.CompletedProcess[str], workdir: Path) -> str:
    """A permanent failure exits 0 with CDI's JSON form, so restartPolicy OnFailure never runs it again."""
    assert result.returncode == 0, result.stderr
    return str(json.loads(termination(workdir))["message"])


def test_every_setting_from_the_environment(images: ImageSet, make_fault_server: Callable[..., FaultServer],
                                            tls_ca: certs.TestCA, tmp_path: Path) -> None:
    server = make_fault_server(tls=tls_ca.server_context())
    name = server.publish(images.path("disk.qcow2.gz"))
    server.behaviours[name] = Behaviour(basic_auth=("ak", "sk"))
    digest = hashlib.sha256(images.path(name).read_bytes()).hexdigest()
    result = run_importer_pod(pod_env(
        tmp_path, IMPORTER_ENDPOINT=server.url(name), IMPORTER_CERT_DIR=str(tls_ca.cert_dir),
        IMPORTER_ACCESS_KEY_ID="ak", IMPORTER_SECRET_KEY="sk", IMPORTER_CHECKSUM=f"sha256:{digest}",
        IMPORTER_EXTRA_HEADER_0="X-Trace: 1", IMPORTER_EXTRA_HEADER_1="X-Tenant: blue",
        IMPORTER_IMAGE_SIZE="64Mi", FILESYSTEM_OVERHEAD="0.055"))
    assert result.returncode == 0, result.stderr
    assert termination(tmp_path) == COMPLETE
    disk = tmp_path / "data" / "disk.img"
    images.assert_imported(disk, name)
    assert disk.stat().st_size == 60 * MiB  # floor_MiB(ceil(64 MiB / 1.055))
    assert disk.stat().st_mode & 0o777 == 0o660
    headers = server.requests_for(name)[-1].headers
    assert headers["x-trace"] == "1" and headers["x-tenant"] == "blue"


def test_insecure_tls(images: ImageSet, nginx_server: NginxServer, tmp_path: Path) -> None:
    url = nginx_server.https_url(nginx_server.publish(images.path("disk.vmdk")))
    result = run_importer_pod(pod_env(tmp_path, IMPORTER_ENDPOINT=url, INSECURE_TLS="true", IMPORTER_IMAGE_SIZE="64Mi"))
    assert result.returncode == 0, result.stderr
    assert termination(tmp_path) == COMPLETE
    images.assert_imported(tmp_path / "data" / "disk.img", "disk.vmdk")


def test_block_volume(images: ImageSet, nginx_server: NginxServer, loop_device: Callable[..., Path],
                      tmp_path: Path) -> None:
    device = loop_device(16 * MiB, old_data=True)
    url = nginx_server.url(nginx_server.publish(images.path("disk.qcow2")))
    result = run_importer_pod(pod_env(tmp_path, IMPORTER_ENDPOINT=url, IMPORTER_BLOCK_PATH=str(device),
                                      IMPORTER_IMAGE_SIZE="16Mi"))
    assert result.returncode == 0, result.stderr
    assert termination(tmp_path) == COMPLETE
    images.assert_imported(device, "disk.qcow2")
    assert list((tmp_path / "data").iterdir()) == []


def test_preallocation(images: ImageSet, nginx_server: NginxServer, tmp_path: Path) -> None:
    url = nginx_server.url(nginx_server.publish(images.path("disk.raw")))
    result = run_importer_pod(pod_env(tmp_path, IMPORTER_ENDPOINT=url, PREALLOCATION="true",
                                      IMPORTER_IMAGE_SIZE="16Mi"))
    assert result.returncode == 0, result.stderr
    assert termination(tmp_path) == COMPLETE.replace('"preallocationApplied":false', '"preallocationApplied":true')
    disk = tmp_path / "data" / "disk.img"
    images.assert_imported(disk, "disk.raw")
    assert disk.stat().st_blocks * 512 >= disk.stat().st_size  # every block allocated


CONNECT = "Unable to connect to http data source: "
PROCESS = "Unable to process data: "


@pytest.mark.parametrize(("served", "behaviour", "env", "expected"), [
    ("missing.qcow2", None, {}, CONNECT + "NotFound: "),
    ("disk.qcow2", Behaviour(basic_auth=("ak", "sk")), {}, CONNECT + "Unauthorized: "),
    ("disk.qcow2", None, {"IMPORTER_CHECKSUM": "sha256:" + "0" * 64}, PROCESS + "ChecksumMismatch: "),
    ("backing.qcow2", None, {}, PROCESS + "UnsafeImage: "),
    ("disk.qcow2", None, {"IMPORTER_IMAGE_SIZE": "1Mi"}, PROCESS + "TargetTooSmall: "),
    ("disk.qcow2", None, {"INSECURE_TLS": "maybe"}, PROCESS + "InvalidArgument: "),
], ids=["not-found", "unauthorized", "checksum", "unsafe", "too-small", "bad-flag"])
def test_failures_in_the_termination_message(served: str, behaviour: Behaviour | None, env: dict[str, str],
                                             expected: str, images: ImageSet, fault_server: FaultServer,
                                             tmp_path: Path) -> None:
    if served != "missing.qcow2":
        fault_server.publish(images.path(served))
    if behaviour is not None:
        fault_server.behaviours[served] = behaviour
    result = run_importer_pod(pod_env(tmp_path, IMPORTER_ENDPOINT=fault_server.url(served), **env))
    message = permanent_failure(result, tmp_path)
    assert message.startswith(expected), message
    assert "\n" not in message
    assert not (tmp_path / "data" / "disk.img").exists()


def test_wrong_ca_is_a_connection_failure(images: ImageSet, nginx_server: NginxServer, other_ca: certs.TestCA,
                                          tmp_path: Path) -> None:
    url = nginx_server.https_url(nginx_server.publish(images.path("disk.qcow2")))
    result = run_importer_pod(pod_env(tmp_path, IMPORTER_ENDPOINT=url, IMPORTER_CERT_DIR=str(other_ca.cert_dir)))
    assert permanent_failure(result, tmp_path).startswith(CONNECT + "TLSError: ")
    assert not (tmp_path / "data" / "disk.img").exists()
