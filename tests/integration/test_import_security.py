"""`cdi import` where trust is at stake: TLS verification, credentials across redirects, the URL deny list,
images too big for their target, and hostile images that would make qemu-img read host files.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.images import HOSTILE, HUGE, HUGE_PADDING, ImageSet
from tests.support import certs
from tests.support.cli import cdi_import, failed, succeeded
from tests.support.httpfault import Behaviour, FaultServer
from tests.support.nginx import NginxServer

MiB = 1 << 20
CREDENTIALS = {"CDI_ACCESS_KEY_ID": "tester", "CDI_SECRET_KEY": "s3cret"}
METADATA = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"


def test_tls_needs_the_servers_ca(images: ImageSet, nginx_server: NginxServer, tls_ca: certs.TestCA,
                                  other_ca: certs.TestCA, tmp_path: Path) -> None:
    url = nginx_server.https_url(nginx_server.publish(images.path("disk.qcow2")))
    failed(cdi_import("--url", url, "--dest", str(tmp_path)), "TLSError")
    failed(cdi_import("--url", url, "--dest", str(tmp_path), "--cert-dir", str(other_ca.cert_dir)), "TLSError")
    assert list(tmp_path.iterdir()) == []
    succeeded(cdi_import("--url", url, "--dest", str(tmp_path), "--cert-dir", str(tls_ca.cert_dir)))
    images.assert_imported(tmp_path / "disk.img", "disk.qcow2")


def test_tls_insecure_skips_verification(images: ImageSet, nginx_server: NginxServer, tmp_path: Path) -> None:
    url = nginx_server.https_url(nginx_server.publish(images.path("disk.raw.zst")))
    succeeded(cdi_import("--url", url, "--dest", str(tmp_path), "--insecure"))
    images.assert_imported(tmp_path / "disk.img", "disk.raw.zst")


def test_tls_resumes_after_drops(images: ImageSet, make_fault_server: Callable[..., FaultServer], tls_ca: certs.TestCA,
                                 tmp_path: Path) -> None:
    server = make_fault_server(tls=tls_ca.server_context())
    name = server.publish(images.path("disk.qcow2"))
    size = images.path(name).stat().st_size
    server.behaviours[name] = Behaviour(drop_at=[size // 3, size * 2 // 3])
    out = succeeded(cdi_import("--url", server.url(name), "--dest", str(tmp_path), "--cert-dir", str(tls_ca.cert_dir)))
    images.assert_imported(tmp_path / "disk.img", name)
    assert out["resumes"] == 2 and out["bytes_refetched"] <= 2 * MiB


def test_credentials_and_headers_never_go_to_another_host(images: ImageSet, fault_server: FaultServer,
                                                          make_fault_server: Callable[..., FaultServer],
                                                          tmp_path: Path) -> None:
    mirror = make_fault_server()
    name = mirror.publish(images.path("disk.qcow2"))
    fault_server.behaviours[name] = Behaviour(basic_auth=("tester", "s3cret"), redirect=mirror.url(name))
    size = images.path(name).stat().st_size
    mirror.behaviours[name] = Behaviour(drop_at=[size // 2])  # the resume goes to the mirror too
    out = succeeded(cdi_import("--url", fault_server.url(name), "--dest", str(tmp_path), "--header", "X-Token: abc",
                               env=CREDENTIALS))
    images.assert_imported(tmp_path / "disk.img", name)
    assert out["resumes"] == 1
    first = fault_server.requests_for(name)[0].headers
    assert first.get("authorization", "").startswith("Basic ") and first.get("x-token") == "abc"
    seen = mirror.requests_for(name)
    assert len(seen) >= 2
    assert all("authorization" not in r.headers and "x-token" not in r.headers for r in seen), seen


def test_another_name_for_the_same_address_is_another_host(images: ImageSet, fault_server: FaultServer,
                                                           tmp_path: Path) -> None:
    name = fault_server.publish(images.path("disk.raw"))
    fault_server.behaviours["start"] = Behaviour(redirect=f"http://localhost:{fault_server.port}/{name}")
    succeeded(cdi_import("--url", fault_server.url("start"), "--dest", str(tmp_path), "--header", "X-Token: abc",
                         env=CREDENTIALS))
    images.assert_imported(tmp_path / "disk.img", name)
    assert fault_server.requests_for("start")[0].headers.get("x-token") == "abc"
    assert all("authorization" not in r.headers and "x-token" not in r.headers
               for r in fault_server.requests_for(name))


def test_same_host_redirect_keeps_credentials(images: ImageSet, fault_server: FaultServer, tmp_path: Path) -> None:
    name = fault_server.publish(images.path("disk.qcow2"))
    fault_server.behaviours["old/disk.qcow2"] = Behaviour(redirect=f"/{name}")
    fault_server.behaviours[name] = Behaviour(basic_auth=("tester", "s3cret"))
    succeeded(cdi_import("--url", fault_server.url("old/disk.qcow2"), "--dest", str(tmp_path), env=CREDENTIALS))
    images.assert_imported(tmp_path / "disk.img", name)


@pytest.mark.parametrize("target", [METADATA, "http://[fe80::1]/disk.img", "http://169.254.0.1:8080/disk.img"])
def test_link_local_is_denied_directly_and_as_a_redirect_target(target: str, fault_server: FaultServer,
                                                                  tmp_path: Path) -> None:
    failed(cdi_import("--url", target, "--dest", str(tmp_path)), "URLDenied")
    fault_server.behaviours["innocent.qcow2"] = Behaviour(redirect=target)
    failed(cdi_import("--url", fault_server.url("innocent.qcow2"), "--dest", str(tmp_path)), "URLDenied")
    assert list(tmp_path.iterdir()) == []


def test_deny_list(images: ImageSet, fault_server: FaultServer, tmp_path: Path) -> None:
    name = fault_server.publish(images.path("disk.raw"))
    failed(cdi_import("--url", fault_server.url(name), "--dest", str(tmp_path), "--deny-url", "127.0.0.0/8"),
           "URLDenied")
    assert fault_server.requests_for(name) == []  # refused before connecting
    failed(cdi_import("--url", fault_server.url(name), "--dest", str(tmp_path), "--deny-url", "127.0.0.1"),
           "URLDenied")
    succeeded(cdi_import("--url", fault_server.url(name), "--dest", str(tmp_path), "--deny-url", "10.0.0.0/8"))
    images.assert_imported(tmp_path / "disk.img", name)


def test_redirect_loop(fault_server: FaultServer, tmp_path: Path) -> None:
    fault_server.behaviours["a"] = Behaviour(redirect="/b")
    fault_server.behaviours["b"] = Behaviour(redirect="/a")
    failed(cdi_import("--url", fault_server.url("a"), "--dest", str(tmp_path)), "RedirectLoop")
    assert len(fault_server.requests) <= 30  # gave up, bounded
    assert list(tmp_path.iterdir()) == []


def test_virtual_size_beyond_the_target_is_refused_from_the_header(images: ImageSet, fault_server: FaultServer,
                                                                   tmp_path: Path) -> None:
    name = fault_server.publish(images.path(HUGE))
    failed(cdi_import("--url", fault_server.url(name), "--dest", str(tmp_path), "--size", "64Mi"), "TargetTooSmall")
    assert list(tmp_path.iterdir()) == []
    fault_server.wait_idle()
    # The 64 GiB header is in the first KiB; the padding behind it must not have been downloaded.
    assert fault_server.sent(name) < HUGE_PADDING // 2


def test_raw_bigger_than_the_directory_target(images: ImageSet, fault_server: FaultServer, tmp_path: Path) -> None:
    name = fault_server.publish(images.path("disk.raw"))
    failed(cdi_import("--url", fault_server.url(name), "--dest", str(tmp_path), "--size", "4Mi"), "TargetTooSmall")
    assert list(tmp_path.iterdir()) == []


def test_image_bigger_than_the_raw_file_target(images: ImageSet, fault_server: FaultServer, tmp_path: Path) -> None:
    name = fault_server.publish(images.path("disk.qcow2"))
    dest = tmp_path / "small.raw"
    failed(cdi_import("--url", fault_server.url(name), "--dest", str(dest), "--size", "1Mi"), "TargetTooSmall")
    assert not dest.exists()


@pytest.mark.parametrize("name", ["disk.qcow2", "disk.raw"])
def test_image_bigger_than_the_block_device(name: str, images: ImageSet, nginx_server: NginxServer,
                                            loop_device: Callable[..., Path]) -> None:
    device = loop_device(4 * MiB)  # the images are over 6 MiB
    failed(cdi_import("--url", nginx_server.url(nginx_server.publish(images.path(name))), "--dest", str(device)),
           "TargetTooSmall")


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_image_into_a_directory(name: str, images: ImageSet, nginx_server: NginxServer,
                                        tmp_path: Path) -> None:
    line = failed(cdi_import("--url", nginx_server.url(nginx_server.publish(images.path(name))),
                             "--dest", str(tmp_path), "--size", "16Mi"), HOSTILE[name])
    assert images.host_secret.read_bytes()[12:44].decode() not in line  # the marker's random part
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_image_into_a_block_device(name: str, images: ImageSet, nginx_server: NginxServer,
                                           loop_device: Callable[..., Path]) -> None:
    device = loop_device(16 * MiB)
    failed(cdi_import("--url", nginx_server.url(nginx_server.publish(images.path(name))), "--dest", str(device)),
           HOSTILE[name])
    images.assert_no_host_bytes(device)


@pytest.mark.parametrize("name", ["backing.qcow2", "flat.vmdk"])
def test_hostile_image_into_a_raw_file(name: str, images: ImageSet, nginx_server: NginxServer,
                                       tmp_path: Path) -> None:
    dest = tmp_path / "out.raw"
    failed(cdi_import("--url", nginx_server.url(nginx_server.publish(images.path(name))), "--dest", str(dest),
                      "--size", "16Mi"), HOSTILE[name])
    if dest.exists():
        images.assert_no_host_bytes(dest)
