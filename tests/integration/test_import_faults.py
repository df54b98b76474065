"""`cdi import` against a server that misbehaves: dropped connections, no Range, errors, stalls, a file that
changes mid-transfer, checksums. The fault server counts every byte it sent, so re-fetching is measured on
the server's side as well as reported by the importer.
"""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.images import ImageSet
from tests.support.cli import cdi_import, failed, succeeded
from tests.support.httpfault import Behaviour, FaultServer
from tests.support.nginx import NginxServer

MiB = 1 << 20


@pytest.mark.parametrize("name", ["disk.raw", "disk.qcow2", "disk.vmdk", "disk.qcow2.gz", "disk.raw.zst"])
def test_drops_at_a_quarter_half_and_three_quarters_resume(name: str, images: ImageSet, fault_server: FaultServer,
                                                          tmp_path: Path) -> None:
    size = images.path(name).stat().st_size
    fault_server.publish(images.path(name))
    fault_server.behaviours[name] = Behaviour(drop_at=[size // 4, size // 2, size * 3 // 4])
    out = succeeded(cdi_import("--url", fault_server.url(name), "--dest", str(tmp_path)))
    images.assert_imported(tmp_path / "disk.img", name)
    assert out["resumes"] == 3
    assert out["bytes_refetched"] <= 3 * MiB
    assert out["bytes_transferred"] == size + out["bytes_refetched"]
    fault_server.wait_idle()
    assert fault_server.sent(name) == out["bytes_transferred"]
    requests = fault_server.requests_for(name)
    assert sum(r.headers.get("range", "bytes=0-") != "bytes=0-" for r in requests) >= 3
    assert {r.method for r in requests} == {"GET"}  # presigned URLs are often valid for GET only (cdi#2737)


@pytest.mark.parametrize("kind", ["file", "block"])
@pytest.mark.parametrize("name", ["disk.qcow2", "disk.vhdx", "disk.raw.gz"])
def test_drops_into_a_raw_file_or_block_device(kind: str, name: str, images: ImageSet, fault_server: FaultServer,
                                               loop_device: Callable[..., Path], tmp_path: Path) -> None:
    """Other targets take other paths through the importer (a file of the virtual size; a memory window)."""
    dest = loop_device(16 * MiB, old_data=True) if kind == "block" else tmp_path / "out.raw"
    size = images.path(name).stat().st_size
    fault_server.publish(images.path(name))
    fault_server.behaviours[name] = Behaviour(drop_at=[size // 4, size // 2, size * 3 // 4])
    out = succeeded(cdi_import("--url", fault_server.url(name), "--dest", str(dest)))
    images.assert_imported(dest, name, exact_size=kind == "file")
    assert out["resumes"] == 3 and out["bytes_refetched"] <= 3 * MiB


def test_drops_keep_the_checksum_of_the_bytes_served(images: ImageSet, fault_server: FaultServer,
                                                     tmp_path: Path) -> None:
    served = images.path("disk.qcow2.xz")
    fault_server.publish(served)
    fault_server.behaviours[served.name] = Behaviour(drop_at=[served.stat().st_size // 3])
    digest = hashlib.sha512(served.read_bytes()).hexdigest()
    out = succeeded(cdi_import("--url", fault_server.url(served.name), "--dest", str(tmp_path),
                               "--checksum", f"sha512:{digest}"))
    assert out["resumes"] == 1
    images.assert_imported(tmp_path / "disk.img", served.name)


@pytest.mark.parametrize("name", ["disk.raw", "disk.qcow2"])
def test_server_refusing_range_restarts_from_zero(name: str, images: ImageSet, fault_server: FaultServer,
                                                  tmp_path: Path) -> None:
    size = images.path(name).stat().st_size
    fault_server.publish(images.path(name))
    fault_server.behaviours[name] = Behaviour(no_range=True, drop_at=[size // 2])
    out = succeeded(cdi_import("--url", fault_server.url(name), "--dest", str(tmp_path)))
    images.assert_imported(tmp_path / "disk.img", name)
    assert out["resumes"] == 1
    assert out["bytes_refetched"] == size // 2  # everything before the drop, once more
    assert out["bytes_transferred"] == size + size // 2


def test_file_changed_while_resuming_is_not_spliced(images: ImageSet, fault_server: FaultServer,
                                                    tmp_path: Path) -> None:
    name = "disk.raw"
    size = images.path(name).stat().st_size
    fault_server.publish(images.path(name))
    # The connection drops at half; when the importer comes back, the server holds another file (new ETag).
    fault_server.behaviours[name] = Behaviour(drop_at=[size // 2], replacement=images.path("disk.vdi"))
    failed(cdi_import("--url", fault_server.url(name), "--dest", str(tmp_path)), "TransferFailed")
    assert list(tmp_path.iterdir()) == []
    assert fault_server.requests_for(name)[-1].headers.get("if-range") == '"v1"'


@pytest.mark.parametrize("status", [500, 502, 503])
def test_transient_errors_twice_then_success(status: int, images: ImageSet, fault_server: FaultServer,
                                            tmp_path: Path) -> None:
    fault_server.publish(images.path("disk.qcow2"))
    fault_server.behaviours["disk.qcow2"] = Behaviour(errors=[status, status])
    succeeded(cdi_import("--url", fault_server.url("disk.qcow2"), "--dest", str(tmp_path)))
    images.assert_imported(tmp_path / "disk.img", "disk.qcow2")
    assert len(fault_server.requests_for("disk.qcow2")) >= 3


def test_errors_forever_give_up_after_bounded_retries(images: ImageSet, fault_server: FaultServer,
                                                      tmp_path: Path) -> None:
    fault_server.publish(images.path("disk.qcow2"))
    fault_server.behaviours["disk.qcow2"] = Behaviour(errors=[503] * 100)
    failed(cdi_import("--url", fault_server.url("disk.qcow2"), "--dest", str(tmp_path)), "TransferFailed")
    assert 2 <= len(fault_server.requests_for("disk.qcow2")) <= 10
    assert list(tmp_path.iterdir()) == []


def test_nothing_listening_is_unreachable(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port that was free a moment ago and that nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    failed(cdi_import("--url", f"http://127.0.0.1:{port}/disk.qcow2", "--dest", str(tmp_path)), "SourceUnreachable")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("status", "reason"), [(404, "NotFound"), (410, "NotFound"), (401, "Unauthorized"),
                                                (403, "Unauthorized")])
def test_permanent_errors_fail_on_the_first_request(status: int, reason: str, fault_server: FaultServer,
                                                    tmp_path: Path) -> None:
    fault_server.behaviours["disk.qcow2"] = Behaviour(errors=[status] * 10)
    failed(cdi_import("--url", fault_server.url("disk.qcow2"), "--dest", str(tmp_path)), reason)
    assert len(fault_server.requests_for("disk.qcow2")) == 1
    assert list(tmp_path.iterdir()) == []


def test_missing_file_is_not_found_at_once(fault_server: FaultServer, tmp_path: Path) -> None:
    failed(cdi_import("--url", fault_server.url("missing.qcow2"), "--dest", str(tmp_path)), "NotFound")
    assert len(fault_server.requests_for("missing.qcow2")) == 1
    assert list(tmp_path.iterdir()) == []


def test_basic_auth(images: ImageSet, make_fault_server: Callable[..., FaultServer], tmp_path: Path) -> None:
    fault_server = make_fault_server(default=Behaviour(basic_auth=("tester", "s3cret")))
    fault_server.publish(images.path("disk.qcow2"))
    failed(cdi_import("--url", fault_server.url("disk.qcow2"), "--dest", str(tmp_path)), "Unauthorized")
    assert len(fault_server.requests_for("disk.qcow2")) == 1
    assert list(tmp_path.iterdir()) == []
    failed(cdi_import("--url", fault_server.url("disk.qcow2"), "--dest", str(tmp_path),
                      env={"CDI_ACCESS_KEY_ID": "tester", "CDI_SECRET_KEY": "wrong"}), "Unauthorized")
    succeeded(cdi_import("--url", fault_server.url("disk.qcow2"), "--dest", str(tmp_path),
                         env={"CDI_ACCESS_KEY_ID": "tester", "CDI_SECRET_KEY": "s3cret"}))
    images.assert_imported(tmp_path / "disk.img", "disk.qcow2")


def test_stall_longer_than_the_timeout(images: ImageSet, fault_server: FaultServer, tmp_path: Path) -> None:
    fault_server.publish(images.path("disk.qcow2"))
    fault_server.behaviours["disk.qcow2"] = Behaviour(stall_after=100_000, stall_seconds=60)
    failed(cdi_import("--url", fault_server.url("disk.qcow2"), "--dest", str(tmp_path), "--stall-timeout", "2"),
           "Timeout")
    assert list(tmp_path.iterdir()) == []


def test_server_that_never_answers_times_out(fault_server: FaultServer, tmp_path: Path) -> None:
    fault_server.default = Behaviour(silent_seconds=60)
    failed(cdi_import("--url", fault_server.url("disk.qcow2"), "--dest", str(tmp_path), "--stall-timeout", "2"),
           "Timeout")
    assert list(tmp_path.iterdir()) == []


def test_stall_shorter_than_the_timeout_is_waited_out(images: ImageSet, fault_server: FaultServer,
                                                      tmp_path: Path) -> None:
    name = "disk.raw"
    size = images.path(name).stat().st_size
    fault_server.publish(images.path(name))
    # One second of silence at half way, then the connection ends there and the importer resumes.
    fault_server.behaviours[name] = Behaviour(stall_after=size // 2, stall_seconds=1)
    out = succeeded(cdi_import("--url", fault_server.url(name), "--dest", str(tmp_path), "--stall-timeout", "5"))
    images.assert_imported(tmp_path / "disk.img", name)
    assert out["resumes"] >= 1


@pytest.mark.parametrize("algorithm", ["md5", "sha1", "sha256", "sha512"])
@pytest.mark.parametrize("name", ["disk.qcow2", "disk.raw.gz"])
def test_checksum_of_the_bytes_served(algorithm: str, name: str, images: ImageSet, nginx_server: NginxServer,
                                      tmp_path: Path) -> None:
    url = nginx_server.url(nginx_server.publish(images.path(name)))
    digest = hashlib.new(algorithm, images.path(name).read_bytes()).hexdigest()
    succeeded(cdi_import("--url", url, "--dest", str(tmp_path), "--checksum", f"{algorithm}:{digest}"))
    images.assert_imported(tmp_path / "disk.img", name)
    (tmp_path / "disk.img").unlink()
    wrong = f"{int(digest[0], 16) ^ 1:x}{digest[1:]}"  # one hex digit off
    line = failed(cdi_import("--url", url, "--dest", str(tmp_path), "--checksum", f"{algorithm}:{wrong}"),
                  "ChecksumMismatch")
    assert wrong in line or algorithm in line
    assert list(tmp_path.iterdir()) == []


def test_checksum_mismatch_is_not_retried(images: ImageSet, fault_server: FaultServer, tmp_path: Path) -> None:
    fault_server.publish(images.path("disk.raw"))
    failed(cdi_import("--url", fault_server.url("disk.raw"), "--dest", str(tmp_path), "--checksum", "md5:" + "0" * 32),
           "ChecksumMismatch")
    assert len([r for r in fault_server.requests_for("disk.raw") if "range" not in r.headers]) == 1
    assert list(tmp_path.iterdir()) == []


def test_http_proxy_from_the_environment(images: ImageSet, fault_server: FaultServer,
                                         make_fault_server: Callable[..., FaultServer], tmp_path: Path) -> None:
    """The proxy answers from its own files, so only a request that went through it can succeed."""
    proxy = fault_server
    name = proxy.publish(images.path("disk.qcow2"))
    origin = make_fault_server()
    url = origin.url(name)  # origin has no such file: a direct request would get 404
    succeeded(cdi_import("--url", url, "--dest", str(tmp_path),
                         env={"http_proxy": f"http://127.0.0.1:{proxy.port}", "no_proxy": ""}))
    images.assert_imported(tmp_path / "disk.img", name)
    assert origin.requests == []
    assert proxy.requests_for(name)[0].proxied_to == f"127.0.0.1:{origin.port}"
    (tmp_path / "disk.img").unlink()
    failed(cdi_import("--url", url, "--dest", str(tmp_path),
                      env={"http_proxy": f"http://127.0.0.1:{proxy.port}", "no_proxy": "127.0.0.1"}), "NotFound")
    assert len(origin.requests_for(name)) == 1
