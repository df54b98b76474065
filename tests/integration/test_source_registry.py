"""The registry source on its own, against a real docker-registry with images the tests build and push.

Checks the exact bytes of the disk file as they leave the layer, overlay rules across layers, refusals, digests,
platforms, auth and redirects. `cdi import docker://…` end to end (qcow2 → raw checked against qemu-img, Docker
schema 2 and manifest lists, bearer tokens, TLS with a private CA, the pod's env contract) is in
test_registry_import.py; here only the case the pipeline must turn into a failed import is run through the CLI.
"""

from __future__ import annotations

import json
import os
import platform
import random
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
import requests

from importer.errors import ImportFailed, Reason
from importer.sources import open_source
from importer.sources.base import Source, SourceOptions, Transient
from importer.sources.registry import descriptor
from tests.fixtures.images import ImageSet
from tests.fixtures.registry_server import MakeRegistry
from tests.support import certs
from tests.support.httpfault import Behaviour, FaultServer
from tests.support.registry import OCI_MANIFEST, Registry
from tests.support.tcpcut import CuttingRelay
from tests.support.tokenserver import TokenServer

MIB = 1 << 20
Layer = tuple[dict[str, bytes | None], str]


def blob(seed: int, size: int = MIB + 4321) -> bytes:
    """Distinct content per seed: registry storage is content-addressed, and some tests corrupt what they push."""
    return random.Random(seed).randbytes(size)


A, B, C = blob(1), blob(2), blob(3, 2 * MIB + 17)


def registry_source(url: str, **options: object) -> Source:
    return open_source("registry", SourceOptions(url=url, insecure=True, **options))  # type: ignore[arg-type]


def pull(url: str, **options: object) -> bytes:
    with closing(registry_source(url, **options)) as source:
        source.probe()
        return b"".join(source.stream(0))


def failure(url: str, **options: object) -> ImportFailed:
    with closing(registry_source(url, **options)) as source, pytest.raises(ImportFailed) as caught:
        source.probe()
        b"".join(source.stream(0))
    assert "\n" not in caught.value.message
    return caught.value


def manifest_of(registry: Registry, repo: str, ref: str) -> dict:
    return requests.get(f"{registry.base}/v2/{repo}/manifests/{ref}", headers={"Accept": OCI_MANIFEST},
                        timeout=10).json()


def corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("compression", ["gzip", "zstd", "none"])
def test_disk_file_streams_out_of_the_layer(compression: str, registry_server: Registry) -> None:
    env = ["INSTANCETYPE_KUBEVIRT_IO_DEFAULT_INSTANCETYPE=u1.small",
           "PREFERENCE_KUBEVIRT_IO_DEFAULT_PREFERENCE_KIND=VirtualMachineClusterPreference",
           "KUBEVIRT_IO_FOO_BAR=x", "PATH=/usr/bin", "NOT_KUBEVIRT_IO=1"]
    registry_server.push_image("src/layers", compression, [({"disk/": None, "disk/fedora.img": C}, compression)],
                               env=env)
    with closing(registry_source(registry_server.url("src/layers", compression))) as source:
        probe = source.probe()
        chunks = list(source.stream(0))
    assert b"".join(chunks) == C
    assert max(map(len, chunks)) <= MIB  # streamed, never the whole file in memory
    assert (probe.size, probe.resumable) == (None, False)
    assert probe.labels == {"instancetype.kubevirt.io/default-instancetype": "u1.small",
                            "preference.kubevirt.io/default-preference-kind": "VirtualMachineClusterPreference",
                            "kubevirt.io/foo-bar": "x"}


@pytest.mark.parametrize(("layers", "expected"), [
    ([({"disk/old.img": A}, "gzip"), ({"disk/.wh.old.img": b"", "disk/new.img": B}, "gzip")], B),
    ([({"disk/d.img": A}, "gzip"), ({"disk/d.img": B}, "zstd")], B),
    ([({"disk/a.img": A, "disk/b.img": C}, "gzip"), ({"disk/.wh..wh..opq": b"", "disk/new.img": B}, "none")], B),
    ([({"disk/a.img": A, "disk/b.img": C}, "gzip"), ({"disk/.wh.b.img": b""}, "gzip")], A),
    ([({"disk/a.img": A}, "gzip"), ({".wh.disk": b""}, "gzip"), ({"disk/b.img": B}, "gzip")], B),
    ([({"./disk/": None, "./disk/d.img": B, "./etc/motd": b"hello"}, "gzip")], B),
], ids=["whiteout-and-new-file", "same-path-replaced", "opaque-directory", "whiteout-leaves-one",
        "directory-whited-out-then-refilled", "dot-slash-names"])
def test_overlay_rules_pick_the_one_disk(layers: list[Layer], expected: bytes, registry_server: Registry,
                                         request: pytest.FixtureRequest) -> None:
    tag = request.node.callspec.id
    registry_server.push_image("src/overlay", tag, layers)
    assert pull(registry_server.url("src/overlay", tag)) == expected


@pytest.mark.parametrize(("layers", "words"), [
    ([({"disk/a.img": A, "disk/b.img": B}, "gzip")], "more than one file under disk/ (disk/a.img, disk/b.img)"),
    ([({"disk/a.img": A}, "gzip"), ({"disk/.wh.a.img": b""}, "gzip")], "no file under disk/"),
    ([({"disk/": None, "etc/motd": b"hello"}, "gzip")], "no file under disk/"),
], ids=["two-files", "only-file-whited-out", "no-file"])
def test_not_a_containerdisk(layers: list[Layer], words: str, registry_server: Registry,
                             request: pytest.FixtureRequest) -> None:
    tag = request.node.callspec.id
    registry_server.push_image("src/notdisk", tag, layers)
    error = failure(registry_server.url("src/notdisk", tag))
    assert error.reason is Reason.UnsupportedFormat
    assert words in error.message


def test_second_file_in_a_lower_layer_fails_after_the_first_was_streamed(registry_server: Registry,
                                                                         tmp_path: Path) -> None:
    registry_server.push_image("src/late", "v1", [({"disk/lower.img": A}, "gzip"), ({"disk/upper.img": B}, "gzip")])
    url = registry_server.url("src/late", "v1")
    received = bytearray()
    with closing(registry_source(url)) as source, pytest.raises(ImportFailed) as caught:
        source.probe()
        for chunk in source.stream(0):
            received += chunk
    assert bytes(received) == B  # the upper layer's file went out whole before the lower layer showed the second
    assert caught.value.reason is Reason.UnsupportedFormat
    assert "more than one file under disk/ (disk/upper.img, disk/lower.img)" in caught.value.message
    # The pipeline turns that late failure into a failed import: nothing that passes for a finished disk.img.
    result = subprocess.run([sys.executable, "-m", "cdi.cli.main", "import", "--url", url, "--dest", str(tmp_path),
                             "--insecure", "--no-progress"], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "CDI_ACCESS_KEY_ID": "", "CDI_SECRET_KEY": ""})
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("error: UnsupportedFormat: ")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("label", ["containers.bootc", "ostree.bootable"])
def test_bootc_image_is_refused(label: str, registry_server: Registry) -> None:
    registry_server.push_image("src/bootc", label, [({"disk/a.img": A}, "gzip")], labels={label: "1"})
    error = failure(registry_server.url("src/bootc", label))
    assert error.reason is Reason.UnsupportedFormat
    assert error.message.startswith("bootc image detected: ") and f"({label}=1)" in error.message


@pytest.mark.parametrize("docker", [False, True], ids=["oci-index", "docker-manifest-list"])
def test_index_picks_the_platform(docker: bool, registry_server: Registry) -> None:
    repo = "src/multi-docker" if docker else "src/multi-oci"
    amd = registry_server.push_image(repo, "amd64", [({"disk/d.img": A}, "gzip")], arch="amd64", docker=docker)
    arm = registry_server.push_image(repo, "arm64", [({"disk/d.img": B}, "gzip")], arch="arm64", docker=docker)
    registry_server.push_index(repo, "latest", {"amd64": amd, "arm64": arm}, docker=docker)
    url = registry_server.url(repo, "latest")
    assert pull(url, architecture="arm64") == B
    assert pull(url, architecture="amd64") == A
    machine = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine())
    if machine:
        assert pull(url) == {"amd64": A, "arm64": B}[machine]
    error = failure(url, architecture="s390x")
    assert error.reason is Reason.NotFound and "no image for linux/s390x" in error.message


def test_requested_architecture_must_be_the_images(registry_server: Registry) -> None:
    registry_server.push_image("src/single", "arm64", [({"disk/d.img": B}, "gzip")], arch="arm64")
    error = failure(registry_server.url("src/single", "arm64"), architecture="amd64")
    assert error.reason is Reason.NotFound
    assert "'arm64' does not match the requested architecture 'amd64'" in error.message


@pytest.mark.parametrize("url", ["src/layers:nope", "src/nothing-here:v1"], ids=["missing-tag", "missing-repo"])
def test_missing_is_not_found(url: str, registry_server: Registry) -> None:
    repo, tag = url.split(":")
    assert failure(registry_server.url(repo, tag)).reason is Reason.NotFound


def test_by_digest_and_a_manifest_that_does_not_match_it(registry_server: Registry) -> None:
    digest = registry_server.push_image("src/pinned", "v1", [({"disk/d.img": blob(10)}, "gzip")])
    assert pull(registry_server.url("src/pinned", digest)) == blob(10)
    corrupt(registry_server.blob_path(digest))  # the registry keeps manifests as blobs too
    error = failure(registry_server.url("src/pinned", digest))
    assert error.reason is Reason.ChecksumMismatch and digest in error.message


@pytest.mark.parametrize("compression", ["gzip", "zstd", "none"])
def test_corrupt_layer_is_caught_by_its_digest(compression: str, registry_server: Registry) -> None:
    seed = {"gzip": 20, "zstd": 21, "none": 22}[compression]
    registry_server.push_image("src/corrupt", compression, [({"disk/d.img": blob(seed)}, compression)])
    layer = manifest_of(registry_server, "src/corrupt", compression)["layers"][0]["digest"]
    corrupt(registry_server.blob_path(layer))
    # A flipped bit in a gzip or zstd layer breaks decompression first; the digest still names the cause.
    error = failure(registry_server.url("src/corrupt", compression))
    assert error.reason is Reason.ChecksumMismatch and layer in error.message


def test_layer_longer_than_its_descriptor(registry_server: Registry) -> None:
    registry_server.push_image("src/long", "v1", [({"disk/d.img": blob(30)}, "none")])
    path = registry_server.blob_path(manifest_of(registry_server, "src/long", "v1")["layers"][0]["digest"])
    path.write_bytes(path.read_bytes() + b"\0" * 4096)  # what a registry streaming without end would start with
    error = failure(registry_server.url("src/long", "v1"))
    assert error.reason is Reason.ChecksumMismatch and "longer than" in error.message


def test_corrupt_config_is_refused_before_any_layer(registry_server: Registry) -> None:
    registry_server.push_image("src/badconfig", "v1", [({"disk/d.img": A}, "gzip")],
                               env=["KUBEVIRT_IO_ONLY_HERE=1"])
    corrupt(registry_server.blob_path(manifest_of(registry_server, "src/badconfig", "v1")["config"]["digest"]))
    with closing(registry_source(registry_server.url("src/badconfig", "v1"))) as source, \
            pytest.raises(ImportFailed) as caught:
        source.probe()
    assert caught.value.reason is Reason.ChecksumMismatch


def test_plain_http_registry_needs_the_insecure_flag(registry_server: Registry) -> None:
    registry_server.push_image("src/plain", "v1", [({"disk/d.img": A}, "gzip")])
    url = registry_server.url("src/plain", "v1")
    with closing(open_source("registry", SourceOptions(url=url))) as source, pytest.raises(ImportFailed) as caught:
        source.probe()
    assert caught.value.reason is Reason.TLSError  # https first, and no falling back to plain http unless asked
    assert pull(url) == A


def test_refused_connection_is_transient_and_unreachable(registry_server: Registry) -> None:
    registry_server.push_image("src/gone", "v1", [({"disk/d.img": A}, "gzip")])
    stopped = registry_server.url("src/gone", "v1").replace(f":{registry_server.port}/", ":1/")
    with closing(registry_source(stopped)) as source, pytest.raises(Transient) as caught:
        source.probe()
    assert caught.value.unreachable


def test_basic_auth(make_registry: MakeRegistry) -> None:
    registry = make_registry(htpasswd=("tester", "secret123"))
    registry.push_image("private/disk", "v1", [({"disk/d.img": A}, "zstd")])
    url = registry.url("private/disk", "v1")
    assert failure(url).reason is Reason.Unauthorized
    assert failure(url, access_key="tester", secret_key="wrong").reason is Reason.Unauthorized
    assert pull(url, access_key="tester", secret_key="secret123") == A


def test_bearer_token_renewed_when_the_registry_stops_taking_it(make_registry: MakeRegistry,
                                                               tmp_path: Path) -> None:
    tokens = TokenServer(tmp_path, user="puller", password="pw")
    try:
        registry = make_registry(token=(tokens.realm, str(tokens.cert_path), "puller:pw"))
        registry.push_image("tokened/disk", "v1", [({"disk/d.img": A}, "gzip")])
        url = registry.url("tokened/disk", "v1")
        assert failure(url, access_key="puller", secret_key="wrong").reason is Reason.Unauthorized
        tokens.requests.clear()
        with closing(registry_source(url, access_key="puller", secret_key="pw")) as source:
            source.probe()
            # Tokens expire after minutes, which a test cannot wait for: one the registry rejects stands in for it.
            source._token = "expired"  # type: ignore[attr-defined]
            assert b"".join(source.stream(0)) == A
        assert [q.get("scope") for q in tokens.requests] == [["repository:tokened/disk:pull"]] * 2
    finally:
        tokens.close()


def test_cut_connection_to_a_tls_registry_reads_the_layer_again(make_registry: MakeRegistry, tls_ca: certs.TestCA,
                                                                images: ImageSet, tmp_path: Path) -> None:
    """`cdi import` of a qcow2 containerDisk over TLS with a private CA, the connection cut in the middle of the layer.

    The layer cannot be entered mid-stream, so the import reads it again from its start and skips what it has.
    """
    registry = make_registry(tls=(tls_ca.server_cert, tls_ca.server_key, tls_ca.ca_cert))
    qcow2 = images.path("disk.qcow2").read_bytes()
    registry.push_image("tls/disk", "v1", [({"disk/": None, "disk/disk.qcow2": qcow2}, "gzip")])
    relay = CuttingRelay(target_port=registry.port, cut_after=[MIB])  # the first connection, inside the layer
    dest = tmp_path / "pvc"
    dest.mkdir()
    try:
        result = subprocess.run([sys.executable, "-m", "cdi.cli.main", "import", "--url",
                                 f"docker://127.0.0.1:{relay.port}/tls/disk:v1", "--dest", str(dest),
                                 "--cert-dir", str(tls_ca.cert_dir), "--json", "--no-progress"],
                                capture_output=True, text=True, timeout=120,
                                env={**os.environ, "CDI_ACCESS_KEY_ID": "", "CDI_SECRET_KEY": ""})
    finally:
        relay.close()
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["format"] == "qcow2" and out["resumes"] == 1
    images.assert_imported(dest / "disk.img", "disk.qcow2")


def test_blob_redirects_go_through_the_url_policy_without_credentials(
        registry_server: Registry, make_fault_server, tmp_path: Path) -> None:
    """The registry's API is fronted by a server that redirects, as registries on object storage do for blobs.

    docker-registry with filesystem storage never redirects, so the front is the fault server: manifests and
    the config go on to the real registry, the layer to a second server playing the object store.
    """
    registry_server.push_image("src/redirected", "v1", [({"disk/d.img": B}, "gzip")])
    manifest = manifest_of(registry_server, "src/redirected", "v1")
    layer = manifest["layers"][0]["digest"]
    front: FaultServer = make_fault_server()
    store: FaultServer = make_fault_server()
    store_copy = tmp_path / "layer"
    store_copy.write_bytes(registry_server.blob_path(layer).read_bytes())
    store.publish(store_copy, "bucket/layer")
    for path in ("v2/src/redirected/manifests/v1", f"v2/src/redirected/blobs/{manifest['config']['digest']}"):
        front.behaviours[path] = Behaviour(redirect=f"{registry_server.base}/{path}")
    front.behaviours[f"v2/src/redirected/blobs/{layer}"] = Behaviour(redirect=store.url("bucket/layer"))
    url = f"docker://127.0.0.1:{front.port}/src/redirected:v1"

    assert pull(url, access_key="tester", secret_key="secret123") == B
    assert all(r.headers.get("authorization", "").startswith("Basic ") for r in front.requests)
    assert [r.headers.get("authorization") for r in store.requests] == [None]

    front.behaviours[f"v2/src/redirected/blobs/{layer}"] = Behaviour(redirect="http://169.254.169.254/bucket/layer")
    assert failure(url).reason is Reason.URLDenied


@pytest.mark.parametrize("entry", [
    {"digest": "sha256:../../../v2/other/manifests/latest", "size": 2},
    {"digest": "md5:" + "0" * 32, "size": 2},
    {"digest": "sha256:" + "0" * 63, "size": 2},
    {"digest": "sha256:" + "0" * 64},
    {"digest": "sha256:" + "0" * 64, "size": -1},
    "sha256:" + "0" * 64,
], ids=["path-in-digest", "unknown-algorithm", "short-hex", "no-size", "negative-size", "not-an-object"])
def test_hostile_descriptors_are_refused(entry: object) -> None:
    """A digest becomes part of a URL path and a size bounds a read: both are checked before either is used."""
    with pytest.raises(ImportFailed) as caught:
        descriptor(entry, what="layer")
    assert caught.value.reason is Reason.UnsupportedFormat
